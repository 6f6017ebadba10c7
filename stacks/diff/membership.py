"""Danger about the cluster's membership and identity, from the plans: control-plane membership (the etcd quorum
before and after, read from the two plans' settings) and the cluster's identity. `cluster.name` is the Kubernetes
provider's `clusterIdentifier`; pulumi-kubernetes replaces the provider when it changes, and the engine replaces
every resource bound to a replaced provider (pulumi_kubernetes/provider.py, `cluster_identifier`: "the provider will
_only_ be replaced when `clusterIdentifier` changes"). `bound_replacements` marks those resources replaced in the
diff, so a protected one among them is refused (exit status 3).
"""

from __future__ import annotations

from typing import Any, Optional

from stacks.diff.core import DangerClass, Entry, Sides, component_of, show
from stacks.diff.declared import documents

PROVIDER = "pulumi:providers:kubernetes"


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
    DangerClass("control-plane membership: the etcd quorum before and after", _quorum_danger),
    DangerClass(
        "the cluster's identity: the Kubernetes provider and every object bound to it replaced", _identity_danger
    ),
)
