"""The Zabbix object kinds the dynamic provider manages (`objects.py`): for each, how to find it by its
natural key, create, update, read back (as a spec with names, not ids) and delete it through the 7.0 API.
Host-side kinds here; the alerting kinds in `alerting.py`, the dashboard kind in `dashboards.py`."""

from __future__ import annotations

from typing import Any

from components.monitoring.alerting import ActionKind, MediaTypeKind, UserGroupKind, UserKind, UserRoleKind
from components.monitoring.api import first, ids_of
from components.monitoring.dashboards import DashboardKind, normalized_dashboard

# Zabbix API enums (7.0 API reference).
_AGENT_INTERFACE = 1
_TLS_PSK = 2

# configuration.import rules: create and update everything in our templates; delete what the YAML no
# longer has inside them (a removed item must go), never other templates.
IMPORT_RULES = {
    "template_groups": {"createMissing": True, "updateExisting": True},
    "templates": {"createMissing": True, "updateExisting": True},
    "items": {"createMissing": True, "updateExisting": True, "deleteMissing": True},
    "triggers": {"createMissing": True, "updateExisting": True, "deleteMissing": True},
    "discoveryRules": {"createMissing": True, "updateExisting": True, "deleteMissing": True},
    "graphs": {"createMissing": True, "updateExisting": True, "deleteMissing": True},
    "valueMaps": {"createMissing": True, "updateExisting": True, "deleteMissing": True},
}


# ---------------------------------------------------------------------------------------------
# Object kinds: find (natural key), create, update, read (spec as Zabbix has it), delete
# ---------------------------------------------------------------------------------------------


class HostGroupKind:
    def find(self, api, spec, secrets):
        return first(api.hostgroup.get(filter={"name": spec["name"]}, output=["groupid"]), "groupid")

    def create(self, api, spec, secrets):
        return api.hostgroup.create(name=spec["name"])["groupids"][0]

    def update(self, api, id_, spec, secrets):
        api.hostgroup.update(groupid=id_, name=spec["name"])

    def read(self, api, id_):
        rows = api.hostgroup.get(groupids=[id_], output=["name"])
        return {"name": rows[0]["name"]} if rows else None

    def delete(self, api, id_):
        api.hostgroup.delete(id_)


class GlobalMacroKind:
    """A global user macro: how settings reach the templates' triggers (thresholds) and the K8s
    templates (API URL, token). `secret: true` stores the value as a secret macro (type 1), which
    the API never returns."""

    def find(self, api, spec, secrets):
        rows = api.usermacro.get(globalmacro=True, filter={"macro": spec["macro"]}, output=["globalmacroid"])
        return first(rows, "globalmacroid")

    def _payload(self, spec, secrets):
        value = secrets.get("value", spec.get("value", ""))
        return {"value": value, "type": 1 if spec.get("secret") else 0, "description": spec.get("description", "")}

    def create(self, api, spec, secrets):
        return api.usermacro.createglobal(macro=spec["macro"], **self._payload(spec, secrets))["globalmacroids"][0]

    def update(self, api, id_, spec, secrets):
        api.usermacro.updateglobal(globalmacroid=id_, **self._payload(spec, secrets))

    def read(self, api, id_):
        rows = api.usermacro.get(globalmacro=True, globalmacroids=[id_], output="extend")
        if not rows:
            return None
        row = rows[0]
        spec = {"macro": row["macro"], "description": row["description"]}
        if row["type"] == "1":
            spec["secret"] = True
        else:
            spec["value"] = row["value"]
        return spec

    def delete(self, api, id_):
        api.usermacro.deleteglobal(id_)


class TemplateImportKind:
    """Templates from a YAML export, imported with `configuration.import`. Id: the template ids.
    `read` checks that the templates exist (a deleted one is imported again by the next `up`); it
    does not detect edits made in the UI: `configuration.importcompare` reports reordered macros
    and defaults as changes, so it cannot tell real drift from none. A changed YAML re-imports."""

    def find(self, api, spec, secrets):
        rows = api.template.get(filter={"host": spec["templates"]}, output=["templateid"])
        return ",".join(sorted(r["templateid"] for r in rows)) if len(rows) == len(spec["templates"]) else None

    def create(self, api, spec, secrets):
        self.update(api, "", spec, secrets)
        return self.find(api, spec, secrets)

    def update(self, api, id_, spec, secrets):
        api.configuration.import_(format="yaml", source=spec["source"], rules=IMPORT_RULES)

    def read(self, api, id_):
        rows = api.template.get(templateids=id_.split(","), output=["host"])
        if len(rows) != len(id_.split(",")):
            return None
        return {"templates": sorted(r["host"] for r in rows)}

    def delete(self, api, id_):
        api.template.delete(*id_.split(","))


class HostKind:
    """A monitored host: agent interface, groups, linked templates, tags, PSK-encrypted agent traffic."""

    def find(self, api, spec, secrets):
        return first(api.host.get(filter={"host": spec["host"]}, output=["hostid"]), "hostid")

    def _payload(self, api, spec, secrets):
        payload = {
            "host": spec["host"],
            "groups": [{"groupid": g} for g in ids_of(api, "hostgroup", "groupid", "name", spec["groups"])],
            "templates": [{"templateid": t} for t in ids_of(api, "template", "templateid", "host", spec["templates"])],
            "tags": spec["tags"],
            # Secret macros (type 1) come from `secrets`: the API never returns their values.
            "macros": spec.get("macros", []) + [{**m, "type": 1} for m in secrets.get("macros", [])],
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
        return payload

    def create(self, api, spec, secrets):
        return api.host.create(**self._payload(api, spec, secrets))["hostids"][0]

    def update(self, api, id_, spec, secrets):
        payload = self._payload(api, spec, secrets)
        current = api.host.get(
            hostids=[id_], selectParentTemplates=["templateid"], selectInterfaces=["interfaceid", "type", "main"]
        )
        main = [i for i in current[0]["interfaces"] if i["type"] == str(_AGENT_INTERFACE) and i["main"] == "1"]
        if main and "interfaces" in payload:
            # Keep the interface's id: items are linked to it, and a new interface would be refused.
            payload["interfaces"][0]["interfaceid"] = main[0]["interfaceid"]
        wanted = {t["templateid"] for t in payload["templates"]}
        # Unlink and clear templates no longer declared (plain unlinking would leave their items behind).
        payload["templates_clear"] = [
            {"templateid": t["templateid"]} for t in current[0]["parentTemplates"] if t["templateid"] not in wanted
        ]
        api.host.update(hostid=id_, **payload)

    def read(self, api, id_):
        rows = api.host.get(
            hostids=[id_],
            output=["host"],
            selectHostGroups=["name"],
            selectParentTemplates=["host"],
            selectInterfaces=["ip", "type", "main"],
            selectTags=["tag", "value"],
            selectMacros=["macro", "value", "type"],
        )
        if not rows:
            return None
        row = rows[0]
        agent = [i["ip"] for i in row["interfaces"] if i["type"] == str(_AGENT_INTERFACE) and i["main"] == "1"]
        spec = {
            "host": row["host"],
            "groups": sorted(g["name"] for g in row["hostgroups"]),
            "templates": sorted(t["host"] for t in row["parentTemplates"]),
            "tags": sorted(({"tag": t["tag"], "value": t["value"]} for t in row["tags"]), key=_tag_key),
            "macros": sorted(
                ({"macro": m["macro"], "value": m["value"]} for m in row["macros"] if m["type"] != "1"), key=_macro_key
            ),
        }
        if agent:
            spec["ip"] = agent[0]
        return spec

    def delete(self, api, id_):
        api.host.delete(id_)


def _tag_key(tag: dict) -> tuple:
    return (tag["tag"], tag["value"])


def _macro_key(macro: dict) -> str:
    return macro["macro"]


KINDS: dict[str, Any] = {
    "HostGroup": HostGroupKind(),
    "GlobalMacro": GlobalMacroKind(),
    "TemplateImport": TemplateImportKind(),
    "Host": HostKind(),
    "MediaType": MediaTypeKind(),
    "UserGroup": UserGroupKind(),
    "User": UserKind(),
    "UserRole": UserRoleKind(),
    "Action": ActionKind(),
    "Dashboard": DashboardKind(),
}


def normalized(kind: str, spec: dict) -> dict:
    """`spec` in the order `read` returns it (sorted lists), so declared and read specs compare equal."""
    spec = dict(spec)
    if kind == "Host":
        spec.setdefault("macros", [])
        spec.setdefault("tags", [])
    if kind == "GlobalMacro":
        spec.setdefault("description", "")
    if kind == "Dashboard":
        spec = normalized_dashboard(spec)
    for key in ("groups", "templates", "host_groups", "api"):
        if key in spec:
            spec[key] = sorted(spec[key])
    for key in ("tags", "event_tags"):
        if key in spec:
            spec[key] = sorted(spec[key], key=_tag_key)
    if "macros" in spec:
        spec["macros"] = sorted(spec["macros"], key=_macro_key)
    return spec


def comparable(kind: str, declared: dict, actual: dict) -> dict:
    """The part of what Zabbix has that the declaration speaks about (a media type's own defaults
    and a template's YAML text are not read back)."""
    if kind == "MediaType":
        params = {p["name"]: p["value"] for p in actual["parameters"]}
        return {**actual, "parameters": {k: params.get(k) for k in declared["parameters"]}}
    if kind == "TemplateImport":
        return {**actual, "source": declared["source"]}
    if kind == "GlobalMacro" and actual.get("secret"):
        return {**actual, "value": declared.get("value")} if "value" in declared else actual
    return actual
