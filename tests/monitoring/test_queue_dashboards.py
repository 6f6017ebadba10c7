"""The queue dashboards on the real Zabbix 7.0 API, server and frontend (tests/monitoring/queue_dashboard_data.py
builds the platform and its data): created, read back equal and deleted through the provider; every
widget's item patterns match items with values that the templates made; the real frontend draws the
platform's page and every team's page without an error, with lines, cells and the queue problems."""

from __future__ import annotations

import fnmatch

import pytest

from components.monitoring.dashboards import GROUP, HOST
from components.monitoring.kinds import normalized
from components.monitoring.objects import ZabbixObjectProvider
from tests.monitoring.dashboard_data import render
from tests.monitoring.queue_dashboard_data import build
from tests.monitoring.zabbix70 import zabbix70
from tests.prerequisites import require_chromium

pytestmark = pytest.mark.real_server


@pytest.fixture(scope="module")
def platform():
    with zabbix70("queue-dashboards", with_server=True) as zabbix:
        yield build(zabbix.url, zabbix.server_port)


@pytest.fixture(scope="module")
def connection(platform):
    api = platform.api
    tokenid = api.token.create(name="queue-dashboards", userid="1")["tokenids"][0]  # userid 1: Admin
    return {"url": platform.url + "api_jsonrpc.php", "token": api.token.generate(tokenid)[0]["token"], "ca": None}


def props(spec: dict, connection: dict) -> dict:
    return {"kind": "Dashboard", "spec": normalized("Dashboard", spec), "connection": connection, "secrets": {}}


@pytest.mark.parametrize("which", ["queues", "team_queues"])
def test_created_read_back_equal_and_deleted_through_the_provider(platform, connection, which):
    provider = ZabbixObjectProvider()
    spec = getattr(platform, which)
    created = provider.create(props(spec, connection))
    read = provider.read(created.id, created.outs)
    assert read.outs["spec"] == created.outs["spec"] == normalized("Dashboard", spec)
    assert not provider.diff(created.id, read.outs, props(spec, connection)).changes
    provider.delete(created.id, created.outs)
    assert provider.read(created.id, created.outs).id is None


@pytest.mark.parametrize("which", ["queues", "team_queues"])
def test_every_widget_points_at_items_with_data(platform, which):
    api = platform.api
    every = api.host.get(output=["host"])
    checked = 0
    for page in getattr(platform, which)["pages"]:
        for w in page["widgets"]:
            fields = {f["name"]: (f["type"], f["value"]) for f in w["fields"]}
            patterns = [(k, v) for k, (_, v) in fields.items() if k.startswith("items.") or ".items." in k]
            for key, pattern in patterns:
                prefix = key.split("items.")[0]  # "ds.N." in a graph
                if prefix:
                    names = [v for k, (_, v) in fields.items() if k.startswith(f"{prefix}hosts.")]
                    hostids = [h["hostid"] for h in every if any(fnmatch.fnmatchcase(h["host"], n) for n in names)]
                    where = {"hostids": hostids}
                else:
                    hosts = [v for t, v in fields.values() if t == HOST]
                    groups = [v for t, v in fields.values() if t == GROUP]
                    where = {"hostids": [h["hostid"] for h in every if h["host"] in hosts]} if hosts else {}
                    if groups:
                        ids = api.hostgroup.get(filter={"name": groups}, output=["groupid"])
                        where["groupids"] = [g["groupid"] for g in ids]
                rows = api.item.get(**where, output=["name", "lastclock"])
                matching = [r for r in rows if fnmatch.fnmatchcase(r["name"], pattern)]
                assert any(r["lastclock"] != "0" for r in matching), f"{page['name']}/{w['name']}: {pattern!r}"
                checked += 1
    assert checked >= (10 if which == "queues" else 3 * 10)


def test_the_real_frontend_draws_every_page_with_data(platform, connection):
    chromium = require_chromium()
    for which, spec in (("queues", platform.queues), ("team_queues", platform.team_queues)):
        created = ZabbixObjectProvider().create(props(spec, connection))
        for index, page in enumerate(spec["pages"]):
            shown = render(chromium, platform.url, created.id, page_index=index)
            declared = {w["name"]: w["type"] for w in page["widgets"]}
            assert sorted(w["name"] for w in shown) == sorted(declared), shown
            for w in shown:
                assert not w["errors"] and "No permissions" not in w["text"], w
                if declared[w["name"]] == "svggraph":
                    assert w["lines"], w
                if declared[w["name"]] == "honeycomb":
                    assert w["cells"], w
            found = {w["name"]: w["text"] for w in shown if declared[w["name"]] == "problems"}
            if which == "queues":
                alerts = found["All teams: queue and idle-GPU alerts"]
                assert "a workload waits more than 60m" in alerts and "pod eval-2 on " in alerts, alerts
                assert "research can ever hold" in alerts, alerts
                waiting = found["All teams: who waits, why (Kueue's reason) and for how long"]
                assert "pretrain-7b waits, 16 GPUs, priority 1000" in waiting and "gang-64" in waiting, waiting
            elif page["name"] == "Team llm":
                alerts = found["Team llm: queue and idle-GPU alerts"]
                assert "llm-train/default" in alerts and "eval-2" in alerts and "vision" not in alerts, alerts
                waiting = found["Team llm: who waits, why (Kueue's reason) and for how long"]
                assert "pretrain-7b" in waiting and "eval-sweep" in waiting and "gang-64" not in waiting, waiting
