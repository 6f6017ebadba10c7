"""Offline preview: what `pulumi up` would do, without the CLI, a backend, credentials or network.

    python -m stacks.plan STACK [--config FILE] [--out FILE]
    python -m stacks.plan --diff OLD.json NEW.json

The first form evaluates the real program for STACK on Pulumi's mock engine (`stacks.engine`) from
`Pulumi.<STACK>.yaml` (or FILE, in the same format), prints a summary and optionally writes the
plan as JSON. The second compares two such plans: added, removed and changed resources, with the
input paths that changed. Invalid settings exit with status 2 and write no JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from settings import SettingsError
from stacks.engine import SECRET, Plan, evaluate_stack


def summary(plan: Plan) -> str:
    resources = plan.resources
    by_urn = plan.by_urn()
    components = {urn: r for urn, r in by_urn.items() if r["type"].startswith("mlplatform:")}
    per_component: Counter[str] = Counter()
    for r in resources:
        owner = _owner(r, by_urn, components)
        if owner is not None:
            per_component[owner] += 1
    lines = [f"Offline preview of {plan.project}/{plan.stack}: {len(resources)} resources to create", ""]
    lines.append("Per component (resources inside it, nested ones included):")
    for urn, comp in sorted(components.items()):
        lines.append(f"  {per_component.get(urn, 0):5d}  {comp['name']} ({comp['type']})")
    lines += ["", "Per type:"]
    for type_, count in sorted(Counter(r["type"] for r in resources).items()):
        lines.append(f"  {count:5d}  {type_}")
    lines += ["", "Outputs:"]
    for name, value in plan.outputs.items():
        shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        lines.append(f"  {name}: {shown}")
    if SECRET in plan.outputs.values():
        lines.append("  ([secret] values are Pulumi secrets; the real stack shows them with --show-secrets)")
    return "\n".join(lines)


def _owner(resource: dict, by_urn: dict[str, dict], components: dict[str, dict]) -> Optional[str]:
    """The URN of the top-level ml-platform component that contains `resource`, if any."""
    owner = None
    urn = resource["parent"]
    while urn is not None and urn in by_urn:
        if urn in components:
            owner = urn
        urn = by_urn[urn]["parent"]
    return owner


_ABSENT = object()


def diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Added, removed and changed resources between two plans, with the changed input paths."""
    before = {r["urn"]: r for r in old["resources"]}
    after = {r["urn"]: r for r in new["resources"]}
    changed = {}
    for urn in sorted(before.keys() & after.keys()):
        paths = sorted(_changed_paths(before[urn]["inputs"], after[urn]["inputs"], "inputs"))
        for key in ("parent", "provider", "dependencies", "custom"):
            if before[urn][key] != after[urn][key]:
                paths.append(key)
        if paths:
            changed[urn] = paths
    outputs = {
        name: "added" if name not in old["outputs"] else "removed" if name not in new["outputs"] else "changed"
        for name in sorted(old["outputs"].keys() | new["outputs"].keys())
        if old["outputs"].get(name, _ABSENT) != new["outputs"].get(name, _ABSENT)
    }
    return {
        "added": sorted(after.keys() - before.keys()),
        "removed": sorted(before.keys() - after.keys()),
        "changed": changed,
        "outputs": outputs,
    }


def _changed_paths(a: Any, b: Any, path: str) -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            yield from _changed_paths(a.get(key), b.get(key), f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _changed_paths(x, y, f"{path}[{i}]")
    elif a != b:
        yield path


def render_diff(result: dict[str, Any]) -> str:
    lines = [
        f"{len(result['added'])} to add, {len(result['removed'])} to remove, "
        f"{len(result['changed'])} to change, {len(result['outputs'])} outputs changed"
    ]
    for urn in result["added"]:
        lines.append(f"+ {urn}")
    for urn in result["removed"]:
        lines.append(f"- {urn}")
    for urn, paths in result["changed"].items():
        lines.append(f"~ {urn}")
        lines += [f"    {p}" for p in paths]
    signs = {"added": "+", "removed": "-", "changed": "~"}
    for name, change in result["outputs"].items():
        lines.append(f"{signs[change]} output {name}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", nargs="?", help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--config", type=Path, help="a stack config file to use instead of Pulumi.<stack>.yaml")
    parser.add_argument("--out", type=Path, help="write the plan as JSON to this file")
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("OLD", "NEW"), help="compare two plan JSON files")
    args = parser.parse_args(argv)

    if args.diff:
        old, new = (json.loads(p.read_text()) for p in args.diff)
        print(render_diff(diff(old, new)))
        return 0
    if not args.stack:
        parser.error("give a STACK (e.g. prod) or --diff OLD NEW")
    try:
        plan = evaluate_stack(args.stack, args.config)
    except SettingsError as exc:
        print(f"{args.stack}: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"{args.stack}: no such stack config: {exc.filename}", file=sys.stderr)
        return 2
    print(summary(plan))
    if args.out:
        args.out.write_text(plan.to_json())
        print(f"\nPlan written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
