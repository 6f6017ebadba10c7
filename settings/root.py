"""The whole configuration of one environment, validated before anything is created.

This package is the only place that knows the shape of `Pulumi.<stack>.yaml`. Every key lives under
the `ml-platform:` namespace, one top-level key per area (`cluster`, `ssh`, `nodes`, ...), camelCase
in YAML and snake_case here; each area's models live in their own module. `load()` turns the raw
config into a frozen `Settings` object or raises `SettingsError` listing every problem, one per line,
each naming its path and the fix. Rules that relate several areas live in `settings.rules`.
"""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any, Optional

import pulumi
from pydantic import BaseModel, Field, ValidationError

from settings.charts import Charts
from settings.cluster import ClusterSettings, SshSettings
from settings.gpu import GpuSettings
from settings.monitoring import MonitoringSettings
from settings.network import NetworkSettings
from settings.nodes import NasSettings, NodeSettings
from settings.partial import path_text, set_aside
from settings.rules import cross_field_problems, waiting_rules
from settings.scheduling import SchedulingSettings
from settings.storage import StorageSettings
from settings.types import Model

NAMESPACE = "ml-platform"

# Config keys that hold secrets. They are read with `require_secret`/`get_secret` and never enter
# the settings model, so their values cannot leak through validation messages.
SECRET_KEYS = {
    "sshPrivateKey": "the SSH private key (PEM/OpenSSH) that logs in to every node and NAS host",
    "rke2Token": "the RKE2 server token (only servers hold it; agents join with a generated agent token); when "
    "unset, one is generated and kept (secret) in the stack state",
    "zabbixAdminPassword": "the Zabbix Admin password set on the first up; when unset, one is generated (secret)",
    "zabbixAgentPsk": "the agent<->server TLS PSK (64+ hex digits); when unset, one is generated (secret)",
    "zabbixSlackBotToken": "the Slack bot token (xoxb-...) of the Zabbix Slack media type; needed with a slack channel",
    "zabbixMattermostBotToken": "the Mattermost bot access token; needed with a mattermost channel",
}

# Plain-config keys that people put secrets under, and the secret key that takes the value instead.
SECRET_LOOKALIKES = {
    "botToken": "zabbixSlackBotToken or zabbixMattermostBotToken",
    "webhookUrl": "zabbixSlackBotToken or zabbixMattermostBotToken (the media types take bot tokens)",
    "token": "zabbixSlackBotToken or zabbixMattermostBotToken",
    "psk": "zabbixAgentPsk",
    "password": "zabbixAdminPassword",
    "adminPassword": "zabbixAdminPassword",
}


class SettingsError(pulumi.RunError):
    """Invalid settings: every problem, one per line. Raised before any resource is registered."""

    def __init__(self, problems: list[str], shown: Optional[list[str]] = None):
        """`problems`: one per line, path first; `shown`: what is printed (list items named, notes)."""
        self.problems = problems
        super().__init__("invalid settings:\n" + "\n".join(f"  {p}" for p in shown or problems))


class Settings(Model):
    cluster: ClusterSettings = Field(description="RKE2 and the API endpoint.")
    ssh: SshSettings = Field(default=SshSettings(), description="How every node and NAS host is reached.")
    nodes: list[NodeSettings] = Field(min_length=1, description="The cluster's machines, one entry per node.")
    nas: NasSettings = Field(default=NasSettings(), description="The NAS hosts outside the cluster (tier 3).")
    network: NetworkSettings = Field(
        default=NetworkSettings(), description="The CNI, pod and service ranges, and the InfiniBand fabric."
    )
    gpu: GpuSettings = Field(
        default=GpuSettings(), description="The GPU Operator, time-slicing, and tier-1 local NVMe."
    )
    storage: StorageSettings = Field(default=StorageSettings(), description="Tier 2 (Ceph) and tier 3 (MinIO).")
    scheduling: SchedulingSettings = Field(
        default=SchedulingSettings(), description="Kueue (quota, admission) and Volcano (gang placement)."
    )
    monitoring: MonitoringSettings = Field(default=MonitoringSettings(), description="Zabbix.")
    charts: Charts = Field(
        default=Charts(), description="Every Helm chart at a pinned version, each repository overridable for a mirror."
    )

    @property
    def servers(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.control_plane]

    @property
    def init_server(self) -> NodeSettings:
        """The server that initialises the cluster (and whose kubeconfig the program reads)."""
        return next(n for n in self.nodes if n.name == self.cluster.init_server)

    @property
    def gpu_nodes(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.role == "gpu"]

    @property
    def cpu_nodes(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.role == "cpu"]

    @property
    def storage_hosts(self) -> list[NodeSettings]:
        return [n for n in self.nodes if n.storage_host]


def load(raw: dict[str, Any]) -> Settings:
    """Validate the raw config (area key -> parsed YAML value) and return the settings.

    Raises SettingsError with every problem found, sorted by path, each list item named: unknown keys,
    the shape and types of every key, and the rules that relate several fields, run on what validated
    (settings.partial: a rule that needs an item or area that failed waits, and a note says so).
    """
    problems = [_unknown_area(key) for key in raw if key not in Settings.model_fields and _alias_field(key) is None]
    known = {k: v for k, v in raw.items() if k not in SECRET_KEYS and _alias_field(k) is not None}
    errors = _errors(known)
    problems += [_describe(err) for err in errors]
    notes = []
    if errors:
        partial = set_aside(Settings, known, errors)
        problems += map(partial.renumber, cross_field_problems(partial.settings, partial.missing, partial.incomplete))
        notes = _waiting_note(waiting_rules(partial.missing, partial.incomplete))
    else:
        settings = Settings.model_validate(known, by_alias=True)
        problems += cross_field_problems(settings)
    if problems:
        problems.sort(key=_path_key)
        raise SettingsError(problems, [_name_items(p, raw) for p in problems] + notes)
    return settings


def _waiting_note(waiting: list[str]) -> list[str]:
    if not waiting:
        return []
    return [f"(checked once the problems above are fixed, as they need what those problems name: {'; '.join(waiting)})"]


def _errors(known: dict[str, Any]) -> list[dict]:
    try:
        Settings.model_validate(known, by_alias=True)
    except ValidationError as exc:
        return list(exc.errors())
    return []


_ITEM = re.compile(r"^([A-Za-z]+(?:\.[A-Za-z]+)*)\[(\d+)\]")


def _name_items(problem: str, raw: dict[str, Any]) -> str:
    """`nodes[49].address: ...` -> `nodes[49] (gpu-16).address: ...`: a position alone is hard to find.
    Any list whose items have a `name` (nodes, NAS hosts, teams, alert channels, backup sources)."""
    match = _ITEM.match(problem)
    if not match:
        return problem
    items: Any = raw
    for key in match[1].split("."):
        items = items.get(key) if isinstance(items, dict) else None
    index = int(match[2])
    item = items[index] if isinstance(items, list) and index < len(items) else None
    name = item.get("name") if isinstance(item, dict) else None
    return f"{match[0]} ({name}){problem[match.end() :]}" if isinstance(name, str) else problem


def _path_key(problem: str) -> list:
    """Sort by the path before the first `: ` (positions numerically: nodes[9] before nodes[10])."""
    path = problem.removeprefix(f"{NAMESPACE}:").split(": ", 1)[0]
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", path)]


def _alias_field(alias: str) -> Optional[str]:
    return _aliases(Settings).get(alias)


def _aliases(model: type[BaseModel]) -> dict[str, str]:
    return {(f.alias or name): name for name, f in model.model_fields.items()}


def _unknown_area(key: str) -> str:
    valid = sorted(set(_aliases(Settings)) | set(SECRET_KEYS))
    return f"{NAMESPACE}:{key}: unknown key{_suggest(key, valid)}; valid keys are {', '.join(valid)}"


def _suggest(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if not close:
        close = [v for v in valid if v.lower() == key.lower()]
    return f" (did you mean '{close[0]}'?)" if close else ""


def _describe(err: dict) -> str:
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden" and loc[-1] in SECRET_LOOKALIKES:
        return (
            f"{path_text(loc)}: a secret must not be plain config (it would sit unencrypted in Pulumi.<stack>.yaml "
            f"and the state); remove it and set {SECRET_LOOKALIKES[loc[-1]]} with "
            f"`pulumi config set --secret {NAMESPACE}:<key>` (value on stdin)"
        )
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        valid = sorted(_aliases(model)) if model else []
        hint = _suggest(str(loc[-1]), valid)
        listing = f"; valid keys here: {', '.join(valid)}" if valid else ""
        return f"{path_text(loc)}: unknown key{hint}{listing}"
    if kind == "missing":
        return f"{path_text(loc)}: required; add it"
    if kind == "literal_error":
        return f"{path_text(loc)}: {err['input']!r} is not allowed; use {err['ctx']['expected']}"
    if kind == "value_error":
        return f"{path_text(loc)}: {err['ctx']['error']}"
    if kind.endswith("_type"):
        fix = _TYPE_FIX.get(kind, "")
        return f"{path_text(loc)}: {err['msg'].lower()}, got {type(err['input']).__name__} {err['input']!r}{fix}"
    return f"{path_text(loc)}: {err['msg']}"


# How to write each type in YAML (values are checked strictly: "22" is no port, 7 no version).
_TYPE_FIX = {
    "bool_type": "; write true or false, without quotes",
    "int_type": "; write a whole number, without quotes",
    "float_type": "; write a number, without quotes",
    "string_type": "; put it in quotes",
    "list_type": "; write a YAML list, one '- item' per line",
    "dict_type": "; write a mapping, one 'key: value' per line",
    "model_type": "; write a mapping, one 'key: value' per line",
    "model_attributes_type": "; write a mapping, one 'key: value' per line",
}


def _model_at(loc: tuple) -> Optional[type[BaseModel]]:
    """The settings model that the config path `loc` points into (for unknown-key hints)."""
    current: Any = Settings
    for part in loc:
        current = _unwrap(current)
        if isinstance(part, int):
            args = typing.get_args(current)
            current = args[0] if args else None
        elif isinstance(current, type) and issubclass(current, BaseModel):
            field = _aliases(current).get(part)
            current = current.model_fields[field].annotation if field else None
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp
