"""Run a `layout: layered` environment: its stacks in layers, node groups in parallel, on Pulumi's Automation API.

    python -m stacks.orchestrate preview|up|refresh|destroy ENV [--parallel N] [--groups a,b] [--resume] [--check]
                                 [--continue-on-error]
    python -m stacks.orchestrate init ENV
    python -m stacks.orchestrate preview|up|refresh ENV --stack NAME [--parallel N]     (one stack: a CI job)
    python -m stacks.orchestrate stacks ENV [--parallel N]         (layout, groups, budget: GitHub step outputs)
    python -m stacks.orchestrate changed ENV[,ENV...] --plans DIR  (stacks whose offline plan changed: outputs)
    python -m stacks.orchestrate migrate ENV [--plans DIR] [--state EXPORT.json] [--backup FILE] [--back]

`up`: ENV-cluster, then every ENV-nodes-<group> at once, then ENV-platform; `destroy` the reverse. `--parallel N`
(default 64) is one budget across the stacks running at once: the bastion's SSH limit (stacks/orchestration/run.py
says how it is shared). A node group that fails does not stop the others; the platform layer runs only when every
group is up to date. `--resume` runs only the groups that failed, never ran, or are stale (their cluster digest
differs from the cluster stack's current outputs). `--groups` limits a run to those groups. `--check` (preview):
fail on any change to a deployed resource (after a migration). `init`: create the stacks and copy the config,
run nothing. `migrate`: print the `pulumi state move` script from a deployed single stack (docs/runbook.md).
Exit status: 0 all done, 1 a stack failed or was held back, 2 bad input (nothing ran).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

from settings import SettingsError
from stacks import layers
from stacks.orchestration import ci
from stacks.orchestration import migrate as migration
from stacks.orchestration.run import ACTIONS, Orchestrator, shares
from stacks.orchestration.workspace import ROOT, ConfigInput, Environment
from stacks.plan import stack_settings

DEFAULT_PARALLEL = 64  # what the delivery workflow runs `up` with


def specs(env: str, work_dir: Path, migrating: bool = False) -> list[layers.StackSpec]:
    settings = stack_settings(env, work_dir / f"Pulumi.{env}.yaml")
    if settings.layout != "layered":
        fix = (
            f"set layout: layered in Pulumi.{env}.yaml first (no `up`), then migrate (docs/runbook.md, section 24)"
            if migrating
            else f"run `pulumi up --stack {env}`; the orchestrator runs environments with layout: layered"
        )
        raise SettingsError([f"layout: {env} is one stack (layout: {settings.layout}): {fix}"])
    return layers.stack_specs(env, settings)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m stacks.orchestrate", description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=[*ACTIONS, "init", "migrate", "stacks", "changed"])
    p.add_argument("env", help="the environment: Pulumi.<env>.yaml (changed: several, comma-separated)")
    p.add_argument("--stack", help="only this stack of the environment (a CI job per stack)")
    p.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL, help="operations at once across all stacks")
    p.add_argument("--groups", help="only these node groups, comma-separated")
    p.add_argument("--resume", action="store_true", help="up: only the groups that failed, never ran or are stale")
    p.add_argument("--check", action="store_true", help="preview: fail on any change to a deployed resource")
    p.add_argument(
        "--continue-on-error",
        action="store_true",
        help="up: a failed step stops only what depends on it (pulumi up --continue-on-error, in every stack)",
    )
    p.add_argument(
        "--expect-create", type=Path, help="preview --check: a file of URNs (one a line) that may be created"
    )
    p.add_argument(
        "--plans",
        type=Path,
        help="migrate: the layered plans (`python -m stacks.plan ENV --out DIR`); changed: "
        "the folder `python -m stacks.review --out` wrote",
    )
    p.add_argument("--state", type=Path, help="migrate: `pulumi stack export` of the single stack (required)")
    p.add_argument("--backup", help="migrate: the backup file the script writes (default <env>-single-backup.json)")
    p.add_argument("--back", action="store_true", help="migrate: the script that moves the layered stacks back")
    return p


def main(
    argv: Optional[list[str]] = None,
    auto: Optional[ModuleType] = None,
    work_dir: Path = ROOT,
    out: Callable[[str], None] = print,
    config_input: Optional[ConfigInput] = None,
) -> int:
    args = parser().parse_args(argv)
    try:
        if args.action == "migrate":
            return migrate(args, work_dir, out)
        if args.action == "changed":
            if args.plans is None:
                raise ValueError("changed: give --plans, the folder `python -m stacks.review --out` wrote")
            entries = ci.changed(args.plans, [e for e in args.env.split(",") if e])
            print(f"stacks to preview: {', '.join(e['stack'] for e in entries) or 'none'}", file=sys.stderr)
            out(f"previews={json.dumps(entries)}")
            return 0
        if args.action == "stacks":
            settings = stack_settings(args.env, work_dir / f"Pulumi.{args.env}.yaml")
            for key, value in ci.stack_outputs(args.env, settings, args.parallel).items():
                out(f"{key}={value}")
            return 0
        stacks = specs(args.env, work_dir)
        shares(args.parallel, 1)
        if args.resume and args.action != "up":
            raise ValueError("--resume: only with up")
        if args.check and args.action != "preview":
            raise ValueError("--check: only with preview")
        groups = [g.strip() for g in args.groups.split(",") if g.strip()] if args.groups else None
        if groups is not None and not groups:
            raise ValueError("--groups: name at least one group")
        environment = Environment(args.env, work_dir, auto, config_input=config_input)
        orchestrator = Orchestrator(environment, stacks, out)
        orchestrator.members = members(args.env, work_dir)
        if args.continue_on_error and args.action != "up":
            raise ValueError("--continue-on-error: only with up")
        orchestrator.continue_on_error = args.continue_on_error
        if args.action != "destroy":
            orchestrator.choose(groups)  # an unknown group is refused before any stack is touched
        if args.action == "init":
            chosen = [s for s in stacks if args.stack in (None, s.name)]
            if not chosen:
                raise ValueError(
                    f"--stack {args.stack}: not a stack of {args.env} ({', '.join(s.name for s in stacks)})"
                )
            for spec in chosen:
                orchestrator.stack(spec)
                provider = environment.file.secrets_provider or "the backend's default"
                out(f"{spec.name}: ready (secrets provider: {provider})")
            return 0
        allowed = set(args.expect_create.read_text().split()) if args.expect_create else set()
        if allowed and not args.check:
            raise ValueError("--expect-create: only with preview --check")
        if args.stack:
            if groups or args.resume or args.action == "destroy":
                raise ValueError("--stack: one stack's preview, up or refresh, without --groups or --resume")
            report = orchestrator.run_stack(args.action, args.stack, args.parallel, args.check, allowed)
            return 0 if report.ok else 1
        report = orchestrator.run(args.action, args.parallel, groups, args.resume, args.check, allowed)
        return 0 if report.ok else 1
    except (SettingsError, ValueError, migration.MigrationError) as exc:
        print(f"{args.env}: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        if exc.filename == "pulumi":
            print(f"{args.env}: the Pulumi CLI is not on PATH: install it (3.226 or later)", file=sys.stderr)
        else:
            print(f"{args.env}: no such file: {exc.filename}", file=sys.stderr)
        return 2


def members(env: str, work_dir: Path) -> dict[str, list[str]]:
    """Group -> the agents the settings put in it (servers live in the cluster stack)."""
    settings = stack_settings(env, work_dir / f"Pulumi.{env}.yaml")
    return {group: [n.name for n in nodes if not n.control_plane] for group, nodes in settings.node_groups.items()}


def layered_plans(env: str, plans: Optional[Path], work_dir: Path) -> dict[str, list[dict[str, Any]]]:
    if plans is None:
        from stacks.layered_plan import evaluate_layered

        return {name: plan.resources for name, plan in evaluate_layered(env, work_dir / f"Pulumi.{env}.yaml").items()}
    found = {p.stem: json.loads(p.read_text())["resources"] for p in sorted(plans.glob("*.json"))}
    if not found:
        raise ValueError(f"--plans {plans}: no <stack>.json in it (`python -m stacks.plan {env} --out {plans}`)")
    return found


def migrate(args: argparse.Namespace, work_dir: Path, out: Callable[[str], None]) -> int:
    if args.state is None and not args.back:
        raise ValueError(
            f"migrate: give --state, the single stack's state (`pulumi stack export --stack {args.env} --file FILE`): "
            "the moves are checked against it before they are printed"
        )
    order = [s.name for s in specs(args.env, work_dir, migrating=True)]
    plans = layered_plans(args.env, args.plans, work_dir)
    missing = [name for name in order if name not in plans]
    if missing:
        raise ValueError(f"--plans: no plan for {', '.join(missing)}")
    key = migration.engine_form
    resources = {
        key(migration.strip(r["urn"])): {**r, "parent": key(migration.strip(r["parent"])) if r.get("parent") else None}
        for name in order
        for r in plans[name]
    }
    held = {stack: [key(k) for k in keys] for stack, keys in layers.assign({n: plans[n] for n in order}).items()}
    if args.back:
        # Back: what each layered stack holds by the plans; the single stack's state (emptied) has nothing to add.
        plan = migration.plan_migration(args.env, held, resources, order)
        out(migration.script(plan, "", back=True).rstrip("\n"))
        return 0
    state = json.loads(args.state.read_text())
    deployed = {migration.strip(r["urn"]) for r in state["deployment"]["resources"]}
    plan = migration.plan_migration(args.env, held, resources, order, deployed)
    received = migration.check(state, plan)
    for name in order:
        made = len(plan.created.get(name, []))
        print(f"# {name}: {len(received.get(name, []))} moved, {made} created at its first up", file=sys.stderr)
    print(f"# stay in {args.env}: {len(migration.stays(state))} (root, providers)", file=sys.stderr)
    out(migration.script(plan, args.backup or f"{args.env}-single-backup.json").rstrip("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
