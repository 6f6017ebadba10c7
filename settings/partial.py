"""What validated, when something did not: the settings the cross-field rules judge next to type errors.

Pydantic builds nothing above a failing field, so neither the models' own validators nor the rules
in `settings.rules` would see a config with one bad address. To report every problem in one run,
`load` sets each failing unit aside and builds the settings from the rest:

- an error inside a list item (`nodes[3].address`, `nas.hosts[1].drives[0].device`) drops the outermost
  list item on its path (`nodes[3]`, `nas.hosts[1]`): its area is then *incomplete*;
- any other error sets its whole top-level area aside (`network` for `network.clusterCidr`): the area
  is then *missing*;
- an unknown key is only removed: the item around it still validates.

Rules that read a missing area, or count or compare an incomplete one as a whole, wait (each rule
says which, `settings.rules.RULES`): judging a list with an item taken out could report a problem
the config does not have. Positions in the rules' messages refer to the shortened lists; `renumber`
maps them back to the config's.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError


class SetAside:
    """Stands for an area that failed validation; reading it is a rule that forgot to declare the area."""

    def __init__(self, area: str):
        self._area = area

    def __getattr__(self, name: str):
        raise AttributeError(f"settings area {self._area!r} failed validation; a rule read it without declaring it")


@dataclass
class Partial:
    settings: Any  # a `Settings` built without validation from the areas that validated; SetAside for the rest
    missing: set[str] = field(default_factory=set)
    incomplete: set[str] = field(default_factory=set)
    kept: dict[str, list[int]] = field(default_factory=dict)  # list path -> config positions of the items kept

    def renumber(self, problem: str) -> str:
        """`nodes[3].gpu: ...` about the 4th node kept -> the position of that node in the config, wherever the
        problem names one (a collision names two items)."""
        for path, positions in self.kept.items():
            problem = re.sub(
                rf"(?<![\w.]){re.escape(path)}\[(\d+)\]",
                lambda m, path=path, positions=positions: f"{path}[{positions[int(m[1])]}]",
                problem,
            )
        return problem


def set_aside(model: type[BaseModel], raw: dict[str, Any], errors: list[dict]) -> Partial:
    """`model` (the root settings) built from `raw` without the parts that `errors` (pydantic's) name."""
    unknown = [tuple(e["loc"]) for e in errors if e["type"] == "extra_forbidden"]
    partial = Partial(settings=None)
    items: dict[tuple, set[int]] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden" or not loc:
            continue
        first = next((k for k, part in enumerate(loc) if isinstance(part, int)), None)
        if first is None:
            partial.missing.add(loc[0])
        else:
            partial.incomplete.add(loc[0])
            items.setdefault(loc[:first], set()).add(loc[first])
    pruned = _without(raw, unknown)
    for path, dropped in items.items():
        if not _drop(pruned, path, dropped, partial.kept):
            partial.missing.add(path[0])
    areas = {name: _area(model, name, pruned, partial) for name in model.model_fields}
    partial.incomplete -= partial.missing
    partial.settings = model.model_construct(**areas)
    return partial


def _area(model: type[BaseModel], name: str, pruned: dict[str, Any], partial: Partial) -> Any:
    info = model.model_fields[name]
    area = info.alias or name
    if area in partial.missing:
        return SetAside(area)
    if area not in pruned:
        return info.get_default(call_default_factory=True)
    try:
        return _adapter(model, name).validate_python(pruned[area], by_alias=True)
    except ValidationError:  # e.g. `nodes` with every item set aside is too short
        partial.missing.add(area)
        return SetAside(area)


@functools.cache
def _adapter(model: type[BaseModel], name: str) -> TypeAdapter:
    """A validator for one field of `model`, with its constraints (e.g. `min_length`)."""
    info = model.model_fields[name]
    return TypeAdapter(Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation)


def _drop(value: dict[str, Any], path: tuple, dropped: set[int], kept: dict[str, list[int]]) -> bool:
    """Remove the items at positions `dropped` from the list at `path` (in place), recording the rest;
    False when `path` is no list (a position in pydantic's error that is a number-like mapping key)."""
    *parents, last = path
    for part in parents:
        value = value.get(part) if isinstance(value, dict) else None
    items = value.get(last) if isinstance(value, dict) else None
    if not isinstance(items, list):
        return False
    positions = [i for i in range(len(items)) if i not in dropped]
    value[last] = [items[i] for i in positions]
    kept[path_text(path)] = positions
    return True


def _without(value: Any, locs: list[tuple]) -> Any:
    """`value` (the raw config) with the keys at `locs` removed (a copy; the raw config is left alone)."""
    if isinstance(value, dict):
        drop = {loc[0] for loc in locs if len(loc) == 1}
        return {
            k: _without(v, [loc[1:] for loc in locs if len(loc) > 1 and loc[0] == k])
            for k, v in value.items()
            if k not in drop
        }
    if isinstance(value, list):
        return [_without(v, [loc[1:] for loc in locs if len(loc) > 1 and loc[0] == i]) for i, v in enumerate(value)]
    return value


def path_text(loc: tuple) -> str:
    """pydantic's location as the config path people read: `nodes[3].infiniband.address`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
