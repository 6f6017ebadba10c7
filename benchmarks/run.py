"""The scale benchmark: generated inventories through the offline preview and the bring-up model.

    python -m benchmarks.run [--nodes 50 200 1000] [--profile 1000] [--out docs/benchmarks.md]

For each size: the offline preview (`python -m stacks.plan`) runs in a subprocess, timed, with its
peak memory (the child's maximum resident set, from wait4); the plan it writes gives the resource
count, the host steps per node and the longest host-command chain; the bring-up model
(benchmarks/makespan.py) schedules that plan at several `--parallel` values and counts the SSH
connections each costs. Which host a step connects to is inside the (secret) connection, so the
runner also evaluates the program in-process and reads it from the revealed inputs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from benchmarks import engine_report, makespan, state
from benchmarks.inventory import ROOT, inventory, prod_config, stack_file
from benchmarks.layered import LayeredResult, measure_layered
from benchmarks.layered import report as layered_report
from stacks import engine

PARALLELS = (64, 128, 192, 256)
CHECKS = ("acceptance check",)
# --parallel recommended for a bring-up, by node count (up to and including): docs and README.
RECOMMENDED = ((100, 64), (400, 128), (2000, 192))


# What the profile led to, and what it says about the rest.
PROFILE_NOTES = [
    "Before the two changes below, the 1000-node preview (3795 resources then, before MinioTier) took 26.3 s wall",
    "and 772 MiB on an idle 2-core machine (about 36 s on the same machine under load); after the",
    "changes, 18.5 s and 713 MiB on the same plan. Two changes in `stacks/engine.py`, plan JSON of prod and lab",
    "byte-identical before and after (`cmp`): the recording monitor answers a resource with its own",
    "request instead of `MockMonitor`'s deserialise-then-serialise round trip of every input (the mock",
    "engine's own overhead), and the cycle collector runs every 50,000 allocations instead of 700 while",
    "the program runs (the SDK keeps several futures and Outputs per input alive to the end; gen-0",
    "collections kept rescanning them: a third of the CPU time). Scripts are read once per process",
    "(`components/hosts/remote.py`). What remains is the Pulumi SDK's own per-resource registration",
    "(Outputs, futures, serialisation) and its event loop; our code (components, settings, recording,",
    "plan JSON) is a few percent. Profile it yourself: `python -m benchmarks.profile 1000 --top 30`.",
]


def recommended_parallel(nodes: int) -> int:
    return next(p for limit, p in RECOMMENDED if nodes <= limit)


@dataclass
class Result:
    label: str
    """The inventory: `prod` (Pulumi.prod.yaml) or the generated node count."""
    nodes: int
    resources: int
    host_steps: int
    wall_seconds: float
    cpu_seconds: float
    """User and system CPU time of the preview process: steadier than wall time on a shared machine."""
    peak_mib: float
    steps_per_node: dict[str, str]
    """Host steps named after a node, by kind of node ('3' or '3-4')."""
    chain: int
    graph_limit: float
    schedules: dict[int, makespan.Schedule]
    init_server: str
    nas_hosts: list[str]
    without_checks: dict[int, float] = field(default_factory=dict)
    """Modeled bring-up with the acceptance checks taken as instant: what the bring-up itself takes."""
    sessions_by_host: Counter = field(default_factory=Counter)
    """SSH sessions a fresh bring-up opens to each host (host steps with a create command)."""
    engine: dict[str, float] = field(default_factory=dict)
    """What the engine itself costs (benchmarks/state.py): plan and state bytes, host step inputs, the
    snapshot saves of a fresh bring-up with a self-managed backend and the rate this machine saves at."""

    def busiest_host(self) -> tuple[str, int]:
        return max(sorted(self.sessions_by_host.items()), key=lambda item: item[1])


def preview(config: Path, out: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak resident MiB) of `python -m stacks.plan bench --config CONFIG --out OUT`."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "stacks.plan", "bench", "--config", str(config), "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"offline preview of {config} exited {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # Linux: KiB


def node_classes(raw: dict[str, Any]) -> dict[str, str]:
    """Node name -> kind: server, storage host, GPU node or CPU agent."""
    classes = {}
    for n in raw["nodes"]:
        if n.get("controlPlane"):
            classes[n["name"]] = "server"
        elif n["role"] == "gpu":
            classes[n["name"]] = "GPU node"
        elif n.get("osdDevices"):
            classes[n["name"]] = "storage host"
        else:
            classes[n["name"]] = "CPU agent"
    return classes


def steps_per_node(plan: dict[str, Any], classes: dict[str, str]) -> dict[str, str]:
    per_node = Counter(makespan.node_of(r["name"], classes) for r in plan["resources"] if makespan.opens_ssh(r))
    out = {}
    for kind in ("server", "CPU agent", "storage host", "GPU node"):
        counts = sorted({per_node[name] for name, k in classes.items() if k == kind})
        if counts:
            out[kind] = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return out


def step_targets(stack: str, config: Path, raw: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """The host name each host step connects to, by URN (from the revealed connection), and the revealed
    inputs (the sizes of the secrets, for the state estimate)."""
    names = {h["address"]: h["name"] for h in [*raw["nodes"], *raw["nas"]["hosts"]]}
    plan = engine.evaluate_stack(stack, config)
    steps = [*plan.by_type(makespan.COMMAND), *plan.by_type(makespan.COPY)]
    return {r["urn"]: names.get(plan.revealed[r["urn"]]["connection"]["host"], "?") for r in steps}, plan.revealed


def engine_cost(plan: dict[str, Any], plan_bytes: int, revealed: dict[str, Any], order: list[str]) -> dict[str, float]:
    """State bytes, host step inputs, and the snapshot saves of a fresh bring-up finishing in `order`."""
    sizes = state.sizes(plan, revealed)
    steps = state.host_step_inputs(plan)
    rate = state.serialisation_rate(state.state_document(plan, revealed))
    written = state.snapshot_writes(order, sizes)
    return {
        "plan_bytes": plan_bytes,
        "state_bytes": sum(sizes.values()),
        "median_step": steps[len(steps) // 2],
        "largest_step": steps[-1],
        "snapshot_bytes": written,
        "rate": rate,
        "snapshot_seconds": written / rate,
    }


def measure(label: str, raw: dict[str, Any], workdir: Path, parallels: tuple[int, ...] = PARALLELS) -> Result:
    """Preview, shape and modeled bring-up of the inventory `raw` (settings as in a stack file)."""
    nodes = len(raw["nodes"])
    config = workdir / f"Pulumi.bench-{label}.yaml"
    config.write_text(stack_file(raw))
    out = workdir / f"plan-{label}.json"
    wall, cpu, peak = preview(config, out)
    text = out.read_text()
    plan = json.loads(text)
    targets, revealed = step_targets("bench", config, raw)
    res, deps = makespan.graph(plan)
    parallels = tuple(sorted({*parallels, recommended_parallel(nodes)}))
    schedules = {p: makespan.simulate(res, deps, p, targets) for p in parallels}
    order = schedules[recommended_parallel(nodes)].order
    return Result(
        label=label,
        nodes=nodes,
        resources=len(plan["resources"]),
        host_steps=sum(makespan.opens_ssh(r) for r in plan["resources"]),
        sessions_by_host=Counter(targets[r["urn"]] for r in plan["resources"] if makespan.opens_ssh(r)),
        wall_seconds=wall,
        cpu_seconds=cpu,
        peak_mib=peak,
        steps_per_node=steps_per_node(plan, node_classes(raw)),
        chain=makespan.longest_host_chain(plan),
        graph_limit=makespan.simulate(res, deps, 0).makespan,
        schedules=schedules,
        without_checks={p: makespan.simulate(res, deps, p, without=CHECKS).makespan for p in parallels},
        init_server=raw["cluster"]["initServer"],
        nas_hosts=[h["name"] for h in raw["nas"]["hosts"]],
        engine=engine_cost(plan, len(text.encode()), revealed, order),
    )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def sdk_floor(resources: int) -> float:
    """CPU seconds the same engine takes for `resources` bare host steps (one connection, a short command,
    one trigger; no settings, no components): what the Pulumi SDK costs per resource before any work of
    the program's own. A preview of that many resources cannot be faster than this."""
    from pulumi_command import remote

    def program() -> dict[str, Any]:
        for i in range(resources):
            host = f"10.{i // 62500}.{i // 250 % 250}.{i % 250}"
            remote.Command(f"step-{i}", connection={"host": host, "user": "root"}, create="true", triggers=[str(i)])
        return {}

    # A loop of its own: the profile (run before) leaves none behind. It stays the current loop.
    asyncio.set_event_loop(asyncio.new_event_loop())
    started = time.process_time()
    engine.run("floor", {}, [], program)
    return time.process_time() - started


def report(
    results: list[Result],
    profile_md: str = "",
    load: Optional[tuple[float, float]] = None,
    floor: Optional[tuple[int, float]] = None,
    layered: Optional[list[LayeredResult]] = None,
) -> str:
    parallels = sorted({p for r in results for p in r.schedules})
    lines = [
        "# Scale benchmarks",
        "",
        "Generated by `make bench` (`python -m benchmarks.run`); do not edit by hand. The inventories come from",
        "`benchmarks/inventory.py` (30% GPU nodes with InfiniBand and tier-1 NVMe, one CPU agent in four a Ceph",
        "storage host, 3 servers, 5 from 500 nodes; address plan in its docstring) and pass the settings",
        "validation (`tests/test_benchmarks.py`). `python -m benchmarks.inventory N --out Pulumi.big.yaml`",
        "writes one for `python -m stacks.plan big --config Pulumi.big.yaml`.",
        "",
        "## Offline preview",
        "",
        f"Measured on the machine that ran `make bench` ({os.cpu_count()} CPUs, shared with other work"
        + (f"; 1-minute load average {load[0]:.1f} at the start, {load[1]:.1f} at the end" if load else "")
        + f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}): wall time and peak",
        "resident memory of `python -m stacks.plan` as a subprocess, plan JSON written. On a loaded machine",
        "wall times grow with the load; memory does not.",
        "",
        "| inventory | nodes | resources | host steps at create | preview wall s | preview CPU s | peak memory MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.label} | {r.nodes} | {r.resources} | {r.host_steps} | {r.wall_seconds:.1f} | {r.cpu_seconds:.1f} "
        f"| {r.peak_mib:.0f} |"
        for r in results
    ]
    if floor:
        lines += [
            "",
            f"The Pulumi SDK's own floor (`sdk_floor`): {floor[0]} bare host steps (one connection, a short command,",
            f"one trigger, nothing else) take {floor[1]:.1f} CPU s through the same engine on this machine, in this",
            "run: a preview of that many resources cannot take less. The program's resources each carry more",
            "inputs (Outputs, secrets, dependencies) than a bare step, and the SDK's registration of them is most",
            "of the time (profile below); the program's own code is a few percent.",
        ]
    kinds = [
        k for k in ("server", "CPU agent", "storage host", "GPU node") if any(k in r.steps_per_node for r in results)
    ]
    lines += [
        "",
        "## Shape",
        "",
        "Host steps that connect at create, named after each node (the copy of the host scripts, prepare, RKE2",
        "with its certificate timer, and the hardware steps of its role), and the longest chain of host commands",
        "that must run one after another.",
        "",
        "| inventory | nodes | " + " | ".join(f"steps per {k}" for k in kinds) + " | longest host-command chain |",
        "|---|---:|" + "---:|" * len(kinds) + "---:|",
    ]
    lines += [
        f"| {r.label} | {r.nodes} | " + " | ".join(r.steps_per_node.get(k, "-") for k in kinds) + f" | {r.chain} |"
        for r in results
    ]
    lines += [
        "",
        "## Modeled fresh bring-up (minutes)",
        "",
        "`benchmarks/makespan.py`: the plan's dependency graph scheduled first come, first served under",
        "`--parallel`, with the per-step durations below. The graph limit is the schedule with unbounded",
        "parallelism. **Bold**: the recommended `--parallel` for that size. Every `up` now ends with the",
        "acceptance checks; the last column is the bring-up at the recommended `--parallel` without them.",
        "",
        "| inventory | nodes | graph limit | "
        + " | ".join(f"--parallel {p}" for p in parallels)
        + " | recommended, checks not counted |",
        "|---|---:|---:|" + "---:|" * len(parallels) + "---:|",
    ]
    for r in results:
        cells = []
        for p in parallels:
            s = r.schedules.get(p)
            cell = _minutes(s.makespan) if s else ""
            cells.append(f"**{cell}**" if p == recommended_parallel(r.nodes) else cell)
        bare = _minutes(r.without_checks[recommended_parallel(r.nodes)])
        lines.append(f"| {r.label} | {r.nodes} | {_minutes(r.graph_limit)} | " + " | ".join(cells) + f" | {bare} |")
    lines += [
        "",
        "## What a `--parallel` costs in SSH connections",
        "",
        "Every running host step is one SSH connection from the machine running Pulumi, with one session on",
        "its host. pulumi-command dials the bastion once per step (its `Dial`: a new client to the proxy, then",
        "a channel to the host), so the bastion holds as many connections as steps run, up to `--parallel`,",
        "and the first `--parallel` steps (every node's prepare step) start together: that many handshakes",
        "arrive at once. A node's membership step has no command at create and opens no connection then",
        "(only its delete drains, on the init server); labels and taints go through the Kubernetes API.",
        "Sessions per host over a whole fresh bring-up, and the model's peaks at once:",
        "",
        "| inventory | nodes | sessions per node (median) | busiest host: sessions | --parallel | "
        "bastion at once | init server at once | busiest NAS host at once |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        busiest, count = r.busiest_host()
        median = sorted(r.sessions_by_host.values())[len(r.sessions_by_host) // 2]
        for p, s in sorted(r.schedules.items()):
            nas = max((s.peak_by_target.get(h, 0) for h in r.nas_hosts), default=0)
            rec = " (recommended)" if p == recommended_parallel(r.nodes) else ""
            init = s.peak_by_target.get(r.init_server, 0)
            lines.append(
                f"| {r.label} | {r.nodes} | {median} | {busiest}: {count} | {p}{rec} | {s.peak_ssh} | {init} | {nas} |"
            )
    lines += [
        "",
        "sshd counts connections that have not authenticated yet against `MaxStartups` (default `10:30:100`:",
        "from 10 pending it drops 30% of new ones, rising to all at 100), not established ones. pulumi-command",
        "retries a refused dial (`ssh.dialErrorLimit`, default 10 tries) but a burst far above the limit exhausts",
        "the tries. So on the bastion set `MaxStartups` above the `--parallel` you use (e.g. `200:30:400` for",
        "192), and check that its connection-rate limits (firewall, `fail2ban`, a cloud bastion's session",
        "quota) allow that many logins from the Pulumi machine within a few seconds. `MaxSessions` (default 10)",
        "limits sessions per connection: each step opens one connection with one session on its host and a",
        "forwarding channel on the bastion, so the default is enough. The nodes themselves, the init server",
        "included, see a handful of sessions each, never many at once at create. Removing many nodes in one",
        "`up` runs their drains on the init server at once (up to `--parallel`): raise its `MaxStartups` first.",
        "The recommended values: " + ", ".join(f"{p} up to {limit} nodes" for limit, p in RECOMMENDED) + ".",
        "",
    ]
    lines += ["", *engine_report.engine_section(results, recommended_parallel)]
    lines += ["", *engine_report.backend_advice(results, recommended_parallel)]
    lines += ["", *engine_report.before_and_after(results, recommended_parallel)]
    lines += [
        "",
        "## Per-step durations of the model",
        "",
        makespan.duration_table(),
    ]
    if layered:
        lines += ["", *layered_report(layered)]
    if profile_md:
        lines += ["", "## Where the preview's time goes", "", profile_md, "", *PROFILE_NOTES]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[50, 200, 1000])
    parser.add_argument("--profile", type=int, metavar="N", help="add a cProfile summary of an N-node preview")
    parser.add_argument("--out", type=Path, help="write the Markdown report here (else standard output)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure("prod", prod_config(), Path(tmp))]
        results += [measure(str(n), inventory(n), Path(tmp)) for n in args.nodes]
        layered = [
            measure_layered(str(n), inventory(n), Path(tmp), recommended_parallel(n)) for n in args.nodes if n >= 200
        ]
    load = (load_before, os.getloadavg()[0])
    profile_md = ""
    if args.profile:
        from benchmarks import profile

        profile_md = profile.report(args.profile)
    largest = max(results, key=lambda r: r.resources)
    text = report(results, profile_md, load, (largest.resources, sdk_floor(largest.resources)), layered)
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
