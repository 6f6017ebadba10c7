"""A stack file as the Pulumi CLI hands its config to the program: full keys, objects as JSON strings, `secure:`
values and missing required secrets as placeholders marked secret (the offline preview's input)."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Optional

import yaml

from settings import NAMESPACE

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "ml-platform"

# Required secrets that a checkout does not hold: the plan uses placeholders, marked secret.
PLACEHOLDER_SECRETS = {
    f"{NAMESPACE}:sshPrivateKey": "placeholder-ssh-private-key",
    f"{NAMESPACE}:zabbixSlackBotToken": "placeholder-slack-bot-token",
    f"{NAMESPACE}:zabbixMattermostBotToken": "placeholder-mattermost-bot-token",
}


@functools.lru_cache(maxsize=8)
def _stack_doc(path: str, mtime_ns: int) -> dict[str, Any]:
    """The stack file, parsed once per version of it (the offline preview reads it more than once). libyaml's safe
    loader where PyYAML has it: a 1000-node stack file parses several times faster. Callers only read it."""
    return yaml.load(Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def load_stack_config(stack: str, config_file: Optional[Path] = None) -> tuple[dict[str, str], list[str]]:
    """Config as the CLI would hand it to the program: full keys, objects as JSON strings.

    `secure:` values and missing required secrets become placeholders marked secret.
    """
    path = config_file or ROOT / f"Pulumi.{stack}.yaml"
    doc = _stack_doc(str(path), path.stat().st_mtime_ns)
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in (doc.get("config") or {}).items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            # The ciphertext's digest: a changed secret gives a changed placeholder (and plan digest).
            digest = hashlib.sha256(str(value["secure"]).encode()).hexdigest()[:12]
            config[full] = f"placeholder-{full.split(':', 1)[1]}-{digest}"
            secret_keys.append(full)
        elif isinstance(value, str):
            config[full] = value
        else:
            config[full] = json.dumps(value)
    for full, placeholder in PLACEHOLDER_SECRETS.items():
        if full not in config:
            config[full] = placeholder
            secret_keys.append(full)
    return config, sorted(set(secret_keys))
