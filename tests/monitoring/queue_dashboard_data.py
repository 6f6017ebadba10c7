"""The queue dashboards' test platform on a real Zabbix 7.0 server, with 15 minutes of data: the
`<cluster>-kueue` host fed Kueue v0.19.2's metrics text (tests/monitoring/kueue_samples.py) and the Kubernetes
API's lists, and one GPU node fed dcgm-exporter text with pod attribution. Templates, global macros,
host groups, host macros and dashboards are the program's (prod settings); the templates' collected
items accept trapped values (tests/monitoring/dashboard_data.py `pushable`).

What the data shows: llm's 16-GPU pretraining waits two hours with its quota idle (and a smaller job behind
it); research borrows GPUs and gives them back, and a 64-GPU gang of it can never fit; vision keeps being
evicted and preempts, one of its workloads waits for its requeue; on gpu-01 the pods of llm-eval and
research hold GPUs idle (their GPU_UTIL reads busy, their graphics and tensor activity does not) and one
GPU is free.
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
LES = ["1", "2.5", "5", "10", "20", "40", "80", "160", "320", "640", "1280", "2560", "5120", "10240", "20480", "40960"]
LES.append("+Inf")  # Kueue v0.19.2's admission-wait buckets
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
    text = s.with_value(text, preempted + 'replica_role="leader"}', str(3 + step // 3))
    # admissions: every queue admits one workload a poll on top of the sample's counts, llm's after a long
    # wait (its queue is the one that waits), research's and vision's within minutes
    for cq, base in (("llm", 1200), ("research", 40), ("vision", 90)):
        waits = [base * (1 + k % 4) for k in range(1, step + 1)]
        counts = {le: 1000 + sum(1 for w in waits if w <= float(le)) for le in LES}
        text = s.with_buckets(text, cq, counts)
    return text


def workloads() -> str:
    why = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor {}"
    h100 = why.format(s.H100)
    return s.workloads(
        s.workload(
            "llm-train",
            "pretrain-7b",
            7200,
            [s.condition("QuotaReserved", "False", 7000, "Pending", h100)],
            gpus=8,
            count=2,
            priority=1000,
        ),
        s.workload(
            "llm-train",
            "eval-sweep",
            1500,
            [s.condition("QuotaReserved", "False", 1400, "Pending", h100)],
            gpus=1,
            count=4,
            priority=100,
        ),
        s.workload(
            "vision",
            "resnet-9",
            5400,
            [
                s.condition(
                    "Requeued",
                    "False",
                    600,
                    "PodsReadyTimeout",
                    "Exceeded the PodsReady timeout; backing off before the next admission attempt",
                )
            ],
            gpus=8,
            count=1,
        ),
        s.workload(
            "research",
            "gang-64",
            1800,
            [
                s.condition(
                    "QuotaReserved",
                    "False",
                    1700,
                    "Pending",
                    "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
                    f"{s.H100}, request > maximum capacity (64 > 48)",
                )
            ],
            gpus=8,
            count=8,
            priority=10,
        ),
    )


def dcgm(step: int) -> str:
    busy = {0: 0.92, 1: 0.88, 2: 0.95, 3: 0.90, 5: 0.40 + step / 100}
    activity = {gpu: busy.get(gpu, 0.01 if gpu == 6 else 0.0) for gpu in range(8)}
    util = {gpu: 100 if gpu in PODS else 0 for gpu in range(8)}  # GPU_UTIL reads busy for a spinning kernel
    return s.dcgm_pods(util, PODS, activity)


def build(api_url: str, server_port: int) -> QueuePlatform:
    api = login(api_url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
    for _, text in template_sources().values():
        api.configuration.import_(format="yaml", source=pushable(text), rules=IMPORT_RULES)
    settings = load(stack_doc("prod"))
    teams = settings.scheduling.teams
    for macro, (value, description) in global_macros(settings.monitoring, "https://zabbix.example", teams).items():
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
    deadline = time.monotonic() + 150  # the percentiles are calculated once a minute from the buckets
    while not _ready(api, node.name, {"ClusterQueue *: admission wait, p95": KUEUE_HOST}):
        if time.monotonic() > deadline:
            raise AssertionError("the admission-wait percentiles got no value in 150 s")
        time.sleep(5)
    idle = settings.monitoring.thresholds.gpu_idle_percent
    return QueuePlatform(
        api,
        api_url.removesuffix("api_jsonrpc.php"),
        queues_dashboard(KUEUE_HOST, idle),
        team_queues_dashboard(settings.scheduling.teams, KUEUE_HOST, idle),
    )


def _ready(api, gpu_node: str, wanted: dict[str, str] | None = None) -> bool:
    wanted = wanted or {
        "ClusterQueue *: quota in use": KUEUE_HOST,
        "Queue *: oldest pending workload wait": KUEUE_HOST,
        "Cohort *: GPU quota": KUEUE_HOST,
        "ClusterQueue *: evictions (*)": KUEUE_HOST,
        "Pod *: GPU activity": gpu_node,
    }
    for pattern, host in wanted.items():
        rows = api.item.get(host=host, search={"name": pattern}, searchWildcardsEnabled=True, output=["lastclock"])
        if not rows or any(r["lastclock"] == "0" for r in rows):
            return False
    return True
