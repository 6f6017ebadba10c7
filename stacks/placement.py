"""Where a workload of the plan runs: the inventory's nodes as the plan makes them (labels and taints from
each node's RKE2 step and Node patch), and whether a pod spec's tolerations and node selection reach them."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from stacks import render

NODE_PATCH_TYPE = "kubernetes:core/v1:NodePatch"


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(hash=False)
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect)


def _command_env(command: Any) -> dict[str, str]:
    """The `NAME=value` parameters of a host step's command (components/hosts/remote.py: `... env A=1 bash -c`)."""
    if not isinstance(command, str) or " bash -c " not in command:
        return {}
    tokens = shlex.split(command.partition(" bash -c ")[0])
    return dict(t.split("=", 1) for t in tokens if "=" in t and not t.startswith("-"))


def nodes(plan: Any) -> list[Node]:
    """The cluster's nodes with the labels and taints they get: RKE2's `node-label` / `node-taint` from each
    node's RKE2 step (and a `NodePatch` of the Node, when the plan applies them through the API), RKE2's own
    role labels on servers, and the hardware labels NFD and the GPU Operator add (NVIDIA GPU: PCI vendor
    10de; Mellanox NIC: 15b3, on nodes with an InfiniBand step)."""
    resources = render.resources(plan)
    names = {r["name"] for r in resources}
    patches = {
        (r["inputs"].get("metadata") or {}).get("name"): r["inputs"] for r in resources if r["type"] == NODE_PATCH_TYPE
    }
    found = []
    for r in resources:
        if r["type"] != "command:remote:Command" or not r["name"].endswith("-rke2"):
            continue
        env = _command_env(r["inputs"].get("create"))
        config = yaml.safe_load(env.get("RKE2_CONFIG") or "{}") or {}
        name = config.get("node-name") or env.get("NODE_NAME") or r["name"].removesuffix("-rke2")
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        labels.update(item.split("=", 1) for item in config.get("node-label") or [])
        if env.get("RKE2_TYPE") == "server":
            labels.update({f"node-role.kubernetes.io/{role}": "true" for role in ("control-plane", "etcd", "master")})
        if labels.get("ml-platform.io/role") == "gpu":
            labels.update({"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.present": "true"})
        if f"{name}-infiniband" in names:
            labels["feature.node.kubernetes.io/pci-15b3.present"] = "true"
        taints = []
        for taint in config.get("node-taint") or []:
            key_value, effect = taint.rsplit(":", 1)
            key, _, value = key_value.partition("=")
            taints.append((key, value, effect))
        patch = patches.get(name)
        if patch is not None:  # labels and taints applied through the API after registration
            labels.update((patch.get("metadata") or {}).get("labels") or {})
            if "taints" in (patch.get("spec") or {}):
                taints = [(t["key"], t.get("value") or "", t["effect"]) for t in patch["spec"]["taints"] or []]
        found.append(Node(name, labels, tuple(taints)))
    return sorted(found, key=lambda n: n.name)


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: tuple[str, str, str]) -> bool:
    """Kubernetes' rule: does any toleration tolerate the taint (key, value, effect)?"""
    key, value, effect = taint
    for t in tolerations or []:
        if t.get("effect") not in (None, "", effect):
            continue
        if t.get("operator", "Equal") == "Exists":
            if t.get("key") in (None, "", key):
                return True
        elif t.get("key") == key and (t.get("value") or "") == value:
            return True
    return False


def _matches(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = requirement.get("key"), requirement.get("operator"), requirement.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False  # Gt/Lt: not used by these charts on node labels


def selects(spec: Mapping[str, Any], node: Node) -> bool:
    """The pod spec's nodeSelector and required node affinity admit the node."""
    if any(node.labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {})  # fmt: skip
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(all(_matches(e, node.labels) for e in t.get("matchExpressions") or []) for t in terms)


def runs_on(spec: Mapping[str, Any], inventory: Iterable[Node]) -> list[Node]:
    """The nodes a DaemonSet with this pod spec runs on (selected, and every NoSchedule/NoExecute taint tolerated)."""
    tolerations = spec.get("tolerations") or []
    return [
        n
        for n in inventory
        if selects(spec, n) and all(tolerates(tolerations, t) for t in n.taints if t[2] in ("NoSchedule", "NoExecute"))
    ]


# --- comparing rendered objects -----------------------------------------------------------------------------
