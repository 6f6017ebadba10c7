"""Rules about Zabbix: web access and alert channels."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from settings.monitoring import HOST_GROUPS
from settings.rules.base import rule

if TYPE_CHECKING:
    from settings.root import Settings


# Where each media type sends (the official webhooks' "Send to" forms).
_SLACK_SEND_TO = re.compile(r"^(#[a-z0-9][a-z0-9._-]{0,79}|@[A-Za-z0-9][A-Za-z0-9._-]{0,79}|[CGD][A-Z0-9]{8,12})$")
_MATTERMOST_SEND_TO = re.compile(
    r"^([a-z0-9][a-z0-9-]{0,63}/(#[a-z0-9][a-z0-9_-]{0,63}|@[a-z0-9][a-z0-9._-]{0,63})|[a-z0-9]{26})$"
)


def _monitoring_problems(s: Settings, add) -> None:
    mon = s.monitoring
    web = mon.web
    if (web.node_port is None) == (web.ingress_host is None):
        add(
            "monitoring.web: give exactly one of nodePort (http://<cluster.apiEndpoint>:<nodePort>) and "
            "ingressHost (https://<ingressHost>); set the other to null"
        )
    groups = HOST_GROUPS
    names = Counter(c.name for c in mon.alerting.channels)
    for i, channel in enumerate(mon.alerting.channels):
        path = f"monitoring.alerting.channels[{i}]"
        if names[channel.name] > 1:
            add(f"{path}.name: {channel.name!r} is used by more than one channel; names must be unique")
        form = _SLACK_SEND_TO if channel.type == "slack" else _MATTERMOST_SEND_TO
        if not form.match(channel.send_to):
            wanted = (
                "'#channel', '@user' or a channel ID such as 'C0123456789'"
                if channel.type == "slack"
                else "'team/#channel', 'team/@user' or a 26-character channel ID"
            )
            add(f"{path}.sendTo: {channel.send_to!r} is not a {channel.type} destination; use {wanted}")
        if channel.type == "mattermost" and mon.alerting.mattermost_url is None:
            add(f"{path}.type: a mattermost channel needs monitoring.alerting.mattermostUrl; set the server's URL")
        for j, group in enumerate(channel.host_groups):
            if group not in groups:
                add(f"{path}.hostGroups[{j}]: {group!r} is not a monitored host group; use one of {', '.join(groups)}")


def _channel_team_problems(s: Settings, add) -> None:
    teams = [t.name for t in s.scheduling.teams]
    for i, channel in enumerate(s.monitoring.alerting.channels):
        for j, team in enumerate(channel.teams):
            if team not in teams:
                known = ", ".join(teams) or "none is configured"
                add(f"monitoring.alerting.channels[{i}].teams[{j}]: {team!r} is not in scheduling.teams ({known})")


RULES = (
    rule(_monitoring_problems, "the Zabbix web access and alert channels", "monitoring"),
    rule(_channel_team_problems, "the teams of the alert channels", "monitoring scheduling", "scheduling"),
)
