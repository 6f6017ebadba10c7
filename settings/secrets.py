"""`ml-platform:` keys that carry credentials: each a `Secret` field, set only with `pulumi config set --secret`.

Their values never enter the settings model (so they cannot leak through a validation message): the
program reads them with `require_secret` / `get_secret`. This model only declares them; `SECRET_KEYS` and
the refusal of plain-text values (`plain_secret_problems`) are derived from it, so a credential added here
is covered by both. Credentials belong here and nowhere else: `tests/test_secrets.py` fails for a field of
any other settings model whose name says it holds one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from settings.declare import rerender, restarts
from settings.types import SECRET, Model, Secret


class StackSecrets(Model):
    ssh_private_key: Secret = None
    """the SSH private key (PEM/OpenSSH) that logs in to every node and NAS host; required"""
    rke2_token: Secret = None
    """the RKE2 server token (only servers hold it; agents join with a generated agent token); when unset, one is
    generated and kept (secret) in the stack state"""
    zabbix_admin_password: Secret = None
    """the Zabbix Admin password set on the first up; when unset, one is generated (secret)"""
    zabbix_agent_psk: Secret = None
    """the agent<->server TLS PSK (64+ hex digits); when unset, one is generated (secret)"""
    zabbix_slack_bot_token: Secret = None
    """the Slack bot token (xoxb-...) of the Zabbix Slack media type; needed with a slack channel"""
    zabbix_mattermost_bot_token: Secret = None
    """the Mattermost bot access token; needed with a mattermost channel"""

    CHANGES: ClassVar = {
        "ssh_private_key": rerender(
            "how the program reaches the hosts: every host step's connection changes, so each re-runs its (idempotent) "
            "script once; the hosts must accept the new key first (docs/runbook.md §4)"
        ),
        "rke2_token": restarts(
            "rke2-server (the token in config.yaml); agents keep their agent token", "servers", "hosts"
        ),
        "zabbix_admin_password": rerender("the Zabbix Admin password"),
        "zabbix_agent_psk": restarts("zabbix-agent2 and the server's PSK (agents reconnect)", "every node"),
        "zabbix_slack_bot_token": rerender("the Slack media type"),
        "zabbix_mattermost_bot_token": rerender("the Mattermost media type"),
    }


def secret_fields(model: type[Model]) -> dict[str, str]:
    """Config key -> meaning of every `Secret` field of `model`."""
    return {
        (info.alias or name): info.description or ""
        for name, info in model.model_fields.items()
        if any(meta is SECRET for meta in info.metadata)
    }


SECRET_KEYS = secret_fields(StackSecrets)


def plain_secret_problems(namespace: str, is_set: Callable[[str], bool], is_secret: Callable[[str], bool]) -> list[str]:
    """A credential key set as plain config sits unencrypted in Pulumi.<stack>.yaml and the state: refused,
    with the commands that move it into an encrypted secret."""
    problems = []
    for key in SECRET_KEYS:
        full = f"{namespace}:{key}"
        if is_set(full) and not is_secret(full):
            problems.append(
                f"{full}: a credential set as plain config (unencrypted in the stack file and the state); move it: "
                f"`pulumi config rm {full}`, then `pulumi config set --secret {full}` with the value on stdin "
                f"(e.g. `pulumi config set --secret {full} < FILE`)"
            )
    return problems
