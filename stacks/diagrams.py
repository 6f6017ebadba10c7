"""docs/architecture.md: the components and the bring-up order as Mermaid diagrams, generated from the
offline plan of the prod stack (what the engine would receive), so they cannot drift from the code.

`python -m stacks.diagrams` (part of `make docs`) writes it; tests/test_diagrams.py fails when it is stale.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from stacks.engine import Plan, evaluate_stack

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "architecture.md"
STACK = "prod"


def _short(type_: str) -> str:
    """`kubernetes:helm.sh/v3:Release` -> `Release`."""
    return type_.rsplit(":", 1)[-1]


def _kind(resource: dict[str, Any]) -> str:
    """What a resource is, for the diagrams: a host step by its name without the host (`cpu-13-rke2` ->
    `SSH rke2`), anything else by its type (`Release`)."""
    if resource["type"] == "command:remote:Command":
        return "SSH " + re.sub(r"^[a-z]+-\d+-", "", resource["name"])
    return _short(resource["type"])


def _component_of(resource: dict[str, Any], by_urn: dict[str, dict[str, Any]]) -> str:
    """The name of the top-level component a resource belongs to (`stack` for resources of the stack itself)."""
    while resource["parent"] and not by_urn.get(resource["parent"], {}).get("type", "").startswith("pulumi:pulumi:"):
        parent = by_urn.get(resource["parent"])
        if parent is None:
            break
        resource = parent
    return resource["name"] if not resource["custom"] else "stack"


def _waits_for(resource: dict[str, Any], by_urn: dict[str, dict[str, Any]]) -> list[str]:
    """What the engine waits for before it creates `resource`: its dependencies and its provider."""
    waits = [urn for urn in resource["dependencies"] if urn in by_urn]
    if resource.get("provider"):
        provider = resource["provider"].rsplit("::", 1)[0]
        if provider in by_urn:
            waits.append(provider)
    return waits


def bring_up_steps(plan: Plan) -> list[Counter[tuple[str, str]]]:
    """The resources of a fresh `up` by sequential step: a resource is in step n when the longest chain
    of resources it waits for is n - 1 long. Per step, (component, resource kind) -> count."""
    by_urn = plan.by_urn()
    step: dict[str, int] = {}

    def step_of(urn: str) -> int:
        if urn not in step:
            step[urn] = 0  # a cycle cannot happen in a Pulumi program; this only guards the recursion
            waits = [step_of(u) for u in _waits_for(by_urn[urn], by_urn) if by_urn[u]["custom"]]
            step[urn] = 1 + max(waits, default=0)
        return step[urn]

    steps: dict[int, Counter[tuple[str, str]]] = defaultdict(Counter)
    for resource in plan.resources:
        if resource["custom"]:
            steps[step_of(resource["urn"])][(_component_of(resource, by_urn), _kind(resource))] += 1
    return [steps[n] for n in sorted(steps)]


def component_edges(plan: Plan) -> tuple[dict[str, dict[str, Any]], set[tuple[str, str]]]:
    """The top-level components (name -> resource) and which waits for which (waiter, waited-for)."""
    by_urn = plan.by_urn()
    components = {r["name"]: r for r in plan.resources if not r["custom"] and r["type"].startswith("mlplatform:")}
    edges = set()
    for resource in plan.resources:
        if not resource["custom"]:
            continue
        waiter = _component_of(resource, by_urn)
        for urn in _waits_for(resource, by_urn):
            waited = _component_of(by_urn[urn], by_urn)
            if waiter != waited and waiter in components and waited in components:
                edges.add((waiter, waited))
    return components, edges


def architecture(plan: Plan) -> str:
    components, edges = component_edges(plan)
    by_urn = plan.by_urn()
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    for resource in plan.resources:
        if resource["custom"]:
            kinds[_component_of(resource, by_urn)][_short(resource["type"])] += 1
    lines = ["```mermaid", "flowchart LR"]
    for name, component in sorted(components.items()):
        count = sum(kinds[name].values())
        detail = f"{kinds[name]['Command']} host steps, {kinds[name]['Release']} Helm releases, {count} resources"
        lines.append(f'  {name}["{_short(component["type"])}<br/>{detail}"]')
    lines += [f"  {waited} --> {waiter}" for waiter, waited in sorted(edges)]
    return "\n".join(lines + ["```"])


_COMPONENT_TYPE = re.compile(r'super\(\).__init__\(\s*"(mlplatform:[^"]+)"')


def component_homes() -> dict[str, str]:
    """Component type -> the file under `components/` that creates it (where its `super().__init__` names it)."""
    homes = {}
    for path in sorted((ROOT / "components").rglob("*.py")):
        for type_ in _COMPONENT_TYPE.findall(path.read_text()):
            homes[type_] = path.relative_to(ROOT).as_posix()
    return homes


def where_things_live(plan: Plan) -> str:
    """A row per component of the plan: its type, the file that creates it, and the folder beside it."""
    homes = component_homes()
    types = sorted({r["type"] for r in plan.resources if not r["custom"] and r["type"].startswith("mlplatform:")})
    rows = ["| component | created in | its package (scripts, templates, vendored files beside it) |", "|---|---|---|"]
    for type_ in types:
        home = homes[type_]
        folder = Path(home).parent.as_posix()
        package = f"`{folder}/`" if folder != "components" else "(a single module)"
        rows.append(f"| `{_short(type_)}` | `{home}` | {package} |")
    return "\n".join(rows)


def bring_up(plan: Plan) -> str:
    lines = ["```mermaid", "flowchart TD"]
    steps = bring_up_steps(plan)
    for number, content in enumerate(steps, 1):
        by_component: dict[str, list[str]] = defaultdict(list)
        for (component, kind), count in sorted(content.items()):
            by_component[component].append(f"{count} {kind}")
        parts = "<br/>".join(f"{component}: {', '.join(kinds)}" for component, kinds in sorted(by_component.items()))
        lines.append(f'  step{number}["<b>step {number}</b><br/>{parts}"]')
    lines += [f"  step{n} --> step{n + 1}" for n in range(1, len(steps))]
    return "\n".join(lines + ["```"])


def page(plan: Plan) -> str:
    steps = len(bring_up_steps(plan))
    resources = sum(1 for r in plan.resources if r["custom"])
    return f"""# Architecture and bring-up order (generated)

Generated by `make docs` (`stacks/diagrams.py`) from the offline plan of the `{plan.stack}` stack, the
resources and dependencies the engine would receive; `tests/test_diagrams.py` fails when this page is stale.
The design and its rules: [design](design.md).

## Components and what waits for what

An arrow `A --> B`: some resource of B waits for one of A (a dependency, or A's Kubernetes provider).
Each component is one `ComponentResource` in `components/`; `stack` resources belong to the stack itself.

{architecture(plan)}

## Where each component lives

A component with more than one module or files of its own (host scripts in `scripts/`, container scripts,
templates, vendored manifests) is a package; the SSH runner and the shell helpers every host script gets
are in `components/hosts/`.

{where_things_live(plan)}

## Bring-up order

A fresh `pulumi up` of `{plan.stack}` ({resources} resources) in {steps} sequential steps: a resource is
in step n when the longest chain of resources it waits for is n - 1 long. Everything in one step can run
at once, up to `--parallel`; the number of steps does not grow with the number of nodes.

{bring_up(plan)}
"""


def main() -> int:
    content = page(evaluate_stack(STACK))
    if TARGET.exists() and TARGET.read_text() == content:
        print(f"unchanged {TARGET.relative_to(ROOT)}")
    else:
        TARGET.write_text(content)
        print(f"wrote     {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
