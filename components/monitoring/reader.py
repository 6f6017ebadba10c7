"""The read-only API user of the monitoring acceptance check: a role of type User allowed only the read methods
the check may call (`READ_METHODS`), a user group with read permission on the host groups of the hosts it
reads (no UI login), the user, and its API token. The check holds that token, not the program's Super admin
token: it can read items, hosts, triggers and problems of those host groups and change nothing.

The role, group and user are tracked objects like the others (`objects.py`); the token is its own resource,
`ApiToken`, because Zabbix shows a token once (`token.generate`): its `read` checks that the token still
exists and keeps the value from the state, which is a Pulumi secret there and in every output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from components.monitoring import objects as zbx
from components.monitoring.api import connect, first

READER = "ml-platform-acceptance"
READ_METHODS = ("host.get", "item.get", "problem.get", "trigger.get")


class ApiTokenProvider(ResourceProvider):
    """An API token of a user, made by the program's API user. A new user or token name replaces it; a new
    connection (the program's token changed) only stores the new connection."""

    __module__ = zbx.STATE_MODULE  # pickled by reference, under the name the state knows (objects.py)

    serialize_as_secret_always = False

    def _api(self, props: dict) -> Any:
        conn = props["connection"]
        return connect(conn["url"], conn["token"], conn.get("ca"))

    def create(self, props: dict) -> CreateResult:
        api = self._api(props)
        userid = first(api.user.get(filter={"username": props["username"]}, output=["userid"]), "userid")
        if userid is None:
            raise ValueError(f"Zabbix user {props['username']!r} does not exist: its token cannot be made")
        old = api.token.get(filter={"name": props["name"]}, userids=[userid], output=["tokenid"])
        if old:  # one left by an interrupted run: its value is lost, make a new one
            api.token.delete(*[t["tokenid"] for t in old])
        tokenid = api.token.create(name=props["name"], userid=userid)["tokenids"][0]
        token = api.token.generate(tokenid)[0]["token"]
        return CreateResult(tokenid, {**props, "token": token})

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        replaces = [k for k in ("username", "name") if olds.get(k) != news.get(k)]
        changed = bool(replaces) or olds.get("connection") != news.get("connection")
        return DiffResult(changes=changed, replaces=replaces, delete_before_replace=True)

    def update(self, id_: str, olds: dict, news: dict) -> UpdateResult:
        return UpdateResult({**news, "token": olds["token"]})

    def read(self, id_: str, props: dict) -> ReadResult:
        rows = self._api(props).token.get(tokenids=[id_], output=["tokenid"])
        return ReadResult(id_ if rows else None, props if rows else {})

    def delete(self, id_: str, props: dict) -> None:
        self._api(props).token.delete(id_)


class ApiToken(Resource, module="zabbix", name="ApiToken"):
    token: pulumi.Output[str]

    def __init__(
        self, name: str, username: str, token_name: str, connection: pulumi.Input[dict], opts: pulumi.ResourceOptions
    ) -> None:
        props = {"username": username, "name": token_name, "connection": connection, "token": None}
        secret = pulumi.ResourceOptions(additional_secret_outputs=["token"])
        super().__init__(ApiTokenProvider(), name, props, pulumi.ResourceOptions.merge(secret, opts))


def reader_specs(host_groups: Sequence[str]) -> tuple[dict, dict, dict]:
    """The reader's role, user group and user, as the tracked objects declare them."""
    role = {"name": READER, "type": 1, "api": sorted(READ_METHODS)}
    group = {"name": READER, "host_groups": sorted(host_groups)}
    user = {"username": READER, "role": READER, "group": READER}
    return role, group, user


def acceptance_reader(
    name: str,
    host_groups: Sequence[str],
    connection: pulumi.Output,
    opts: Any,
    groups: dict[str, pulumi.Resource],
) -> pulumi.Output[str]:
    """The reader's objects, children of the monitoring component; its token, a Pulumi secret."""
    role_spec, group_spec, user_spec = reader_specs(host_groups)
    host_groups_objects = [groups[g] for g in host_groups if g in groups]
    role = zbx.UserRole(f"{name}-acceptance-reader-role", role_spec, connection, opts=opts())
    group = zbx.UserGroup(f"{name}-acceptance-reader-group", group_spec, connection, opts=opts(*host_groups_objects))
    user = zbx.User(f"{name}-acceptance-reader-user", user_spec, connection, opts=opts(role, group))
    token = ApiToken(f"{name}-acceptance-reader-token", READER, READER, connection, opts(user))
    return pulumi.Output.secret(token.token)
