"""The benchmark report's sections on what the engine itself costs, and the before/after of host-script
delivery (the figures of `benchmarks.run.Result.engine`, from benchmarks/state.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MB = 1_000_000

# The program before host scripts went to each host once in a bundle (commit 7aae230: every host step carried its
# program inline in `create` and again in `update`), measured with this benchmark's own code (benchmarks/state.py
# and benchmarks/makespan.py at the recommended --parallel; the revealed inputs of that commit's program for the
# secrets' sizes) on 2026-11-27 between 16:10 and 16:50 UTC, on this 2-CPU machine shared with other work at a load
# average of 9-11. `cpu`: user+system seconds of that commit's `python -m stacks.plan` on the same inventories in
# the same hour (the load inflates CPU seconds too: compare with the after column of the same run only roughly).
BEFORE: dict[str, dict[str, Any]] = {
    "50": {
        "resources": 580,
        "plan_bytes": 6_521_281,
        "state_bytes": 13_769_145,
        "median_step": 20461,
        "largest_step": 38418,
        "snapshot_bytes": 10_338_298_271,
        "makespan": 1665.0,
        "cpu": 5.4,
    },
    "200": {
        "resources": 1641,
        "plan_bytes": 22_991_709,
        "state_bytes": 48_663_027,
        "median_step": 20461,
        "largest_step": 38422,
        "snapshot_bytes": 102_180_410_801,
        "makespan": 1820.0,
        "cpu": 11.6,
    },
    "1000": {
        "resources": 7300,
        "plan_bytes": 110_880_857,
        "state_bytes": 234_839_912,
        "median_step": 20461,
        "largest_step": 38422,
        "snapshot_bytes": 2_220_128_702_716,
        "makespan": 3300.0,
        "cpu": 43.0,
    },
}


def _mb(value: float) -> str:
    return f"{value / MB:.1f}"


def _gb(value: float) -> str:
    return f"{value / 1e9:.1f}"


def _min(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def engine_section(results: list, recommended: Callable[[int], int]) -> list[str]:
    lines = [
        "## What the engine itself costs: state and snapshots",
        "",
        "`benchmarks/state.py`. The state estimate is the plan's inputs twice (inputs and outputs; every provider",
        "here stores its inputs again as outputs) plus each resource's own fields, secrets at the length of their",
        "ciphertext, a real ed25519 SSH key counted where the offline preview has a placeholder. A fresh `up` with a",
        "self-managed backend (`pulumi login --local`, an S3 bucket) saves the whole checkpoint when each step",
        "begins and again when it ends, one save at a time (pulumi/pulumi `pkg/backend/snapshot.go`: `doCreate`",
        "persists before the step, `End` after it, through one service loop); the bytes below sum those saves in",
        "the order the bring-up model finishes the resources. Seconds: those bytes at the rate this machine",
        "serialises and writes the plan's own state shape (JSON indented by four spaces, as the engine writes it:",
        "pulumi/pulumi `sdk/go/common/encoding/marshal.go`; measured in Python each run, the engine is Go, so take",
        "it as an order of magnitude; the 1 GB/s column is an optimistic bound). The saves are serial and every",
        "step waits for its own, so a bring-up takes at least the larger of the host work and the saves.",
        "",
        "| inventory | nodes | resources per node | plan JSON MB | state MB "
        "| host step inputs: median / largest bytes | saves of a fresh up, GB | save rate MB/s | saves, min "
        "| saves at 1 GB/s, min | host work, min | bring-up with the saves, at least min |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        e = r.engine
        host = r.schedules[recommended(r.nodes)].makespan
        cells = [
            r.label,
            str(r.nodes),
            f"{r.resources / r.nodes:.1f}",
            _mb(e["plan_bytes"]),
            _mb(e["state_bytes"]),
            f"{e['median_step']:.0f} / {e['largest_step']:.0f}",
            f"{e['snapshot_bytes'] / 1e9:.1f}",
            f"{e['rate'] / MB:.0f}",
            _min(e["snapshot_seconds"]),
            _min(e["snapshot_bytes"] / 1e9),
            _min(host),
            _min(max(host, e["snapshot_seconds"])),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def before_and_after(results: list, recommended: Callable[[int], int]) -> list[str]:
    lines = [
        "## Before and after: host scripts delivered once per host",
        "",
        "Before: every host step carried its whole program (lib.sh and its script) inline in `create`, and again",
        "in `update` (commit 7aae230). After: a bundle of every program goes to each host once per version",
        "(`<host>-scripts`, its state the file's path and hash) and each step's command is a short call naming",
        "its program's SHA-256 (components/hosts/delivery.py). Before figures: that commit's program measured",
        "with this benchmark's own code (see BEFORE in `benchmarks/engine_report.py` for when and how). Wall times",
        "move with the load of this shared machine: compare CPU seconds.",
        "",
        "| figure | inventory | before | after |",
        "|---|---|---:|---:|",
    ]
    for r in results:
        before = BEFORE.get(r.label)
        if before is None:
            continue
        e = r.engine
        host = r.schedules[recommended(r.nodes)].makespan
        rows = [
            ("plan JSON MB", _mb(before["plan_bytes"]), _mb(e["plan_bytes"])),
            ("estimated state MB", _mb(before["state_bytes"]), _mb(e["state_bytes"])),
            ("host step inputs, median bytes", f"{before['median_step']:.0f}", f"{e['median_step']:.0f}"),
            ("host step inputs, largest bytes", f"{before['largest_step']:.0f}", f"{e['largest_step']:.0f}"),
            ("resources per node", f"{before['resources'] / r.nodes:.1f}", f"{r.resources / r.nodes:.1f}"),
            ("preview CPU s", f"{before['cpu']:.1f}", f"{r.cpu_seconds:.1f}"),
            ("snapshot saves of a fresh up, GB", _gb(before["snapshot_bytes"]), _gb(e["snapshot_bytes"])),
            (
                f"modeled bring-up at --parallel {recommended(r.nodes)}, host work only, min",
                _min(before["makespan"]),
                _min(host),
            ),
            (
                "modeled bring-up with the snapshot saves (self-managed backend), at least min",
                _min(max(before["makespan"], before["snapshot_bytes"] / e["rate"])),
                _min(max(host, e["snapshot_seconds"])),
            ),
        ]
        lines += [f"| {name} | {r.label} | {old} | {new} |" for name, old, new in rows]
    lines += [
        "",
        "Both snapshot columns use this run's measured save rate, so they differ only by the bytes.",
    ]
    return lines


def backend_advice(results: list, recommended: Callable[[int], int]) -> list[str]:
    """Which state backend each size should use, from the figures above."""
    lines = [
        "### Which backend for which size",
        "",
        "Where the saves of a fresh bring-up stay under a tenth of the host work, a self-managed backend is fine;",
        "where they approach or pass it, they are the bring-up's critical path. The measured rate falls with the",
        "load of the machine running `pulumi` (see the load average above), so each size is judged at that rate",
        "and at 1 GB/s:",
        "",
    ]
    for r in results:
        e = r.engine
        host = r.schedules[recommended(r.nodes)].makespan
        slow, fast = e["snapshot_seconds"] / host, e["snapshot_bytes"] / 1e9 / host
        if slow < 0.1:
            verdict = "a self-managed backend is fine"
        elif fast >= 0.1:
            verdict = "use Pulumi Cloud, or a self-managed backend with `PULUMI_SKIP_CHECKPOINTS=true` as below"
        else:
            verdict = (
                "a self-managed backend costs a few percent with a fast machine running `pulumi` and much more"
                " with a slow or busy one: prefer Pulumi Cloud or `PULUMI_SKIP_CHECKPOINTS=true` for the bring-up"
            )
        lines.append(
            f"- {r.label} ({r.nodes} nodes): {_gb(e['snapshot_bytes'])} GB of saves against {_min(host)} min of host"
            f" work: {_min(e['snapshot_seconds'])} min at the {e['rate'] / MB:.0f} MB/s measured here ({slow:.0%}),"
            f" {_min(e['snapshot_bytes'] / 1e9)} min at 1 GB/s ({fast:.0%}): {verdict}."
        )
    lines += [
        "",
        "- **Pulumi Cloud** journals: it sends each step's change instead of the whole checkpoint",
        "  (pulumi/pulumi `pkg/backend/httpstate/journal/`; the self-managed backend, `pkg/backend/diy`, has no",
        "  journal), so the cost per step no longer grows with the stack.",
        "- **A self-managed backend with `PULUMI_SKIP_CHECKPOINTS=true`** saves only the final state (pulumi/pulumi",
        '  `sdk/go/common/env/env.go`: "Skip saving state checkpoints and only save the final deployment"). The',
        "  risk: an `up` that dies before its end (the machine running it lost, the process killed) records",
        "  nothing it did. Host steps re-run harmlessly on the next `up` (idempotent scripts), but generated",
        "  secrets (the RKE2 tokens, passwords, the CA keys) would be generated again and no longer match what",
        "  the hosts hold. So create those first with checkpoints on (`pulumi up --target` on the `random:` and",
        "  `tls:` resources, seconds), then run the bring-up with the variable set, and keep it for large",
        "  changes only; a day-2 `up` touches few resources.",
        "- **Splitting the stack** (a stack per rack of nodes) would bound each checkpoint, but this program is one",
        "  stack today: the cluster's nodes share one bootstrap, one membership and one monitoring component.",
    ]
    return lines
