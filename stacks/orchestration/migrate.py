"""From one deployed stack to the layered stacks: the `pulumi state move` commands, and their check.

`pulumi state move --source SRC --dest DST URN...` (Pulumi CLI 3.226 or later: `MINIMUM_CLI`) moves each named
resource and all its descendants (children, transitively) from SRC's state to DST's, rewriting the stack part of
their URNs. It refuses to move a provider: it copies the providers the moved resources use, which also stay in
SRC. It never moves the stack's root. A moved resource whose parent stays behind is parented to DST's root in the
state (pkg/cmd/pulumi/state/state_move.go in pulumi/pulumi).

Which stack holds a resource comes from the layered stacks' own plans (`stacks.layers.assign`): each custom
resource is in exactly one; a component is in every stack that creates children under it. A component moves to
the first stack (in run order) that holds it; the other stacks create their own copy at their first `up`
(a component has no state outside Pulumi's). Because a move takes every descendant along, the commands run
deepest first: a resource whose parent goes to another stack leaves before its parent does.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

ROOT_TYPE = "pulumi:pulumi:Stack"
# Read by each stack that references another; it is never moved (it exists only in the layered stacks).
REFERENCE_TYPE = "pulumi:pulumi:StackReference"
PROVIDER_PREFIX = "pulumi:providers:"
# `pulumi state move` exists since v3.125.0; re-parenting was fixed in v3.224.0 and copied providers in v3.226.0
# (pulumi/pulumi's CHANGELOG): the floor for this migration.
MINIMUM_CLI = "3.226.0"


class MigrationError(ValueError):
    """The plans and the state do not allow a complete move: every problem, one per line."""


def strip(urn: str) -> str:
    """`urn:pulumi:STACK::project::type::name` -> `project::type::name`."""
    return urn.split("::", 1)[1]


def engine_form(key: str) -> str:
    """A stripped URN as the Pulumi engine writes it. The engine leaves the root stack's type out of a top-level
    resource's type chain (`urn.New` in pulumi/pulumi's sdk/go/common/resource/urn/urn.go); the SDK's mock
    engine, which the offline plans come from, keeps it (`pulumi:pulumi:Stack$mlplatform:...`)."""
    return key.replace(f"::{ROOT_TYPE}$", "::", 1)


def type_of(key: str) -> str:
    return key.split("::")[-2].rsplit("$", 1)[-1]


def is_provider(key: str) -> bool:
    return type_of(key).startswith(PROVIDER_PREFIX)


@dataclass
class Move:
    dest: str
    urns: list[str]  # full URNs in the source stack


@dataclass
class Migration:
    env: str
    moves: list[Move]
    owner: dict[str, str]  # stripped URN -> the stack it moves to (components: their first stack)
    parents: dict[str, Optional[str]]  # stripped URN -> its parent's (None at the top)
    copies: dict[str, list[str]] = field(default_factory=dict)  # component -> stacks that create their own copy
    created: dict[str, list[str]] = field(default_factory=dict)  # stack -> what it holds that is not deployed
    order: list[str] = field(default_factory=list)  # the stacks in run order

    def tops(self, stack: str) -> list[str]:
        """The resources of `stack` whose parent another stack holds (or none): what a move names."""
        return sorted(k for k, s in self.owner.items() if s == stack and self.owner.get(self.parents.get(k) or "") != s)

    def depth(self, key: str) -> int:
        d = 0
        while self.parents.get(key) and d <= len(self.parents):
            key = self.parents[key]  # type: ignore[assignment]
            d += 1
        return d


def plan_migration(
    env: str,
    held: Mapping[str, Sequence[str]],
    resources: Mapping[str, Mapping[str, Any]],
    order: Sequence[str],
    deployed: Optional[set[str]] = None,
) -> Migration:
    """The moves of `env`'s single-stack resources into the stacks of `order` (run order).

    `held`: stack -> stripped URNs it holds (`stacks.layers.assign`); `resources`: stripped URN -> its plan
    entry (`parent`: the parent's stripped URN or None; `custom`: False for a component); `deployed`: the
    stripped URNs of the single stack's state (None: all). What a stack holds that is not deployed is not moved:
    the stack creates it at its first `up` (`created`), e.g. what only the layered layout has."""
    owner: dict[str, str] = {}
    created: dict[str, list[str]] = {}
    copies: dict[str, list[str]] = {}
    problems = []
    unknown = sorted(set(held) - set(order))
    if unknown:
        problems.append(f"plans for stacks not in the environment: {', '.join(unknown)}")
    for stack in order:
        for key in held.get(stack, ()):
            if is_provider(key) or type_of(key) in (ROOT_TYPE, REFERENCE_TYPE):
                continue
            if deployed is not None and key not in deployed:
                if resources.get(key, {}).get("custom", True):
                    created.setdefault(stack, []).append(key)
                continue
            if key not in owner:
                owner[key] = stack
            elif resources.get(key, {}).get("custom", True):
                problems.append(f"{key}: a custom resource held by both {owner[key]} and {stack}")
            else:
                copies.setdefault(key, []).append(stack)
    if problems:
        raise MigrationError("\n".join(problems))
    parents = {key: entry.get("parent") for key, entry in resources.items()}
    migration = Migration(env, [], owner, parents, copies, created, list(order))
    roots = [k for s in order for k in migration.tops(s)]
    rank = {stack: i for i, stack in enumerate(order)}
    for level in sorted({migration.depth(k) for k in roots}, reverse=True):
        at = [k for k in roots if migration.depth(k) == level]
        for stack in sorted({owner[k] for k in at}, key=rank.__getitem__):
            keys = sorted(k for k in at if owner[k] == stack)
            migration.moves.append(Move(stack, [f"urn:pulumi:{env}::{k}" for k in keys]))
    return migration


def simulate(state: Mapping[str, Any], migration: Migration) -> tuple[dict[str, list[str]], list[dict[str, Any]]]:
    """`pulumi state move`'s effect on a `pulumi stack export` of the single stack: stack -> the URNs it receives
    (stripped), and the resources left in the source."""
    resources = [dict(r) for r in state["deployment"]["resources"]]
    received: dict[str, list[str]] = {}
    for move in migration.moves:
        present = {r["urn"] for r in resources}
        # The CLI warns of a URN it does not find and moves the others; with none found it stops.
        if not present & set(move.urns):
            raise MigrationError(f"no resources found to move to {move.dest}: {', '.join(move.urns[:3])}")
        taken = set(move.urns) & present
        for r in resources:  # the export lists parents before children
            if r.get("parent") in taken and r["type"] != ROOT_TYPE and not r["type"].startswith(PROVIDER_PREFIX):
                taken.add(r["urn"])
        received.setdefault(move.dest, []).extend(strip(r["urn"]) for r in resources if r["urn"] in taken)
        resources = [r for r in resources if r["urn"] not in taken]
    return received, resources


def check(state: Mapping[str, Any], migration: Migration) -> dict[str, list[str]]:
    """Every resource of the state moved exactly once, to the stack that holds it; only the stack's root and
    providers (copied to the stacks that use them) stay. Returns stack -> URNs moved there."""
    received, left = simulate(state, migration)
    problems = []
    counts: dict[str, int] = {}
    for stack, keys in received.items():
        for key in keys:
            counts[key] = counts.get(key, 0) + 1
            if migration.owner.get(key) != stack:
                problems.append(f"{key}: moved to {stack}, but {migration.owner.get(key, 'no stack')} holds it")
    problems += [f"{key}: moved {n} times" for key, n in counts.items() if n > 1]
    for r in left:
        if r["type"] != ROOT_TYPE and not r["type"].startswith(PROVIDER_PREFIX):
            problems.append(f"{strip(r['urn'])}: left behind in {migration.env} (no layered stack holds it)")
    in_state = {strip(r["urn"]) for r in state["deployment"]["resources"]}
    problems += [f"{key}: not in the state of {migration.env}" for key in migration.owner.keys() - in_state]
    if problems:
        raise MigrationError("\n".join(sorted(problems)))
    return received


def stays(state: Mapping[str, Any]) -> list[str]:
    """What stays in the environment's own stack: its root and its providers (copied where used)."""
    return [
        r["urn"] for r in state["deployment"]["resources"] if r["type"] == ROOT_TYPE or is_provider(strip(r["urn"]))
    ]


def script(migration: Migration, backup: str, back: bool = False) -> str:
    """The commands, as a bash script (set -euo pipefail), that migrate `env` (or, `back`, move it back)."""
    env = migration.env
    q = shlex.quote
    lines = [
        "#!/usr/bin/env bash",
        f"# Generated by `python -m stacks.orchestrate migrate {env}`: "
        + ("the layered stacks back into the single stack." if back else "the single stack into the layered stacks."),
        "set -euo pipefail",
        "",
        f"# Pulumi CLI {MINIMUM_CLI} or later.",
        'have="$(pulumi version)"; have="${have#v}"',
        f'if [ "$(printf "%s\\n" {MINIMUM_CLI} "$have" | sort -V | head -n1)" != {MINIMUM_CLI} ]; then',
        f'  echo "pulumi $have: this migration needs {MINIMUM_CLI} or later" >&2; exit 1',
        "fi",
        "",
    ]
    if not back:
        lines += [
            "# 1. The backup: the whole state of the single stack (secrets stay encrypted). Keep it until the",
            "#    layered stacks have previewed with no changes and run one `up`.",
            f"if [ -e {q(backup)} ]; then",
            f"  echo {q(backup + ' exists: this script ran before; run its remaining moves by hand')} >&2; exit 1",
            "fi",
            f"pulumi stack export --stack {q(env)} --file {q(backup)}",
            "",
            "# 2. The layered stacks, created with the environment's secrets provider and config.",
            f"python -m stacks.orchestrate init {q(env)}",
            "",
            "# 3. The moves, deepest resources first (a move takes a resource's children along).",
        ]
        for move in migration.moves:
            lines.append(f"pulumi state move --yes --source {q(env)} --dest {q(move.dest)} \\")
            lines += [f"  {q(u)} \\" for u in move.urns[:-1]] + [f"  {q(move.urns[-1])}"]
        creates = f"{env}-layered-creates.txt"
        cluster = f"{env}-cluster"
        expected = [f"urn:pulumi:{stack}::{key}" for stack, keys in migration.created.items() for key in sorted(keys)]
        check = f"--check --expect-create {q(creates)}" if expected else "--check"
        if expected:
            lines += [
                "",
                "# What the layered stacks hold that the single stack never had: their first `up` creates it.",
                f"cat > {q(creates)} <<'EOF'",
                *expected,
                "EOF",
            ]
        lines += [
            "",
            "# 4. The cluster stack first: no change to a deployed resource, then one `up` that records its outputs",
            "#    (moves carry no stack outputs; the node groups join with them) and creates what only it has.",
            f"python -m stacks.orchestrate preview {q(env)} --stack {q(cluster)} {check}",
            f"python -m stacks.orchestrate up {q(env)} --stack {q(cluster)}",
            "",
            "# 5. Every layered stack must preview with no change to a deployed resource.",
            f"python -m stacks.orchestrate preview {q(env)} {check}",
        ]
    else:
        lines += [
            "# Back: every resource of each layered stack into the single stack (platform first). Before: no `up`",
            f"# runs; `layout: single` is set in Pulumi.{env}.yaml. Providers are copied; what stays in a layered",
            "# stack (its root, providers, the cluster stack reference, its component copies) goes with `stack rm`.",
        ]
        for stack in reversed(migration.order):
            tops = migration.tops(stack)
            if not tops:
                continue
            lines.append(f"pulumi state move --yes --source {q(stack)} --dest {q(env)} \\")
            urns = [f"urn:pulumi:{stack}::{k}" for k in tops]
            lines += [f"  {q(u)} \\" for u in urns[:-1]] + [f"  {q(urns[-1])}"]
        lines += [
            "",
            "# No change expected but the deletion of what only the layered layout has (the node groups' Node-patching",
            "# credential in the cluster) and the stack references.",
            f"pulumi preview --stack {q(env)} --diff",
            "",
        ]
        lines += [f"# Once that preview shows no change: pulumi stack rm --force --yes {q(s)}" for s in migration.order]
    return "\n".join(lines) + "\n"
