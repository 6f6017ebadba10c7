"""The Zabbix host set provider (components/monitoring/host_set.py) against a REAL Zabbix 7.0 API.

Each test drives the providers as the engine would (create, diff, update, read, delete with the outputs of the
previous step as `olds`) and reads Zabbix back through the API: host ids, macros, templates, interfaces, and the
audit log to prove that a step without a change writes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from components.monitoring import api as zapi
from components.monitoring import host_set, kinds
from components.monitoring import objects as zbx
from components.monitoring.host_set import (
    MARKER,
    HostClaimProvider,
    HostSetProvider,
    compact,
    expand,
)
from tests.monitoring.zabbix70 import zabbix70

pytestmark = pytest.mark.real_server  # make test-fast leaves these out

LINUX, PING = "Linux by Zabbix agent active", "ICMP Ping"  # stock 7.0 templates (no item key in common)
PSK = {"tls_psk_identity": "ml-platform-agent", "tls_psk": "cd" * 32}


@pytest.fixture(scope="module")
def connection():
    with zabbix70("host-set") as instance:
        props = {"url": instance.url, "api_user": "ml-platform-api", "admin_password": "Adm1n-hostset-passphrase-5",
                 "api_password": "Api-hostset-passphrase-8", "wait_seconds": 30}  # fmt: skip
        token = zbx.BootstrapProvider().create(props).outs["token"]
        conn = {"url": instance.url, "token": token}
        provider = zbx.ZabbixObjectProvider()
        for group in ("ml-platform/cpu-nodes", "ml-platform/gpu-nodes", "ml-platform/nas"):
            provider.create({"kind": "HostGroup", "spec": {"name": group}, "connection": conn, "secrets": {}})
        yield conn


@pytest.fixture
def api(connection):
    return zapi.connect(connection["url"], connection["token"])


def node(name: str, ip: str, role: str = "cpu", **extra: Any) -> dict:
    spec = {
        "host": name,
        "ip": ip,
        "groups": [f"ml-platform/{role}-nodes"],
        "templates": [LINUX],
        "tags": [{"tag": "role", "value": role}],
        "macros": [{"macro": "{$CERT.ENDPOINTS}", "value": f"{ip}:10250"}],
    }
    return {**spec, **extra}


def props(key: str, hosts: list[dict], connection: dict, secrets: dict | None = None) -> dict:
    """The inputs a `HostSet` hands its provider."""
    return {
        "set": key,
        "spec": compact(hosts),
        "connection": connection,
        "secrets": PSK if secrets is None else secrets,
    }


def claim(key: str, hosts: list[dict], connection: dict) -> dict:
    return {"set": key, "hosts": sorted(h["host"] for h in hosts), "connection": connection}


def in_zabbix(api, names: list[str]) -> dict[str, dict]:
    rows = api.host.get(filter={"host": names}, output=["hostid", "host", "tls_connect"],
                        selectMacros=["macro", "value"], selectParentTemplates=["host"],
                        selectInterfaces=["ip"])  # fmt: skip
    return {r["host"]: r for r in rows}


def macros(row: dict) -> dict[str, str]:
    return {m["macro"]: m["value"] for m in row["macros"]}


class Recorder:
    """The API client the providers get, recording every call (method, arguments) before passing it on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def connect(self, url: str, token: str, ca: Any = None) -> Any:
        real, recorder = zapi.connect(url, token, ca), self

        class Object:
            def __init__(self, name: str) -> None:
                self.name = name

            def __getattr__(self, method: str):
                def call(*args: Any, **kwargs: Any) -> Any:
                    recorder.calls.append((f"{self.name}.{method}", args[0] if len(args) == 1 else args or kwargs))
                    return getattr(getattr(real, self.name), method)(*args, **kwargs)

                return call

        class Client:
            def __getattr__(self, name: str) -> Object:
                return Object(name)

        return Client()

    def writes(self) -> list[str]:
        """The calls that change something (every method but `get`)."""
        return [method for method, _ in self.calls if not method.endswith(".get")]

    def written_hosts(self) -> dict[str, set[str]]:
        """host.create / host.update: the host names written; host.delete: the host ids deleted."""
        out: dict[str, set[str]] = {}
        for method, payload in self.calls:
            if method in ("host.create", "host.update"):
                out.setdefault(method, set()).update(h["host"] for h in payload)
            elif method == "host.delete":
                out.setdefault(method, set()).update([payload] if isinstance(payload, str) else payload)
        return out


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(host_set, "connect", recorder.connect)
    return recorder


# ---------------------------------------------------------------------------------------------


def test_the_spec_is_compact_and_expands_back_to_every_host():
    hosts = [node(f"cpu-{i:02d}", f"10.9.0.{i}") for i in range(1, 65)]
    hosts[0] = node("gpu-01", "10.9.1.1", "gpu", macros=[{"macro": "{$GPU.COUNT.EXPECTED}", "value": "8"}])
    spec = compact(hosts)
    assert len(spec["profiles"]) == 2  # groups, templates and tags written once per distinct combination
    assert expand(spec) == {h["host"]: kinds.normalized("Host", h) for h in hosts}
    with pytest.raises(ValueError, match="'cpu-02' is declared twice"):
        compact([hosts[1], hosts[1]])


def test_create_read_and_a_rerun_that_writes_nothing(connection, api, recorder):
    hosts = [
        node("hs-a1", "10.98.0.1"),
        node(
            "hs-a2",
            "10.98.0.2",
            "gpu",
            macros=[
                {"macro": "{$CERT.ENDPOINTS}", "value": "10.98.0.2:10250"},
                {"macro": "{$GPU.COUNT.EXPECTED}", "value": "8"},
            ],
        ),  # fmt: skip
        node("hs-a3", "10.98.0.3", templates=[LINUX, PING]),
    ]
    provider = HostSetProvider()
    declared = props("group:a", hosts, connection)
    created = provider.create(declared)
    found = in_zabbix(api, ["hs-a1", "hs-a2", "hs-a3"])
    assert {n: r["hostid"] for n, r in found.items()} == {n: e[0] for n, e in created.outs["hosts"].items()}
    # Each host keeps its own macros, and carries the set's id.
    assert macros(found["hs-a2"]) == {"{$CERT.ENDPOINTS}": "10.98.0.2:10250", "{$GPU.COUNT.EXPECTED}": "8",
                                      MARKER: created.id}  # fmt: skip
    assert macros(found["hs-a1"]) == {"{$CERT.ENDPOINTS}": "10.98.0.1:10250", MARKER: created.id}
    assert sorted(t["host"] for t in found["hs-a3"]["parentTemplates"]) == [PING, LINUX]
    assert all(r["tls_connect"] == "2" for r in found.values())  # PSK
    assert "secrets" in created.outs and "spec" not in created.outs  # the state holds ids and digests, not hosts

    refreshed = provider.read(created.id, created.outs)
    assert refreshed.outs["hosts"] == created.outs["hosts"]
    assert not provider.diff(created.id, refreshed.outs, declared).changes
    recorder.calls.clear()
    again = provider.update(created.id, refreshed.outs, declared)  # even a forced update of an unchanged set
    assert again.outs["hosts"] == created.outs["hosts"]
    assert recorder.calls == []  # not even a read: nothing to write
    provider.delete(created.id, again.outs)
    assert in_zabbix(api, ["hs-a1", "hs-a2", "hs-a3"]) == {}


def test_update_adds_changes_and_removes_only_what_changed(connection, api, recorder):
    provider = HostSetProvider()
    before = [node("hs-b1", "10.97.0.1"), node("hs-b2", "10.97.0.2"), node("hs-b3", "10.97.0.3"),
              node("hs-b4", "10.97.0.4")]  # fmt: skip
    created = provider.create(props("group:b", before, connection))
    ids = {n: e[0] for n, e in created.outs["hosts"].items()}
    after = [
        before[0],  # unchanged
        node("hs-b2", "10.97.0.2", macros=[{"macro": "{$CERT.ENDPOINTS}", "value": "10.97.0.2:10250,10.97.0.2:6443"}]),
        node("hs-b3", "10.97.1.3", groups=["ml-platform/cpu-nodes", "ml-platform/nas"], templates=[PING],
             tags=[{"tag": "role", "value": "storage"}]),  # address, groups, templates, tags
        node("hs-b5", "10.97.0.5"),  # new; hs-b4 left
    ]  # fmt: skip
    news = props("group:b", after, connection)
    assert provider.diff(created.id, created.outs, news).changes
    assert provider.diff(created.id, created.outs, news).replaces == []
    recorder.calls.clear()
    updated = provider.update(created.id, created.outs, news)
    found = in_zabbix(api, ["hs-b1", "hs-b2", "hs-b3", "hs-b4", "hs-b5"])
    assert set(found) == {"hs-b1", "hs-b2", "hs-b3", "hs-b5"}
    assert {n: found[n]["hostid"] for n in ("hs-b1", "hs-b2", "hs-b3")} == {
        n: ids[n] for n in ("hs-b1", "hs-b2", "hs-b3")
    }
    assert macros(found["hs-b2"])["{$CERT.ENDPOINTS}"] == "10.97.0.2:10250,10.97.0.2:6443"
    assert [i["ip"] for i in found["hs-b3"]["interfaces"]] == ["10.97.1.3"]
    assert [t["host"] for t in found["hs-b3"]["parentTemplates"]] == [PING]
    assert recorder.written_hosts() == {  # hs-b1 untouched
        "host.update": {"hs-b2", "hs-b3"},
        "host.create": {"hs-b5"},
        "host.delete": {ids["hs-b4"]},
    }
    refreshed = provider.read(created.id, updated.outs)
    assert not provider.diff(created.id, refreshed.outs, news).changes, refreshed.outs["hosts"]
    provider.delete(created.id, refreshed.outs)


def test_a_host_changed_or_deleted_by_hand_is_put_back_after_a_refresh(connection, api):
    provider = HostSetProvider()
    declared = props("group:c", [node("hs-c1", "10.96.0.1"), node("hs-c2", "10.96.0.2")], connection)
    created = provider.create(declared)
    c1, c2 = created.outs["hosts"]["hs-c1"][0], created.outs["hosts"]["hs-c2"][0]
    macro = api.usermacro.get(hostids=[c1], filter={"macro": "{$CERT.ENDPOINTS}"}, output=["hostmacroid"])[0]
    api.usermacro.update(hostmacroid=macro["hostmacroid"], value="edited:1")
    api.host.delete(c2)
    refreshed = provider.read(created.id, created.outs)
    assert set(refreshed.outs["hosts"]) == {"hs-c1"}
    assert provider.diff(created.id, refreshed.outs, declared).changes
    updated = provider.update(created.id, refreshed.outs, declared)
    found = in_zabbix(api, ["hs-c1", "hs-c2"])
    assert found["hs-c1"]["hostid"] == c1 and macros(found["hs-c1"])["{$CERT.ENDPOINTS}"] == "10.96.0.1:10250"
    assert "hs-c2" in found
    assert not provider.diff(created.id, provider.read(created.id, updated.outs).outs, declared).changes
    provider.delete(created.id, updated.outs)


@pytest.mark.parametrize("first", ["gaining set", "losing set"])
def test_a_host_moved_between_sets_keeps_its_id_in_either_order(first, connection, api, recorder):
    """The engine runs both claims first (every set depends on every claim), then the two set updates in either
    order: the moved host is updated in place (same id, history kept) and ends in the gaining set."""
    sets, claims = HostSetProvider(), HostClaimProvider()
    d, e = f"group:d-{first[0]}", f"group:e-{first[0]}"
    moving = node(f"hs-m-{first[0]}", "10.95.0.9")
    stay_d, stay_e = node(f"hs-d-{first[0]}", "10.95.0.1"), node(f"hs-e-{first[0]}", "10.95.0.2")
    old_d, old_e = [stay_d, moving], [stay_e]
    new_d, new_e = [stay_d], [stay_e, {**moving, "groups": ["ml-platform/gpu-nodes"]}]
    set_d, set_e = sets.create(props(d, old_d, connection)), sets.create(props(e, old_e, connection))
    claim_d, claim_e = claims.create(claim(d, old_d, connection)), claims.create(claim(e, old_e, connection))
    hostid = set_d.outs["hosts"][moving["host"]][0]

    recorder.calls.clear()
    claims.update(claim_d.id, claim_d.outs, claim(d, new_d, connection))
    claims.update(claim_e.id, claim_e.outs, claim(e, new_e, connection))
    assert [(m, [x["value"] for x in args]) for m, args in recorder.calls if m == "usermacro.update"] == [
        ("usermacro.update", [e])  # only the host entering e: marked with e's key before either set runs
    ]
    runs = [(set_e, e, new_e), (set_d, d, new_d)]
    outs = {}
    for created, key, hosts in runs if first == "gaining set" else reversed(runs):
        outs[key] = sets.update(created.id, created.outs, props(key, hosts, connection)).outs

    row = in_zabbix(api, [moving["host"]])[moving["host"]]
    assert row["hostid"] == hostid and outs[e]["hosts"][moving["host"]][0] == hostid
    assert macros(row)[MARKER] == set_e.id and moving["host"] not in outs[d]["hosts"]
    assert not sets.diff(set_e.id, sets.read(set_e.id, outs[e]).outs, props(e, new_e, connection)).changes
    # The set it left is deleted (its group gone): the host stays with the set that holds it.
    sets.delete(set_d.id, outs[d])
    assert set(in_zabbix(api, [moving["host"], stay_d["host"]])) == {moving["host"]}
    sets.delete(set_e.id, outs[e])


def test_without_the_claim_the_set_a_host_leaves_would_delete_it(connection, api):
    """Why the claims exist: the losing set alone cannot tell a host that moved from one that left the inventory."""
    sets = HostSetProvider()
    host = node("hs-f1", "10.94.0.1")
    created = sets.create(props("group:f", [host], connection))
    sets.update(created.id, created.outs, props("group:f", [], connection))
    assert in_zabbix(api, ["hs-f1"]) == {}


def test_a_replaced_set_adopts_the_hosts_and_the_old_ones_delete_leaves_them(connection, api):
    """Create-before-delete (a forced replace, or a renamed resource): the new set takes the hosts over."""
    sets = HostSetProvider()
    declared = props(
        "nas",
        [node(n, ip, groups=["ml-platform/nas"]) for n, ip in (("hs-nas1", "10.93.0.1"), ("hs-nas2", "10.93.0.2"))],
        connection,
    )
    old = sets.create(declared)
    new = sets.create(declared)
    assert new.id != old.id and new.outs["hosts"] == old.outs["hosts"]
    sets.delete(old.id, old.outs)
    assert set(in_zabbix(api, ["hs-nas1", "hs-nas2"])) == {"hs-nas1", "hs-nas2"}
    sets.delete(new.id, new.outs)
    assert in_zabbix(api, ["hs-nas1", "hs-nas2"]) == {}


def test_the_per_host_objects_of_older_versions_hand_their_hosts_over(connection, api):
    """The first `up` with host sets: the sets adopt the hosts, then the engine deletes the old `Host` objects
    (deletes run last): a host a set holds stays, one no set took is deleted as before."""
    objects = zbx.ZabbixObjectProvider()
    legacy = {}
    for spec in (node("hs-old1", "10.92.0.1"), node("hs-old2", "10.92.0.2")):
        legacy[spec["host"]] = objects.create(
            {"kind": "Host", "spec": kinds.normalized("Host", spec), "connection": connection, "secrets": PSK}
        )
    created = HostSetProvider().create(props("group:g", [node("hs-old1", "10.92.0.1")], connection))
    assert created.outs["hosts"]["hs-old1"][0] == legacy["hs-old1"].id
    for result in legacy.values():
        objects.delete(result.id, result.outs)
    assert {n: r["hostid"] for n, r in in_zabbix(api, ["hs-old1", "hs-old2"]).items()} == {
        "hs-old1": legacy["hs-old1"].id
    }
    HostSetProvider().delete(created.id, created.outs)


def test_a_new_psk_rewrites_every_host_and_a_new_token_none(connection, api, recorder):
    sets = HostSetProvider()
    hosts = [node("hs-h1", "10.91.0.1"), node("hs-h2", "10.91.0.2")]
    created = sets.create(props("group:h", hosts, connection))
    moved_token = {**created.outs, "connection": {**connection, "token": "0" * 64}}
    assert sets.diff(created.id, moved_token, props("group:h", hosts, connection)).changes
    recorder.calls.clear()
    sets.update(created.id, moved_token, props("group:h", hosts, connection))
    assert recorder.calls == []
    rotated = props("group:h", hosts, connection, {**PSK, "tls_psk": "ef" * 32})
    assert sets.diff(created.id, created.outs, rotated).changes
    updated = sets.update(created.id, created.outs, rotated)
    assert recorder.written_hosts() == {"host.update": {"hs-h1", "hs-h2"}}
    sets.delete(created.id, updated.outs)


def test_a_large_set_is_written_in_batches_with_each_host_its_own_id(connection, api, recorder):
    """40 hosts: three create calls (16, 16, 8), and every host's id in the state is the one Zabbix gave it."""
    hosts = [node(f"hs-big-{i:02d}", f"10.90.0.{i}") for i in range(1, 41)]
    sets = HostSetProvider()
    created = sets.create(props("group:big", hosts, connection))
    assert [len(args) for method, args in recorder.calls if method == "host.create"] == [16, 16, 8]
    found = in_zabbix(api, [h["host"] for h in hosts])
    assert {n: e[0] for n, e in created.outs["hosts"].items()} == {n: r["hostid"] for n, r in found.items()}
    assert all(macros(found[h["host"]])["{$CERT.ENDPOINTS}"] == f"{h['ip']}:10250" for h in hosts)
    sets.delete(created.id, created.outs)
    assert in_zabbix(api, [h["host"] for h in hosts]) == {}


def test_going_back_to_per_host_objects_keeps_the_hosts(connection, api):
    """A program from before host sets adopts the hosts again (its `Host` create finds them by name and writes
    their macros without the set's marker); the set's delete that follows then leaves them."""
    sets, objects = HostSetProvider(), zbx.ZabbixObjectProvider()
    spec = node("hs-back1", "10.89.0.1")
    created = sets.create(props("group:back", [spec], connection))
    hostid = created.outs["hosts"]["hs-back1"][0]
    legacy = objects.create({"kind": "Host", "spec": kinds.normalized("Host", spec), "connection": connection,
                             "secrets": PSK})  # fmt: skip
    assert legacy.id == hostid and MARKER not in macros(in_zabbix(api, ["hs-back1"])["hs-back1"])
    sets.delete(created.id, created.outs)
    assert in_zabbix(api, ["hs-back1"])["hs-back1"]["hostid"] == hostid
    objects.delete(legacy.id, legacy.outs)  # held by no set now: deleted as before
    assert in_zabbix(api, ["hs-back1"]) == {}
