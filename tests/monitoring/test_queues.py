"""The queue and idle-GPU monitoring on a REAL Zabbix 7.0 server: discovery makes one entity per
ClusterQueue, LocalQueue, cohort and reason; the server's preprocessing computes the documented
values from Kueue v0.19.2's metrics text (tests/monitoring/kueue_samples.py); every trigger fires and resolves;
the idle-GPU trigger fires for a GPU a pod holds and never for an idle GPU without a pod.

As in tests/monitoring/test_triggers.py, the templates are imported as they ship, their HTTP-agent master
items opened to `history.push` (the test server polls nothing). Hosts carry the platform's global
macros from the prod settings; where a trigger waits for a period, the host overrides that period's
macro with a short one, which the test names.
"""

from __future__ import annotations

import time

import pytest

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from components.monitoring.config import GPU_TEMPLATE, global_macros, template_sources
from components.monitoring.kinds import IMPORT_RULES
from settings import load
from tests.conftest import stack_doc
from tests.monitoring import kueue_samples as s
from tests.monitoring.test_triggers import OK, PROBLEM, host, push, trappable, triggers, wait_for
from tests.monitoring.zabbix70 import zabbix70

pytestmark = pytest.mark.real_server

CQ_TEMPLATE, DETAILS_TEMPLATE = "ml-platform Kueue ClusterQueues by HTTP", "ml-platform Kueue queue details by HTTP"
KUEUE = [CQ_TEMPLATE, DETAILS_TEMPLATE]


@pytest.fixture(scope="module")
def api():
    with zabbix70("queues", with_server=True) as instance:
        api = login(instance.url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
        for _, text in template_sources().values():
            api.configuration.import_(format="yaml", source=trappable(text), rules=IMPORT_RULES)
        settings = load(stack_doc("prod"))
        for macro, (value, description) in global_macros(settings.monitoring, "https://zabbix.example").items():
            api.usermacro.createglobal(macro=macro, value=value, description=description)
        api.hostgroup.create(name="ml-platform/test")
        yield api


def feed_kueue(api, name: str, metrics: str = s.KUEUE, workloads: str | None = None) -> None:
    """One poll of every Kueue master item: metrics (both templates scrape it), LocalQueues, Workloads."""
    push(api, name, "kueue.metrics", metrics)
    push(api, name, "kueue.details.metrics", metrics)
    push(api, name, "kueue.localqueues", s.localqueues())
    push(api, name, "kueue.workloads", workloads or s.workloads())


def values(api, hostid: str, timeout: float = 120, feed=lambda: None, want: tuple[str, ...] = ()) -> dict[str, str]:
    """key -> last value of the host's items that have one, once every key of `want` has one."""
    deadline = time.monotonic() + timeout
    while True:
        feed()
        rows = api.item.get(hostids=[hostid], output=["key_", "lastvalue", "lastclock"])
        found = {r["key_"]: r["lastvalue"] for r in rows if r["lastclock"] != "0"}
        if all(k in found for k in want) or time.monotonic() > deadline:
            return found
        time.sleep(2)


def test_discovery_makes_one_entity_per_queue_and_the_server_computes_the_values(api):
    name, hostid = host(api, KUEUE, {})
    expected = {
        # ClusterQueues (kueue_cluster_queue_status)
        "kueue.cq.active[llm]": 1,
        "kueue.cq.pending.active[llm]": 1,
        "kueue.cq.pending.inadmissible[llm]": 1,
        "kueue.cq.pending.active[research]": 2,
        "kueue.cq.admitted.active[research]": 5,
        "kueue.cq.reserving.active[vision]": 3,
        "kueue.cq.quota.used[llm]": 100 * 8 / 512,  # 8 of 512 CPUs on the cpu flavor: its most used
        "kueue.cq.quota.used[research]": 250,  # 40 of 16 GPUs
        "kueue.cq.gpu.usage[research]": 40,
        "kueue.cq.gpu.reservation[vision]": 24,
        "kueue.cq.gpu.nominal[llm]": 64,
        "kueue.cq.gpu.borrowed[research]": 24,
        "kueue.cq.gpu.borrowed[vision]": 0,
        "kueue.cq.gpu.lendable[llm]": 32,  # 64 unused, lending limit 32
        "kueue.cq.gpu.lendable[vision]": 16,  # 40 - 24, no lending limit (+Inf)
        "kueue.cq.gpu.lendable[research]": 0,
        # LocalQueues (Kubernetes API list), their values from the metrics
        "kueue.lq.pending.active[llm-train,default]": 1,
        "kueue.lq.pending.active[llm-eval,default]": 0,
        "kueue.lq.admitted.active[vision,default]": 3,
        "kueue.lq.gpu.usage[research,default]": 40,
        "kueue.lq.gpu.usage[llm-train,default]": 0,  # no series at 0
        "kueue.lq.cq.quota.used[research,default]": 250,
        "kueue.lq.pending.oldest[vision,default]": 0,
        # the cohort (kueue_cohort_info)
        "kueue.cohort.gpu.quota[ml-platform]": 120,
        "kueue.cohort.gpu.reserved[ml-platform]": 64,
        "kueue.clusterqueues": 3,
    }
    found = values(api, hostid, feed=lambda: feed_kueue(api, name), want=tuple(expected))
    assert {k: pytest.approx(float(found[k])) for k in expected if k in found} == expected
    keys = {r["key_"] for r in api.item.get(hostids=[hostid], output=["key_"])}
    assert {k.split("[")[1] for k in keys if k.startswith("kueue.cq.active[")} == {"llm]", "research]", "vision]"}
    lqs = {k.removeprefix("kueue.lq.pending.oldest[") for k in keys if k.startswith("kueue.lq.pending.oldest[")}
    assert lqs == {"llm-train,default]", "llm-eval,default]", "research,default]", "vision,default]"}
    # one item per ClusterQueue and reason Kueue counted (not per priority class or underlying cause)
    assert {k for k in keys if k.startswith("kueue.cq.evictions.reason[")} == {
        "kueue.cq.evictions.reason[vision,PodsReadyTimeout]",
        "kueue.cq.evictions.reason[research,Preempted]",
    }
    assert {k for k in keys if k.startswith("kueue.cq.preemptions[")} == {
        "kueue.cq.preemptions[vision,InCohortReclamation]"
    }
    # counters: the change since the previous poll (the same sample again: 0)
    changes = values(api, hostid, feed=lambda: feed_kueue(api, name), want=("kueue.cq.evictions[vision]",))
    assert float(changes["kueue.cq.evictions[vision]"]) == 0
    assert float(changes["kueue.cq.admissions[vision]"]) == 0


def test_a_workload_waiting_while_the_quota_idles_fires_and_resolves(api):
    """llm uses 1.6% of its quota; research uses 250% (borrowing). Both have a workload pending for 2 h:
    only llm's queue fires. {$KUEUE.PENDING.MAX} is 30m here (settings: thresholds.queuePendingMaxMinutes)."""
    name, hostid = host(api, KUEUE, {"{$KUEUE.PENDING.MAX}": "30m"})
    pending = s.condition("QuotaReserved", "False", 7000, "Pending")
    waiting = s.workloads(
        s.workload("llm-train", "pretrain-7b", 7200, [pending]),
        s.workload("research", "sweep-12", 7200, [pending]),
        s.workload("vision", "deactivated", 7200, [pending], active=False),  # not waiting: spec.active false
    )
    fired = wait_for(api, hostid, "llm-train/default", PROBLEM, feed=lambda: feed_kueue(api, name, workloads=waiting))
    assert fired == "Queue llm-train/default: a workload waits more than 30m while llm uses under 50% of its quota"
    states = {d: t["value"] for d, t in triggers(api, hostid).items() if "a workload waits" in d}
    assert states[fired] == PROBLEM and list(states.values()).count(PROBLEM) == 1, states
    oldest = values(api, hostid, want=("kueue.lq.pending.oldest[llm-train,default]",))
    assert 6990 <= int(oldest["kueue.lq.pending.oldest[llm-train,default]"]) <= 7100  # since QuotaReserved=False
    admitted = s.workloads(
        s.workload("llm-train", "pretrain-7b", 7200, [s.condition("QuotaReserved", "True", 10, "QuotaReserved")]),
        s.workload("research", "sweep-12", 7200, [pending]),
    )
    wait_for(api, hostid, "llm-train/default", OK, feed=lambda: feed_kueue(api, name, workloads=admitted))


def test_a_requeued_workload_waits_since_its_eviction(api):
    """Kueue's wait runs from creation or requeue: an evicted workload's QuotaReserved turned False then."""
    name, hostid = host(api, KUEUE, {})
    evicted = s.workloads(
        s.workload("vision", "resnet", 86400, [s.condition("QuotaReserved", "False", 600, "Evicted")]),
        s.workload("vision", "done", 90000, [s.condition("Finished", "True", 3600, "Succeeded")]),
    )
    key = "kueue.lq.pending.oldest[vision,default]"
    found = values(api, hostid, feed=lambda: feed_kueue(api, name, workloads=evicted), want=(key,))
    assert 590 <= int(found[key]) <= 700


def test_a_clusterqueue_evicting_repeatedly_fires_and_resolves(api):
    """{$KUEUE.EVICTIONS.PERIOD} is 1m here (1h shipped); 5 or more evictions in it fire (prod default)."""
    name, hostid = host(api, KUEUE, {"{$KUEUE.EVICTIONS.PERIOD}": "1m"})
    values(api, hostid, feed=lambda: feed_kueue(api, name, s.evictions(6)), want=("kueue.cq.evictions[vision]",))
    thirteen = lambda: feed_kueue(api, name, s.evictions(13))  # noqa: E731
    fired = wait_for(api, hostid, "vision: 5 or more evictions", PROBLEM, feed=thirteen)
    assert fired == "ClusterQueue vision: 5 or more evictions in 1m"
    assert triggers(api, hostid)["ClusterQueue research: 5 or more evictions in 1m"]["value"] == OK
    wait_for(api, hostid, "vision: 5 or more evictions", OK, timeout=150, feed=thirteen)


def test_a_team_borrowing_above_the_threshold_for_long_fires_and_resolves(api):
    """research borrows 24 GPUs (above the prod default 8). {$KUEUE.BORROWING.PERIOD} is 1m here."""
    name, hostid = host(api, KUEUE, {"{$KUEUE.BORROWING.PERIOD}": "1m"})
    fired = wait_for(api, hostid, "research: borrowing", PROBLEM, feed=lambda: feed_kueue(api, name))
    assert fired == "ClusterQueue research: borrowing more than 8 GPUs for 1m"
    assert triggers(api, hostid)["ClusterQueue vision: borrowing more than 8 GPUs for 1m"]["value"] == OK
    back = s.gpu_usage("research", 16)  # the workloads above its quota were preempted
    wait_for(api, hostid, "research: borrowing", OK, timeout=150, feed=lambda: feed_kueue(api, name, back))


def test_kueue_metrics_absent_fires_and_resolves(api):
    """{$KUEUE.NODATA.PERIOD} is 30s here (10m shipped)."""
    name, hostid = host(api, KUEUE, {"{$KUEUE.NODATA.PERIOD}": "30s"})
    feed_kueue(api, name)
    wait_for(api, hostid, "Kueue: no metrics", OK, timeout=30)
    assert wait_for(api, hostid, "Kueue: no metrics", PROBLEM, timeout=150) == "Kueue: no metrics for 30s"
    wait_for(api, hostid, "Kueue: no metrics", OK, feed=lambda: feed_kueue(api, name))


def test_an_idle_gpu_held_by_a_pod_fires_for_its_namespace_and_a_free_idle_gpu_does_not(api):
    """GPU 0: held by llm-train/pretrain-0, 0%; GPU 1: vision/resnet-1, 93%; GPU 2: no pod, 0%.
    {$GPU.IDLE.PERIOD} is 1m here (settings: thresholds.gpuIdleMinutes); the pod must have held the GPU a
    period ago already, so the values of the period before are pushed with their past time."""
    name, hostid = host(api, [GPU_TEMPLATE], {"{$GPU.IDLE.PERIOD}": "1m", "{$GPU.COUNT.EXPECTED}": "3"})
    pods = {0: ("llm-train", "pretrain-0"), 1: ("vision", "resnet-1")}
    idle = s.dcgm_pods({0: 0, 1: 93, 2: 0}, pods)
    first = "dcgm.gpu.pod.util[0,llm-train,pretrain-0]"
    items = values(api, hostid, feed=lambda: push(api, name, "dcgm.metrics", idle), want=(first,))
    assert {k for k in items if k.startswith("dcgm.gpu.pod.util[")} == {
        "dcgm.gpu.pod.util[0,llm-train,pretrain-0]",
        "dcgm.gpu.pod.util[1,vision,resnet-1]",
    }  # GPU 2 has no pod: not discovered, no trigger
    now = int(time.time())
    for ago in (110, 90, 70):
        push(api, name, "dcgm.metrics", idle, clock=now - ago)
    fired = wait_for(api, hostid, "Idle GPU", PROBLEM, feed=lambda: push(api, name, "dcgm.metrics", idle))
    assert fired == "Idle GPU 0 allocated to llm-train/pretrain-0: under 5% for 1m"
    idle_triggers = {d: t for d, t in triggers(api, hostid).items() if d.startswith("Idle GPU")}
    assert sorted(idle_triggers) == [fired, "Idle GPU 1 allocated to vision/resnet-1: under 5% for 1m"]
    assert idle_triggers["Idle GPU 1 allocated to vision/resnet-1: under 5% for 1m"]["value"] == OK
    assert idle_triggers[fired]["priority"] == "1"  # information: a team's notice, not an incident
    problem = [p for p in api.problem.get(hostids=[hostid], selectTags="extend") if p["name"] == fired][0]
    assert {"tag": "namespace", "value": "llm-train"} in problem["tags"]
    busy = s.dcgm_pods({0: 61, 1: 93, 2: 0}, pods)
    wait_for(api, hostid, "Idle GPU 0", OK, feed=lambda: push(api, name, "dcgm.metrics", busy))


def test_a_pod_that_just_got_its_gpu_is_not_idle_yet(api):
    """No value a period ago: a job that is still loading its data does not alert in its first period."""
    name, hostid = host(api, [GPU_TEMPLATE], {"{$GPU.IDLE.PERIOD}": "1m", "{$GPU.COUNT.EXPECTED}": "1"})
    fresh = s.dcgm_pods({0: 0}, {0: ("vision", "just-started")})
    key = "dcgm.gpu.pod.util[0,vision,just-started]"
    values(api, hostid, feed=lambda: push(api, name, "dcgm.metrics", fresh), want=(key,))
    for _ in range(10):
        push(api, name, "dcgm.metrics", fresh)
        time.sleep(2)
    assert triggers(api, hostid)["Idle GPU 0 allocated to vision/just-started: under 5% for 1m"]["value"] == OK
