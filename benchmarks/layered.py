"""The layered layout at fleet size: each stack of a `layout: layered` inventory previewed on its own (as the
orchestrator or a CI job runs it: one process per stack), its estimated state, the snapshot saves of its fresh
`up`, and the fleet's modeled bring-up with the node groups in parallel under one `--parallel` budget.

    python -m benchmarks.layered 1000     # the table for one size (make bench writes it into docs/benchmarks.md)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from benchmarks import makespan, state
from benchmarks.inventory import ROOT, inventory, stack_file
from stacks.layered_plan import evaluate_layered


@dataclass(frozen=True)
class StackFigures:
    name: str
    layer: str
    resources: int
    cpu_seconds: float
    state_bytes: int
    snapshot_bytes: int
    """What a self-managed backend writes over this stack's fresh `up` (the whole snapshot around each step)."""
    makespan: float
    """Modeled seconds of its fresh `up` at its share of the `--parallel` budget."""


@dataclass(frozen=True)
class LayeredResult:
    label: str
    nodes: int
    parallel: int
    stacks: list[StackFigures]

    def largest(self) -> StackFigures:
        return max(self.stacks, key=lambda s: s.resources)

    def bring_up_seconds(self) -> float:
        """Cluster, then the node groups side by side (the longest counts), then the platform."""
        by_layer: dict[str, list[float]] = {}
        for s in self.stacks:
            by_layer.setdefault(s.layer, []).append(s.makespan)
        return sum(max(by_layer.get(layer, [0.0])) for layer in ("cluster", "nodes", "platform"))


def stack_cpu(config: Path, stack: str) -> float:
    """CPU seconds of `python -m stacks.plan ENV --config CONFIG --only STACK` (user + system, from wait4)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "stacks.plan", "bench", "--config", str(config), "--only", stack],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"offline preview of {stack} ({config}) failed")
    return usage.ru_utime + usage.ru_stime


def share(parallel: int, groups: int) -> int:
    """Each node group's part of one `--parallel` budget when all groups run at once (the orchestrator's split)."""
    return max(1, parallel // max(1, groups))


def measure_layered(label: str, raw: dict[str, Any], workdir: Path, parallel: int) -> LayeredResult:
    config = workdir / f"Pulumi.bench-{label}-layered.yaml"
    config.write_text(stack_file({**raw, "layout": "layered"}))
    plans = evaluate_layered("bench", config)
    groups = sum(1 for name in plans if "-nodes-" in name)
    figures = []
    for name, plan in plans.items():
        doc: dict[str, Any] = {"resources": plan.resources}
        layer = "nodes" if "-nodes-" in name else name.rsplit("-", 1)[-1]
        budget = share(parallel, groups) if layer == "nodes" else parallel
        res, deps = makespan.graph(doc)
        schedule = makespan.simulate(res, deps, budget)
        sizes = state.sizes(doc, plan.revealed)
        figures.append(
            StackFigures(
                name=name,
                layer=layer,
                resources=len(plan.resources),
                cpu_seconds=stack_cpu(config, name),
                state_bytes=sum(sizes.values()),
                snapshot_bytes=state.snapshot_writes(schedule.order, sizes),
                makespan=schedule.makespan,
            )
        )
    return LayeredResult(label, len(raw["nodes"]), parallel, figures)


def report(results: list[LayeredResult]) -> list[str]:
    """Markdown lines: per size, the stacks (node groups summed up as a range), and the fleet bring-up."""
    lines = [
        "## Layered layout (`layout: layered`)",
        "",
        "The same inventories as layers of stacks (docs/cluster.md, Running a fleet): `bench-cluster`, one",
        "`bench-nodes-<group>` per node group (64 nodes, whole racks, `benchmarks/inventory.py`), `bench-platform`.",
        "Each stack previewed in a process of its own, as the orchestrator and the CI matrix run them; its state",
        "and the snapshot saves of its fresh `up` estimated as above; the bring-up modeled with the node groups",
        "side by side, each with an equal share of the `--parallel` budget.",
        "",
        "| inventory | stack | resources | preview CPU s | state MB | snapshot saves GB | modeled up min |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        groups = [s for s in r.stacks if s.layer == "nodes"]
        rows = [s for s in r.stacks if s.layer != "nodes"]
        for s in rows[:1]:
            lines.append(_row(r.label, s.name, [s]))
        if groups:
            lines.append(_row(r.label, f"{len(groups)} node groups (each)", groups))
        for s in rows[1:]:
            lines.append(_row(r.label, s.name, [s]))
    lines += [
        "",
        "| inventory | stacks | largest stack | its resources | slowest preview CPU s | largest state MB "
        "| fleet bring-up min (`--parallel`) |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        big = r.largest()
        lines.append(
            f"| {r.label} | {len(r.stacks)} | {big.name} | {big.resources} | "
            f"{max(s.cpu_seconds for s in r.stacks):.1f} | {max(s.state_bytes for s in r.stacks) / 1e6:.1f} | "
            f"{r.bring_up_seconds() / 60:.1f} ({r.parallel}) |"
        )
    return lines


def _row(label: str, name: str, stacks: list[StackFigures]) -> str:
    def span(values: list[float], fmt: str) -> str:
        low, high = min(values), max(values)
        return format(low, fmt) if format(low, fmt) == format(high, fmt) else f"{low:{fmt}}-{high:{fmt}}"

    return (
        f"| {label} | {name} | {span([s.resources for s in stacks], '.0f')} "
        f"| {span([s.cpu_seconds for s in stacks], '.1f')} | {span([s.state_bytes / 1e6 for s in stacks], '.1f')} "
        f"| {span([s.snapshot_bytes / 1e9 for s in stacks], '.2f')} "
        f"| {span([s.makespan / 60 for s in stacks], '.1f')} |"
    )


def main(argv: Optional[list[str]] = None) -> int:
    from benchmarks.run import recommended_parallel

    parser = argparse.ArgumentParser(prog="python -m benchmarks.layered", description=__doc__.split("\n\n")[0])
    parser.add_argument("nodes", type=int, nargs="+")
    args = parser.parse_args(argv)
    started = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure_layered(str(n), inventory(n), Path(tmp), recommended_parallel(n)) for n in args.nodes]
    print("\n".join(report(results)))
    print(f"\n(measured in {time.process_time() - started:.0f} CPU s of this process)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
