"""Danger made from what each settings field declares (`settings.declare`): the two plans' settings documents
(`settings` in a plan: the stack file's plain `ml-platform:` config) are compared field by field, and every change
whose declared semantics restart on nodes, replace, destroy (a retention, count or list lowered), rebuild the
cluster or are refused is named with the field, old and new value and what it does. A new settings field is
covered by its declaration, without a line here.

Where another Danger class words the same change from the plan in more detail (the hosts, devices or releases
concerned), the field says so (`worded_by`) and its declared line is left out when that class names something.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import ValidationError

from settings import Settings
from settings.declare import Change, changes_of, field_at
from stacks.diff.core import ABSENT, DangerClass, Sides, show, value_changes
from stacks.diff.core import Change as ValueChange


def documents(old: dict[str, Any], new: dict[str, Any]) -> tuple[Optional[dict], Optional[dict]]:
    """Both plans' settings as the models read them (defaults filled in, so that writing a default out changes
    nothing); both raw where the head's models cannot read one of them (a field renamed since the base)."""
    raw = old.get("settings"), new.get("settings")
    if raw[0] is None or raw[1] is None:
        return None, None
    try:
        before, after = (Settings.model_validate(doc, by_alias=True) for doc in raw)
    except ValidationError:
        return raw
    return before.model_dump(by_alias=True, mode="json"), after.model_dump(by_alias=True, mode="json")


def declared(path: str) -> Optional[Change]:
    """The change semantics declared for the field at a diff path (`nodes[name=gpu-01].osdDevices[0].wipe`)."""
    found = field_at(Settings, path.lstrip("."))
    if found is None:
        return None
    model, name, _ = found
    return changes_of(model).get(name)


def _decreased(change: ValueChange) -> bool:
    old, new = change.old, change.new
    if new is ABSENT or new is None:
        return old is not ABSENT and old is not None
    if isinstance(old, bool) or isinstance(new, bool):
        return old is True and new is False
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        return new < old
    if isinstance(old, list) and isinstance(new, list):
        return len(new) < len(old) or any(item not in new for item in old)
    return False


def settings_changes(sides: Sides) -> list[tuple[ValueChange, Change]]:
    before, after = documents(sides.old, sides.new)
    if before is None or after is None:
        return []
    found = []
    for change in value_changes(before, after, ""):
        semantics = declared(change.path)
        if semantics is not None:
            found.append((change, semantics))
    return found


def declared_danger(sides: Sides, worded: frozenset[str] = frozenset()) -> list[str]:
    """A line for each changed field whose declaration is Danger; `worded`: the Danger classes (by module) that
    named something in this diff."""
    out = []
    for change, semantics in settings_changes(sides):
        if not semantics.danger or (semantics.kind == "destroys-on-decrease" and not _decreased(change)):
            continue
        if semantics.worded_by and semantics.worded_by in worded:
            continue
        path = change.path.lstrip(".")
        out.append(f"settings {path}: {_shown(change.old)} -> {_shown(change.new)}: {semantics.describe()}")
    return out


def _shown(value: Any) -> str:
    """A list entry or section as its name (`(entry cpu-20)`), not its whole content."""
    if isinstance(value, dict):
        return f"(entry {value['name']})" if isinstance(value.get("name"), str) else "(a section)"
    return show(value)


CLASSES = (
    DangerClass(
        "a settings change whose declared semantics restart on nodes, replace, destroy when lowered, rebuild the "
        "cluster or are refused (every field declares one; docs/safety.md lists them)",
        declared_danger,
    ),
)
