"""Where the offline preview spends its CPU time: cProfile, grouped by who owns the code.

    python -m benchmarks.profile N        # prints a Markdown table for a generated N-node inventory

The mock engine calls the monitor from a thread pool; cProfile sees only the thread that runs the
program, so the run is profiled with the monitor calls made inline (same results, one thread).
The timer is CPU time (`time.process_time`), so other processes on the machine do not skew it.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import cProfile
import pstats
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Optional

from benchmarks.inventory import inventory, stack_file
from stacks import engine

# (label, path fragment) in order: the first match owns a function.
OWNERS = [
    ("ml-platform: components/", "/components/"),
    ("ml-platform: settings/", "/settings/"),
    ("ml-platform: stacks/ (recording, plan JSON)", "/stacks/"),
    ("Pulumi SDK (registration, serialisation, Outputs)", "/site-packages/pulumi/"),
    ("Pulumi providers' SDKs (pulumi_command, pulumi_kubernetes, ...)", "/site-packages/pulumi_"),
    ("protobuf (request messages, MessageToDict)", "/site-packages/google/"),
    ("PyYAML (stack file, RKE2 config.yaml)", "/site-packages/yaml/"),
    ("pydantic (settings validation)", "/site-packages/pydantic"),
    ("asyncio event loop (the SDK's tasks and futures)", "/asyncio/"),
    ("json (plan JSON)", "/json/"),
]


OTHER = "Python standard library and other"


class _InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each submitted call at once in the calling thread (so cProfile sees it)."""

    def submit(self, fn, /, *args, **kwargs):
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 (handed to the awaiting coroutine, as a pool does)
            future.set_exception(exc)
        return future


def owner(filename: str) -> str:
    for label, fragment in OWNERS:
        if fragment in filename:
            return label
    return OTHER


def _attribute(table: dict, func: tuple, seconds: float, by_owner: dict[str, float], depth: int) -> None:
    """Charge `seconds` of `func` to its owner; built-ins and standard-library helpers (isinstance,
    typing, pathlib) are charged to the code that called them, in proportion to their calls' time."""
    label = owner(func[0])
    if label != OTHER or depth == 0:
        by_owner[label] += seconds
        return
    callers = table[func][4]
    total = sum(entry[2] for entry in callers.values()) if callers else 0.0
    if total <= 0:
        by_owner[label] += seconds
        return
    for caller, entry in callers.items():
        _attribute(table, caller, seconds * entry[2] / total, by_owner, depth - 1)


def profile(config: Path, stack: str = "bench") -> tuple[float, list[tuple[str, float]], pstats.Stats]:
    """(total CPU seconds, [(owner, CPU seconds)] largest first, the stats) of preview + plan JSON."""
    loop = asyncio.new_event_loop()
    loop.set_default_executor(_InlineExecutor())
    asyncio.set_event_loop(loop)
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    engine.evaluate_stack(stack, config).to_json()
    profiler.disable()
    asyncio.set_event_loop(None)
    loop.close()
    stats = pstats.Stats(profiler)
    by_owner: dict[str, float] = defaultdict(float)
    for func, (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        _attribute(stats.stats, func, tottime, by_owner, depth=4)  # type: ignore[attr-defined]
    total = sum(by_owner.values())
    return total, sorted(by_owner.items(), key=lambda kv: -kv[1]), stats


def markdown(nodes: int, total: float, by_owner: list[tuple[str, float]]) -> str:
    lines = [
        f"CPU time of the offline preview of {nodes} nodes under cProfile (its per-call overhead inflates the "
        "total several times; the shares are what matters), "
        "by the code that spends it (own time of each function; built-ins and standard-library helpers such as "
        "`isinstance` are charged to their callers):",
        "",
        "| code | CPU s | share |",
        "|---|---:|---:|",
    ]
    lines += [f"| {label} | {seconds:.1f} | {seconds / total:.0%} |" for label, seconds in by_owner]
    lines.append(f"| total | {total:.1f} | 100% |")
    return "\n".join(lines)


def report(nodes: int) -> str:
    """The Markdown summary of an N-node preview's profile."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "Pulumi.bench.yaml"
        config.write_text(stack_file(inventory(nodes)))
        total, by_owner, _ = profile(config)
    return markdown(nodes, total, by_owner)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("nodes", type=int)
    parser.add_argument("--top", type=int, default=0, help="also print the N functions with the most own time")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "Pulumi.bench.yaml"
        config.write_text(stack_file(inventory(args.nodes)))
        total, by_owner, stats = profile(config)
    print(markdown(args.nodes, total, by_owner))
    if args.top:
        stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
