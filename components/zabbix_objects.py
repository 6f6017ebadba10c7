"""Zabbix configuration as tracked Pulumi state: a dynamic provider over the Zabbix 7.0 API.

Why a dynamic provider in an importable module: Pulumi pickles the provider by reference (module and
class name), so the provider process imports this file and a code change does not show up as a
`__provider` diff on every resource (a provider defined in `__main__` is pickled by value).

Every resource has the same inputs:
- `kind`: which Zabbix object (a key of `KINDS`);
- `spec`: the object as declared, with names instead of Zabbix ids (groups, templates, media types
  are resolved at apply time), in the shape `read` returns, so a refresh and a second `up` compare
  like with like and change nothing;
- `secrets`: write-only values (bot tokens, PSKs, secret macro values); a Pulumi secret;
- `connection`: `{url, token}` of the API user (a Pulumi secret). A new one (the bootstrap issued a
  new token) is an update of every object: `refresh` and `delete` use the connection stored in the
  state, so each object must store the token that works. The update re-applies the object, which
  changes nothing in Zabbix. A password rotation keeps the token (see `BootstrapProvider`).

`create` adopts an object that already exists under the same natural key (name, host name, macro)
instead of failing, then brings it to the declared state. `read` returns a `None` id when the
object is gone, so a refresh drops it and the next `up` creates it again. The Zabbix id is the
Pulumi id.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

# Zabbix API enums (7.0 API reference).
_AGENT_INTERFACE = 1
_TLS_PSK = 2
_PERMISSION_READ = 2
_GUI_DISABLED = 3
_CONDITION_HOST_GROUP, _CONDITION_SEVERITY = 0, 4
_OPERATOR_EQUAL, _OPERATOR_AT_LEAST = 0, 5
_OPERATION_MESSAGE, _OPERATION_NOTIFY_ALL = 0, 11
_ALWAYS = "1-7,00:00-24:00"

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


def connect(url: str, token: str) -> Any:
    """A logged-in `ZabbixAPI`. Built per call, never stored on the provider (it cannot be pickled)."""
    from zabbix_utils import ZabbixAPI

    return ZabbixAPI(url=url, token=token)


def _one(rows: list[dict], key: str) -> Optional[str]:
    return rows[0][key] if rows else None


def _ids(api: Any, method: str, key: str, field: str, names: list[str]) -> list[str]:
    """Zabbix ids of the objects named `names`; fails naming the ones that do not exist."""
    rows = getattr(api, method).get(filter={field: names}, output=[key, field])
    found = {r[field]: r[key] for r in rows}
    missing = sorted(set(names) - set(found))
    if missing:
        raise ValueError(f"{method} {missing} do not exist in Zabbix")
    return [found[n] for n in names]


def _names(api: Any, method: str, key: str, field: str, ids: list[str]) -> list[str]:
    rows = getattr(api, method).get(**{f"{key}s": ids}, output=[field]) if ids else []
    return sorted(r[field] for r in rows)


# ---------------------------------------------------------------------------------------------
# Object kinds: find (natural key), create, update, read (spec as Zabbix has it), delete
# ---------------------------------------------------------------------------------------------


class HostGroupKind:
    def find(self, api, spec, secrets):
        return _one(api.hostgroup.get(filter={"name": spec["name"]}, output=["groupid"]), "groupid")

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
        return _one(rows, "globalmacroid")

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
        return _one(api.host.get(filter={"host": spec["host"]}, output=["hostid"]), "hostid")

    def _payload(self, api, spec, secrets):
        payload = {
            "host": spec["host"],
            "groups": [{"groupid": g} for g in _ids(api, "hostgroup", "groupid", "name", spec["groups"])],
            "templates": [{"templateid": t} for t in _ids(api, "template", "templateid", "host", spec["templates"])],
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


class MediaTypeKind:
    """One of the webhooks Zabbix ships preloaded (Slack, Mattermost): adopted by name, never created.
    `parameters` are the ones we set (the others keep the official defaults); `delete` disables it
    and blanks the token rather than deleting an official object."""

    def find(self, api, spec, secrets):
        return _one(api.mediatype.get(filter={"name": spec["name"]}, output=["mediatypeid"]), "mediatypeid")

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
        return _one(api.usergroup.get(filter={"name": spec["name"]}, output=["usrgrpid"]), "usrgrpid")

    def _payload(self, api, spec):
        groups = _ids(api, "hostgroup", "groupid", "name", spec["host_groups"])
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
        return {"name": rows[0]["name"], "host_groups": _names(api, "hostgroup", "groupid", "name", ids)}

    def delete(self, api, id_):
        api.usergroup.delete(id_)


class UserKind:
    """An alert recipient: a user in one group, with one webhook media (the channel)."""

    def find(self, api, spec, secrets):
        return _one(api.user.get(filter={"username": spec["username"]}, output=["userid"]), "userid")

    def _payload(self, api, spec):
        role = _ids(api, "role", "roleid", "name", [spec["role"]])[0]
        group = _ids(api, "usergroup", "usrgrpid", "name", [spec["group"]])[0]
        media = _ids(api, "mediatype", "mediatypeid", "name", [spec["mediatype"]])[0]
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
            spec["mediatype"] = _names(api, "mediatype", "mediatypeid", "name", [media["mediatypeid"]])[0]
            spec["send_to"] = media["sendto"]
            spec["severity"] = int(media["severity"])
        return spec

    def delete(self, api, id_):
        api.user.delete(id_)


class ActionKind:
    """A trigger action: problems at or above a severity, in some host groups (any of them), are sent
    to a user group through one media type; recoveries go to everyone who got the problem."""

    def find(self, api, spec, secrets):
        return _one(api.action.get(filter={"name": spec["name"]}, output=["actionid"]), "actionid")

    def _payload(self, api, spec):
        conditions = [
            {"conditiontype": _CONDITION_SEVERITY, "operator": _OPERATOR_AT_LEAST, "value": str(spec["min_severity"])}
        ]
        conditions += [
            {"conditiontype": _CONDITION_HOST_GROUP, "operator": _OPERATOR_EQUAL, "value": g}
            for g in _ids(api, "hostgroup", "groupid", "name", spec["host_groups"])
        ]
        group = _ids(api, "usergroup", "usrgrpid", "name", [spec["user_group"]])[0]
        media = _ids(api, "mediatype", "mediatypeid", "name", [spec["mediatype"]])[0]
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
        op = row["operations"][0] if row["operations"] else {}
        spec = {
            "name": row["name"],
            "min_severity": int(severity[0]) if severity else 0,
            "host_groups": _names(api, "hostgroup", "groupid", "name", groups),
        }
        if op.get("opmessage_grp"):
            spec["user_group"] = _names(api, "usergroup", "usrgrpid", "name", [op["opmessage_grp"][0]["usrgrpid"]])[0]
            spec["mediatype"] = _names(api, "mediatype", "mediatypeid", "name", [op["opmessage"]["mediatypeid"]])[0]
        return spec

    def delete(self, api, id_):
        api.action.delete(id_)


KINDS: dict[str, Any] = {
    "HostGroup": HostGroupKind(),
    "GlobalMacro": GlobalMacroKind(),
    "TemplateImport": TemplateImportKind(),
    "Host": HostKind(),
    "MediaType": MediaTypeKind(),
    "UserGroup": UserGroupKind(),
    "User": UserKind(),
    "Action": ActionKind(),
}


def normalized(kind: str, spec: dict) -> dict:
    """`spec` in the order `read` returns it (sorted lists), so declared and read specs compare equal."""
    spec = dict(spec)
    if kind == "Host":
        spec.setdefault("macros", [])
        spec.setdefault("tags", [])
    if kind == "GlobalMacro":
        spec.setdefault("description", "")
    for key in ("groups", "templates", "host_groups"):
        if key in spec:
            spec[key] = sorted(spec[key])
    if "tags" in spec:
        spec["tags"] = sorted(spec["tags"], key=_tag_key)
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


class ZabbixObjectProvider(ResourceProvider):
    """CRUD for every kind in `KINDS`, dispatched on the `kind` input."""

    serialize_as_secret_always = False

    def _api(self, props: dict) -> Any:
        return connect(props["connection"]["url"], props["connection"]["token"])

    def create(self, props: dict) -> CreateResult:
        kind, spec, secrets = props["kind"], normalized(props["kind"], props["spec"]), props.get("secrets") or {}
        api = self._api(props)
        handler = KINDS[kind]
        id_ = handler.find(api, spec, secrets)
        if id_ is None:
            id_ = handler.create(api, spec, secrets)
        else:  # adopt: the object exists under its natural key; bring it to the declared state
            handler.update(api, id_, spec, secrets)
        return CreateResult(id_, {**props, "spec": spec})

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        spec = normalized(news["kind"], news["spec"])
        changed = (
            olds.get("spec") != spec
            or (olds.get("secrets") or {}) != (news.get("secrets") or {})
            or olds.get("connection") != news.get("connection")
        )
        return DiffResult(changes=changed, replaces=["kind"] if olds.get("kind") != news["kind"] else [])

    def update(self, id_: str, olds: dict, news: dict) -> UpdateResult:
        spec = normalized(news["kind"], news["spec"])
        KINDS[news["kind"]].update(self._api(news), id_, spec, news.get("secrets") or {})
        return UpdateResult({**news, "spec": spec})

    def read(self, id_: str, props: dict) -> ReadResult:
        kind = props["kind"]
        actual = KINDS[kind].read(self._api(props), id_)
        if actual is None:
            return ReadResult(None, {})
        return ReadResult(id_, {**props, "spec": comparable(kind, props["spec"], actual)})

    def delete(self, id_: str, props: dict) -> None:
        KINDS[props["kind"]].delete(self._api(props), id_)


class _ZabbixObject(Resource):
    zabbix_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        spec: dict,
        connection: pulumi.Input[dict],
        secrets: Optional[pulumi.Input[dict]] = None,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        kind = type(self).__name__
        props = {"kind": kind, "spec": normalized(kind, spec), "connection": connection, "secrets": secrets or {}}
        super().__init__(ZabbixObjectProvider(), name, props, opts)


class HostGroup(_ZabbixObject, module="zabbix", name="HostGroup"):
    pass


class GlobalMacro(_ZabbixObject, module="zabbix", name="GlobalMacro"):
    pass


class TemplateImport(_ZabbixObject, module="zabbix", name="TemplateImport"):
    pass


class Host(_ZabbixObject, module="zabbix", name="Host"):
    pass


class MediaType(_ZabbixObject, module="zabbix", name="MediaType"):
    pass


class UserGroup(_ZabbixObject, module="zabbix", name="UserGroup"):
    pass


class User(_ZabbixObject, module="zabbix", name="User"):
    pass


class Action(_ZabbixObject, module="zabbix", name="Action"):
    pass


# ---------------------------------------------------------------------------------------------
# Bootstrap: replace the chart's default Admin password, create the program's API user and token
# ---------------------------------------------------------------------------------------------

DEFAULT_ADMIN, DEFAULT_PASSWORD = "Admin", "zabbix"
_SUPER_ADMIN_ROLE, _ADMINISTRATORS_GROUP = "Super admin role", "Zabbix administrators"
TOKEN_NAME = "ml-platform"


def _login(url: str, user: str, password: str) -> Any:
    from zabbix_utils import ZabbixAPI

    api = ZabbixAPI(url=url)
    api.login(user=user, password=password)
    return api


def _wait_for_api(url: str, timeout_seconds: int) -> None:
    """The web pod answers some time after the Helm release is ready (DB schema on first start)."""
    from zabbix_utils import ZabbixAPI

    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            ZabbixAPI(url=url)
            return
        except Exception:  # noqa: BLE001 (any connection error means: not up yet)
            if time.monotonic() > deadline:
                raise
            time.sleep(5)


def admin_session(url: str, admin_password: str, previous_password: Optional[str] = None) -> Any:
    """Logs in as Admin with the declared password. If Admin still has `previous_password` (a
    rotation: the one in the state) or the chart's default (first run), changes it to the declared
    one first: 7.0 requires `current_passwd` when a user changes their own password."""
    from zabbix_utils.exceptions import APIRequestError

    candidates = [p for p in (previous_password, DEFAULT_PASSWORD) if p and p != admin_password]
    for current in [admin_password, *candidates]:
        try:
            api = _login(url, DEFAULT_ADMIN, current)
        except APIRequestError:  # wrong password: try the next one
            continue
        if current != admin_password:
            userid = api.user.get(filter={"username": DEFAULT_ADMIN}, output=["userid"])[0]["userid"]
            api.user.update(userid=userid, passwd=admin_password, current_passwd=current)
            api = _login(url, DEFAULT_ADMIN, admin_password)
        return api
    raise ValueError(
        f"cannot log in to {url} as {DEFAULT_ADMIN} with the declared password, the previous one or the "
        "chart's default; if the API user and the Admin password changed together, change one per `pulumi up`"
    )


class BootstrapProvider(ResourceProvider):
    """Admin password, the API user (Super admin, in Zabbix administrators) and its token. The token
    is only ever shown by `token.generate`: a refresh cannot read it back, so `read` keeps it and
    only checks that the user still exists.

    A new Admin or API password is an in-place update: it logs in with the Admin password in the
    state and sets the new one. A replace could not: its `create` knows only the new password (Admin
    still has the old one), and its `delete` of the old resource would delete the API user the new
    one had just adopted. The token survives a password change, so the objects' connections stay
    valid. Only a new URL (another server) or API user name replaces."""

    serialize_as_secret_always = False
    _REPLACE_ON = ("url", "api_user")
    _UPDATE_ON = ("admin_password", "api_password")

    def create(self, props: dict) -> CreateResult:
        _wait_for_api(props["url"], int(props.get("wait_seconds", 900)))
        api = admin_session(props["url"], props["admin_password"])
        userid = self._api_user(api, props)
        old = api.token.get(filter={"name": TOKEN_NAME}, userids=[userid], output=["tokenid"])
        if old:
            api.token.delete(*[t["tokenid"] for t in old])
        tokenid = api.token.create(name=TOKEN_NAME, userid=userid)["tokenids"][0]
        token = api.token.generate(tokenid)[0]["token"]
        return CreateResult(userid, {**props, "userid": userid, "token": token})

    def _api_user(self, api: Any, props: dict) -> str:
        """Creates the API user, or brings an existing one to the declared role, group and password."""
        role = _ids(api, "role", "roleid", "name", [_SUPER_ADMIN_ROLE])[0]
        group = _ids(api, "usergroup", "usrgrpid", "name", [_ADMINISTRATORS_GROUP])[0]
        fields = {"roleid": role, "usrgrps": [{"usrgrpid": group}], "passwd": props["api_password"]}
        userid = _one(api.user.get(filter={"username": props["api_user"]}, output=["userid"]), "userid")
        if userid is None:
            return api.user.create(username=props["api_user"], **fields)["userids"][0]
        api.user.update(userid=userid, **fields)
        return userid

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        replaces = [k for k in self._REPLACE_ON if olds.get(k) != news.get(k)]
        changed = replaces + [k for k in self._UPDATE_ON if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=replaces)

    def update(self, id_: str, olds: dict, news: dict) -> UpdateResult:
        api = admin_session(news["url"], news["admin_password"], olds.get("admin_password"))
        userid = self._api_user(api, news)
        return UpdateResult({**news, "userid": userid, "token": olds["token"]})

    def read(self, id_: str, props: dict) -> ReadResult:
        api = connect(props["url"], props["token"])
        rows = api.user.get(userids=[id_], output=["username"])
        return ReadResult(id_ if rows else None, props if rows else {})

    def delete(self, id_: str, props: dict) -> None:
        api = admin_session(props["url"], props["admin_password"])
        api.user.delete(id_)


class ZabbixBootstrap(Resource, module="zabbix", name="Bootstrap"):
    token: pulumi.Output[str]
    userid: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        url: pulumi.Input[str],
        api_user: str,
        admin_password: pulumi.Input[str],
        api_password: pulumi.Input[str],
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        props = {
            "url": url,
            "api_user": api_user,
            "admin_password": admin_password,
            "api_password": api_password,
            "token": None,
            "userid": None,
        }
        options = pulumi.ResourceOptions(additional_secret_outputs=["token", "admin_password", "api_password"])
        super().__init__(BootstrapProvider(), name, props, pulumi.ResourceOptions.merge(options, opts))
