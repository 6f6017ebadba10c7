"""The platform's dashboards on the real Zabbix 7.0 API, server and frontend: created, read back,
updated and deleted through the dynamic provider; every widget's hosts, groups and item patterns
match what the platform's templates create on the server; the real frontend renders them with data
in headless Chromium (tests/monitoring/dashboard_data.py builds the platform and its data)."""

from __future__ import annotations

import copy
import fnmatch

import pytest

from components.monitoring.dashboards import GROUP, HOST, overview_dashboard
from components.monitoring.kinds import normalized
from components.monitoring.objects import ZabbixObjectProvider
from settings import load
from tests.conftest import stack_doc
from tests.monitoring.dashboard_data import KUBE, build, render
from tests.monitoring.zabbix70 import zabbix70
from tests.prerequisites import require_chromium

pytestmark = pytest.mark.real_server  # make test-fast leaves these out


@pytest.fixture(scope="module")
def platform():
    with zabbix70("dashboards", with_server=True) as zabbix:
        yield build(zabbix.url, zabbix.server_port)


@pytest.fixture(scope="module")
def connection(platform):
    api = platform.api
    userid = api.user.get(filter={"username": "Admin"}, output=["userid"])[0]["userid"]
    tokenid = api.token.create(name="dashboards-test", userid=userid)["tokenids"][0]
    return {"url": platform.url + "api_jsonrpc.php", "token": api.token.generate(tokenid)[0]["token"], "ca": None}


def props(spec: dict, connection: dict) -> dict:
    return {"kind": "Dashboard", "spec": normalized("Dashboard", spec), "connection": connection, "secrets": {}}


@pytest.mark.parametrize("which", ["overview", "teams"])
def test_create_read_update_delete_through_the_provider(platform, connection, which):
    provider = ZabbixObjectProvider()
    spec = getattr(platform, which)
    created = provider.create(props(spec, connection))
    assert created.outs["spec"] == normalized("Dashboard", spec)

    read = provider.read(created.id, created.outs)
    assert read.id == created.id
    assert read.outs["spec"] == created.outs["spec"]  # read back equal: a refresh changes nothing
    assert not provider.diff(created.id, read.outs, props(spec, connection)).changes  # a re-run neither

    # A settings change (here: a widget's title, as a team's new quota changes it) is an in-place update.
    changed = copy.deepcopy(spec)
    changed["pages"][0]["widgets"][0]["name"] += " (changed)"
    assert provider.diff(created.id, read.outs, props(changed, connection)).changes
    updated = provider.update(created.id, read.outs, props(changed, connection))
    assert provider.read(created.id, updated.outs).outs["spec"] == normalized("Dashboard", changed)

    # Someone moves a widget in the UI: a refresh shows it, the next `up` puts it back.
    api = platform.api
    row = api.dashboard.get(dashboardids=[created.id], selectPages="extend")[0]
    row["pages"][0]["widgets"][0]["y"] = str(int(row["pages"][0]["widgets"][0]["y"]) + 30)
    pages = [{"dashboard_pageid": p["dashboard_pageid"], "widgets": p["widgets"]} for p in row["pages"]]
    api.dashboard.update(dashboardid=created.id, pages=pages)
    drifted = provider.read(created.id, updated.outs)
    assert drifted.outs["spec"] != updated.outs["spec"]
    assert provider.diff(created.id, drifted.outs, props(changed, connection)).changes
    provider.update(created.id, drifted.outs, props(changed, connection))
    assert provider.read(created.id, updated.outs).outs["spec"] == updated.outs["spec"]

    provider.delete(created.id, updated.outs)
    assert provider.read(created.id, updated.outs).id is None
    assert not api.dashboard.get(dashboardids=[created.id])


def test_a_widget_naming_a_host_that_does_not_exist_is_refused_naming_it(platform, connection):
    settings = load(stack_doc("prod"))
    spec = overview_dashboard(settings.nodes[:1], has_nas=False, kubernetes_host=KUBE, ceph_host="no-such-ceph")
    spec["name"] = "refused"
    with pytest.raises(ValueError, match="no-such-ceph"):
        ZabbixObjectProvider().create(props(spec, connection))
    assert not platform.api.dashboard.get(filter={"name": "refused"})


def widgets(spec: dict) -> list[dict]:
    return [w for page in spec["pages"] for w in page["widgets"]]


@pytest.mark.parametrize("which", ["overview", "teams"])
def test_every_widget_points_at_items_with_data_on_the_real_server(platform, which):
    """Each item pattern of each widget matches at least one item on the widget's hosts that the
    templates created (directly or by discovery) and that has a value."""
    api = platform.api
    checked = 0
    for w in widgets(getattr(platform, which)):
        fields = {f["name"]: f["value"] for f in w["fields"]}
        types = {f["name"]: f["type"] for f in w["fields"]}
        groups = [v for k, v in fields.items() if types[k] == GROUP]
        hosts = [v for k, v in fields.items() if types[k] == HOST]
        if w["type"] == "svggraph":
            sets = sorted({k.split(".")[1] for k in fields if k.startswith("ds.")})
            pairs = [
                ([v for k, v in fields.items() if k.startswith(f"ds.{i}.hosts.")], v)
                for i in sets
                for k, v in fields.items()
                if k.startswith(f"ds.{i}.items.")
            ]
        else:
            pairs = [(hosts, v) for k, v in fields.items() if k.startswith("items.")]
        for host_names, pattern in pairs:
            where = {"groupids": _ids(api, "hostgroup", "groupid", "name", groups)} if groups else {}
            if "host_tags.0.tag" in fields:  # only the group's hosts with that tag (e.g. gpu: <model>)
                tag = {"tag": fields["host_tags.0.tag"], "value": fields["host_tags.0.value"], "operator": 1}
                tagged = api.host.get(**where, tags=[tag], output=["hostid"])
                assert tagged, f"{w['name']!r}: no host tagged {tag}"
                where["hostids"] = [h["hostid"] for h in tagged]
            if host_names:  # names, or name patterns in a graph's data set
                every = api.host.get(output=["host"])
                where["hostids"] = [
                    h["hostid"] for h in every if any(fnmatch.fnmatchcase(h["host"], p) for p in host_names)
                ]
                assert where["hostids"], f"{w['name']!r}: no host named like {host_names}"
            rows = api.item.get(**where, output=["name", "lastclock"], selectHosts=["host"])
            matching = [r for r in rows if fnmatch.fnmatchcase(r["name"], pattern)]
            assert matching, f"{w['name']!r}: no item named like {pattern!r} on {host_names or groups}"
            assert any(r["lastclock"] != "0" for r in matching), f"{w['name']!r}: {pattern!r} has no value"
            checked += 1
    assert checked >= (11 if which == "overview" else 2)


def _ids(api, method: str, key: str, field: str, names: list[str]) -> list[str]:
    rows = getattr(api, method).get(filter={field: names}, output=[key])
    assert len(rows) == len(names), f"{method} {names}: {len(rows)} found"
    return [r[key] for r in rows]


def test_the_real_frontend_renders_the_overview_with_data(platform, connection):
    chromium = require_chromium()
    created = ZabbixObjectProvider().create(props(platform.overview, connection))
    shown = render(chromium, platform.url, created.id)
    declared = widgets(platform.overview)
    assert sorted(w["name"] for w in shown) == sorted(w["name"] for w in declared), shown
    for w in shown:
        assert not w["errors"], w
        assert "No data" not in w["text"] and "No permissions" not in w["text"], w
    kinds = {w["name"]: w["type"] for w in declared}
    graphs = [w for w in shown if kinds[w["name"]] == "svggraph"]
    combs = [w for w in shown if kinds[w["name"]] == "honeycomb"]
    assert graphs and all(w["lines"] for w in graphs), graphs
    assert combs and all(w["cells"] for w in combs), combs
    problems = next(w for w in shown if kinds[w["name"]] == "problems")
    assert "drive(s) offline" in problems["text"] and "below the inventory" in problems["text"], problems
