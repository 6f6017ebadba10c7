"""What each settings field declares: what it claims (a name or range others must not take) and what changing it does.

A field declares both on itself, so that the rules and the review follow every field, a new one included,
without a list to keep up to date:

- claims ride on the field's type: `Annotated[str, Claim("namespace")]` (the shared types in `settings.types`
  carry them, e.g. `Namespace`, `PodCidr`, `NodeAddress`), or `Uses(...)` for a field that names something it
  does not own (a team's namespace a backup reads from, an NTP server). `settings.rules.claims` collects every
  claim of a loaded configuration (`claims()`) and refuses collisions and reserved values;
- change semantics sit in the model's `CHANGES` map, one entry per field (`NONE`, `RERENDER`, `restarts(...)`,
  `replaces(...)`, `destroys_on_decrease(...)`, `rebuilds_cluster(...)`, `refused(...)`); the review's Danger
  is made from them (`stacks.diff.settings`) and docs/safety.md lists them.

tests/test_declarations.py walks every field of every model: a field without change semantics, or one whose name
or type says it names a shared thing (namespace, CIDR, address, device, bucket, port, host) without a claim,
fails the suite.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import BaseModel
from pydantic.fields import FieldInfo

ClaimKind = Literal["namespace", "cidr", "ipv4", "device", "bucket", "port", "hostname", "storage-class"]


@dataclass(frozen=True)
class Claim:
    """The field's value is something only it may hold: `kind` (what it is), `network` (for CIDRs and addresses:
    which network it belongs to: ethernet, pod, service, infiniband, ipoib-pods), `scope` (`host`: unique per
    host, the enclosing `nodes[i]` or `nas.hosts[i]`; `cluster`: unique in the cluster; ports: the port space;
    `shared:<group>`: fields of one group may hold the same value, which their component then creates once)."""

    kind: ClaimKind
    network: str = ""
    scope: str = "cluster"
    owns: bool = True

    def __repr__(self) -> str:
        extra = f", network={self.network}" if self.network else ""
        return f"Claim({self.kind}{extra}, scope={self.scope})" if self.owns else f"Uses({self.kind}{extra})"


def Uses(kind: ClaimKind, network: str = "", scope: str = "cluster") -> Claim:  # noqa: N802 (reads as a type mark)
    """The field names something another field, the site or the system owns (never a collision with its owner),
    still checked against the ranges it must not fall into (an NTP server inside the pod network)."""
    return Claim(kind, network, scope, owns=False)


Kind = Literal[
    "none", "re-render", "restart", "replace", "destroys-on-decrease", "restricts", "rebuilds-cluster", "refused"
]
# How a restricting field narrows (`restricts(..., narrows=...)`): `decrease` (a list loses items, a switch goes off, a
# number or quantity goes down), `increase` (the reverse), `any` (every change narrows for someone: a prefix), `limit`
# (a limit set where there was none, or lowered), `allowlist` (an empty list allows all: a first entry narrows too),
# or an order of values from widest to narrowest (`baseline<restricted`).
Narrows = str


@dataclass(frozen=True)
class Change:
    """What changing a field does. `what`: the objects, pods or host services concerned, in plain words;
    `nodes`: where a restart happens (`every node`, `servers`, `GPU nodes`, `storage hosts`, `NAS hosts`, or
    `cluster` for pods that are not per node); `data_lost`: a replacement loses the data it holds; `worded_by`:
    the review's Danger class (`stacks.diff.<module>`) that words this change from the plan in more detail (the
    hosts, devices or releases concerned): the declared line is left out when that class names the change."""

    kind: Kind
    what: str = ""
    nodes: str = ""
    data_lost: bool = False
    worded_by: str = ""
    narrows: Narrows = ""

    @property
    def danger(self) -> bool:
        """Named under Danger in the review (a re-render or a wait is not)."""
        return self.kind not in ("none", "re-render") and not (self.kind == "restart" and self.nodes == "cluster")

    def describe(self) -> str:
        if self.kind == "none":
            return "nothing outside the program changes" + (f" ({self.what})" if self.what else "")
        if self.kind == "re-render":
            return "updated in place, nothing restarts" + (f": {self.what}" if self.what else "")
        if self.kind == "restart":
            return f"restarts {self.what}" + (f" on {self.nodes}" if self.nodes and self.nodes != "cluster" else "")
        if self.kind == "replace":
            lost = ", the data it holds is LOST" if self.data_lost else " (no data lost)"
            return f"replaces {self.what}{lost}"
        if self.kind == "destroys-on-decrease":
            return f"lowering it destroys: {self.what}"
        if self.kind == "restricts":
            return f"RESTRICTS: {self.what}"
        if self.kind == "rebuilds-cluster":
            return f"cannot change on a running cluster: {self.what}"
        return f"refused: {self.what}"


NONE = Change("none")
RERENDER = Change("re-render")


def none(why: str) -> Change:
    return Change("none", why)


def rerender(what: str) -> Change:
    return Change("re-render", what)


def restarts(what: str, nodes: str, by: str = "") -> Change:
    return Change("restart", what, nodes, worded_by=by)


def replaces(what: str, data_lost: bool = False, by: str = "") -> Change:
    return Change("replace", what, data_lost=data_lost, worded_by=by)


def destroys_on_decrease(what: str, by: str = "", empty_means_name: bool = False) -> Change:
    """`empty_means_name`: an empty list stands for one entry named like the enclosing item (a team's namespaces)."""
    return Change("destroys-on-decrease", what, worded_by=by, narrows="empty-is-name" if empty_means_name else "")


def restricts(stops: str, narrows: Narrows = "decrease", by: str = "") -> Change:
    """A field that narrows who or what may run (egress, Pod Security, priority classes, group prefixes, where team
    pods land): `stops` says what stops working for whom when it narrows; `narrows` which way narrows."""
    return Change("restricts", stops, worded_by=by, narrows=narrows)


def rebuilds_cluster(what: str, by: str = "") -> Change:
    return Change("rebuilds-cluster", what, worded_by=by)


def refused(why: str, by: str = "") -> Change:
    return Change("refused", why, worded_by=by)


def destructive_flags() -> set[str]:
    """The config keys of the true/false fields whose change destroys data (`format`, `force`, `wipe`)."""
    from settings.root import Settings

    return {
        info.alias or name
        for model in every_model(Settings)
        for name, info in model.model_fields.items()
        if info.annotation is bool and (change := changes_of(model).get(name)) and change.data_lost
    }


def changes_of(model: type[BaseModel]) -> dict[str, Change]:
    """Field name -> its declared change semantics, inherited declarations included (a subclass adds its own)."""
    found: dict[str, Change] = {}
    for cls in reversed(model.__mro__):
        found.update(cls.__dict__.get("CHANGES", {}))
    return found


def claims_of(info: FieldInfo) -> list[Claim]:
    """The claims a field's type carries (on the field, on its items, or on a dict's keys and values)."""
    found = [m for m in info.metadata if isinstance(m, Claim)]
    return found + [m for arg in _args(info.annotation) for m in _metadata(arg) if isinstance(m, Claim)]


def _args(tp: Any) -> Iterator[Any]:
    for arg in typing.get_args(tp):
        yield arg
        yield from _args(arg)


def _metadata(tp: Any) -> tuple:
    return getattr(tp, "__metadata__", ())


def models_in(tp: Any) -> list[type[BaseModel]]:
    """The settings models a field's type holds (itself, its items, its dict values, an Optional's)."""
    candidates = [tp, *_args(tp)]
    return [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]


def every_model(root: type[BaseModel]) -> list[type[BaseModel]]:
    """`root` and every model reachable from its fields, each once, in the order met."""
    seen: dict[type[BaseModel], None] = {}
    stack = [root]
    while stack:
        model = stack.pop(0)
        if model in seen:
            continue
        seen[model] = None
        for info in model.model_fields.values():
            stack += models_in(info.annotation)
    return list(seen)


@dataclass(frozen=True)
class Held:
    """One claimed value of a loaded configuration: the claim, the value and the config path that holds it."""

    claim: Claim
    value: Any
    path: str

    @property
    def host(self) -> str:
        """The host scope: the enclosing `nodes[i]` / `nas.hosts[i]` item (the path up to its first position)."""
        return self.path.split("]", 1)[0] + "]" if "[" in self.path else ""


def claims(model: BaseModel, path: str = "") -> Iterator[Held]:
    """Every claimed or used value in `model`, walked through nested models, lists and dicts; `path` in config
    form (`nodes[3].osdDevices[0].device`). A model may add claims it derives (`extra_claims`), and hold none
    while it is switched off (`claims_held` false: a disabled network's default range claims nothing)."""
    held = getattr(model, "claims_held", True)
    for name, info in type(model).model_fields.items():
        value = getattr(model, name, None)
        if value is None:
            continue
        at = f"{path}.{info.alias or name}" if path else (info.alias or name)
        for claim in claims_of(info) if held else ():
            yield from (Held(claim, v, p) for v, p in _leaves(value, at))
        yield from _nested(value, at)
    extra = getattr(model, "extra_claims", None)
    if extra is not None:
        yield from (Held(c, v, f"{path}.{p}" if path else p) for c, v, p in extra())


def _leaves(value: Any, at: str) -> Iterator[tuple[Any, str]]:
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{at}[{i}]")
    elif isinstance(value, dict):
        for key in value:
            yield from _leaves(key, f"{at}.{key}")
    elif not isinstance(value, BaseModel):
        yield value, at


def _nested(value: Any, at: str) -> Iterator[Held]:
    if isinstance(value, BaseModel):
        yield from claims(value, at)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _nested(item, f"{at}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _nested(item, f"{at}.{key}")


def field_at(root: type[BaseModel], path: str) -> Optional[tuple[type[BaseModel], str, FieldInfo]]:
    """The model, field name and field of a config path (`storage.minio.backup.sources[2].schedule`), walking
    aliases, list positions and dict keys; None where the path leaves the models."""
    model: Optional[type[BaseModel]] = root
    found = None
    key_next = False
    for part in _parts(path):
        if part.startswith("[") or key_next:
            key_next = False
            continue
        if model is None:
            return found if found and _is_mapping(found[2]) else None
        names = {(f.alias or n): n for n, f in model.model_fields.items()}
        if part not in names:
            return None
        info = model.model_fields[names[part]]
        found = (model, names[part], info)
        inner = models_in(info.annotation)
        model = inner[0] if inner else None
        key_next = bool(inner) and _is_mapping(info)
    return found


def _is_mapping(info: FieldInfo) -> bool:
    return typing.get_origin(info.annotation) is dict


def _parts(path: str) -> list[str]:
    parts: list[str] = []
    for dotted in path.split("."):
        head, _, rest = dotted.partition("[")
        if head:
            parts.append(head)
        if rest:
            parts += [f"[{p}" for p in rest.split("[")]
    return parts
