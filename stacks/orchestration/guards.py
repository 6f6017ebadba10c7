"""What the orchestrator refuses before it touches a stack, each a way to break a running environment:

- `unmigrated`: the environment's own stack `<env>` still holds resources (it ran `layout: single`). Layered
  stacks created beside it would generate new tokens and join the running servers and agents again: move the
  state first (`python -m stacks.orchestrate migrate`, docs/runbook.md).
- `moved_nodes`: a node the settings put in another group than the stack that holds it. Its old group would
  drain, delete and uninstall it while its new group joins it, both at once: move its resources between the two
  stacks first (the commands are printed, from the old stack's own state).
- `retired`: node-group stacks of this environment whose group the settings no longer declare. A stack counts only
  when its own outputs say it is this environment's group (`environment`, `group`): a stack name alone can belong to
  another environment (`prod-nodes-eu-cluster` is the cluster stack of `prod-nodes-eu`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from stacks.layers import StackSpec


def unmigrated(environment: Any) -> Optional[str]:
    """Why the layered stacks must not run yet, or None."""
    count = environment.resources_in_own_stack()
    if count == 0:
        return None
    env = environment.env
    return (
        f"stack {env} still holds {count} resources of the single layout: layered stacks beside it would generate new "
        f"tokens and join the running hosts again. Move its state first: python -m stacks.orchestrate migrate {env} "
        "--state EXPORT.json (docs/runbook.md, from one stack to layered stacks)"
    )


def moved_nodes(
    environment: Any, specs: Sequence[StackSpec], members: Mapping[str, Sequence[str]], existing: Sequence[str]
) -> list[str]:
    """One line per node whose group changed: the `pulumi state move` that takes its resources along."""
    declared = {node: group for group, nodes in members.items() for node in nodes}
    names = set(declared)
    lines = []
    for spec in specs:
        if spec.layer != "nodes" or spec.name not in existing:
            continue
        outputs = environment.outputs_of(spec.name)
        held = outputs.get("nodes") or []
        names |= set(held)
        for node in held:
            target = declared.get(node)
            if target is None or target == spec.group:
                continue
            urns = [u for u in environment.urns_of(spec.name) if owner(u.rsplit("::", 1)[-1], names) == node]
            dest = f"{environment.env}-nodes-{target}"
            quoted = " ".join(f"'{u}'" for u in urns)
            move = f"pulumi state move --source {spec.name} --dest {dest} {quoted}"
            lines.append(f"{node} moves from {spec.name} to {dest}: {move}")
    return lines


def owner(resource_name: str, nodes: set[str]) -> Optional[str]:
    """The node a resource is named after (`<node>-<step>`): the longest node name it starts with (`gpu-1-b-rke2` is
    gpu-1-b's, not gpu-1's)."""
    found = [n for n in nodes if resource_name.startswith(f"{n}-")]
    return max(found, key=len) if found else None


def retired(environment: Any, specs: Sequence[StackSpec], existing: Sequence[str]) -> list[StackSpec]:
    """This environment's node-group stacks (by their own outputs) whose group the settings no longer declare."""
    env = environment.env
    prefix = f"{env}-nodes-"
    known = {s.name for s in specs}
    found = []
    for name in existing:
        if not name.startswith(prefix) or name in known:
            continue
        outputs = environment.outputs_of(name)
        if outputs.get("environment") == env and outputs.get("group") == name.removeprefix(prefix):
            found.append(StackSpec(name, "nodes", name.removeprefix(prefix)))
    return found
