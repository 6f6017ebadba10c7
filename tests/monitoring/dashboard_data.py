"""A small platform on a real Zabbix 7.0 server, with data, for the dashboard test and the docs'
screenshot (`tests/monitoring/dashboard_screenshot.py`).

The platform's templates are imported as they ship, except that their collected items accept
trapped values: HTTP-agent items get `allow_traps` (as in tests/monitoring/test_triggers.py) and the
InfiniBand template's agent items become trapper items (the real agent reading a sysfs tree is
tests/monitoring/test_infiniband.py). Values reach the server in the Zabbix sender protocol on its
trapper port, with clocks spread over the last 15 minutes so graphs have lines. Hosts, groups and
macros are the ones the program declares for two GPU nodes of the prod inventory, the Kubernetes and
Ceph hosts and one NAS host; the dashboards are the program's, built for that inventory.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import yaml

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from components.monitoring.config import (
    CEPH_TEMPLATE,
    K8S_STATE_TEMPLATE,
    KUBE_TEMPLATE,
    LINUX_TEMPLATE,
    MINIO_TEMPLATE,
    global_macros,
    node_groups,
    node_macros,
    node_tags,
    node_templates,
    template_sources,
)
from components.monitoring.dashboards import overview_dashboard, teams_dashboard
from components.monitoring.kinds import IMPORT_RULES
from settings import load
from settings.monitoring import HOST_GROUPS
from tests.conftest import stack_doc
from tests.monitoring.zabbix70 import exposition, trapper_request

SAMPLES = 30  # one every 30 s
KUBE, CEPH, NAS = "prod-kubernetes", "prod-ceph", "nas-01"
BACKUP_SOURCES = ("datasets", "checkpoints")
IB_PORTS = (("mlx5_0", "1"), ("mlx5_1", "1"))
HEADERS_OK = "HTTP/1.1 200 OK\r\nServer: MinIO\r\n"  # what the health items retrieve (headers only)


@dataclass
class Platform:
    api: object
    url: str  # the frontend's base URL
    overview: dict
    teams: dict


def pushable(text: str) -> str:
    """The template YAML with every collected item open to the sender protocol."""
    doc = yaml.safe_load(text)
    for template in doc["zabbix_export"]["templates"]:
        for item in template.get("items", []):
            if item["type"] == "HTTP_AGENT":
                item["allow_traps"] = "YES"
        for rule in template.get("discovery_rules", []):
            if rule["type"] == "ZABBIX_ACTIVE":
                rule["type"] = "TRAP"
                rule.pop("delay", None)
            for proto in rule.get("item_prototypes", []):
                if proto["type"] == "ZABBIX_ACTIVE":
                    proto["type"] = "TRAP"
                    proto.pop("delay", None)
    return yaml.safe_dump(doc, sort_keys=False)


def send(port: int, rows: list[dict]) -> None:
    reply = trapper_request(port, {"request": "sender data", "data": rows})
    assert reply.get("response") == "success", reply


def dcgm(gpus: int, step: int, node: int) -> str:
    lines = []
    for gpu in range(gpus):
        labels = f'gpu="{gpu}",UUID="GPU-{node}-{gpu}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3"'
        util = int(50 + 40 * math.sin((step + gpu * 3 + node * 7) / 5))
        used = (20 + 50 * (util / 100)) * 1024  # MiB, as DCGM reports framebuffer use
        faults = ("XID_ERRORS", "ECC_DBE_VOL_TOTAL", "UNCORRECTABLE_REMAPPED_ROWS", "ROW_REMAP_FAILURE")
        values = {
            "GPU_UTIL": util,
            "FB_USED": f"{used:.0f}",
            "FB_FREE": f"{81559 - used:.0f}",
            "GPU_TEMP": 45 + util // 4,
            "POWER_USAGE": 150 + util * 5,
            **dict.fromkeys(faults, 0),
            "NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 0,
        }
        lines += exposition(labels, {f"DCGM_FI_DEV_{metric}": value for metric, value in values.items()})
    return "\n".join(lines) + "\n"


def ceph(step: int) -> str:
    lines = ["ceph_health_status 0"]
    lines += [f'ceph_osd_up{{ceph_daemon="osd.{i}"}} 1' for i in range(6)]
    for pool, name in ((1, ".mgr"), (2, "tier2-block"), (3, "tier2-fs-data")):
        lines.append(f'ceph_pool_metadata{{pool_id="{pool}",name="{name}",type="replicated"}} 1')
        grow = step * (1 + pool) * (1 + math.sin(step / 4) / 2)
        rates = {"rd_bytes": 40e6, "wr_bytes": 25e6, "rd": 900, "wr": 600}
        values = {f"ceph_pool_{metric}": int(grow * rate) for metric, rate in rates.items()}
        values["ceph_pool_percent_used"] = f"{0.1 * pool + step / 1000:.3f}"
        lines += exposition(f'pool_id="{pool}"', values)
    return "\n".join(lines) + "\n"


def minio(offline: int) -> str:
    return (
        f"minio_cluster_drive_offline_total {offline}\nminio_cluster_drive_online_total {16 - offline}\n"
        "minio_cluster_capacity_usable_free_bytes 6.597069766656e+13\n"
        "minio_cluster_capacity_usable_total_bytes 8.796093022208e+13\n"
    )


def backup_status(now: int) -> str:
    ages = {"datasets": 5 * 3600, "checkpoints": 30 * 3600}  # checkpoints missed a night
    items = [
        {
            "metadata": {"name": f"backup-status-{s}"},
            "data": {"lastSuccessTime": str(now - ages[s]), "lastResult": "ok"},
        }
        for s in BACKUP_SOURCES
    ]
    return json.dumps({"items": items})


def etcd_snapshots(now: int) -> str:
    return json.dumps(
        {"items": [{"status": {"creationTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 4000))}}]}
    )


def ib_key(dev: str, port: str, counter: str) -> str:
    return f"vfs.file.contents[{{$IB.SYSFS}}/{dev}/ports/{port}/{counter}]"


def build(api_url: str, server_port: int) -> Platform:
    """Imports, hosts, data; returns the dashboards' specs (not yet created)."""
    api = login(api_url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
    for _, text in template_sources().values():
        api.configuration.import_(format="yaml", source=pushable(text), rules=IMPORT_RULES)
    settings = load(stack_doc("prod"))
    for macro, (value, description) in global_macros(settings.monitoring, "https://zabbix.example").items():
        api.usermacro.createglobal(macro=macro, value=value, description=description)
    groups = {g: api.hostgroup.create(name=g)["groupids"][0] for g in HOST_GROUPS}
    templates = {t["host"]: t["templateid"] for t in api.template.get(output=["host"])}

    def host(name: str, group_names: list[str], template_names: list[str], tags=(), macros=()) -> None:
        api.host.create(
            host=name,
            groups=[{"groupid": groups[g]} for g in group_names],
            templates=[{"templateid": templates[t]} for t in template_names],
            tags=list(tags),
            macros=list(macros),
        )

    nodes = [n for n in settings.nodes if n.role == "gpu" and n.infiniband][:2]
    for node in nodes:
        host(node.name, node_groups(node), node_templates(node), node_tags(node), node_macros(node))
    sources = ",".join(BACKUP_SOURCES)
    host(
        KUBE,
        ["ml-platform/kubernetes"],
        [K8S_STATE_TEMPLATE, KUBE_TEMPLATE],
        macros=[{"macro": "{$BACKUP.SOURCES}", "value": sources}],
    )
    host(CEPH, ["ml-platform/ceph-storage"], [CEPH_TEMPLATE])
    host(NAS, ["ml-platform/nas"], [LINUX_TEMPLATE, MINIO_TEMPLATE])

    now = int(time.time())
    start = now - SAMPLES * 30

    def rows(step: int, clock: int) -> list[dict]:
        out = [
            {"host": n.name, "key": "dcgm.metrics", "value": dcgm(8 - i, step, i), "clock": clock}
            for i, n in enumerate(nodes)
        ]
        out += [
            {"host": CEPH, "key": "ceph.metrics", "value": ceph(step), "clock": clock},
            {"host": NAS, "key": "minio.metrics", "value": minio(2), "clock": clock},
            {"host": NAS, "key": "minio.health.live", "value": HEADERS_OK, "clock": clock},
            {"host": NAS, "key": "minio.health.cluster", "value": HEADERS_OK, "clock": clock},
            {"host": KUBE, "key": "ml.kube.backup.status", "value": backup_status(clock), "clock": clock},
            {"host": KUBE, "key": "ml.kube.etcd.snapshot.last", "value": etcd_snapshots(clock), "clock": clock},
        ]
        for i, node in enumerate(nodes):
            for dev, port in IB_PORTS:
                words = int(step * 30 * (2.5e9 + 1e9 * math.sin(step / 3 + i)) / 4)
                for counter, value in (
                    ("counters/port_rcv_data", words),
                    ("counters/port_xmit_data", int(words * 0.8)),
                    ("counters/symbol_error", 0),
                    ("counters/port_rcv_errors", 3 if (i, dev) == (1, "mlx5_1") and step > 20 else 0),
                    ("counters/link_downed", 0),
                    ("state", "4: ACTIVE"),
                    ("phys_state", "5: LinkUp"),
                    ("rate", "400 Gb/sec (4X NDR)"),
                ):
                    out.append(
                        {"host": node.name, "key": ib_key(dev, port, counter), "value": str(value), "clock": clock}
                    )
        return out

    lld = [
        {
            "host": n.name,
            "key": "ml.ib.ports",
            "value": "\n".join(f"{d}/ports/{p}" for d, p in IB_PORTS),  # what the UserParameter prints
        }
        for n in nodes
    ]
    # Discovered items take values once the server's configuration cache knows them: until then
    # push the first sample again.
    deadline = time.monotonic() + 180
    while not _ready(api, [n.name for n in nodes]):
        if time.monotonic() > deadline:
            raise AssertionError("the discovered items got no value in 180 s")
        send(server_port, lld + rows(0, start))
        time.sleep(3)
    for step in range(1, SAMPLES + 1):
        send(server_port, rows(step, start + step * 30))
    overview = overview_dashboard(nodes, has_nas=True, kubernetes_host=KUBE, ceph_host=CEPH)
    teams = teams_dashboard(settings.scheduling.teams, nodes)
    return Platform(api, api_url.removesuffix("api_jsonrpc.php"), overview, teams)


def _ready(api, gpu_nodes: list[str]) -> bool:
    """The discovered items the widgets show exist and have a value (GPUs, IB ports, pools, backups)."""
    wanted = {
        "GPU *: utilization": gpu_nodes,
        "IB *: state": gpu_nodes,
        "Pool *: used": [CEPH],
        "Backup *: age": [KUBE],
    }
    for pattern, hosts in wanted.items():
        for name in hosts:
            rows = api.item.get(host=name, search={"name": pattern}, searchWildcardsEnabled=True, output=["lastclock"])
            if not rows or any(r["lastclock"] == "0" for r in rows):
                return False
    return True


# Chromium on a machine without outside network: no background connections, a fresh profile.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_WIDGETS_JS = """() => [...document.querySelectorAll('.dashboard-grid-widget')].map(w => ({
    name: (w.querySelector('.dashboard-grid-widget-header h4') || {}).textContent || '',
    text: (w.querySelector('.dashboard-grid-widget-contents') || w).innerText,
    errors: w.querySelectorAll('.msg-bad, .msg-warning').length,
    lines: w.querySelectorAll('svg .svg-graph-line path, svg g.svg-graph-line').length,
    cells: w.querySelectorAll('svg .svg-honeycomb-cell').length,
    loading: w.querySelectorAll('.is-loading').length,
}))"""


def render(chromium: str, base_url: str, dashboardid: str, png=None, page_index: int = 0) -> list[dict]:
    """Logs in to the real frontend as Admin, opens the dashboard (its page `page_index`), waits until
    every widget has loaded, saves a PNG when asked; returns what each widget shows."""
    import tempfile

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1680, "height": 2100},
        )
        try:
            page = browser.new_page()
            page.goto(f"{base_url}index.php")
            page.fill("#name", DEFAULT_ADMIN)
            page.fill("#password", DEFAULT_PASSWORD)
            page.click("#enter")
            page.wait_for_load_state("networkidle")
            page.goto(f"{base_url}zabbix.php?action=dashboard.view&dashboardid={dashboardid}&from=now-20m&to=now")
            if page_index:
                page.locator(".dashboard-navigation-tabs li").nth(page_index).click()
            page.wait_for_selector(".dashboard-grid-widget")
            if page.locator("a.btn-time").count():  # only with time-based widgets
                page.click("a.btn-time")  # folds the time selector away (clicking the open tab closes it)
            page.wait_for_load_state("networkidle")
            time.sleep(3)  # widgets draw after their data arrives
            widgets = page.evaluate(_WIDGETS_JS)
            if png:
                page.screenshot(path=str(png), full_page=True)
            return widgets
        finally:
            browser.close()
