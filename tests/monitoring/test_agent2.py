"""The real Zabbix agent 2 7.0 (tests/monitoring/agent2.py) with exactly the configuration the platform
renders: the chart's DaemonSet (values -> container env -> the image entrypoint's zabbix_agent2.conf,
the PSK Secret file at the owner and mode the kubelet gives it, the image's uid) and the NAS hosts
(the files zabbix-agent2-nas.sh writes). It must stay up, answer on the port the chart's probes use,
and deliver active checks to the real 7.0 server through PSK."""

from __future__ import annotations

import grp
import os
import pwd
import re
import secrets
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from components.monitoring.config import PSK_IDENTITY, RELEASE, global_macros, template_sources
from components.monitoring.host_set import expand
from components.monitoring.kinds import IMPORT_RULES, KINDS, normalized
from settings import load
from tests.conftest import requires_upstream, stack_doc
from tests.hosts import staged_bundle
from tests.monitoring.agent2 import (
    CHART_AGENT_DEFAULTS,
    File,
    agent2_root,
    config_values,
    daemonset_env,
    entrypoint_config,
    run_agent2,
    secret_file,
)
from tests.monitoring.zabbix70 import zabbix70

pytestmark = pytest.mark.real_server  # make test-fast leaves these out

ZABBIX = "monitoring-zabbix"
PROBE_PORT = 10050  # the chart's liveness/startup probes: tcpSocket on the container port `zabbix-agent`


def agent_values(plan) -> dict:
    return plan.named(ZABBIX)["inputs"]["values"]["zabbixAgent"]


def node_names(plan, role: str) -> list[str]:
    """The agent hosts of `role` by name, from the Zabbix host sets (one per node group, one for the NAS hosts)."""
    return sorted(h["host"] for h in planned_agent_hosts(plan) if {"tag": "role", "value": role} in h["tags"])


def planned_agent_hosts(plan) -> list[dict]:
    """Every node's and NAS host's Zabbix host spec, from the plan's host sets (components/monitoring/host_set.py)."""
    sets = plan.by_type("pulumi-python:dynamic/zabbix:HostSet")
    return [h for r in sets for h in expand(r["inputs"]["spec"]).values()]


def daemonset_agent(plan, node: str, psk: str) -> tuple[str, dict]:
    """The agent configuration and files of the DaemonSet pod on `node`."""
    values = agent_values(plan)
    base = (agent2_root() / "etc/zabbix/zabbix_agent2.conf").read_text()
    config = entrypoint_config(base, daemonset_env(values, node))
    (volume,) = [v for v in values["extraVolumes"] if v["name"] == "psk"]
    (mount,) = [m for m in values["extraVolumeMounts"] if m["name"] == "psk"]
    fs_group = values.get("extraPodSpecs", {}).get("securityContext", {}).get("fsGroup")
    psk_file = secret_file(psk, volume["secret"].get("defaultMode"), fs_group)
    groups = (1995, 0, fs_group) if fs_group is not None else (1995, 0)
    files = {f"{mount['mountPath']}/psk": psk_file, "/etc/zabbix/zabbix_agentd.d/.keep": File("")}
    return config, {"files": files, "groups": groups}


def server_names(config: str) -> list[str]:
    return [entry.rsplit(":", 1)[0] for v in config_values(config, "ServerActive") for entry in v.split(",")]


def test_chart_defaults_used_for_the_agent_env_are_the_pinned_charts():
    upstream = yaml.safe_load(requires_upstream("charts-src", "zabbix", "7.0.12", "values.yaml").read_text())
    assert {k: upstream["zabbixAgent"][k] for k in CHART_AGENT_DEFAULTS} == CHART_AGENT_DEFAULTS


@pytest.mark.parametrize("role", ["gpu", "cpu"])
def test_daemonset_agent_stays_up_answers_the_probe_port_and_reads_its_psk(role, prod_plan):
    node = node_names(prod_plan, role)[0]
    config, run = daemonset_agent(prod_plan, node, secrets.token_hex(32))
    assert config_values(config, "Hostname") == [node]
    with run_agent2(config, **run) as agent:
        time.sleep(2)
        assert agent.alive(), f"agent2 exited:\n{agent.log()}"
        assert agent.accepts(PROBE_PORT), f"nothing listens on {PROBE_PORT}:\n{agent.log()}"
        assert "permission denied" not in agent.log()


def test_daemonset_agent_opens_one_active_session_per_server(prod_plan):
    """ServerActive names each server once: the short Service name and its FQDN are the same server
    (two entries = two sessions, every active item collected and sent twice)."""
    config, _ = daemonset_agent(prod_plan, node_names(prod_plan, "gpu")[0], "00" * 32)
    namespace = prod_plan.named(ZABBIX)["inputs"]["namespace"]
    canonical = [re.sub(rf"\.{namespace}\.svc(\.cluster\.local)?$", "", n) for n in server_names(config)]
    assert canonical == [f"{RELEASE}-zabbix-server"]


def test_daemonset_agent_delivers_active_checks_to_the_real_server_over_psk(prod_plan):
    node = node_names(prod_plan, "gpu")[0]
    psk = secrets.token_hex(32)
    config, run = daemonset_agent(prod_plan, node, psk)
    with zabbix70("agent2-daemonset", with_server=True) as z:
        api = login(z.url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
        hostid = _host_with_active_item(api, node, psk)
        hosts = {name: "127.0.0.1" for name in server_names(config)}
        with run_agent2(
            config, **run, hosts=hosts, forwards={("127.0.0.1", 10051): ("127.0.0.1", z.server_port)}
        ) as agent:
            value = _wait_for_value(api, hostid, "agent.hostname", agent)
        assert value == node


def _host_with_active_item(api, name: str, psk: str) -> str:
    """The host as the platform declares it (HostKind, PSK both ways) plus one active item."""
    spec = normalized("Host", {"host": name, "ip": "127.0.0.1", "groups": ["Linux servers"], "templates": [],
                               "tags": []})  # fmt: skip
    hostid = KINDS["Host"].create(api, spec, {"tls_psk_identity": PSK_IDENTITY, "tls_psk": psk})
    api.item.create(hostid=hostid, name="agent hostname", key_="agent.hostname", type=7, value_type=1, delay="5s")
    # The server reads new hosts into its configuration cache every 10 s (CacheUpdateFrequency); an
    # agent that asks before then is refused and retries only a minute later.
    time.sleep(12)
    return hostid


def host_with_template(api, node: str, psk: str, stem: str, macros: dict[str, str]) -> str:
    """The platform's template `stem` imported as it ships, the global macros from the prod settings, and
    `node`'s host (as `_host_with_active_item` makes it) linked to it with the host `macros`."""
    names, text = template_sources()[stem]
    api.configuration.import_(format="yaml", source=text, rules=IMPORT_RULES)
    for macro, (value, _) in global_macros(load(stack_doc("prod")).monitoring, "https://zabbix.example").items():
        api.usermacro.createglobal(macro=macro, value=value)
    hostid = _host_with_active_item(api, node, psk)
    templates = api.template.get(filter={"host": names}, output=["templateid"])
    api.host.update(
        hostid=hostid,
        templates=[{"templateid": t["templateid"]} for t in templates],
        macros=[{"macro": k, "value": v} for k, v in macros.items()],
    )
    return hostid


def _wait_for_value(api, hostid: str, key: str, agent, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert agent.alive(), f"agent2 exited:\n{agent.log()}"
        (item,) = api.item.get(hostids=[hostid], filter={"key_": key}, output=["lastclock", "lastvalue"])
        if item["lastclock"] != "0":
            return item["lastvalue"]
        time.sleep(2)
    raise AssertionError(f"no value for {key} from the agent in {timeout}s; agent log:\n{agent.log()}")


# ---------------------------------------------------------------------------------------------
# NAS hosts: the files zabbix-agent2-nas.sh writes, with the package's own zabbix_agent2.conf
# ---------------------------------------------------------------------------------------------


def _unused_id() -> int:
    """A uid/gid no user or group of this machine has (the overlay's /etc/passwd extends the host's)."""
    for n in range(2999, 2000, -1):
        try:
            pwd.getpwuid(n)
        except KeyError:
            try:
                grp.getgrgid(n)
            except KeyError:
                return n
    raise RuntimeError("no unused uid in 2000-2999")


NAS_UID = _unused_id()  # the system user the package's postinst creates
_NAS_STUBS = {
    # The key download and dearmoring: any bytes do for a file the test never verifies.
    "curl": 'while [ $# -gt 0 ]; do [ "$1" = -o ] && { echo key >"$2"; shift; }; shift; done',
    "gpg": 'while [ $# -gt 0 ]; do [ "$1" = -o ] && { echo key >"$2"; shift; }; shift; done',
    # `install` creates the zabbix user, as the package's postinst does.
    "apt-get": f"""case " $* " in *" install "*)
  echo "zabbix:x:{NAS_UID}:{NAS_UID}::/var/lib/zabbix:/usr/sbin/nologin" >>/etc/passwd
  echo "zabbix:x:{NAS_UID}:" >>/etc/group
  for a in "$@"; do case $a in zabbix-agent2=*) echo "${{a#*=}}" >/etc/zabbix-test-installed ;; esac; done ;;
esac""",
    "dpkg-query": 'v=$(cat /etc/zabbix-test-installed 2>/dev/null) && echo "install ok installed $v"',
    "dpkg": "exit 0  # `dpkg --audit`: nothing left half-installed",
    "systemctl": """case $1 in restart) touch /etc/zabbix-test-up ;; is-active) [ -f /etc/zabbix-test-up ] ;; esac""",
    "sudo": '[ "$1" = -n ] && shift; exec "$@"',
}


def run_nas_script(tmp_path, step_create: str, psk: str, runs: int = 1) -> tuple[list[str], Path]:
    """Runs the NAS step's command (as the plan has it) `runs` times, with /etc and
    /usr/share/keyrings on an overlay (the host's stay untouched) and the package tools stubbed.
    Returns each run's output and the overlay's upper /etc."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, body in _NAS_STUBS.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    home = staged_bundle(tmp_path / "home")
    dirs = {n: tmp_path / n for n in ("etc-up", "etc-work", "keys-up", "keys-work")}
    for d in dirs.values():
        d.mkdir()
    mounts = (
        f"mount -t overlay overlay -o lowerdir=/etc,upperdir={dirs['etc-up']},workdir={dirs['etc-work']} /etc && "
        f"mount -t overlay overlay -o lowerdir=/usr/share/keyrings,upperdir={dirs['keys-up']},"
        f"workdir={dirs['keys-work']} /usr/share/keyrings && "
    )
    outputs = []
    for _ in range(runs):
        proc = subprocess.run(
            ["unshare", "--mount", "--", "sh", "-c", mounts + step_create],
            input=psk + "\n",
            capture_output=True,
            text=True,
            # The step's runner finds its program in the bundle the host's -scripts step copied (HOME) and
            # keeps it in a store under HOST_ROOT, not on this machine.
            env={"PATH": f"{stubs}:{os.environ['PATH']}", "HOME": str(home), "HOST_ROOT": str(tmp_path / "root")},
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout + proc.stderr)
    return outputs, dirs["etc-up"]


def nas_agent(plan, tmp_path, psk: str) -> tuple[str, str, dict, list[str]]:
    host = node_names(plan, "nas")[0]
    create = plan.revealed[plan.named(f"{host}-zabbix-agent2")["urn"]]["create"]
    outputs, etc = run_nas_script(tmp_path, create, psk, runs=2)
    dropin, psk_path = etc / "zabbix/zabbix_agent2.d/ml-platform.conf", etc / "zabbix/ml-platform.psk"
    st = psk_path.stat()
    files = {
        "/etc/zabbix/zabbix_agent2.d/ml-platform.conf": File(dropin.read_text()),
        "/etc/zabbix/ml-platform.psk": File(psk_path.read_text(), st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)),
    }
    base = (agent2_root() / "etc/zabbix/zabbix_agent2.conf").read_text()
    return host, base, files, outputs


def test_nas_script_gives_the_psk_to_the_zabbix_user_and_changes_nothing_the_second_time(prod_plan, tmp_path):
    _, _, files, outputs = nas_agent(prod_plan, tmp_path, secrets.token_hex(32))
    psk = files["/etc/zabbix/ml-platform.psk"]
    assert (psk.uid, psk.gid, psk.mode) == (NAS_UID, NAS_UID, 0o400)
    assert "restarted zabbix-agent2" in outputs[0]
    assert "changed" not in outputs[1].lower() and "restarted" not in outputs[1], outputs[1]


def test_nas_agent_runs_with_the_written_files_and_delivers_over_psk(prod_plan, tmp_path):
    psk = secrets.token_hex(32)
    host, base, files, _ = nas_agent(prod_plan, tmp_path, psk)
    dropin = files["/etc/zabbix/zabbix_agent2.d/ml-platform.conf"].content
    (server,) = config_values(dropin, "ServerActive")
    address, port = server.rsplit(":", 1)
    with zabbix70("agent2-nas", with_server=True) as z:
        api = login(z.url, DEFAULT_ADMIN, DEFAULT_PASSWORD)
        hostid = _host_with_active_item(api, host, psk)
        run = {
            "uid": NAS_UID,
            "gid": NAS_UID,
            "groups": (NAS_UID,),
            "writable_dirs": ("/run/zabbix", "/var/log/zabbix"),
        }
        forwards = {(address, int(port)): ("127.0.0.1", z.server_port)}
        with run_agent2(base, files, **run, forwards=forwards) as agent:
            log = agent.root / "var/log/zabbix/zabbix_agent2.log"
            agent.log = lambda: log.read_text(errors="replace") if log.exists() else ""  # its LogFile
            assert agent.alive(), agent.log()
            assert agent.accepts(PROBE_PORT)
            value = _wait_for_value(api, hostid, "agent.hostname", agent)
        assert value == host
