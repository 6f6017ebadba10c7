"""`load()`: the raw config -> validated `Settings`, or `SettingsError` with every problem in one run.

The models (`settings.root` and the area modules) judge each field; the cross-field rules
(`settings.rules`) judge what validated (`settings.partial`). Messages name the path and the fix.
"""

from __future__ import annotations

import difflib
import json
import re
import typing
from collections import OrderedDict
from typing import Any, Optional

from pydantic import BaseModel, ValidationError

from settings.partial import path_text, set_aside
from settings.root import NAMESPACE, SECRET_LOOKALIKES, Settings, SettingsError
from settings.rules import cross_field_problems, waiting_rules
from settings.scan import credential_problems, strings
from settings.secrets import SECRET_KEYS

# The last few configs that loaded, by their canonical JSON: the offline preview and the program it evaluates read
# the same stack file (a 1000-node file takes about a second and a half to judge). Settings are frozen.
_LOADED: OrderedDict[str, Settings] = OrderedDict()


def load(raw: dict[str, Any]) -> Settings:
    """Validate the raw config (area key -> parsed YAML value) and return the settings.

    Raises SettingsError with every problem found, sorted by path, each list item named: unknown keys,
    the shape and types of every key, and the rules that relate several fields, run on what validated
    (settings.partial: a rule that needs an item or area that failed waits, and a note says so).
    """
    key = json.dumps(raw, sort_keys=True, default=str)
    if key in _LOADED:
        _LOADED.move_to_end(key)
        return _LOADED[key]
    settings = _load(raw)
    _LOADED[key] = settings
    while len(_LOADED) > 4:
        _LOADED.popitem(last=False)
    return settings


def _load(raw: dict[str, Any]) -> Settings:
    problems = [_unknown_area(key) for key in raw if key not in Settings.model_fields and _alias_field(key) is None]
    known = {k: v for k, v in raw.items() if k not in SECRET_KEYS and _alias_field(k) is not None}
    errors = _errors(known)
    problems += [_describe(err) for err in errors]
    credentials = credential_problems(Settings, {k: v for k, v in raw.items() if k not in SECRET_KEYS})
    if credentials:  # no other message may echo a value the scanner calls a credential
        flagged = {path.split(": ", 1)[0]: None for path in credentials}
        values = [v for p, v in strings(raw) if p in flagged]
        problems = [p for p in problems if not any(v in p for v in values)] + credentials
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
