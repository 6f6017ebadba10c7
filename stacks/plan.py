"""Offline preview: what `pulumi up` would do, without the CLI, a backend, credentials or network.

    python -m stacks.plan STACK [--config FILE] [--out FILE]
    python -m stacks.plan --diff OLD.json NEW.json [--format text|markdown]

The first form evaluates the real program for STACK on Pulumi's mock engine (`stacks.engine`) from
`Pulumi.<STACK>.yaml` (or FILE, in the same format), prints a summary and optionally writes the
plan as JSON. The second compares two such plans (`stacks.diff`): what is created, updated, replaced
or deleted, with old and new values, destructive steps first. Invalid settings exit with status 2 and
write no JSON; a diff that replaces or deletes a protected resource exits with status 3.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import yaml

from settings import NAMESPACE, Settings, SettingsError, load
from stacks import diff as diffs
from stacks.engine import SECRET, Plan, evaluate_stack, load_stack_config
from stacks.namespaces import team_namespace_problems

# Exit status of --diff when a protected resource would be replaced or deleted (`pulumi preview` fails too).
REFUSED = 3


def stack_settings(stack: str, config_file: Optional[Path] = None) -> Settings:
    """The validated settings of the stack config the plan was made from."""
    config, secret_keys = load_stack_config(stack, config_file)
    raw: dict[str, Any] = {}
    for full, value in config.items():
        namespace, _, key = full.partition(":")
        if namespace == NAMESPACE and full not in secret_keys:
            try:
                raw[key] = json.loads(value)
            except ValueError:
                raw[key] = value
    return load(raw)


def _layout_settings(stack: str, config_file: Optional[Path]) -> Optional[Settings]:
    """The settings, when they load as they are, to choose the layout; None leaves the problems to `evaluate_stack`."""
    try:
        return stack_settings(stack, config_file)
    except (SettingsError, yaml.YAMLError, ValueError):
        return None


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
    workloads = [r for r in resources if r["type"] in WORKLOAD_TYPES]
    if workloads:
        lines += ["", "Workloads the program runs itself (not from a chart), and how long an `up` waits for each:"]
        lines += [_workload(r) for r in sorted(workloads, key=lambda r: (r["type"], r["name"]))]
    if plan.reads:
        lines += ["", "Reads (objects the program reads at every run and does not manage):"]
        lines += [f"  read {r['name']} [{r['type']}] id {r['id']}" for r in plan.reads]
    lines += ["", "Outputs:"]
    for name, value in plan.outputs.items():
        shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        lines.append(f"  {name}: {shown}")
    if SECRET in plan.outputs.values():
        lines.append("  ([secret] values are Pulumi secrets; the real stack shows them with --show-secrets)")
    return "\n".join(lines)


WORKLOAD_TYPES = {
    f"kubernetes:{kind}" for kind in ("batch/v1:Job", "batch/v1:CronJob", "apps/v1:DaemonSet", "apps/v1:Deployment")
}


def _workload(resource: dict) -> str:
    """One line per workload: kind, namespace/name, and what the engine waits for. pulumi-kubernetes 4.x
    waits for a Job until Complete (failing the `up` when it fails) and a Deployment until ready, 10 min
    by default (their resources' documentation), a DaemonSet until rolled out (pulumi/pulumi-kubernetes#2953);
    `pulumi.com/timeoutSeconds` bounds the wait. A CronJob is created, not awaited."""
    meta = resource["inputs"].get("metadata", {})
    kind = resource["type"].rsplit(":", 1)[1]
    timeout = meta.get("annotations", {}).get("pulumi.com/timeoutSeconds")
    wait = {"Job": "until Complete", "DaemonSet": "until rolled out", "Deployment": "until ready"}.get(kind)
    if wait is None:
        wait = "created, not awaited"
    elif timeout:
        wait += f", at most {timeout} s"
    else:
        wait += ", the provider's default timeout"
    return f"  {kind:10s} {meta.get('namespace', '')}/{meta.get('name', resource['name'])}: {wait}"


def _owner(resource: dict, by_urn: dict[str, dict], components: dict[str, dict]) -> Optional[str]:
    """The URN of the top-level ml-platform component that contains `resource`, if any."""
    owner = None
    urn = resource["parent"]
    while urn is not None and urn in by_urn:
        if urn in components:
            owner = urn
        urn = by_urn[urn]["parent"]
    return owner


def diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The diff in short, for scripts and tests: added, removed and changed URNs (with changed paths), outputs."""
    result = diffs.compare(old, new)
    paths = {
        e.urn: sorted({p for c in e.changes for p in diffs.bare_paths(c)})
        for e in result.entries
        if e.action not in ("create", "delete")
    }
    return {
        "added": [e.urn for e in result.entries if e.action == "create"],
        "removed": [e.urn for e in result.entries if e.action == "delete"],
        "changed": paths,
        "outputs": {
            c.path: "added" if c.old is diffs.ABSENT else "removed" if c.new is diffs.ABSENT else "changed"
            for c in result.outputs
        },
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", nargs="?", help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--config", type=Path, help="a stack config file to use instead of Pulumi.<stack>.yaml")
    parser.add_argument(
        "--out", type=Path, help="write the plan as JSON to this file (layout: layered: a folder, a file per stack)"
    )
    parser.add_argument("--only", metavar="STACK", help="layout: layered: preview only this stack of the environment")
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("OLD", "NEW"), help="compare two plan JSON files")
    parser.add_argument("--format", choices=("text", "markdown"), default="text", help="--diff output format")
    args = parser.parse_args(argv)

    if args.diff:
        old, new = (json.loads(p.read_text()) for p in args.diff)
        result = diffs.compare(old, new)
        print(diffs.render_markdown(result) if args.format == "markdown" else diffs.render_text(result))
        return REFUSED if result.errors else 0
    if not args.stack:
        parser.error("give a STACK (e.g. prod) or --diff OLD NEW")
    try:
        settings = _layout_settings(args.stack, args.config)
        if settings is not None and settings.layout == "layered":
            return layered_main(args.stack, args.config, args.out, args.only)
        # The file's own checks (YAML syntax, credentials given as plain config) and every settings problem, each at
        # its file:line, come from evaluating it.
        plan = evaluate_stack(args.stack, args.config)
        settings = settings or stack_settings(args.stack, args.config)
        problems = team_namespace_problems(plan.resources, settings.scheduling.teams)
        if problems:
            raise SettingsError(problems)
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


def layered_main(env: str, config: Optional[Path], out: Optional[Path], only: Optional[str] = None) -> int:
    """Each stack of a layered environment (or `only` that one), in run order: its summary, and its plan in
    `out`/<stack>.json."""
    from stacks.layered_plan import evaluate_layered

    plans = evaluate_layered(env, config, only)
    print(f"{env} runs as {len(plans)} stacks (layout: layered): {', '.join(plans)}\n")
    for name, plan in plans.items():
        print(summary(plan) + "\n")
        if out:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{name}.json").write_text(plan.to_json())
    if out:
        print(f"Plans written to {out}/<stack>.json")
    return 0


def cli() -> int:
    """`main` for a terminal: output piped into `head` and closed early ends quietly."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at devnull so that flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return status


if __name__ == "__main__":
    sys.exit(cli())
