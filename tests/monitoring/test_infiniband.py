"""InfiniBand through the real agent 2 and the real 7.0 server: the DaemonSet's agent (the rendered
configuration and the user parameters ConfigMap) reads a sysfs tree laid out like the kernel's
(/sys/class/infiniband/<dev> symlinks to the PCI device), every device and port is discovered, and
the port-down and degraded-rate triggers fire and resolve. The intervals are host macros of 5-10 s
here (1 min and 10 min shipped)."""

from __future__ import annotations

import secrets
import time

import pytest

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from components.monitoring.config import ZABBIX_FILES
from tests.monitoring.agent2 import File, run_agent2
from tests.monitoring.test_agent2 import daemonset_agent, host_with_template, node_names, server_names
from tests.monitoring.test_triggers import OK, PROBLEM, triggers
from tests.monitoring.zabbix70 import zabbix70

pytestmark = pytest.mark.real_server  # make test-fast leaves these out

SYSFS = "/hostfs/sys"
PORTS = {("mlx5_0", "0000:17:00.0", "1"), ("mlx5_1", "0000:2a:00.0", "1"), ("mlx4_0", "0000:3b:00.0", "2")}


def sysfs_files(state: dict[tuple[str, str], tuple[str, str, str]]) -> tuple[dict[str, File], list[tuple[str, str]]]:
    """Files of a fake /sys: (dev, port) -> (state, phys_state, rate); the class entries are symlinks."""
    files, links = {}, []
    for dev, pci, port in PORTS:
        base = f"{SYSFS}/devices/pci0000:00/{pci}/infiniband/{dev}"
        st, phys, rate = state[(dev, port)]
        for name, value in {"state": st, "phys_state": phys, "rate": rate, "counters/port_rcv_data": "1000",
                            "counters/port_xmit_data": "2000", "counters/symbol_error": "0",
                            "counters/port_rcv_errors": "0", "counters/link_downed": "0"}.items():  # fmt: skip
            files[f"{base}/ports/{port}/{name}"] = File(value + "\n")
        links.append((f"{SYSFS}/class/infiniband/{dev}", f"../../devices/pci0000:00/{pci}/infiniband/{dev}"))
    return files, links


def test_every_port_is_discovered_and_down_or_degraded_ports_alert(prod_plan):
    node = node_names(prod_plan, "gpu")[0]
    psk = secrets.token_hex(32)
    config, run = daemonset_agent(prod_plan, node, psk)
    healthy = ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)")
    state = {(dev, port): healthy for dev, _, port in PORTS}
    files, links = sysfs_files(state)
    params = File((ZABBIX_FILES / "agent2-userparameters.conf").read_text())
    files = {**run["files"], **files, "/etc/zabbix/zabbix_agentd.d/ml-platform.conf": params}
    with zabbix70("agent2-ib", with_server=True) as z:
        api = login(z.url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
        hostid = host_with_template(api, node, psk, "infiniband", {"{$IB.INTERVAL}": "5s", "{$IB.LLD.INTERVAL}": "10s"})
        forwards = {("127.0.0.1", 10051): ("127.0.0.1", z.server_port)}
        hosts = {name: "127.0.0.1" for name in server_names(config)}
        with run_agent2(config, files, groups=run["groups"], hosts=hosts, forwards=forwards) as agent:
            for link, target in links:
                path = agent.root / link.lstrip("/")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.symlink_to(target)

            def port_items() -> set[str]:
                rows = api.item.get(hostids=[hostid], search={"key_": "/state]"}, output=["key_", "lastclock"])
                return {r["key_"] for r in rows if r["lastclock"] != "0" and "phys_state" not in r["key_"]}

            # Item keys keep the template macro; {$IB.SYSFS} is /hostfs/sys/class/infiniband.
            expected = {f"vfs.file.contents[{{$IB.SYSFS}}/{d}/ports/{p}/state]" for d, _, p in PORTS}
            _wait(lambda: port_items() == expected, 180, lambda: f"ports with values: {port_items()}\n{agent.log()}")

            def set_port(dev: str, port: str, values: tuple[str, str, str]) -> None:
                pci = next(p for d, p, q in PORTS if (d, q) == (dev, port))
                base = agent.root / f"{SYSFS.lstrip('/')}/devices/pci0000:00/{pci}/infiniband/{dev}/ports/{port}"
                for name, value in zip(("state", "phys_state", "rate"), values, strict=True):
                    (base / name).write_text(value + "\n")

            set_port("mlx4_0", "2", ("1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)"))
            set_port("mlx5_1", "1", ("4: ACTIVE", "5: LinkUp", "50 Gb/sec (1X HDR)"))
            _wait(lambda: _value(api, hostid, "IB mlx4_0/2: port down") == PROBLEM, 120, lambda: triggers(api, hostid))
            _wait(lambda: _value(api, hostid, "IB mlx5_1/1: link trained to") == PROBLEM, 120,
                  lambda: triggers(api, hostid))  # fmt: skip
            assert _value(api, hostid, "IB mlx5_0/1: port down") == OK
            set_port("mlx4_0", "2", healthy)
            set_port("mlx5_1", "1", healthy)
            _wait(lambda: _value(api, hostid, "IB mlx4_0/2: port down") == OK, 120, lambda: triggers(api, hostid))
            _wait(lambda: _value(api, hostid, "IB mlx5_1/1: link trained to") == OK, 120, lambda: triggers(api, hostid))
            assert agent.alive()


def _value(api, hostid: str, prefix: str) -> str:
    matching = [t["value"] for d, t in triggers(api, hostid).items() if d.startswith(prefix)]
    return PROBLEM if PROBLEM in matching else (OK if matching else "missing")


def _wait(check, timeout: float, explain) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout}s: {explain()}")
        time.sleep(2)
