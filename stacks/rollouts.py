"""What a change to a Helm release does to running pods, for the review (`stacks.review`).

For every release whose chart, version or values differ between the base and the head plan, both sides
are rendered by real Helm (`stacks.render`) and compared object by object: added, removed and changed
objects, with the changed fields (Secret data and placeholder secrets masked). Then, in plain words,
what restarts and where:

- a changed pod template of a DaemonSet restarts its pods on the nodes it runs on, counted from the
  inventory (the nodes' labels and taints as ClusterBootstrap gives them) against the DaemonSet's node
  selector, required node affinity and tolerations;
- a changed pod template of a Deployment or StatefulSet rolls its replicas;
- a changed StatefulSet `volumeClaimTemplates` cannot be applied (the field is immutable);
- a changed component of the GPU Operator's ClusterPolicy (driver, toolkit, device plugin, ...) makes the
  operator roll that component on every GPU node; a changed CSI `Driver` rolls its node plugin.

Node-wide rollouts of node-critical DaemonSets (CNI, CSI node plugins, the GPU stack, the monitoring
agent) are Danger, with their node count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from stacks import crd_uninstall, render
from stacks.placement import Node, nodes, runs_on

# The pod template of these kinds restarts pods when it changes.
WORKLOADS = ("DaemonSet", "Deployment", "StatefulSet")
# DaemonSets whose restart on a node disturbs every pod there, by chart: what they are.
NODE_CRITICAL_CHARTS = {
    "cilium": "the CNI",
    "tigera-operator": "the CNI",
    "zabbix": "the monitoring agent",
}
# ClusterPolicy components the GPU Operator runs as DaemonSets on every GPU node, and what a change means.
GPU_COMPONENTS = {
    "driver": "replaces the NVIDIA driver (driver pods restart; GPU pods on each node are evicted first)",
    "toolkit": "restarts the container toolkit (containerd's NVIDIA runtime is reconfigured)",
    "devicePlugin": "restarts the device plugin (GPUs are re-advertised)",
    "dcgmExporter": "restarts the DCGM exporter",
    "gfd": "restarts GPU feature discovery",
    "migManager": "restarts the MIG manager",
    "validator": "re-runs the validator",
}
# NicClusterPolicy components the Network Operator runs as DaemonSets on the nodes the policy selects.
NIC_POLICY_TYPE = "kubernetes:mellanox.com/v1alpha1:NicClusterPolicy"
NIC_COMPONENTS = {
    "ofedDriver": "replaces the DOCA-OFED driver (the node's InfiniBand links go down while it reloads; RDMA jobs "
    "there fail)",
    "rdmaSharedDevicePlugin": "restarts the RDMA shared device plugin (RDMA devices are re-advertised)",
    "secondaryNetwork": "restarts Multus and the IPoIB CNI",
    "nvIpam": "restarts nv-ipam",
}
MASK = "(changed; value not shown)"
# What this module puts under Danger (docs/safety.md lists them with the diff's own classes).
DANGER_TITLES = (
    "a node-critical DaemonSet (the CNI, the monitoring agent) whose pod template changes, on N nodes",
    "a GPU Operator component (driver, toolkit, device plugin, ...) changed: rolled on every GPU node",
    "a CSI Driver's node plugin changed: rolled on the nodes it reaches",
    "a NicClusterPolicy component (DOCA-OFED driver, RDMA device plugin, Multus/IPoIB, nv-ipam) changed",
    "a StatefulSet's volumeClaimTemplates changed (Kubernetes refuses the update)",
    "a release removed or replaced whose chart ships CRDs as templates: those CRDs and every object of their kinds, "
    "cluster-wide, are deleted (the kinds named, with the program's own objects)",
)
PLACEHOLDERS = tuple(render.PLACEHOLDER.values())


# --- the inventory ------------------------------------------------------------------------------------------


def _key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return obj["kind"], meta.get("namespace") or "", meta.get("name") or ""


def _show(key: tuple[str, str, str]) -> str:
    kind, namespace, name = key
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    """Leaf paths of an object; list items with a `name` are keyed by it (`containers[name=agent].image`)."""
    if isinstance(value, dict):
        if not value:
            return {path: {}}
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{path}.{k}" if path else str(k)))
        return out
    if isinstance(value, list):
        if not value:
            return {path: []}
        named = all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in value)
        out = {}
        for n, item in enumerate(value):
            out.update(flatten(item, f"{path}[name={item['name']}]" if named else f"{path}[{n}]"))
        return out
    return {path: value}


def changed_paths(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Changed leaf paths; a list item that is only on one side is one path (`env[name=X]`)."""
    a, b = flatten(dict(old)), flatten(dict(new))
    found = set()
    for path in a.keys() | b.keys():
        if a.get(path, _ABSENT) == b.get(path, _ABSENT):
            continue
        found.add(_whole_item(path, a if path not in b else b if path not in a else {}, a if path in b else b))
    return sorted(found)


def _whole_item(path: str, side: Mapping[str, Any], other: Mapping[str, Any]) -> str:
    """The shortest list-item prefix of `path` that `other` lacks entirely, else `path`."""
    if not side:
        return path
    end = path.find("]")
    while end != -1:
        prefix = path[: end + 1]
        if not any(k == prefix or k.startswith(prefix + ".") or k.startswith(prefix + "[") for k in other):
            return prefix
        end = path.find("]", end + 1)
    return path


_ABSENT = object()


def _masked(obj: Mapping[str, Any], path: str, value: Any) -> bool:
    secret_data = obj.get("kind") == "Secret" and path.split(".")[0] in ("data", "stringData")
    return secret_data or (isinstance(value, str) and any(p in value for p in PLACEHOLDERS))


def field_lines(old: Mapping[str, Any], new: Mapping[str, Any], paths: list[str]) -> list[str]:
    a, b = flatten(dict(old)), flatten(dict(new))
    lines = []
    for path in paths:
        before, after = _at(old, a, path), _at(new, b, path)
        if _masked(old, path, before) or _masked(new, path, after):
            lines.append(f"{path}: {MASK}")
        else:
            lines.append(f"{path}: {_value(before)} -> {_value(after)}")
    return lines


def _at(obj: Mapping[str, Any], flat: Mapping[str, Any], path: str) -> Any:
    """The value at a flattened path, or the whole list item a collapsed path names."""
    if path in flat:
        return flat[path]
    items = {k[len(path) + 1 :]: v for k, v in flat.items() if k.startswith(path + ".")}
    return items or _ABSENT


def _value(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value)


@dataclass
class ObjectChange:
    key: tuple[str, str, str]
    action: str  # added / removed / changed
    old: Optional[dict[str, Any]] = None
    new: Optional[dict[str, Any]] = None
    paths: list[str] = field(default_factory=list)


def compare_objects(
    old: list[dict[str, Any]], new: list[dict[str, Any]], unstable: frozenset[str] = frozenset()
) -> list[ObjectChange]:
    """Objects added, removed and changed between two renders (`unstable`: `<object>:<path>` that differ
    between two renders of the same values, e.g. certificates a template generates, are ignored)."""
    before, after = {_key(o): o for o in old}, {_key(o): o for o in new}
    changes = []
    for key in sorted(before.keys() | after.keys()):
        if key not in before:
            changes.append(ObjectChange(key, "added", new=after[key]))
        elif key not in after:
            changes.append(ObjectChange(key, "removed", old=before[key]))
        else:
            paths = [p for p in changed_paths(before[key], after[key]) if f"{_show(key)}:{p}" not in unstable]
            if paths:
                changes.append(ObjectChange(key, "changed", before[key], after[key], paths))
    return changes


def _unstable(objects: list[dict[str, Any]], again: list[dict[str, Any]]) -> frozenset[str]:
    return frozenset(f"{_show(c.key)}:{p}" for c in compare_objects(objects, again) for p in c.paths)


# --- what restarts ------------------------------------------------------------------------------------------


@dataclass
class ReleaseRollout:
    release: render.Release
    old_version: str
    changes: list[ObjectChange]
    restarts: list[str]  # plain words, one per workload
    danger: list[str]

    def lines(self) -> list[str]:
        counts = {a: sum(c.action == a for c in self.changes) for a in ("added", "removed", "changed")}
        version = (
            f"{self.old_version} -> {self.release.version}"
            if self.old_version != self.release.version
            else self.release.version
        )
        head = (
            f"{self.release.resource} (chart {self.release.chart} {version}, release "
            f"{self.release.namespace}/{self.release.name}): "
            f"{counts['added']} added, {counts['removed']} removed, {counts['changed']} changed"
        )
        lines = [head]
        lines += [f"  restarts: {r}" for r in self.restarts]
        for c in self.changes:
            sign = {"added": "+", "removed": "-", "changed": "~"}[c.action]
            lines.append(f"  {sign} {_show(c.key)}")
            if c.action == "changed":
                lines += [f"      {line}" for line in field_lines(c.old or {}, c.new or {}, c.paths)]
        return lines


def _template_changed(change: ObjectChange) -> bool:
    return any(p.startswith("spec.template.") for p in change.paths)


def _nodes(inventory: list[Node]) -> str:
    """`15 nodes (gpu-01 ... gpu-15)`; up to five are named."""
    if not inventory:
        return "no node"
    names = (
        ", ".join(n.name for n in inventory) if len(inventory) <= 5 else f"{inventory[0].name} ... {inventory[-1].name}"
    )
    return f"{len(inventory)} node{'s' if len(inventory) > 1 else ''} ({names})"


def _max_unavailable(ds: Mapping[str, Any]) -> str:
    update = (ds.get("spec") or {}).get("updateStrategy") or {}
    if update.get("type") == "OnDelete":
        return "only when each pod is deleted by hand (updateStrategy OnDelete)"
    unavailable = (update.get("rollingUpdate") or {}).get("maxUnavailable", 1)
    return f"rolling, {unavailable} node(s) at a time"


def restarts(
    release: render.Release, changes: list[ObjectChange], inventory: list[Node]
) -> tuple[list[str], list[str]]:
    """Plain words for what restarts, and the Danger lines among them."""
    said: list[str] = []
    danger: list[str] = []
    gpu_nodes = [n for n in inventory if n.labels.get("ml-platform.io/role") == "gpu"]
    for c in changes:
        if c.action != "changed" or c.new is None:
            continue
        kind, namespace, name = c.key
        if kind == "DaemonSet" and _template_changed(c):
            spec = render.pod_spec(c.new) or {}
            where = runs_on(spec, inventory)
            what = NODE_CRITICAL_CHARTS.get(release.chart)
            line = (
                f"{release.resource}: DaemonSet {namespace}/{name}{f' ({what})' if what else ''} restarts its pods "
                f"on {_nodes(where)}, {_max_unavailable(c.new)}"
            )
            said.append(line)
            if what and where:
                danger.append(line)
        elif kind in ("Deployment", "StatefulSet") and _template_changed(c):
            replicas = (c.new.get("spec") or {}).get("replicas", 1)
            said.append(f"{release.resource}: {kind} {namespace}/{name} rolls its {replicas} replica(s)")
        if kind == "StatefulSet" and any(p.startswith("spec.volumeClaimTemplates") for p in c.paths):
            line = (
                f"{release.resource}: StatefulSet {namespace}/{name} changes volumeClaimTemplates, which Kubernetes "
                "refuses to update (immutable): the Helm upgrade fails; delete the StatefulSet with "
                "--cascade=orphan first (the PVCs stay), then `pulumi up` recreates it"
            )
            said.append(line)
            danger.append(line)
        if kind == "ClusterPolicy":
            for component, effect in GPU_COMPONENTS.items():
                if any(p.startswith(f"spec.{component}.") for p in c.paths):
                    line = (
                        f"{release.resource}: ClusterPolicy {component} changes: the GPU Operator {effect} on every "
                        f"GPU node, {_nodes(gpu_nodes)}"
                    )
                    said.append(line)
                    danger.append(line)
        if kind == "Driver" and any(p.startswith("spec.nodePlugin") for p in c.paths):
            spec = {"tolerations": (c.new["spec"].get("nodePlugin") or {}).get("tolerations") or []}
            where = runs_on(spec, inventory)
            line = (
                f"{release.resource}: CSI Driver {name} changes its node plugin: the ceph-csi operator restarts the "
                f"node plugin DaemonSet (the CSI node plugin) on {_nodes(where)}"
            )
            said.append(line)
            danger.append(line)
    return said, danger


# --- a whole review ----------------------------------------------------------------------------------------


@dataclass
class Report:
    releases: list[ReleaseRollout]
    problems: list[str]  # releases that could not be rendered, with why
    operators: list[str] = field(default_factory=list)  # operator-managed DaemonSets of the program's own CRs
    uninstalls: list[str] = field(default_factory=list)  # releases removed whose CRDs are templates (crd_uninstall)

    @property
    def danger(self) -> list[str]:
        return [d for r in self.releases for d in r.danger] + self.operators + self.uninstalls

    def text(self) -> str:
        if not self.releases and not self.problems and not self.operators and not self.uninstalls:
            return ""
        lines = ["ROLLOUTS (Helm releases whose chart, version or values change, rendered by Helm and compared):"]
        for problem in self.problems:
            lines.append(f"  cannot compare: {problem}")
        lines += [f"  restarts: {line}" for line in self.operators]
        lines += [f"  deletes: {line}" for line in self.uninstalls]
        for r in self.releases:
            lines += [f"  {line}" for line in r.lines()]
        return "\n".join(lines)


def _changed(old: render.Release, new: render.Release) -> bool:
    def ident(r: render.Release) -> str:
        return json.dumps([r.chart, r.version, r.name, r.namespace, r.values], sort_keys=True)

    return ident(old) != ident(new)


def compare(base: Any, head: Any) -> Report:
    """The rollouts of every Helm release that changes between the `base` and `head` plans."""
    old = {r.resource: r for r in render.releases(base)}
    inventory = nodes(head)
    found, problems = [], []
    for new in render.releases(head):
        before = old.get(new.resource)
        if before is None or not _changed(before, new):
            continue
        try:
            old_objects = render.render_release(before, render.kube_version(base)).objects
            kube = render.kube_version(head)
            new_objects = render.render_release(new, kube).objects
            unstable = _unstable(new_objects, render.render_release(new, kube).objects)
        except (render.RenderError, render.ReferenceMissingError) as exc:
            problems.append(str(exc))
            continue
        changes = compare_objects(old_objects, new_objects, unstable)
        said, danger = restarts(new, changes, inventory)
        found.append(ReleaseRollout(new, before.version, changes, said, danger))
    removed, unrendered = crd_uninstall.uninstalls(base, head)
    return Report(found, problems + unrendered, nic_policy_rollouts(base, head, inventory), removed)


def nic_policy_rollouts(base: Any, head: Any, inventory: list[Node]) -> list[str]:
    """The Network Operator's DaemonSets that a changed NicClusterPolicy (a resource of the program, not of a
    chart) restarts, on the nodes its node affinity and tolerations select."""
    old = {r["name"]: r for r in render.resources(base) if r["type"] == NIC_POLICY_TYPE}
    lines = []
    for policy in (r for r in render.resources(head) if r["type"] == NIC_POLICY_TYPE):
        before = (old.get(policy["name"]) or {}).get("inputs", {}).get("spec")
        after = policy["inputs"].get("spec") or {}
        if before is None or before == after:
            continue
        placement_changed = any(before.get(k) != after.get(k) for k in ("nodeAffinity", "tolerations"))
        spec = {"affinity": {"nodeAffinity": after.get("nodeAffinity") or {}}, "tolerations": after.get("tolerations")}
        where = runs_on(spec, inventory)
        for component, effect in NIC_COMPONENTS.items():
            if component in after and (placement_changed or before.get(component) != after.get(component)):
                lines.append(
                    f"{policy['name']}: NicClusterPolicy {component} changes: the Network Operator {effect} on "
                    f"{_nodes(where)}"
                )
    return lines


# --- into the review's diff ----------------------------------------------------------------------------------

TEXT_DANGER = "DANGER: steps that destroy or disrupt:"
MD_DANGER = "**Danger: steps that destroy or disrupt**"


def _insert_danger(lines: list[str], header: str, items: list[str], before: tuple[str, ...]) -> list[str]:
    """`lines` with `items` at the end of the Danger section (made, before the first line starting with one of
    `before`, when the diff has none)."""
    if not items:
        return lines
    if header in lines:
        start = lines.index(header) + 1
        while start < len(lines) and not lines[start].strip():
            start += 1  # the blank line after a Markdown header
        end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
        return [*lines[:end], *items, *lines[end:]]
    at = next((i for i, line in enumerate(lines) if i and line.startswith(before)), None)
    block = [header, *items] if header == TEXT_DANGER else [header, "", *items]
    # The section goes after the blank line that ends the one before it (headline or errors).
    return [*lines, "", *block] if at is None else [*lines[:at], *block, "", *lines[at:]]


def merge_text(diff_text: str, report: Report) -> str:
    """The plain-text diff with the rollouts' Danger lines in its Danger section and the rollouts at the end."""
    if not report.text():
        return diff_text
    lines = _insert_danger(diff_text.splitlines(), TEXT_DANGER, [f"  ! {d}" for d in report.danger], ("By ",))
    return "\n".join(lines) + "\n\n" + report.text()


def merge_markdown(diff_markdown: str, report: Report) -> str:
    """The Markdown diff with the rollouts' Danger lines and a collapsible section of the rollouts."""
    if not report.text():
        return diff_markdown
    danger = [f"- :warning: {d}" for d in report.danger]
    lines = _insert_danger(diff_markdown.rstrip("\n").splitlines(), MD_DANGER, danger, ("| ", "<details>"))
    summary = f"Helm rollouts: {len(report.releases)} releases change"
    if report.problems:
        summary += f", {len(report.problems)} cannot be compared"
    body = report.text().splitlines()[1:]
    lines += ["", f"<details><summary>{summary}</summary>", "", "```diff", *body, "```", "</details>"]
    return "\n".join(lines) + "\n"
