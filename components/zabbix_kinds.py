"""The Zabbix object kinds the dynamic provider manages (`components/zabbix_objects.py`): for each,
how to find it by its natural key, create, update, read back (as a spec with names, not ids) and
delete it through the 7.0 API."""

from __future__ import annotations

from typing import Any

from components.zabbix_api import first, ids_of, names_of

# Zabbix API enums (7.0 API reference).
_AGENT_INTERFACE = 1
_TLS_PSK = 2
_PERMISSION_READ = 2
_GUI_DISABLED = 3
_CONDITION_HOST_GROUP, _CONDITION_SEVERITY, _CONDITION_TAG_VALUE = 0, 4, 26
_OPERATOR_EQUAL, _OPERATOR_AT_LEAST = 0, 5
_OPERATION_MESSAGE, _OPERATION_NOTIFY_ALL = 0, 11
_ALWAYS = "1-7,00:00-24:00"
_FIELD_INT, _FIELD_GROUP, _FIELD_HOST = 0, 2, 3  # widget field types whose value is a host group / host id
_PUBLIC = 0  # dashboard sharing: public
_WIDGET_INTS = ("x", "y", "width", "height", "view_mode")

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


def _api_value(field: dict, refs: dict[int, dict[str, str]]) -> Any:
    """A widget field's value as the API takes it: an id for a named group or host, an int for type 0."""
    if field["type"] in refs:
        return refs[field["type"]][field["value"]]
    return int(field["value"]) if field["type"] == _FIELD_INT else field["value"]


def _tag_key(tag: dict) -> tuple:
    return (tag["tag"], tag["value"])


def _macro_key(macro: dict) -> str:
    return macro["macro"]


class MediaTypeKind:
    """One of the webhooks Zabbix ships preloaded (Slack, Mattermost): adopted by name, never created.
    `parameters` are the ones we set (the others keep the official defaults); `delete` disables it
    and blanks the token rather than deleting an official object."""

    def find(self, api, spec, secrets):
        return first(api.mediatype.get(filter={"name": spec["name"]}, output=["mediatypeid"]), "mediatypeid")

    def create(self, api, spec, secrets):
        id_ = self.find(api, spec, secrets)
        if id_ is None:
            raise ValueError(f"media type {spec['name']!r} is not in Zabbix; it ships preloaded with 7.0")
        self.update(api, id_, spec, secrets)
        return id_

    def _set(self, api, id_, values: dict, status: int) -> None:
        current = api.mediatype.get(mediatypeids=[id_], output=["parameters"])
        params = {p["name"]: p["value"] for p in current[0]["parameters"]}
        params.update(values)
        api.mediatype.update(
            mediatypeid=id_, status=status, parameters=[{"name": k, "value": v} for k, v in sorted(params.items())]
        )

    def update(self, api, id_, spec, secrets):
        self._set(api, id_, {**spec["parameters"], **secrets}, 0 if spec["enabled"] else 1)

    def read(self, api, id_):
        rows = api.mediatype.get(mediatypeids=[id_], output=["name", "status", "parameters"])
        if not rows:
            return None
        return {"name": rows[0]["name"], "enabled": rows[0]["status"] == "0", "parameters": rows[0]["parameters"]}

    def delete(self, api, id_):
        self._set(api, id_, {"bot_token": ""}, 1)


class UserGroupKind:
    """A user group that may read some host groups and may not log in (alert recipients only)."""

    def find(self, api, spec, secrets):
        return first(api.usergroup.get(filter={"name": spec["name"]}, output=["usrgrpid"]), "usrgrpid")

    def _payload(self, api, spec):
        groups = ids_of(api, "hostgroup", "groupid", "name", spec["host_groups"])
        return {
            "name": spec["name"],
            "gui_access": _GUI_DISABLED,
            "hostgroup_rights": [{"id": g, "permission": _PERMISSION_READ} for g in groups],
        }

    def create(self, api, spec, secrets):
        return api.usergroup.create(**self._payload(api, spec))["usrgrpids"][0]

    def update(self, api, id_, spec, secrets):
        api.usergroup.update(usrgrpid=id_, **self._payload(api, spec))

    def read(self, api, id_):
        rows = api.usergroup.get(usrgrpids=[id_], output=["name"], selectHostGroupRights="extend")
        if not rows:
            return None
        ids = [r["id"] for r in rows[0]["hostgroup_rights"]]
        return {"name": rows[0]["name"], "host_groups": names_of(api, "hostgroup", "groupid", "name", ids)}

    def delete(self, api, id_):
        api.usergroup.delete(id_)


class UserKind:
    """An alert recipient: a user in one group, with one webhook media (the channel)."""

    def find(self, api, spec, secrets):
        return first(api.user.get(filter={"username": spec["username"]}, output=["userid"]), "userid")

    def _payload(self, api, spec):
        role = ids_of(api, "role", "roleid", "name", [spec["role"]])[0]
        group = ids_of(api, "usergroup", "usrgrpid", "name", [spec["group"]])[0]
        media = ids_of(api, "mediatype", "mediatypeid", "name", [spec["mediatype"]])[0]
        return {
            "username": spec["username"],
            "roleid": role,
            "usrgrps": [{"usrgrpid": group}],
            "medias": [
                {"mediatypeid": media, "sendto": spec["send_to"], "severity": spec["severity"], "period": _ALWAYS}
            ],
        }

    def create(self, api, spec, secrets):
        return api.user.create(**self._payload(api, spec))["userids"][0]

    def update(self, api, id_, spec, secrets):
        api.user.update(userid=id_, **self._payload(api, spec))

    def read(self, api, id_):
        rows = api.user.get(
            userids=[id_], output=["username"], selectUsrgrps=["name"], selectRole=["name"], selectMedias="extend"
        )
        if not rows:
            return None
        row = rows[0]
        spec = {"username": row["username"], "role": row["role"]["name"]}
        if len(row["usrgrps"]) == 1:
            spec["group"] = row["usrgrps"][0]["name"]
        if len(row["medias"]) == 1:
            media = row["medias"][0]
            spec["mediatype"] = names_of(api, "mediatype", "mediatypeid", "name", [media["mediatypeid"]])[0]
            spec["send_to"] = media["sendto"]
            spec["severity"] = int(media["severity"])
        return spec

    def delete(self, api, id_):
        api.user.delete(id_)


class ActionKind:
    """A trigger action: problems at or above a severity, in some host groups (any of them), are sent
    to a user group through one media type; recoveries go to everyone who got the problem."""

    def find(self, api, spec, secrets):
        return first(api.action.get(filter={"name": spec["name"]}, output=["actionid"]), "actionid")

    def _payload(self, api, spec):
        conditions = [
            {"conditiontype": _CONDITION_SEVERITY, "operator": _OPERATOR_AT_LEAST, "value": str(spec["min_severity"])}
        ]
        conditions += [
            {"conditiontype": _CONDITION_HOST_GROUP, "operator": _OPERATOR_EQUAL, "value": g}
            for g in ids_of(api, "hostgroup", "groupid", "name", spec["host_groups"])
        ]
        conditions += [  # any of the tags (conditions of one type are or-ed, the types and-ed)
            {
                "conditiontype": _CONDITION_TAG_VALUE,
                "operator": _OPERATOR_EQUAL,
                "value2": t["tag"],
                "value": t["value"],
            }
            for t in spec.get("event_tags", [])
        ]
        group = ids_of(api, "usergroup", "usrgrpid", "name", [spec["user_group"]])[0]
        media = ids_of(api, "mediatype", "mediatypeid", "name", [spec["mediatype"]])[0]
        return {
            "name": spec["name"],
            "status": 0,
            "esc_period": "1h",
            "filter": {"evaltype": 0, "conditions": conditions},
            "operations": [
                {
                    "operationtype": _OPERATION_MESSAGE,
                    "opmessage_grp": [{"usrgrpid": group}],
                    "opmessage": {"default_msg": 1, "mediatypeid": media},
                }
            ],
            "recovery_operations": [{"operationtype": _OPERATION_NOTIFY_ALL, "opmessage": {"default_msg": 1}}],
        }

    def create(self, api, spec, secrets):
        return api.action.create(eventsource=0, **self._payload(api, spec))["actionids"][0]

    def update(self, api, id_, spec, secrets):
        api.action.update(actionid=id_, **self._payload(api, spec))

    def read(self, api, id_):
        rows = api.action.get(actionids=[id_], output=["name"], selectFilter="extend", selectOperations="extend")
        if not rows:
            return None
        row = rows[0]
        conditions = row["filter"]["conditions"]
        severity = [c["value"] for c in conditions if c["conditiontype"] == str(_CONDITION_SEVERITY)]
        groups = [c["value"] for c in conditions if c["conditiontype"] == str(_CONDITION_HOST_GROUP)]
        tags = [
            {"tag": c["value2"], "value": c["value"]}
            for c in conditions
            if c["conditiontype"] == str(_CONDITION_TAG_VALUE)
        ]
        op = row["operations"][0] if row["operations"] else {}
        spec = {
            "name": row["name"],
            "min_severity": int(severity[0]) if severity else 0,
            "host_groups": names_of(api, "hostgroup", "groupid", "name", groups),
        }
        if tags:
            spec["event_tags"] = sorted(tags, key=_tag_key)
        if op.get("opmessage_grp"):
            spec["user_group"] = names_of(api, "usergroup", "usrgrpid", "name", [op["opmessage_grp"][0]["usrgrpid"]])[0]
            spec["mediatype"] = names_of(api, "mediatype", "mediatypeid", "name", [op["opmessage"]["mediatypeid"]])[0]
        return spec

    def delete(self, api, id_):
        api.action.delete(id_)


class DashboardKind:
    """A dashboard, public (every user who may read the hosts sees it). Widget fields are declared
    as the 7.0 API stores them (`{type, name, value}`), except that host group (type 2) and host
    (type 3) fields name the group or host: their ids are looked up at apply time and turned back
    into names by `read`, so a dashboard edited in the UI (a widget moved, added or re-pointed)
    reads back different from the declaration and shows as drift."""

    _REF_KINDS = {_FIELD_GROUP: ("hostgroup", "groupid", "name"), _FIELD_HOST: ("host", "hostid", "host")}

    def find(self, api, spec, secrets):
        return first(api.dashboard.get(filter={"name": spec["name"]}, output=["dashboardid"]), "dashboardid")

    def _payload(self, api, spec):
        refs = {t: {} for t in self._REF_KINDS}
        for page in spec["pages"]:
            for widget in page["widgets"]:
                for field in widget["fields"]:
                    if field["type"] in refs:
                        refs[field["type"]][field["value"]] = None
        for type_, names in refs.items():
            if names:
                method, key, name_field = self._REF_KINDS[type_]
                refs[type_] = dict(zip(names, ids_of(api, method, key, name_field, list(names)), strict=True))
        pages = [
            {
                "name": page["name"],
                "widgets": [
                    {
                        **{k: v for k, v in widget.items() if k != "fields"},
                        "fields": [{**f, "value": _api_value(f, refs)} for f in widget["fields"]],
                    }
                    for widget in page["widgets"]
                ],
            }
            for page in spec["pages"]
        ]
        return {
            "name": spec["name"],
            "display_period": spec["display_period"],
            "auto_start": spec["auto_start"],
            "private": _PUBLIC,
            "pages": pages,
        }

    def create(self, api, spec, secrets):
        return api.dashboard.create(**self._payload(api, spec))["dashboardids"][0]

    def update(self, api, id_, spec, secrets):
        # The pages given replace the dashboard's pages and widgets entirely.
        api.dashboard.update(dashboardid=id_, **self._payload(api, spec))

    def read(self, api, id_):
        rows = api.dashboard.get(dashboardids=[id_], output="extend", selectPages="extend")
        if not rows:
            return None
        row = rows[0]
        names = {}
        for type_, (method, key, name_field) in self._REF_KINDS.items():
            ids = {
                f["value"] for p in row["pages"] for w in p["widgets"] for f in w["fields"] if int(f["type"]) == type_
            }
            rows_ = getattr(api, method).get(**{f"{key}s": sorted(ids)}, output=[key, name_field]) if ids else []
            names[type_] = {r[key]: r[name_field] for r in rows_}
        spec = {
            "name": row["name"],
            "display_period": int(row["display_period"]),
            "auto_start": int(row["auto_start"]),
            "pages": [
                {
                    "name": p["name"],
                    "widgets": [
                        {
                            "type": w["type"],
                            "name": w["name"],
                            **{k: int(w[k]) for k in _WIDGET_INTS},
                            "fields": [
                                {
                                    "type": int(f["type"]),
                                    "name": f["name"],
                                    # an id whose object is gone reads as "#<id>": drift, never equal
                                    "value": names[int(f["type"])].get(f["value"], f"#{f['value']}")
                                    if int(f["type"]) in names
                                    else f["value"],
                                }
                                for f in w["fields"]
                            ],
                        }
                        for w in p["widgets"]
                    ],
                }
                for p in row["pages"]
            ],
        }
        if row["private"] != str(_PUBLIC):
            spec["private"] = True
        return normalized("Dashboard", spec)

    def delete(self, api, id_):
        api.dashboard.delete(id_)


KINDS: dict[str, Any] = {
    "HostGroup": HostGroupKind(),
    "GlobalMacro": GlobalMacroKind(),
    "TemplateImport": TemplateImportKind(),
    "Host": HostKind(),
    "MediaType": MediaTypeKind(),
    "UserGroup": UserGroupKind(),
    "User": UserKind(),
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
        spec["pages"] = [{**page, "widgets": _widgets(page["widgets"])} for page in spec["pages"]]
    for key in ("groups", "templates", "host_groups"):
        if key in spec:
            spec[key] = sorted(spec[key])
    for key in ("tags", "event_tags"):
        if key in spec:
            spec[key] = sorted(spec[key], key=_tag_key)
    if "macros" in spec:
        spec["macros"] = sorted(spec["macros"], key=_macro_key)
    return spec


def _widgets(widgets: list[dict]) -> list[dict]:
    """Widgets in reading order, their fields sorted by name with string values (as the API returns them)."""
    out = [
        {
            **w,
            "fields": sorted(({**f, "value": str(f["value"])} for f in w["fields"]), key=lambda f: f["name"]),
        }
        for w in widgets
    ]
    return sorted(out, key=lambda w: (w["y"], w["x"]))


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
