"""Danger made from what each settings field declares (`settings.declare`): the two plans' settings documents
(`settings` in a plan: the stack file's plain `ml-platform:` config) are compared field by field, and every change
whose declared semantics restart on nodes, replace, destroy (a retention, count or list lowered), rebuild the
cluster or are refused is named with the field, old and new value and what it does. A new settings field is
covered by its declaration, without a line here.

Two changes get their own wording: control-plane membership (etcd quorum before and after) and the cluster's
identity. `cluster.name` is the Kubernetes provider's `clusterIdentifier`; pulumi-kubernetes replaces the provider
when it changes, and the engine replaces every resource bound to a replaced provider (pulumi_kubernetes/provider.py,
`cluster_identifier`: "the provider will _only_ be replaced when `clusterIdentifier` changes"). `bound_replacements`
marks those resources replaced in the diff, so a protected one among them is refused (exit status 3).
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import ValidationError

from settings import Settings
from settings.declare import Change, changes_of, field_at
from stacks.diff.core import ABSENT, DangerClass, Entry, Sides, component_of, show, value_changes
from stacks.diff.core import Change as ValueChange

PROVIDER = "pulumi:providers:kubernetes"


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


def _declared_danger(sides: Sides) -> list[str]:
    out = []
    for change, semantics in settings_changes(sides):
        if not semantics.danger or (semantics.kind == "destroys-on-decrease" and not _decreased(change)):
            continue
        path = change.path.lstrip(".")
        out.append(f"settings {path}: {show(change.old)} -> {show(change.new)}: {semantics.describe()}")
    return out


def _servers(doc: Optional[dict[str, Any]]) -> list[str]:
    return [n["name"] for n in (doc or {}).get("nodes", []) if n.get("controlPlane")]


def quorum(members: int) -> str:
    if members == 0:
        return "no etcd members"
    return f"{members} etcd member(s), quorum {members // 2 + 1}, survives {(members - 1) // 2} server loss(es)"


def _quorum_danger(sides: Sides) -> list[str]:
    before, after = documents(sides.old, sides.new)
    if before is None or after is None:
        return []
    old, new = _servers(before), _servers(after)
    if old == new:
        return []
    left, joined = [s for s in old if s not in new], [s for s in new if s not in old]
    moves = "; ".join([f"leaving: {', '.join(left)}"] * bool(left) + [f"joining: {', '.join(joined)}"] * bool(joined))
    return [
        f"control-plane membership changes ({moves}): {quorum(len(old))} -> {quorum(len(new))}. Change one server "
        "per `up` and wait for etcd to report every member healthy in between (docs/runbook.md, section 3); a "
        "server removed is uninstalled with its etcd data"
    ]


def bound_replacements(entries: list[Entry], before: dict[str, dict], after: dict[str, dict]) -> list[Entry]:
    """`entries` with every resource bound to a replaced Kubernetes provider marked replaced (added when it has no
    other change), as the engine replaces them."""
    replaced = {e.urn for e in entries if e.type == PROVIDER and e.action in ("replace", "delete-before-replace")}
    if not replaced:
        return entries
    by_urn = {e.urn: e for e in entries}
    for urn, resource in after.items():
        provider = resource.get("provider") or ""
        if urn not in before or not any(provider == p or provider.startswith(f"{p}::") for p in replaced):
            continue
        entry = by_urn.get(urn)
        if entry is None:
            options = resource.get("options") or {}
            entry = Entry(urn, resource["name"], resource["type"], "replace", component_of(urn, after), None)
            entry.options = options
            entries.append(entry)
            by_urn[urn] = entry
        if entry.action == "update":
            entry.action = "replace"
        entry.replace_because = sorted({*entry.replace_because, "provider (its Kubernetes provider is replaced)"})
    return entries


def _identity_danger(sides: Sides) -> list[str]:
    out = []
    for entry in sides.entries:
        if entry.type != PROVIDER or entry.action not in ("replace", "delete-before-replace"):
            continue
        bound = [e for e in sides.entries if any(r.startswith("provider (") for r in e.replace_because)]
        protected = sorted(e.name for e in bound if (e.options or {}).get("protect"))
        old = (sides.before.get(entry.urn) or {}).get("inputs", {}).get("clusterIdentifier")
        new = (sides.after.get(entry.urn) or {}).get("inputs", {}).get("clusterIdentifier")
        out.append(
            f"{entry.name}: the cluster's identity changes (clusterIdentifier {show(old)} -> {show(new)}, from "
            f"cluster.name): pulumi-kubernetes replaces the provider and with it all {len(bound)} Kubernetes "
            "object(s) bound to it (deleted and created again: releases, storage classes, queues, namespaces"
            + (f"; protected, so `pulumi up` refuses: {', '.join(protected)}" if protected else "")
            + "). A rename is not a change of cluster: keep cluster.name"
        )
    return out


CLASSES = (
    DangerClass(
        "a settings change whose declared semantics restart on nodes, replace, destroy when lowered, rebuild the "
        "cluster or are refused (every field declares one; docs/safety.md lists them)",
        _declared_danger,
    ),
    DangerClass("control-plane membership: the etcd quorum before and after", _quorum_danger),
    DangerClass(
        "the cluster's identity: the Kubernetes provider and every object bound to it replaced", _identity_danger
    ),
)
