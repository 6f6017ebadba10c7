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
        teams = settings.scheduling.teams
        for macro, (value, description) in global_macros(settings.monitoring, "https://zabbix.example", teams).items():
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


def text_value(api, hostid: str, key: str) -> str:
    """The newest value of a text item, whole (item.get's lastvalue of a text item is its first line)."""
    item = api.item.get(hostids=[hostid], filter={"key_": key}, output=["itemid"])[0]["itemid"]
    rows = api.history.get(itemids=[item], history=4, sortfield="clock", sortorder="DESC", limit=1, output="extend")
    return rows[0]["value"]


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
        # GPUs pending (kueue_cluster_queue_resource_pending: absent in the sample, so 0), ceilings
        "kueue.cq.gpu.pending[llm]": 0,
        "kueue.cq.gpu.ceiling[llm]": 120,  # 64 nominal + unlimited borrowing: the cohort's 120
        "kueue.cq.gpu.ceiling[research]": 48,  # 16 nominal + borrowing limit 32
        "kueue.lq.cq.gpu.ceiling[vision,default]": 120,
        "kueue.lq.active[research,default]": 1,
        "kueue.cohort.gpu.reserved.pct[ml-platform]": 100 * 64 / 120,
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


def test_the_oldest_wait_counts_as_kueue_does_from_creation_or_requeue(api):
    """Kueue's QueuedWaitTime (pkg/workload/workload.go, v0.19.2): since the Requeued condition's last
    transition when there is one, else since creation. A failed admission attempt restarts nothing."""
    name, hostid = host(api, KUEUE, {})
    cases = s.workloads(
        # created 2 h ago, first failed admission 6600 s ago: 7200
        s.workload("llm-train", "failed-once", 7200, [s.condition("QuotaReserved", "False", 6600, "Pending")]),
        # evicted an hour ago, requeued 10 minutes ago: 600
        s.workload(
            "vision",
            "requeued",
            86400,
            [
                s.condition("QuotaReserved", "False", 3600, "Evicted"),
                s.condition("Evicted", "True", 3600, "PodsReadyTimeout"),
                s.condition("Requeued", "True", 600, "BackoffFinished"),
            ],
        ),
        # evicted 3000 s ago and still in its requeue backoff: Kueue counts from that transition
        s.workload("research", "backing-off", 86400, [s.condition("Requeued", "False", 3000, "PodsReadyTimeout")]),
        s.workload("vision", "done", 90000, [s.condition("Finished", "True", 3600, "Succeeded")]),
        s.workload("llm-eval", "admitted", 9000, [s.condition("QuotaReserved", "True", 100, "QuotaReserved")]),
    )
    keys = {ns: f"kueue.lq.pending.oldest[{ns},default]" for ns in ("llm-train", "vision", "research", "llm-eval")}
    found = values(api, hostid, feed=lambda: feed_kueue(api, name, workloads=cases), want=tuple(keys.values()))
    waits = {ns: int(found[key]) for ns, key in keys.items()}
    assert 7200 <= waits["llm-train"] <= 7300, waits
    assert 600 <= waits["vision"] <= 700, waits
    assert 3000 <= waits["research"] <= 3100, waits
    assert waits["llm-eval"] == 0, waits


def test_why_each_workload_waits_names_its_gpus_priority_wait_and_kueues_reason(api):
    name, hostid = host(api, KUEUE, {})
    reason = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100"
    cases = s.workloads(
        s.workload(
            "llm-train",
            "short",
            900,
            [s.condition("QuotaReserved", "False", 800, "Pending", reason)],
            gpus=1,
            count=2,
            priority=100,
        ),
        s.workload(
            "llm-train",
            "pretrain-70b",
            7200,
            [s.condition("QuotaReserved", "False", 7000, "Pending", reason)],
            gpus=8,
            count=4,
            priority=1000,
        ),
        s.workload("llm-train", "fresh", 30, [], gpus=2, count=1),
    )
    why, most = "kueue.lq.pending.why[llm-train,default]", "kueue.lq.pending.gpus.max[llm-train,default]"
    found = values(api, hostid, feed=lambda: feed_kueue(api, name, workloads=cases), want=(why, most))
    lines = text_value(api, hostid, why).splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["pretrain-70b", "short", "fresh"]  # longest wait first
    first = lines[0].split(" | ")
    assert first[1:3] == ["32 GPUs", "priority 1000 (p1000)"]
    assert first[3].startswith("waiting 2h 0m since ") and first[4] == reason
    assert lines[2].endswith("not tried yet (no QuotaReserved condition)")
    assert float(found[most]) == 32
    nothing = values(api, hostid, want=("kueue.lq.pending.why[llm-eval,default]",))
    assert nothing["kueue.lq.pending.why[llm-eval,default]"] == "nothing waits"
    # the dashboards' list: one problem per waiting workload, not classified (no channel sends it)
    listed = wait_for(api, hostid, "pretrain-70b waits", PROBLEM, feed=lambda: feed_kueue(api, name, workloads=cases))
    assert listed == f"Team llm, queue llm-train/default: pretrain-70b waits, 32 GPUs, priority 1000: {reason}"
    assert triggers(api, hostid)[listed]["priority"] == "0"
    admitted = s.workloads(
        s.workload("llm-train", "pretrain-70b", 7200, [s.condition("QuotaReserved", "True", 5, "QuotaReserved")]),
    )
    feed_kueue(api, name, workloads=admitted)
    deadline = time.monotonic() + 60
    while any("pretrain-70b waits" in d for d in triggers(api, hostid)) and time.monotonic() < deadline:
        time.sleep(2)
    assert not any("pretrain-70b waits" in d for d in triggers(api, hostid))  # admitted: gone from the list


def test_a_workload_larger_than_the_queue_can_ever_hold_fires_and_the_idle_quota_one_does_not(api):
    """research may hold 16 nominal + 32 borrowed GPUs: a 64-GPU gang never fits. The waits-while-quota-idles
    alert stays quiet for it (quota is what holds it); a 16-GPU workload of llm, idle quota, fires that one."""
    name, hostid = host(api, KUEUE, {"{$KUEUE.PENDING.MAX}": "30m"})
    pending = s.condition("QuotaReserved", "False", 7000, "Pending")
    waiting = s.workloads(
        s.workload("research", "gang-64", 7200, [pending], gpus=8, count=8),
        s.workload("llm-train", "pretrain-7b", 7200, [pending], gpus=8, count=2),
    )
    feed = lambda: feed_kueue(api, name, workloads=waiting)  # noqa: E731
    fired = wait_for(api, hostid, "can ever hold", PROBLEM, feed=feed)
    assert fired == "Team research, queue research/default: a workload asks more GPUs than research can ever hold"
    idle = wait_for(api, hostid, "a workload waits", PROBLEM, feed=feed)
    assert (
        idle
        == "Team llm, queue llm-train/default: a workload waits more than 30m while llm uses under 50% of its quota"
    )
    states = {
        d: t["value"]
        for d, t in triggers(api, hostid).items()
        if t["value"] == PROBLEM and ", queue " in d and t["priority"] != "0"
    }
    assert sorted(states) == sorted([fired, idle]), states  # research's gang does not raise the idle-quota one
    admitted = s.workloads(
        s.workload("llm-train", "pretrain-7b", 7200, [s.condition("QuotaReserved", "True", 10, "QuotaReserved")]),
    )
    wait_for(api, hostid, "can ever hold", OK, feed=lambda: feed_kueue(api, name, workloads=admitted))
    wait_for(api, hostid, "a workload waits", OK, feed=lambda: feed_kueue(api, name, workloads=admitted))


def test_admission_wait_percentiles_come_from_the_histogram_buckets_of_the_window(api):
    """Ten vision workloads admitted in the window: five within 40-80 s, four within 80-160 s, one within
    160-320 s. As histogram_quantile interpolates: p50 = 80 s, p95 = 160 + 160 * 0.5 = 240 s; mean = sum / count."""
    name, hostid = host(api, KUEUE, {})
    les = [
        "1",
        "2.5",
        "5",
        "10",
        "20",
        "40",
        "80",
        "160",
        "320",
        "640",
        "1280",
        "2560",
        "5120",
        "10240",
        "20480",
        "40960",
        "+Inf",
    ]
    # 100 admitted within 1 s before the window: rate() extrapolates every bucket alike (a counter near 0
    # would have its extrapolation cut at zero, bucket by bucket, as Prometheus's rate does)
    added = [0, 0, 0, 0, 0, 0, 5, 9, 10, 10, 10, 10, 10, 10, 10, 10, 10]
    start = s.with_buckets(s.KUEUE, "vision", dict.fromkeys(les, 100))
    end = s.with_buckets(start, "vision", {le: 100 + a for le, a in zip(les, added, strict=True)})
    bucket = "kueue.cq.wait.bucket[+Inf,vision]"
    now = int(time.time())
    # discovered from a sample older than the window (so nothing newer than the window's end is in history)
    values(api, hostid, feed=lambda: push(api, name, "kueue.metrics", start, clock=now - 4000), want=(bucket,))
    push(api, name, "kueue.metrics", start, clock=now - 1800)
    push(api, name, "kueue.metrics", end, clock=now - 60)
    found = values(api, hostid, timeout=150, want=("kueue.cq.wait.p50[vision]", "kueue.cq.wait.p95[vision]"))
    errors = api.item.get(hostids=[hostid], search={"key_": "kueue.cq.wait.p"}, output=["key_", "error", "state"])
    assert "kueue.cq.wait.p50[vision]" in found, [e["error"] for e in errors]
    assert float(found["kueue.cq.wait.p50[vision]"]) == pytest.approx(80)
    assert float(found["kueue.cq.wait.p95[vision]"]) == pytest.approx(240)


def test_an_inactive_local_queue_fires_naming_its_team_and_resolves(api):
    """{$KUEUE.INACTIVE.PERIOD} is 1m here (10m shipped)."""
    name, hostid = host(api, KUEUE, {"{$KUEUE.INACTIVE.PERIOD}": "1m"})
    stopped = s.local_queue_active(s.KUEUE, "vision", False)
    fired = wait_for(
        api, hostid, "vision/default: inactive", PROBLEM, timeout=180, feed=lambda: feed_kueue(api, name, stopped)
    )
    assert fired == "Team vision, queue vision/default: inactive for 1m, admits nothing"
    wait_for(api, hostid, "vision/default: inactive", OK, feed=lambda: feed_kueue(api, name))


def test_a_clusterqueue_evicting_at_a_steady_rate_near_the_threshold_is_one_problem(api):
    """{$KUEUE.EVICTIONS.PERIOD} is 2m here (1h shipped), the threshold 5 (prod default). Evictions arrive at a
    steady rate, 20, 20 and 40 s apart in turn, each sample pushed with its own time: the window's sum moves
    between 4 and 5 at every third sample. The shipped trigger fires once and stays one problem (it recovers only
    under half the threshold); the same condition without a recovery expression, set beside it on this host
    as a control, flaps."""
    name, hostid = host(api, KUEUE, {"{$KUEUE.EVICTIONS.PERIOD}": "2m"})
    now, total = int(time.time()), 6
    key = "kueue.cq.evictions[vision]"
    values(api, hostid, feed=lambda: push(api, name, "kueue.metrics", s.evictions(total), clock=now - 900), want=(key,))
    control = api.trigger.create(
        description="control: evictions without recovery",
        expression=f"sum(/{name}/{key},2m)>=5",
    )["triggerids"][0]
    clocks, clock = [], now - 600
    while clock < now:
        clocks.append(clock)
        clock += 40 if len(clocks) % 3 == 0 else 20
    sums = [sum(1 for c in clocks if at - 120 < c <= at) for at in clocks]
    assert {4, 5} <= set(sums[10:]), sums  # the input really hovers at the threshold
    for clock in clocks:
        total += 1
        push(api, name, "kueue.metrics", s.evictions(total), clock=clock)
        time.sleep(1.5)  # one history sync per value: the trigger is evaluated at each sample's time
    fired = wait_for(api, hostid, "vision, ClusterQueue vision: 5 or more", PROBLEM)
    assert fired == "Team vision, ClusterQueue vision: 5 or more evictions in 2m"
    shipped = [
        r["triggerid"]
        for r in api.trigger.get(hostids=[hostid], output=["triggerid", "description"], expandDescription=True)
        if r["description"] == fired
    ]
    time.sleep(5)
    assert [e["value"] for e in api.event.get(objectids=shipped, output=["value"])] == [PROBLEM]
    flaps = [e["value"] for e in api.event.get(objectids=[control], output=["value"])]
    assert flaps.count(PROBLEM) >= 2 and OK in flaps, flaps  # the control shows the input would flap
    assert triggers(api, hostid)["Team research, ClusterQueue research: 5 or more evictions in 2m"]["value"] == OK


def test_a_team_borrowing_above_the_threshold_for_long_fires_and_resolves(api):
    """research borrows 24 GPUs (above the prod default 8). {$KUEUE.BORROWING.PERIOD} is 1m here."""
    name, hostid = host(api, KUEUE, {"{$KUEUE.BORROWING.PERIOD}": "1m", "{$KUEUE.RECOVERY.PERIOD}": "1m"})
    fired = wait_for(api, hostid, "research: borrowing", PROBLEM, feed=lambda: feed_kueue(api, name))
    assert fired == "Team research, ClusterQueue research: borrowing more than 8 GPUs for 1m"
    assert triggers(api, hostid)["Team vision, ClusterQueue vision: borrowing more than 8 GPUs for 1m"]["value"] == OK


def test_kueue_metrics_absent_fires_and_resolves(api):
    """{$KUEUE.NODATA.PERIOD} is 30s here (10m shipped)."""
    name, hostid = host(api, KUEUE, {"{$KUEUE.NODATA.PERIOD}": "30s"})
    feed_kueue(api, name)
    wait_for(api, hostid, "Kueue: no metrics", OK, timeout=30)
    assert wait_for(api, hostid, "Kueue: no metrics", PROBLEM, timeout=150) == "Kueue: no metrics for 30s"
    wait_for(api, hostid, "Kueue: no metrics", OK, feed=lambda: feed_kueue(api, name))


def test_an_idle_pod_alerts_once_naming_team_queue_pod_and_node_and_spikes_do_not_reset_it(api):
    """Pod llm-train/pretrain-0 holds GPUs 0-3: graphics/tensor activity 0-2% with a 20% spike every 6th sample
    (mean under 5%) while GPU_UTIL reads 100% (a rank spinning in an NCCL wait). vision/resnet-1 holds GPU 4
    at 90%. GPU 5 is free and idle. {$GPU.IDLE.PERIOD} is 2m here, {$GPU.IDLE.RECOVERY.PERIOD} 1m."""
    name, hostid = host(
        api,
        [GPU_TEMPLATE],
        {"{$GPU.IDLE.PERIOD}": "2m", "{$GPU.IDLE.RECOVERY.PERIOD}": "1m", "{$GPU.COUNT.EXPECTED}": "6"},
    )
    pods = {g: ("llm-train", "pretrain-0") for g in range(4)} | {4: ("vision", "resnet-1")}
    util = dict.fromkeys(range(6), 100) | {5: 0}

    def sample(step: int) -> str:
        spike = 0.20 if step % 6 == 0 else 0.01
        return s.dcgm_pods(util, pods, dict.fromkeys(range(4), spike) | {4: 0.9, 5: 0.0})

    key = "dcgm.pod.activity[llm-train,pretrain-0]"
    items = values(api, hostid, feed=lambda: push(api, name, "dcgm.metrics", sample(1)), want=(key,))
    assert {k for k in items if k.startswith("dcgm.pod.activity[")} == {key, "dcgm.pod.activity[vision,resnet-1]"}
    now = int(time.time())
    for step, ago in enumerate(range(300, 0, -10)):  # 5 minutes of history, 10 s apart, spikes included
        push(api, name, "dcgm.metrics", sample(step), clock=now - ago)
    steps = iter(range(30, 10_000))
    fired = wait_for(
        api, hostid, "pretrain-0", PROBLEM, feed=lambda: push(api, name, "dcgm.metrics", sample(next(steps)))
    )
    assert fired == (
        "Team llm, queue llm-train/default: pod pretrain-0 on " + name + " holds 4 GPUs, idle (under 5% for 2m)"
    )
    for _ in range(15):  # spikes keep coming: still one problem, never resolved
        push(api, name, "dcgm.metrics", sample(next(steps)))
        time.sleep(2)
    idle = {d: t for d, t in triggers(api, hostid).items() if " holds " in d}
    assert [d for d, t in idle.items() if t["value"] == PROBLEM] == [fired], idle
    ids = [
        r["triggerid"]
        for r in api.trigger.get(hostids=[hostid], output=["triggerid", "description"], expandDescription=True)
        if r["description"] == fired
    ]
    assert [e["value"] for e in api.event.get(objectids=ids, output=["value"])] == [PROBLEM]
    problem = [p for p in api.problem.get(hostids=[hostid], selectTags="extend") if p["name"] == fired][0]
    assert {"tag": "team", "value": "llm"} in problem["tags"] and {"tag": "namespace", "value": "llm-train"} in problem[
        "tags"
    ]
    busy = s.dcgm_pods(util, pods, dict.fromkeys(range(5), 0.8) | {5: 0.0})
    wait_for(api, hostid, "pretrain-0", OK, timeout=180, feed=lambda: push(api, name, "dcgm.metrics", busy))


def test_a_pod_that_just_got_its_gpu_is_not_idle_yet(api):
    """No value a period ago: a job that is still loading its data does not alert in its first period."""
    name, hostid = host(api, [GPU_TEMPLATE], {"{$GPU.IDLE.PERIOD}": "1m", "{$GPU.COUNT.EXPECTED}": "1"})
    fresh = s.dcgm_pods({0: 0}, {0: ("vision", "just-started")}, {0: 0.0})
    key = "dcgm.pod.activity[vision,just-started]"
    values(api, hostid, feed=lambda: push(api, name, "dcgm.metrics", fresh), want=(key,))
    for _ in range(10):
        push(api, name, "dcgm.metrics", fresh)
        time.sleep(2)
    assert [d for d, t in triggers(api, hostid).items() if "just-started" in d and t["value"] == PROBLEM] == []
