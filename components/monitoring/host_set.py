"""Zabbix host sets: the agent hosts of one node group (or the NAS) as ONE tracked resource, not one per host.

A node added to the inventory changes only its group's set; nothing depends on every node.

Inputs of a `HostSet` (compact: a 64-node group is a few KB):
- `set`: the set's key (`group:<name>`, or `nas`);
- `spec`: `{"profiles": {digest: {groups, templates, tags}}, "hosts": {name: {ip, profile, macros: {macro: value}}}}`.
  What many hosts share (groups, templates, tags) is written once under a digest of it; `expand` gives back each
  host's spec in the shape `HostKind.read` returns;
- `secrets`: what every host of the set gets and the API never returns (the agents' PSK, secret macros); a Pulumi
  secret;
- `connection`: `{url, token, ca}` of the API user (a Pulumi secret), as for every tracked object.

Its outputs hold, per host, the Zabbix host id and a digest of the host as applied (`hosts: {name: [hostid, digest]}`),
not the hosts again: `diff` compares the declared hosts' digests with them, `read` (refresh) recomputes them from what
Zabbix has, so a host edited or deleted by hand is put back by the next `up`. An update writes only the hosts whose
digest changed (all of them when the secrets change), creates the new ones (adopting a host that already exists under
its name, with its id and history), and deletes the hosts that left. Nothing changed: no call that writes.

Which set holds a host: the host macro `{$ML.HOST.SET}`, set to the holding set's id (`<key>/<random>`, made by its
create). A set deletes a host (one that left it, or all of them when the set is deleted) only when the host carries
its own id. Hence:
- a node moved from group A to group B: B's set adopts the host (update: same host id, history kept) and writes its
  id; A's set, whose host left, sees another set's id and leaves it. The two sets' updates run in parallel, in either
  order, so B's claim must be written BEFORE A's set runs: every set depends on every `HostClaim` (one per set, holding
  only its host names), and B's claim re-marks a host that enters B with B's key first. A's set then never sees its
  own id on the host, whatever order the two set updates run in.
- a set replaced (a forced `--replace`, a renamed resource): the new set adopts the hosts under a new id, so the old
  set's delete, which the engine runs after every create and update, deletes nothing.
- the per-host `Host` objects of older versions: their delete (run at the end of the first `up` with sets, after the
  sets adopted the hosts) leaves a host that carries a set's id (`held_by_set`, objects.py).
A host whose marker was removed by hand is held by no set: no set deletes it.

A set is never replaced: its `diff` reports updates only.
"""

from __future__ import annotations

import hashlib
import json
import secrets as random_ids
from collections.abc import Iterable
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from components.monitoring.api import connect, ids_of
from components.monitoring.kinds import normalized

MARKER = "{$ML.HOST.SET}"
MARKER_TEXT = "ml-platform: the Zabbix host set (Pulumi) that holds this host; do not edit"
BATCH = 16
_AGENT_INTERFACE, _TLS_PSK = 1, 2  # Zabbix API enums (7.0 API reference: hostinterface.type, host.tls_connect)


def digest(value: Any, length: int = 16) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def compact(hosts: Iterable[dict]) -> dict:
    """Host specs (host, ip, groups, templates, tags, macros) -> the set's `spec` input."""
    profiles: dict[str, dict] = {}
    entries: dict[str, dict] = {}
    for host in hosts:
        spec = normalized("Host", host)
        if spec["host"] in entries:
            raise ValueError(f"host {spec['host']!r} is declared twice in one host set")
        profile = {"groups": spec["groups"], "templates": spec["templates"], "tags": spec["tags"]}
        key = digest(profile, 10)
        profiles[key] = profile
        entry: dict[str, Any] = {"profile": key, "macros": {m["macro"]: m["value"] for m in spec["macros"]}}
        if spec.get("ip"):
            entry["ip"] = spec["ip"]
        entries[spec["host"]] = entry
    return {"profiles": dict(sorted(profiles.items())), "hosts": entries}


def expand(spec: dict) -> dict[str, dict]:
    """The set's `spec` -> {host name: host spec}, in the shape `HostKind.read` returns (sorted lists)."""
    hosts = {}
    for name, entry in spec["hosts"].items():
        profile = spec["profiles"][entry["profile"]]
        macros = [{"macro": k, "value": v} for k, v in entry.get("macros", {}).items()]
        host = {**profile, "host": name, "macros": sorted(macros, key=lambda m: m["macro"])}
        if entry.get("ip"):
            host["ip"] = entry["ip"]
        hosts[name] = normalized("Host", host)
    return hosts


def host_digest(spec: dict) -> str:
    return digest(normalized("Host", spec))


def _marker(row: dict) -> Optional[dict]:
    return next((m for m in row.get("macros", []) if m["macro"] == MARKER), None)


def _rows(api: Any, names: Iterable[str], **select: Any) -> dict[str, dict]:
    names = sorted(set(names))
    if not names:
        return {}
    rows = api.host.get(filter={"host": names}, output=["hostid", "host"], selectMacros="extend", **select)
    return {r["host"]: r for r in rows}


def held_by_set(api: Any, hostid: str) -> Optional[str]:
    """The id of the set holding host `hostid`, or None (no such host, or no set's marker on it)."""
    rows = api.host.get(hostids=[hostid], output=["hostid"], selectMacros="extend")
    marker = _marker(rows[0]) if rows else None
    return marker["value"] if marker else None


class HostSetProvider(ResourceProvider):
    """Create, update, read and delete the hosts of one set through the Zabbix 7.0 API (batched calls)."""

    serialize_as_secret_always = False

    def _api(self, props: dict) -> Any:
        conn = props["connection"]
        return connect(conn["url"], conn["token"], conn.get("ca"))

    def create(self, props: dict) -> CreateResult:
        id_ = f"{props['set']}/{random_ids.token_hex(6)}"
        hosts = self._apply(self._api(props), id_, {}, expand(props["spec"]), props.get("secrets") or {}, True)
        return CreateResult(id_, self._outs(props, hosts))

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        declared = {name: host_digest(spec) for name, spec in expand(news["spec"]).items()}
        held = {name: entry[1] for name, entry in (olds.get("hosts") or {}).items()}
        changed = (
            declared != held
            or (olds.get("secrets") or {}) != (news.get("secrets") or {})
            or olds.get("connection") != news.get("connection")
        )
        return DiffResult(changes=changed, replaces=[])

    def update(self, id_: str, olds: dict, news: dict) -> UpdateResult:
        secrets = news.get("secrets") or {}
        rewrite = (olds.get("secrets") or {}) != secrets
        hosts = self._apply(self._api(news), id_, olds.get("hosts") or {}, expand(news["spec"]), secrets, rewrite)
        return UpdateResult(self._outs(news, hosts))

    def read(self, id_: str, props: dict) -> ReadResult:
        """Each held host's digest as Zabbix has it now ("" when another set holds it); a host gone is dropped."""
        api = self._api(props)
        held = props.get("hosts") or {}
        rows = _rows(
            api,
            held,
            selectHostGroups=["name"],
            selectParentTemplates=["host"],
            selectInterfaces=["ip", "type", "main"],
            selectTags=["tag", "value"],
        )
        hosts = {}
        for name in held:
            row = rows.get(name)
            if row is None:
                continue
            marker = _marker(row)
            ours = marker is not None and marker["value"] == id_
            hosts[name] = [row["hostid"], host_digest(_as_read(row)) if ours else ""]
        return ReadResult(id_, {**props, "hosts": hosts})

    def delete(self, id_: str, props: dict) -> None:
        api = self._api(props)
        rows = _rows(api, props.get("hosts") or {})
        ours = [r["hostid"] for r in rows.values() if (_marker(r) or {}).get("value") == id_]
        if ours:
            api.host.delete(*ours)

    @staticmethod
    def _outs(props: dict, hosts: dict) -> dict:
        return {"set": props["set"], "connection": props["connection"], "secrets": props.get("secrets") or {},
                "hosts": hosts}  # fmt: skip

    def _apply(self, api: Any, id_: str, held: dict, declared: dict[str, dict], secrets: dict, rewrite: bool) -> dict:
        """Brings Zabbix to `declared`: writes the hosts whose digest differs from `held` (every host when
        `rewrite`), deletes the held hosts that left and carry this set's id. Returns the new `hosts` output."""
        digests = {name: host_digest(spec) for name, spec in declared.items()}
        write = [n for n in declared if rewrite or n not in held or held[n][1] != digests[n]]
        leaving = [n for n in held if n not in declared]
        rows = _rows(api, [*write, *leaving], selectParentTemplates=["templateid"],
                     selectInterfaces=["interfaceid", "type", "main"])  # fmt: skip
        payloads = self._payloads(api, id_, [declared[n] for n in write], secrets)
        creates = [p for p in payloads if p["host"] not in rows]
        updates = [_for_update(p, rows[p["host"]]) for p in payloads if p["host"] in rows]
        ids = {n: entry[0] for n, entry in held.items() if n in declared}
        ids.update({n: r["hostid"] for n, r in rows.items() if n in declared})
        for chunk in _chunks(updates):
            api.host.update(chunk)
        for chunk in _chunks(creates):
            created = api.host.create(chunk)["hostids"]
            ids.update(zip([p["host"] for p in chunk], created, strict=True))
        gone = [rows[n]["hostid"] for n in leaving if n in rows and (_marker(rows[n]) or {}).get("value") == id_]
        if gone:
            api.host.delete(*gone)
        return {n: [ids[n], digests[n]] for n in declared}

    @staticmethod
    def _payloads(api: Any, id_: str, specs: list[dict], secrets: dict) -> list[dict]:
        if not specs:
            return []
        group_names = sorted({g for s in specs for g in s["groups"]})
        template_names = sorted({t for s in specs for t in s["templates"]})
        groups = dict(zip(group_names, ids_of(api, "hostgroup", "groupid", "name", group_names), strict=True))
        template_ids = ids_of(api, "template", "templateid", "host", template_names)
        templates = dict(zip(template_names, template_ids, strict=True))
        marker = {"macro": MARKER, "value": id_, "description": MARKER_TEXT}
        payloads = []
        for spec in specs:
            payload = {
                "host": spec["host"],
                "groups": [{"groupid": groups[g]} for g in spec["groups"]],
                "templates": [{"templateid": templates[t]} for t in spec["templates"]],
                "tags": spec["tags"],
                # Secret macros (type 1) come from `secrets`: the API never returns their values.
                "macros": [*spec["macros"], *({**m, "type": 1} for m in secrets.get("macros", [])), marker],
            }
            if spec.get("ip"):
                payload["interfaces"] = [
                    {"type": _AGENT_INTERFACE, "main": 1, "useip": 1, "ip": spec["ip"], "dns": "", "port": "10050"}
                ]
            if secrets.get("tls_psk"):
                payload.update(
                    tls_connect=_TLS_PSK,
                    tls_accept=_TLS_PSK,
                    tls_psk_identity=secrets["tls_psk_identity"],
                    tls_psk=secrets["tls_psk"],
                )
            payloads.append(payload)
        return payloads


def _chunks(items: list) -> Iterable[list]:
    """Writes go BATCH hosts a call: linking the templates of a whole group (up to 128 hosts) in one request could
    outlast the client's 30 s timeout, while a call per host would cost a round trip each."""
    for start in range(0, len(items), BATCH):
        yield items[start : start + BATCH]


def _for_update(payload: dict, row: dict) -> dict:
    """`payload` as a host.update of the existing host `row`: its id, its agent interface's id kept (items are
    linked to it), and the templates no longer declared unlinked and cleared (plain unlinking leaves their items)."""
    update = {**payload, "hostid": row["hostid"]}
    main = [i for i in row["interfaces"] if i["type"] == str(_AGENT_INTERFACE) and i["main"] == "1"]
    if main and "interfaces" in update:
        update["interfaces"] = [{**update["interfaces"][0], "interfaceid": main[0]["interfaceid"]}]
    wanted = {t["templateid"] for t in payload["templates"]}
    update["templates_clear"] = [
        {"templateid": t["templateid"]} for t in row["parentTemplates"] if t["templateid"] not in wanted
    ]
    return update


def _as_read(row: dict) -> dict:
    """A host as `host.get` returns it -> its spec (what `HostKind.read` returns), the set's marker left out."""
    agent = [i["ip"] for i in row["interfaces"] if i["type"] == str(_AGENT_INTERFACE) and i["main"] == "1"]
    spec = {
        "host": row["host"],
        "groups": [g["name"] for g in row["hostgroups"]],
        "templates": [t["host"] for t in row["parentTemplates"]],
        "tags": [{"tag": t["tag"], "value": t["value"]} for t in row["tags"]],
        "macros": [{"macro": m["macro"], "value": m["value"]} for m in row["macros"]
                   if m["type"] != "1" and m["macro"] != MARKER],
    }  # fmt: skip
    if agent:
        spec["ip"] = agent[0]
    return normalized("Host", spec)


class HostClaimProvider(ResourceProvider):
    """Marks the hosts that enter a set and already exist (held by another set) with the set's key, before any set
    runs (every set depends on every claim): the set they leave then does not delete them. Writes nothing else."""

    serialize_as_secret_always = False

    def _claim(self, props: dict, names: Iterable[str]) -> None:
        key = props["set"]
        conn = props["connection"]
        api = connect(conn["url"], conn["token"], conn.get("ca"))
        moved = []
        for row in _rows(api, names).values():
            marker = _marker(row)
            if marker is not None and marker["value"] != key and not marker["value"].startswith(f"{key}/"):
                moved.append({"hostmacroid": marker["hostmacroid"], "value": key})
        if moved:
            api.usermacro.update(moved)

    def create(self, props: dict) -> CreateResult:
        self._claim(props, props["hosts"])
        return CreateResult(props["set"], props)

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        changed = olds.get("hosts") != news.get("hosts") or olds.get("connection") != news.get("connection")
        return DiffResult(changes=changed, replaces=[])

    def update(self, id_: str, olds: dict, news: dict) -> UpdateResult:
        self._claim(news, sorted(set(news["hosts"]) - set(olds.get("hosts") or [])))
        return UpdateResult(news)

    def read(self, id_: str, props: dict) -> ReadResult:
        return ReadResult(id_, props)

    def delete(self, id_: str, props: dict) -> None:
        """Nothing to undo: the hosts belong to whichever set holds them."""


class HostClaim(Resource, module="zabbix", name="HostClaim"):
    def __init__(
        self,
        name: str,
        key: str,
        hosts: list[str],
        connection: pulumi.Input[dict],
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        props = {"set": key, "hosts": sorted(hosts), "connection": connection}
        super().__init__(HostClaimProvider(), name, props, opts)


class HostSet(Resource, module="zabbix", name="HostSet"):
    def __init__(
        self,
        name: str,
        key: str,
        hosts: list[dict],
        connection: pulumi.Input[dict],
        secrets: Optional[pulumi.Input[dict]] = None,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        props = {"set": key, "spec": compact(hosts), "connection": connection, "secrets": secrets or {}}
        super().__init__(HostSetProvider(), name, props, opts)
