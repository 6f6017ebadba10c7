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

The API client is `api.py`, the object kinds `kinds.py` beside this module; this module holds the
providers and the resource classes. The providers are pickled under the name they had when the first
stacks were deployed (`components.zabbix_objects`, which re-exports them; see `STATE_MODULE`).
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from components.monitoring.api import admin_session, connect, first, ids_of, wait_for_api
from components.monitoring.host_set import held_by_set
from components.monitoring.kinds import KINDS, comparable, normalized

# Pulumi pickles each provider by reference (module and class name) into every resource's `__provider`
# input, and the provider process imports that module to run it. The providers keep the module name the
# first stacks were deployed with, which re-exports them, so deployed state and plans stay the same.
STATE_MODULE = "components.zabbix_objects"


class ZabbixObjectProvider(ResourceProvider):
    """CRUD for every kind in `KINDS`, dispatched on the `kind` input."""

    __module__ = STATE_MODULE

    serialize_as_secret_always = False

    def _api(self, props: dict) -> Any:
        conn = props["connection"]
        return connect(conn["url"], conn["token"], conn.get("ca"))

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
        api = self._api(props)
        # A node's or NAS host's own `Host` object (before host sets) is deleted at the end of the first `up` with
        # host sets, after its set adopted the host: the host is the set's now and stays, with its history.
        if props["kind"] == "Host" and held_by_set(api, id_):
            return
        KINDS[props["kind"]].delete(api, id_)


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


def _resource_class(kind: str) -> type[_ZabbixObject]:
    """The resource class of one object kind; its type token is `pulumi-python:dynamic/zabbix:<kind>`."""
    return type(kind, (_ZabbixObject,), {"__module__": __name__}, module="zabbix", name=kind)


# One resource class per kind in `components.zabbix_kinds.KINDS`.
HostGroup = _resource_class("HostGroup")
GlobalMacro = _resource_class("GlobalMacro")
TemplateImport = _resource_class("TemplateImport")
Host = _resource_class("Host")
MediaType = _resource_class("MediaType")
UserGroup = _resource_class("UserGroup")
User = _resource_class("User")
UserRole = _resource_class("UserRole")
Action = _resource_class("Action")
Dashboard = _resource_class("Dashboard")


# ---------------------------------------------------------------------------------------------
# Bootstrap: replace the chart's default Admin password, create the program's API user and token
# ---------------------------------------------------------------------------------------------

_SUPER_ADMIN_ROLE, _ADMINISTRATORS_GROUP = "Super admin role", "Zabbix administrators"
TOKEN_NAME = "ml-platform"


class BootstrapProvider(ResourceProvider):
    """Admin password, the API user (Super admin, in Zabbix administrators) and its token. The token
    is only ever shown by `token.generate`: a refresh cannot read it back, so `read` keeps it and
    only checks that the user still exists.

    A new Admin or API password is an in-place update: it logs in with the Admin password in the
    state and sets the new one. A replace could not: its `create` knows only the new password (Admin
    still has the old one), and its `delete` of the old resource would delete the API user the new
    one had just adopted. The token survives a password change, so the objects' connections stay
    valid. Only a new URL (another server) or API user name replaces."""

    __module__ = STATE_MODULE

    serialize_as_secret_always = False
    _REPLACE_ON = ("url", "api_user")
    _UPDATE_ON = ("admin_password", "api_password", "ca")

    def create(self, props: dict) -> CreateResult:
        wait_for_api(props["url"], int(props.get("wait_seconds", 900)), props.get("ca"))
        api = admin_session(props["url"], props["admin_password"], ca_pem=props.get("ca"))
        userid = self._api_user(api, props)
        old = api.token.get(filter={"name": TOKEN_NAME}, userids=[userid], output=["tokenid"])
        if old:
            api.token.delete(*[t["tokenid"] for t in old])
        tokenid = api.token.create(name=TOKEN_NAME, userid=userid)["tokenids"][0]
        token = api.token.generate(tokenid)[0]["token"]
        return CreateResult(userid, {**props, "userid": userid, "token": token})

    def _api_user(self, api: Any, props: dict) -> str:
        """Creates the API user, or brings an existing one to the declared role, group and password."""
        role = ids_of(api, "role", "roleid", "name", [_SUPER_ADMIN_ROLE])[0]
        group = ids_of(api, "usergroup", "usrgrpid", "name", [_ADMINISTRATORS_GROUP])[0]
        fields = {"roleid": role, "usrgrps": [{"usrgrpid": group}], "passwd": props["api_password"]}
        userid = first(api.user.get(filter={"username": props["api_user"]}, output=["userid"]), "userid")
        if userid is None:
            return api.user.create(username=props["api_user"], **fields)["userids"][0]
        api.user.update(userid=userid, **fields)
        return userid

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        replaces = [k for k in self._REPLACE_ON if olds.get(k) != news.get(k)]
        changed = replaces + [k for k in self._UPDATE_ON if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=replaces)

    def update(self, id_: str, olds: dict, news: dict) -> UpdateResult:
        api = admin_session(news["url"], news["admin_password"], olds.get("admin_password"), news.get("ca"))
        userid = self._api_user(api, news)
        return UpdateResult({**news, "userid": userid, "token": olds["token"]})

    def read(self, id_: str, props: dict) -> ReadResult:
        api = connect(props["url"], props["token"], props.get("ca"))
        rows = api.user.get(userids=[id_], output=["username"])
        return ReadResult(id_ if rows else None, props if rows else {})

    def delete(self, id_: str, props: dict) -> None:
        api = admin_session(props["url"], props["admin_password"], ca_pem=props.get("ca"))
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
        ca: Optional[pulumi.Input[str]] = None,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        props = {
            "url": url,
            "ca": ca,  # PEM the web UI's certificate must chain to (None: the system's trust store)
            "api_user": api_user,
            "admin_password": admin_password,
            "api_password": api_password,
            "token": None,
            "userid": None,
        }
        options = pulumi.ResourceOptions(additional_secret_outputs=["token", "admin_password", "api_password"])
        super().__init__(BootstrapProvider(), name, props, pulumi.ResourceOptions.merge(options, opts))
