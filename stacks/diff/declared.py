"""Danger made from what each settings field declares (`settings.declare`): the two plans' settings documents
(`settings` in a plan: the stack file's plain `ml-platform:` config) are compared field by field, and every change
whose declared semantics restart on nodes, replace, destroy (a retention, count or list lowered), rebuild the
cluster or are refused is named with the field, old and new value and what it does. A new settings field is
covered by its declaration, without a line here.

Where another Danger class words the same change from the plan in more detail (the hosts, devices or releases
concerned), the field says so (`worded_by`) and its declared line is left out when that class names something.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from pydantic import ValidationError

from settings import Settings
from settings.declare import Change, changes_of, field_at
from settings.quantities import Ordered, compared, ordered_by
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


def order_of(path: str) -> Optional[Ordered]:
    """The order the field at a diff path declares on its type (versions, images, quantities, durations)."""
    found = field_at(Settings, path.lstrip("."))
    return ordered_by(found[2]) if found is not None else None


def _absent(value: Any) -> bool:
    return value is ABSENT or value is None


def decreased(change: ValueChange, order: Optional[Ordered] = None) -> bool:
    """The value went down: by the field's declared order (a quantity `100Ti` -> `20Ti`, a duration), a number
    lowered, a switch turned off, a list that lost an item, or a value removed."""
    old, new = change.old, change.new
    if _absent(new):
        return not _absent(old)
    if order is not None and (step := compared(order, old, new)) is not None:
        return step < 0
    if isinstance(old, bool) or isinstance(new, bool):
        return old is True and new is False
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        return new < old
    if isinstance(old, list) and isinstance(new, list):
        return len(new) < len(old) or any(item not in new for item in old)
    if isinstance(old, dict) and isinstance(new, dict):
        return any(key not in new for key in old)
    return False


def narrowed(change: ValueChange, semantics: Change, order: Optional[Ordered] = None) -> bool:
    """A restricting field moved the way it narrows (`settings.declare.restricts`)."""
    way = semantics.narrows
    if way == "any":
        return True
    if way == "decrease":
        return decreased(change, order)
    if way == "increase":
        return decreased(ValueChange(change.path, change.new, change.old), order)
    if way == "limit":  # a limit set where there was none narrows as much as one lowered
        return (_absent(change.old) and not _absent(change.new)) or decreased(change, order)
    if way == "allowlist":  # an empty list allows everything: a first entry narrows as much as one removed
        return (not change.old and bool(change.new)) or (bool(change.old) and decreased(change, order))
    levels = way.split("<")
    old, new = str(change.old), str(change.new)
    return old in levels and new in levels and levels.index(new) > levels.index(old)


def settings_changes(sides: Sides) -> list[tuple[ValueChange, Change]]:
    found = []
    for change in field_changes(sides):
        semantics = declared(change.path)
        if semantics is not None:
            found.append((change, semantics))
    return found


def field_changes(sides: Sides) -> list[ValueChange]:
    """Every changed leaf of the two plans' settings (defaults filled in)."""
    before, after = documents(sides.old, sides.new)
    if before is None or after is None:
        return []
    changes = value_changes(before, after, "")
    # A dict of values (a team's storage per class) is compared per key; one of lists per whole list.
    return changes


def _speaks(change: ValueChange, semantics: Change) -> bool:
    """Whether a declared change is Danger in this direction."""
    order = order_of(change.path)
    if semantics.kind == "destroys-on-decrease" and semantics.narrows == "empty-is-name":
        named = re.findall(r"\[name=([^\]]+)\]", change.path)
        default = [named[-1]] if named else []
        change = ValueChange(change.path, change.old or default, change.new or default)
    if semantics.kind == "destroys-on-decrease":
        return decreased(change, order)
    if semantics.kind == "restricts":
        return narrowed(change, semantics, order)
    return semantics.danger


def downgrade(change: ValueChange) -> bool:
    """A version field (its type orders versions: `settings.types.Version`, `Image`, `ChartVersion`,
    `Rke2Version`) set to an older release than before."""
    order = order_of(change.path)
    return order is not None and order.what == "downgrade" and compared(order, change.old, change.new) == -1


DOWNGRADE = (
    "DOWNGRADE: the older release starts on state the newer one wrote (databases, CRDs, on-disk formats), which "
    "most components do not support; check its release notes allow going back, or restore the state taken before "
    "the upgrade"
)


def declared_danger(sides: Sides, worded: frozenset[str] = frozenset()) -> list[str]:
    """A line for each changed field whose declaration is Danger; `worded`: the Danger classes (by module) that
    named something in this diff."""
    out = []
    for change, semantics in settings_changes(sides):
        if semantics.worded_by and semantics.worded_by in worded:
            continue
        path = change.path.lstrip(".")
        shown = f"settings {path}: {_shown(change.old)} -> {_shown(change.new)}"
        if downgrade(change):
            out.append(f"{shown}: {DOWNGRADE}; {semantics.describe()}")
        elif _speaks(change, semantics):
            out.append(f"{shown}: {semantics.describe()}")
    return out


def _shown(value: Any) -> str:
    """A list entry or section as its name (`(entry cpu-20)`), not its whole content."""
    if isinstance(value, dict):
        return f"(entry {value['name']})" if isinstance(value.get("name"), str) else "(a section)"
    return show(value)


CLASSES = (
    DangerClass(
        "a settings change whose declared semantics restart on nodes, replace, destroy when lowered (quantities by "
        "value), restrict who or what may run, rebuild the cluster or are refused, and any version field set to an "
        "older release (every field declares one; docs/safety.md lists them)",
        declared_danger,
    ),
)
