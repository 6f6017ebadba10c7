"""The user and alerting object kinds of the dynamic provider (`objects.py`, registered in `kinds.py`): the
preloaded media types, per alert channel a user group, a user and an action; the API reader's role (`reader.py`)."""

from __future__ import annotations

from components.monitoring.api import first, ids_of, names_of

# Zabbix API enums (7.0 API reference).
_PERMISSION_READ = 2
_GUI_DISABLED = 3
_CONDITION_HOST_GROUP, _CONDITION_SEVERITY, _CONDITION_TAG_VALUE = 0, 4, 26
_OPERATOR_EQUAL, _OPERATOR_AT_LEAST = 0, 5
_OPERATION_MESSAGE, _OPERATION_NOTIFY_ALL = 0, 11
_ALWAYS = "1-7,00:00-24:00"
_USER_TYPE, _API_ALLOW_LIST = 1, 1


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
    """A user in one group: an alert recipient, with one webhook media (the channel), or the API reader, without."""

    def find(self, api, spec, secrets):
        return first(api.user.get(filter={"username": spec["username"]}, output=["userid"]), "userid")

    def _payload(self, api, spec):
        role = ids_of(api, "role", "roleid", "name", [spec["role"]])[0]
        group = ids_of(api, "usergroup", "usrgrpid", "name", [spec["group"]])[0]
        payload = {"username": spec["username"], "roleid": role, "usrgrps": [{"usrgrpid": group}], "medias": []}
        if "mediatype" in spec:  # an alert recipient; the API reader has none
            media = ids_of(api, "mediatype", "mediatypeid", "name", [spec["mediatype"]])[0]
            payload["medias"] = [
                {"mediatypeid": media, "sendto": spec["send_to"], "severity": spec["severity"], "period": _ALWAYS}
            ]
        return payload

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


class UserRoleKind:
    """A role of type User whose API access is an allow list of methods (7.0 role object: rules `api.access` 1,
    `api.mode` 1 = allow list, `api` the methods), with no UI element and no action: what an API reader needs."""

    def find(self, api, spec, secrets):
        return first(api.role.get(filter={"name": spec["name"]}, output=["roleid"]), "roleid")

    def _payload(self, spec):
        rules = {
            "api.access": 1,
            "api.mode": _API_ALLOW_LIST,
            "api": spec["api"],
            "ui.default_access": 0,
            "actions.default_access": 0,
        }
        return {"name": spec["name"], "type": _USER_TYPE, "rules": rules}

    def create(self, api, spec, secrets):
        return api.role.create(**self._payload(spec))["roleids"][0]

    def update(self, api, id_, spec, secrets):
        api.role.update(roleid=id_, **self._payload(spec))

    def read(self, api, id_):
        rows = api.role.get(roleids=[id_], output=["name", "type"], selectRules="extend")
        if not rows:
            return None
        rules = rows[0]["rules"]
        allowed = rules["api.access"] == "1" and rules["api.mode"] == str(_API_ALLOW_LIST)
        # Anything else than an allow list reads as "*" (every method): a diff, and the next `up` restores it.
        return {
            "name": rows[0]["name"],
            "type": int(rows[0]["type"]),
            "api": sorted(rules["api"]) if allowed else ["*"],
        }

    def delete(self, api, id_):
        api.role.delete(id_)


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
            spec["event_tags"] = sorted(tags, key=lambda tag: (tag["tag"], tag["value"]))
        if op.get("opmessage_grp"):
            spec["user_group"] = names_of(api, "usergroup", "usrgrpid", "name", [op["opmessage_grp"][0]["usrgrpid"]])[0]
            spec["mediatype"] = names_of(api, "mediatype", "mediatypeid", "name", [op["opmessage"]["mediatypeid"]])[0]
        return spec

    def delete(self, api, id_):
        api.action.delete(id_)
