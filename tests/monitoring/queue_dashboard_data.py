"""The queue dashboards' test platform on a real Zabbix 7.0 server, with 15 minutes of data: the
`<cluster>-kueue` host fed Kueue v0.19.2's metrics text (tests/monitoring/kueue_samples.py) and the Kubernetes
API's lists, and one GPU node fed dcgm-exporter text with pod attribution. Templates, global macros,
host groups, host macros and dashboards are the program's (prod settings); the templates' collected
items accept trapped values (tests/monitoring/dashboard_data.py `pushable`).

What the data shows: llm waits two hours with its quota idle; research borrows GPUs and gives them
back; vision keeps being evicted and preempts; on gpu-01 the pods of llm-eval and research hold a GPU
idle and one GPU is free.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from components.monitoring.config import (
    global_macros,
    node_groups,
    node_macros,
    node_tags,
    node_templates,
    template_sources,
)
from components.monitoring.kinds import IMPORT_RULES
from components.monitoring.queue_dashboards import queues_dashboard, team_queues_dashboard
from components.monitoring.queues import kueue_host_spec
from settings import load
from settings.monitoring import HOST_GROUPS
from tests.conftest import stack_doc
from tests.monitoring import kueue_samples as s
from tests.monitoring.dashboard_data import pushable, send

SAMPLES = 30  # one every 30 s
KUEUE_HOST = "prod-kueue"
PODS = {
    0: ("llm-train", "pretrain-0"),
    1: ("llm-train", "pretrain-0"),
    2: ("llm-train", "pretrain-0"),
    3: ("llm-train", "pretrain-0"),
    4: ("llm-eval", "eval-2"),
    5: ("vision", "resnet-1"),
    6: ("research", "sweep-3"),
}  # GPU 7: no pod


@dataclass
class QueuePlatform:
    api: object
    url: str  # the frontend's base URL
    queues: dict
    team_queues: dict


def kueue_metrics(step: int) -> str:
    """Kueue's text at `step`: research borrows 24 GPUs, then gives 16 back; vision evicted once a poll."""
    text = s.gpu_usage("research", 40 if step < 20 else 24)
    labels = 'cluster_queue="vision",priority_class="research",reason="PodsReadyTimeout",replica_role="leader",'
    text = s.with_value(text, f'kueue_evicted_workloads_total{{{labels}underlying_cause=""}}', str(6 + step))
    preempted = 'kueue_preempted_workloads_total{preempting_cluster_queue="vision",reason="InCohortReclamation",'
    return s.with_value(text, preempted + 'replica_role="leader"}', str(3 + step // 3))


def workloads() -> str:
    pending = s.condition("QuotaReserved", "False", 7000, "Pending")
    return s.workloads(
        s.workload("llm-train", "pretrain-7b", 7200, [pending]),
        s.workload("vision", "resnet-9", 900, [s.condition("QuotaReserved", "False", 600, "Evicted")]),
        s.workload("research", "sweep-12", 1800, [s.condition("QuotaReserved", "False", 1700, "Pending")]),
    )


def dcgm(step: int) -> str:
    busy = {0: 92, 1: 88, 2: 95, 3: 90, 5: 40 + step}
    return s.dcgm_pods({gpu: busy.get(gpu, 1 if gpu == 6 else 0) for gpu in range(8)}, PODS)


def build(api_url: str, server_port: int) -> QueuePlatform:
    api = login(api_url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
    for _, text in template_sources().values():
        api.configuration.import_(format="yaml", source=pushable(text), rules=IMPORT_RULES)
    settings = load(stack_doc("prod"))
    for macro, (value, description) in global_macros(settings.monitoring, "https://zabbix.example").items():
        api.usermacro.createglobal(macro=macro, value=value, description=description)
    groups = {g: api.hostgroup.create(name=g)["groupids"][0] for g in HOST_GROUPS}
    templates = {t["host"]: t["templateid"] for t in api.template.get(output=["host"])}
    spec = kueue_host_spec("prod", "kueue-system")
    node = next(n for n in settings.nodes if n.role == "gpu")
    # the idle-GPU period is 5 min here (60 shipped), so that 15 minutes of data show idle GPUs
    node_spec = {**spec, "host": node.name, "groups": node_groups(node), "templates": node_templates(node)}
    node_spec.update(tags=node_tags(node), macros=[*node_macros(node), {"macro": "{$GPU.IDLE.PERIOD}", "value": "5m"}])
    for h in (spec, node_spec):
        api.host.create(
            host=h["host"],
            groups=[{"groupid": groups[g]} for g in h["groups"]],
            templates=[{"templateid": templates[t]} for t in h["templates"]],
            tags=h["tags"],
            macros=h["macros"],
        )
    now = int(time.time())
    start = now - SAMPLES * 30

    def rows(step: int, clock: int) -> list[dict]:
        metrics = kueue_metrics(step)
        return [
            {"host": KUEUE_HOST, "key": "kueue.metrics", "value": metrics, "clock": clock},
            {"host": KUEUE_HOST, "key": "kueue.details.metrics", "value": metrics, "clock": clock},
            {"host": KUEUE_HOST, "key": "kueue.localqueues", "value": s.localqueues(), "clock": clock},
            {"host": KUEUE_HOST, "key": "kueue.workloads", "value": workloads(), "clock": clock},
            {"host": node.name, "key": "dcgm.metrics", "value": dcgm(step), "clock": clock},
        ]

    deadline = time.monotonic() + 180
    while not _ready(api, node.name):
        if time.monotonic() > deadline:
            raise AssertionError("the discovered queue and pod items got no value in 180 s")
        send(server_port, rows(0, start))
        time.sleep(3)
    for step in range(1, SAMPLES + 1):
        send(server_port, rows(step, start + step * 30))
    idle = settings.monitoring.thresholds.gpu_idle_percent
    return QueuePlatform(
        api,
        api_url.removesuffix("api_jsonrpc.php"),
        queues_dashboard(KUEUE_HOST, idle),
        team_queues_dashboard(settings.scheduling.teams, KUEUE_HOST, idle),
    )


def _ready(api, gpu_node: str) -> bool:
    wanted = {
        "ClusterQueue *: quota in use": KUEUE_HOST,
        "Queue *: oldest pending workload wait": KUEUE_HOST,
        "Cohort *: GPU quota": KUEUE_HOST,
        "ClusterQueue *: evictions (*)": KUEUE_HOST,
        "GPU * of pod *: utilization": gpu_node,
    }
    for pattern, host in wanted.items():
        rows = api.item.get(host=host, search={"name": pattern}, searchWildcardsEnabled=True, output=["lastclock"])
        if not rows or any(r["lastclock"] == "0" for r in rows):
            return False
    return True
