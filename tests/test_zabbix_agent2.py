"""The real Zabbix agent 2 7.0 (tests/zabbix_agent2.py) with exactly the configuration the platform
renders: the chart's DaemonSet (values -> container env -> the image entrypoint's zabbix_agent2.conf,
the PSK Secret file at the owner and mode the kubelet gives it, the image's uid) and the NAS hosts
(the files zabbix-agent2-nas.sh writes). It must stay up, answer on the port the chart's probes use,
and deliver active checks to the real 7.0 server through PSK."""

from __future__ import annotations

import re
import secrets
import time

import pytest
import yaml

from components.zabbix_api import DEFAULT_ADMIN, DEFAULT_PASSWORD, login
from components.zabbix_kinds import KINDS, normalized
from components.zabbix_monitoring import PSK_IDENTITY, RELEASE
from tests.conftest import requires_upstream
from tests.zabbix70 import zabbix70
from tests.zabbix_agent2 import (
    CHART_AGENT_DEFAULTS,
    File,
    agent2_root,
    config_values,
    daemonset_env,
    entrypoint_config,
    run_agent2,
    secret_file,
)

ZABBIX = "monitoring-zabbix"
PROBE_PORT = 10050  # the chart's liveness/startup probes: tcpSocket on the container port `zabbix-agent`


def agent_values(plan) -> dict:
    return plan.named(ZABBIX)["inputs"]["values"]["zabbixAgent"]


def node_names(plan, role: str) -> list[str]:
    return [r["inputs"]["spec"]["host"] for r in plan.by_type("pulumi-python:dynamic/zabbix:Host")
            if {"tag": "role", "value": role} in r["inputs"]["spec"]["tags"]]  # fmt: skip


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
        with run_agent2(config, **run, hosts=hosts, forwards={10051: ("127.0.0.1", z.server_port)}) as agent:
            value = _wait_for_value(api, hostid, "agent.hostname", agent)
        assert value == node


def _host_with_active_item(api, name: str, psk: str) -> str:
    """The host as the platform declares it (HostKind, PSK both ways) plus one active item."""
    spec = normalized("Host", {"host": name, "ip": "127.0.0.1", "groups": ["Linux servers"], "templates": [],
                               "tags": []})  # fmt: skip
    hostid = KINDS["Host"].create(api, spec, {"tls_psk_identity": PSK_IDENTITY, "tls_psk": psk})
    api.item.create(hostid=hostid, name="agent hostname", key_="agent.hostname", type=7, value_type=1, delay="5s")
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
