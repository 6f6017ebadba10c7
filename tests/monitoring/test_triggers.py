"""Every shipped trigger fires and resolves on the real Zabbix 7.0 server, as docs/monitoring.md says.

The platform's templates are imported as they ship, with one change: their HTTP-agent master items
accept trapped values (`allow_traps`), so the test can hand the server the exporter's text with
`history.push` instead of the server fetching it (the test server polls nothing). The dependent
items, preprocessing, discovery and triggers are the shipped ones. Hosts carry the macros the
platform sets from the prod settings; where a trigger waits for a period (nodata, cordoned), the host
overrides that period's macro with a short one, which the test names.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import yaml

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from components.monitoring.config import (
    CEPH_TEMPLATE,
    GPU_TEMPLATE,
    KUBE_TEMPLATE,
    MINIO_TEMPLATE,
    global_macros,
    template_sources,
)
from components.monitoring.host_set import expand
from components.monitoring.kinds import IMPORT_RULES
from settings import load
from tests.conftest import stack_doc
from tests.monitoring.zabbix70 import exposition, zabbix70

pytestmark = pytest.mark.real_server  # make test-fast leaves these out

PROBLEM, OK = "1", "0"


def trappable(text: str) -> str:
    """The template YAML with every HTTP-agent item and item prototype open to `history.push`."""
    doc = yaml.safe_load(text)
    for template in doc["zabbix_export"]["templates"]:
        prototypes = [p for rule in template.get("discovery_rules", []) for p in rule.get("item_prototypes", [])]
        for item in [*template.get("items", []), *prototypes]:
            if item["type"] == "HTTP_AGENT":
                item["allow_traps"] = "YES"
    # No line folding: the frontend's YAML reader misreads PyYAML's folded double-quoted scalars (an escaped
    # newline of a JavaScript step came back as "n").
    return yaml.safe_dump(doc, sort_keys=False, width=1 << 30)


@pytest.fixture(scope="module")
def zabbix():
    with zabbix70("triggers", with_server=True) as instance:
        yield instance


@pytest.fixture(scope="module")
def api(zabbix):
    api = login(zabbix.url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
    for _, text in template_sources().values():
        api.configuration.import_(format="yaml", source=trappable(text), rules=IMPORT_RULES)
    settings = load(stack_doc("prod"))
    for macro, (value, description) in global_macros(settings.monitoring, "https://zabbix.example").items():
        api.usermacro.createglobal(macro=macro, value=value, description=description)
    api.hostgroup.create(name="ml-platform/test")
    return api


_hosts = iter(range(1, 1000))


def host(api, templates: list[str], macros: dict[str, str]) -> tuple[str, str]:
    """A fresh host (name, id) linked to `templates` with host macros."""
    name = f"trigger-test-{next(_hosts):03d}"
    group = api.hostgroup.get(filter={"name": "ml-platform/test"}, output=["groupid"])[0]["groupid"]
    ids = [api.template.get(filter={"host": t}, output=["templateid"])[0]["templateid"] for t in templates]
    hostid = api.host.create(
        host=name,
        groups=[{"groupid": group}],
        templates=[{"templateid": t} for t in ids],
        macros=[{"macro": m, "value": v} for m, v in macros.items()],
    )["hostids"][0]
    return name, hostid


def push(api, name: str, key: str, value: str, clock: int | None = None) -> None:
    """One value into an item, retried until the server's configuration cache knows the item."""
    row = {"host": name, "key": key, "value": value}
    if clock is not None:
        row["clock"] = clock
    deadline = time.monotonic() + 90
    while True:
        reply = api.history.push([row])
        errors = [r["error"] for r in reply.get("data", []) if "error" in r]
        if not errors:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"history.push {key} on {name}: {errors}")
        time.sleep(1)


def triggers(api, hostid: str) -> dict[str, dict]:
    rows = api.trigger.get(hostids=[hostid], output=["description", "value", "priority"], expandDescription=True)
    return {r["description"]: r for r in rows}


def wait_for(api, hostid: str, name: str, value: str, timeout: float = 120, feed: Callable[[], None] = lambda: None):
    """Waits until a trigger of the host whose expanded name contains `name` is a problem (value 1),
    or until every such trigger is OK (value 0), calling `feed` between looks (e.g. to push the next
    sample); returns the (first) trigger's expanded name."""
    deadline = time.monotonic() + timeout
    seen: dict = {}
    while time.monotonic() < deadline:
        feed()
        seen = triggers(api, hostid)
        matching = [(d, t) for d, t in seen.items() if name in d]
        hits = [d for d, t in matching if t["value"] == value]
        if hits and (value == PROBLEM or len(hits) == len(matching)):
            return hits[0]
        time.sleep(2)
    states = {d: t["value"] for d, t in seen.items()}
    raise AssertionError(f"no trigger containing {name!r} reached value {value} in {timeout}s: {states}")


def problem_of(api, hostid: str, name: str) -> dict:
    (problem,) = [p for p in api.problem.get(hostids=[hostid], output="extend") if name in p["name"]]
    return problem


# ---------------------------------------------------------------------------------------------
# Samples
# ---------------------------------------------------------------------------------------------


def dcgm(gpus: int = 2, xid: int = 0, dbe: int = 0, remap_failure: int = 0) -> str:
    lines = []
    for gpu in range(gpus):
        labels = f'gpu="{gpu}",UUID="GPU-{gpu}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3"'
        first = gpu == 0  # the faults are on the first GPU
        lines += exposition(
            labels,
            {
                "DCGM_FI_DEV_GPU_UTIL": 50,
                "DCGM_FI_DEV_XID_ERRORS": xid if first else 0,
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": dbe if first else 0,
                "DCGM_FI_DEV_ROW_REMAP_FAILURE": remap_failure if first else 0,
            },
        )
    return "\n".join(lines) + "\n"


def ceph(health: int) -> str:
    return f'ceph_health_status {health}\nceph_osd_up{{ceph_daemon="osd.0"}} 1\n'


def minio(offline: int) -> str:
    return f"minio_cluster_drive_offline_total {offline}\nminio_cluster_drive_online_total {16 - offline}\n"


def kube_state(ready: dict[str, int], cordoned: dict[str, int], failed_jobs: dict[str, int]) -> str:
    lines = []
    for node, is_ready in ready.items():
        lines.append(f'kube_node_info{{node="{node}",kernel_version="6.1"}} 1')
        lines.append(f'kube_node_status_condition{{node="{node}",condition="Ready",status="true"}} {is_ready}')
        lines.append(f'kube_node_status_condition{{node="{node}",condition="Ready",status="false"}} {1 - is_ready}')
        lines.append(f'kube_node_spec_unschedulable{{node="{node}"}} {cordoned.get(node, 0)}')
    for job, failed in failed_jobs.items():
        namespace, name = job.split("/")
        lines.append(f'kube_job_failed{{namespace="{namespace}",job_name="{name}",condition="true"}} {failed}')
        lines.append(f'kube_job_failed{{namespace="{namespace}",job_name="{name}",condition="false"}} {1 - failed}')
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------


def test_gpu_count_below_the_inventory_fires_and_resolves(api):
    name, hostid = host(api, [GPU_TEMPLATE], {"{$GPU.COUNT.EXPECTED}": "8"})
    fired = wait_for(api, hostid, "below the inventory", PROBLEM, feed=lambda: push(api, name, "dcgm.metrics", dcgm(7)))
    assert fired == "GPU count 7 below the inventory's 8"
    wait_for(api, hostid, "below the inventory", OK, feed=lambda: push(api, name, "dcgm.metrics", dcgm(8)))


@pytest.mark.parametrize(
    ("template", "master", "sample", "silent"),
    [
        (GPU_TEMPLATE, "dcgm.metrics", dcgm(2), "DCGM exporter: no metrics"),
        (CEPH_TEMPLATE, "ceph.metrics", ceph(0), "Ceph mgr: no metrics"),
    ],
)
def test_a_silent_exporter_fires_nodata_and_resolves_when_it_speaks_again(api, template, master, sample, silent):
    """nodata() sits on an item that keeps history: a master item without history never fires it.
    The period macro is 30 s here (5 min shipped)."""
    period = {GPU_TEMPLATE: "{$DCGM.NODATA.PERIOD}", CEPH_TEMPLATE: "{$CEPH.NODATA.PERIOD}"}[template]
    name, hostid = host(api, [template], {period: "30s", "{$GPU.COUNT.EXPECTED}": "2"})
    push(api, name, master, sample)
    wait_for(api, hostid, silent, OK, timeout=30)
    wait_for(api, hostid, silent, PROBLEM, timeout=150)  # nothing pushed: the exporter is silent
    wait_for(api, hostid, silent, OK, feed=lambda: push(api, name, master, sample))


def test_xid_error_stays_until_closed_by_hand(api):
    name, hostid = host(api, [GPU_TEMPLATE], {"{$GPU.COUNT.EXPECTED}": "2"})
    wait_value(api, hostid, "dcgm.gpu.xid[0]", feed=lambda: push(api, name, "dcgm.metrics", dcgm(2, xid=0)))
    fired = wait_for(api, hostid, "GPU 0: XID", PROBLEM, feed=lambda: push(api, name, "dcgm.metrics", dcgm(2, xid=79)))
    assert fired == "GPU 0: XID error 79"
    for _ in range(3):  # the exporter reports the same last XID, then none: the problem stays
        push(api, name, "dcgm.metrics", dcgm(2, xid=79))
        push(api, name, "dcgm.metrics", dcgm(2, xid=0))
        time.sleep(2)
    assert triggers(api, hostid)["GPU 0: XID error 0"]["value"] == PROBLEM
    api.event.acknowledge(eventids=[problem_of(api, hostid, "XID")["eventid"]], action=1, message="GPU reset")
    wait_for(api, hostid, "GPU 0: XID", OK, timeout=60)


def test_xid_already_set_when_first_seen_fires(api):
    name, hostid = host(api, [GPU_TEMPLATE], {"{$GPU.COUNT.EXPECTED}": "2"})
    fired = wait_for(api, hostid, "GPU 0: XID", PROBLEM, feed=lambda: push(api, name, "dcgm.metrics", dcgm(2, xid=48)))
    assert fired == "GPU 0: XID error 48"


def wait_value(api, hostid: str, key: str, feed: Callable[[], None], timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        feed()
        rows = api.item.get(hostids=[hostid], filter={"key_": key}, output=["lastclock", "lastvalue"])
        if rows and rows[0]["lastclock"] != "0":
            return rows[0]["lastvalue"]
        time.sleep(2)
    raise AssertionError(f"{key} got no value in {timeout}s")


@pytest.mark.parametrize(
    ("sample", "stable", "expected"),
    [
        (dcgm(2, dbe=3), "double-bit ECC", "GPU 0: 3 double-bit ECC errors"),
        (dcgm(2, remap_failure=1), "row remapping failed", "GPU 0: row remapping failed"),
    ],
)
def test_gpu_memory_errors_fire_and_resolve(api, sample, stable, expected):
    name, hostid = host(api, [GPU_TEMPLATE], {"{$GPU.COUNT.EXPECTED}": "2"})
    assert wait_for(api, hostid, stable, PROBLEM, feed=lambda: push(api, name, "dcgm.metrics", sample)) == expected
    wait_for(api, hostid, stable, OK, feed=lambda: push(api, name, "dcgm.metrics", dcgm(2)))


# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------


def test_ceph_health_err_fires_and_resolves(api):
    name, hostid = host(api, [CEPH_TEMPLATE], {})
    wait_for(api, hostid, "HEALTH_ERR", PROBLEM, feed=lambda: push(api, name, "ceph.metrics", ceph(2)))
    wait_for(api, hostid, "HEALTH_ERR", OK, feed=lambda: push(api, name, "ceph.metrics", ceph(0)))


def test_minio_drive_offline_and_write_quorum(api):
    name, hostid = host(api, [MINIO_TEMPLATE], {})
    fired = wait_for(api, hostid, "offline", PROBLEM, feed=lambda: push(api, name, "minio.metrics", minio(2)))
    assert fired == "MinIO: 2 drive(s) offline"
    wait_for(api, hostid, "offline", OK, feed=lambda: push(api, name, "minio.metrics", minio(0)))
    status = "HTTP/1.1 {} Service Unavailable\r\nServer: MinIO\r\n\r\n"
    wait_for(api, hostid, "write quorum", PROBLEM,
             feed=lambda: push(api, name, "minio.health.cluster", status.format(503)))  # fmt: skip
    wait_for(api, hostid, "write quorum", OK, feed=lambda: push(api, name, "minio.health.cluster", status.format(200)))


# ---------------------------------------------------------------------------------------------
# Kubernetes: nodes, upgrade Jobs, backups, etcd snapshots
# ---------------------------------------------------------------------------------------------


def test_node_not_ready_fires_and_resolves(api):
    name, hostid = host(api, [KUBE_TEMPLATE], {})
    nodes = {"gpu-01": 1, "cpu-02": 0}

    def feed():
        push(api, name, "ml.kube.state.metrics", kube_state(nodes, {}, {}))

    assert wait_for(api, hostid, "NotReady", PROBLEM, feed=feed) == "Node cpu-02 NotReady"
    assert triggers(api, hostid)["Node gpu-01 NotReady"]["value"] == OK
    nodes["cpu-02"] = 1
    wait_for(api, hostid, "NotReady", OK, feed=feed)


def test_node_cordoned_longer_than_the_threshold(api):
    """{$KUBE.NODE.CORDONED.MAX} is 1m here (settings: thresholds.nodeCordonedMaxMinutes)."""
    name, hostid = host(api, [KUBE_TEMPLATE], {"{$KUBE.NODE.CORDONED.MAX}": "1m"})
    now = int(time.time())
    ready = {"cpu-05": 1}
    push(api, name, "ml.kube.state.metrics", kube_state(ready, {"cpu-05": 0}, {}), clock=now - 300)
    wait_for(api, hostid, "cordoned", OK, feed=lambda: push(api, name, "ml.kube.state.metrics",
                                                             kube_state(ready, {"cpu-05": 0}, {})))  # fmt: skip
    push(api, name, "ml.kube.state.metrics", kube_state(ready, {"cpu-05": 1}, {}))  # just cordoned: no alert yet
    time.sleep(5)
    assert triggers(api, hostid)["Node cpu-05 cordoned for more than 1m"]["value"] == OK
    cordoned = kube_state(ready, {"cpu-05": 1}, {})
    fired = wait_for(api, hostid, "cordoned", PROBLEM, timeout=150,
                     feed=lambda: push(api, name, "ml.kube.state.metrics", cordoned))  # fmt: skip
    assert fired == "Node cpu-05 cordoned for more than 1m"
    wait_for(api, hostid, "cordoned", OK, feed=lambda: push(api, name, "ml.kube.state.metrics",
                                                             kube_state(ready, {"cpu-05": 0}, {})))  # fmt: skip


def test_failed_job_in_the_upgrade_namespace_only(api):
    name, hostid = host(api, [KUBE_TEMPLATE], {})
    ready = {"cpu-01": 1}
    jobs = {"ml-backup/backup-datasets-1": 1, "system-upgrade/apply-agent-plan-on-gpu-01": 0}

    def feed():
        push(api, name, "ml.kube.state.metrics", kube_state(ready, {}, jobs))

    wait_for(api, hostid, "failed Job", OK, feed=feed)  # a failed Job elsewhere is not an upgrade failure
    jobs["system-upgrade/apply-agent-plan-on-gpu-01"] = 1
    assert wait_for(api, hostid, "failed Job", PROBLEM, feed=feed) == "1 failed Job(s) in namespace system-upgrade"
    del jobs["system-upgrade/apply-agent-plan-on-gpu-01"]  # deleted after the fix
    wait_for(api, hostid, "failed Job", OK, feed=feed)


def backup_configmaps(statuses: dict[str, dict[str, str]]) -> str:
    import json

    items = [{"metadata": {"name": f"backup-status-{source}", "namespace": "ml-backup"}, "data": data}
             for source, data in statuses.items()]  # fmt: skip
    return json.dumps({"kind": "ConfigMapList", "apiVersion": "v1", "items": items})


def test_backup_too_old_for_its_schedule_and_failed_run(api):
    """Two sources with the contract's ConfigMaps; the age limit is a per-source context macro (the
    platform sets it from the schedule: interval + the run's deadline)."""
    limit = 3600
    macros = {"{$BACKUP.SOURCES}": "datasets,results", '{$BACKUP.MAXAGE:"datasets"}': str(limit),
              '{$BACKUP.MAXAGE:"results"}': str(limit)}  # fmt: skip
    name, hostid = host(api, [KUBE_TEMPLATE], macros)
    now = int(time.time())
    statuses = {
        "datasets": {"lastSuccessTime": str(now - 60), "lastRunTime": str(now - 60), "lastResult": "ok",
                     "bytes": "1024", "objects": "3"},
        "results": {"lastSuccessTime": str(now - 2 * limit), "lastRunTime": str(now - 60),
                    "lastResult": "rclone: 2 errors: connection refused", "bytes": "0", "objects": "0"},
    }  # fmt: skip

    def feed():
        push(api, name, "ml.kube.backup.status", backup_configmaps(statuses))

    old = wait_for(api, hostid, "results: no successful run", PROBLEM, feed=feed)
    assert old == f"Backup results: no successful run for more than {limit}s"
    assert wait_for(api, hostid, "results: last run failed", PROBLEM, feed=feed) == "Backup results: last run failed"
    assert _last_value(api, hostid, "backup.last_result[results]") == "rclone: 2 errors: connection refused"
    assert wait_for(api, hostid, "datasets", OK, feed=feed)
    statuses["results"].update(lastSuccessTime=str(int(time.time())), lastResult="ok")
    wait_for(api, hostid, "Backup results", OK, feed=feed)


def test_a_backup_source_that_never_ran_is_too_old(api):
    name, hostid = host(api, [KUBE_TEMPLATE], {"{$BACKUP.SOURCES}": "checkpoints"})
    fired = wait_for(api, hostid, "checkpoints: no successful run", PROBLEM,
                     feed=lambda: push(api, name, "ml.kube.backup.status", backup_configmaps({})))  # fmt: skip
    assert fired.startswith("Backup checkpoints: no successful run")


def _last_value(api, hostid: str, key: str) -> str:
    return api.item.get(hostids=[hostid], filter={"key_": key}, output=["lastvalue"])[0]["lastvalue"]


def etcd_snapshots(ages: list[int]) -> str:
    import datetime as dt
    import json

    now = dt.datetime.now(dt.UTC)
    items = [{"metadata": {"name": f"etcd-snapshot-{i}"}, "spec": {"snapshotName": f"etcd-snapshot-{i}"},
              "status": {"creationTime": (now - dt.timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                         "readyToUse": True}} for i, age in enumerate(ages)]  # fmt: skip
    return json.dumps({"apiVersion": "k3s.cattle.io/v1", "kind": "ETCDSnapshotFileList", "items": items})


def test_etcd_snapshot_too_old_fires_and_resolves(api):
    name, hostid = host(api, [KUBE_TEMPLATE], {"{$ETCD.SNAPSHOT.MAXAGE}": "7200"})
    old = etcd_snapshots([9000, 30000])
    fired = wait_for(api, hostid, "etcd: newest snapshot", PROBLEM,
                     feed=lambda: push(api, name, "ml.kube.etcd.snapshot.last", old))  # fmt: skip
    assert fired == "etcd: newest snapshot older than 7200s"
    wait_for(api, hostid, "etcd: newest snapshot", OK,
             feed=lambda: push(api, name, "ml.kube.etcd.snapshot.last", etcd_snapshots([600, 9000])))  # fmt: skip


@pytest.mark.parametrize("role", ["gpu", "cpu", "nas", "kubernetes"])
def test_every_host_links_its_templates_together(api, prod_plan, role):
    """The templates a host gets (official and ours) link together: no item key twice."""
    specs = [r["inputs"]["spec"] for r in prod_plan.by_type("pulumi-python:dynamic/zabbix:Host")]
    sets = prod_plan.by_type("pulumi-python:dynamic/zabbix:HostSet")  # the nodes' and NAS hosts' (host_set.py)
    specs += [h for r in sets for h in expand(r["inputs"]["spec"]).values()]
    if role == "kubernetes":
        spec = next(s for s in specs if s["host"].endswith("-kubernetes"))
    else:
        spec = next(s for s in specs if {"tag": "role", "value": role} in s["tags"])
    hostid = host(api, spec["templates"], {})[1]
    linked = api.host.get(hostids=[hostid], selectParentTemplates=["host"])[0]["parentTemplates"]
    assert sorted(t["host"] for t in linked) == sorted(spec["templates"])
