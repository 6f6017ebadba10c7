"""What a change does to every stack, for reviewers without credentials (the pull-request step).

    python -m stacks.review --base REV [--head REV] [--stack prod --stack lab] [--out DIR] [--summary FILE]

For each stack, the offline preview (`python -m stacks.plan STACK --out`) of the base revision and of
the head, each run with the planner of its own revision in a copy exported with `git archive` (the
head is the working tree when --head is not given), then `python -m stacks.plan --diff BASE HEAD`
with the head's planner, and the rollouts of the Helm releases that change (`stacks.rollouts`: both
sides rendered by Helm; what restarts on how many nodes, node-wide ones under Danger). Writes the plans,
the diffs and a Markdown report to --out and appends the report to --summary (e.g. `$GITHUB_STEP_SUMMARY`).

A base that cannot be planned is reported, not an error: a stack that is new in the change is diffed
against an empty plan; a base without the planner, or whose settings were invalid, gets no diff.
Exit status 3 when a protected resource would be replaced or deleted (the same verdict as
`python -m stacks.plan --diff` and `pulumi preview`), 1 when a head cannot be planned: the change breaks
that stack.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from stacks import rollouts
from stacks.engine import PROJECT, ROOT
from stacks.plan import REFUSED

STACKS = ("prod", "lab")


@dataclass(frozen=True)
class Side:
    """One side of the comparison: a revision exported to a directory, or the working tree."""

    label: str
    tree: Path


@dataclass(frozen=True)
class StackReview:
    stack: str
    ok: bool  # False: the head cannot be planned
    summary: str  # the diff's first line, or why there is no diff
    diff: str  # the whole diff text ("" when there is none)
    note: str = ""
    markdown: str = ""  # the diff as Markdown, without its headline (collapsible sections)
    refused: bool = False  # a protected resource would be replaced or deleted: `pulumi preview` fails too


def git(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=True)


def export(rev: str, dest: Path) -> Side:
    """The tree of `rev` (read-only: `git archive`, no worktree, no checkout) extracted into `dest`."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}").stdout.decode().strip()
    archive = git("archive", "--format=tar", commit).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # Python before 3.11.4 (Debian 12's 3.11.2) has no extraction filters; the archive is git's own
            tar.extractall(dest)
    return Side(label=commit[:12], tree=dest)


def working_tree() -> Side:
    """The checkout this module runs from, labelled with its commit (and whether it has edits)."""
    commit = git("rev-parse", "HEAD").stdout.decode().strip()
    edited = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return Side(label=commit[:12] + (" + uncommitted changes" if edited else ""), tree=ROOT)


def _env() -> dict[str, str]:
    # The planner of each revision must import its own `stacks`, found from its working directory.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _stacks_plan(tree: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m stacks.plan ARGS` with the planner of the revision checked out at `tree`."""
    return subprocess.run(
        [sys.executable, "-m", "stacks.plan", *args], cwd=tree, env=_env(), capture_output=True, text=True, timeout=900
    )


def plan(side: Side, stack: str, out: Path) -> Optional[str]:
    """Write the offline plan of `stack` at `side` to `out`; None when it worked, else why not."""
    if not (side.tree / "stacks" / "plan.py").exists():
        return f"{side.label} has no offline planner (stacks/plan.py)"
    result = _stacks_plan(side.tree, stack, "--out", str(out))
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        return f"`python -m stacks.plan {stack}` at {side.label} exited with {result.returncode}:\n{tail}"
    return None


def empty_plan(stack: str) -> str:
    return json.dumps({"project": PROJECT, "stack": stack, "resources": [], "outputs": {}}) + "\n"


def review_stack(stack: str, base: Side, head: Side, out: Path) -> StackReview:
    head_json, base_json = out / f"plan-{stack}-head.json", out / f"plan-{stack}-base.json"
    if not (head.tree / f"Pulumi.{stack}.yaml").exists():
        return StackReview(stack, True, f"no `Pulumi.{stack}.yaml` at {head.label}: the stack is not planned", "")
    problem = plan(head, stack, head_json)
    if problem is not None:
        return StackReview(stack, False, f"the change breaks `{stack}`", "", problem)
    note, held = merge_layered(head_json, stack)
    if not (base.tree / f"Pulumi.{stack}.yaml").exists():
        base_json.write_text(empty_plan(stack))
        note = f"`Pulumi.{stack}.yaml` does not exist at {base.label}: the stack is new, compared with an empty plan"
    else:
        problem = plan(base, stack, base_json)
        if problem is not None:
            return StackReview(stack, True, f"no diff: the base {base.label} cannot be planned", "", problem)
        base_note, base_held = merge_layered(base_json, stack)
        note = "; ".join(n for n in (f"{base.label}: {base_note}" if base_note else "", note) if n)
        held = held or base_held
        if held:
            within_stacks(base_json, held)
            within_stacks(head_json, held)
    text_run = _stacks_plan(head.tree, "--diff", str(base_json), str(head_json))
    md_run = _stacks_plan(head.tree, "--diff", str(base_json), str(head_json), "--format", "markdown")
    if {text_run.returncode, md_run.returncode} - {0, REFUSED}:
        return StackReview(stack, False, "the diff failed", "", (text_run.stderr or md_run.stderr).strip())
    report = helm_rollouts(base_json, head_json)
    text = rollouts.merge_text(text_run.stdout.rstrip("\n"), report)
    md = rollouts.merge_markdown(md_run.stdout, report)
    (out / f"diff-{stack}.txt").write_text(text + "\n")
    (out / f"diff-{stack}.md").write_text(md)
    headline = text.splitlines()[0].split(": ", 1)[-1]
    if text_run.returncode == REFUSED:
        headline = f"REFUSED, a protected resource would be replaced or deleted; {headline}"
    body = "\n".join(md.splitlines()[1:]).strip("\n")
    refused = text_run.returncode == REFUSED
    return StackReview(stack, not refused, headline, text, note, body, refused=refused)


def merge_layered(path: Path, env: str) -> tuple[str, dict[str, str]]:
    """A layered environment's plans (a folder, a plan per stack: `stacks.plan --out`) as one plan of `env` in
    place of the folder, each URN with `env` as its stack: the same logical resources whichever stack holds them, so
    a change compares resource by resource in either layout, and a switch of layout shows only what really
    changes. What is shared (a component in every stack that creates children under it) is kept once. Returns a
    note naming the stacks ("" for a single stack's plan) and the stack that holds each URN."""
    if not path.is_dir():
        return "", {}
    resources: dict[str, dict] = {}
    held: dict[str, str] = {}
    outputs: dict = {}
    stacks = []
    for part in sorted(path.glob("*.json")):
        text = part.read_text().replace(f"urn:pulumi:{part.stem}::", f"urn:pulumi:{env}::")
        # The root's name holds the stack's: `ml-platform-<stack>`, the parent of every top-level resource.
        text = text.replace(f'pulumi:pulumi:Stack::{PROJECT}-{part.stem}"', f'pulumi:pulumi:Stack::{PROJECT}-{env}"')
        doc = json.loads(text)
        stacks.append(f"{part.stem} ({len(doc['resources'])})")
        for resource in doc["resources"]:
            resources.setdefault(resource["urn"], resource)
            held.setdefault(resource["urn"], part.stem)
        if part.stem.endswith("-platform"):
            outputs = doc.get("outputs", {})
        merged = doc
    folder = path.with_name(path.name + ".stacks")
    path.rename(folder)
    merged = {
        **merged,
        "stack": env,
        "resources": sorted(resources.values(), key=lambda r: r["urn"]),
        "outputs": outputs,
    }
    path.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
    return f"layout: layered, compared as one ({', '.join(stacks)}; each stack's plan in {folder.name}/)", held


# Secret inputs of a node group's resources that come from the cluster stack's outputs (the agents' join token on
# the RKE2 step's stdin; the Node-patching kubeconfig): an offline preview knows them in neither layout (computed
# in one stack, placeholders in the group's config), so their digests say nothing.
FROM_CLUSTER = ("inputs.stdin", "inputs.kubeconfig")


def within_stacks(path: Path, held: dict[str, str]) -> None:
    """`path`'s plan with each resource's dependencies limited to those in its own layered stack (`held`): across
    stacks the orchestrator's order stands in for them, which a comparison of layouts must not show as a change;
    a node group's secrets from the cluster stack (FROM_CLUSTER) are not compared."""
    plan = json.loads(path.read_text())
    for resource in plan["resources"]:
        own = held.get(resource["urn"])
        if own is None:
            continue
        if "-nodes-" in own:
            digests = resource.get("secretDigests", {})
            resource["secretDigests"] = {k: v for k, v in digests.items() if k not in FROM_CLUSTER}

        def same(urn: str, own: str = own) -> bool:
            return held.get(urn, own) == own

        resource["dependencies"] = [d for d in resource.get("dependencies", []) if same(d)]
        if "propertyDependencies" in resource:
            resource["propertyDependencies"] = {
                k: [d for d in v if same(d)] for k, v in resource["propertyDependencies"].items()
            }
    path.write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")


def helm_rollouts(base_json: Path, head_json: Path) -> rollouts.Report:
    """What the Helm releases that change do to running pods: both plans' changed releases rendered by Helm
    (`stacks.rollouts`). A release that cannot be rendered is reported in the section, not an error."""
    return rollouts.compare(json.loads(base_json.read_text()), json.loads(head_json.read_text()))


def markdown(reviews: list[StackReview], base: Side, head: Side) -> str:
    lines = [
        "## Offline preview: what this change does to each stack",
        "",
        f"Base `{base.label}`, head `{head.label}`. Evaluated on Pulumi's mock engine (no credentials, no"
        " hosts): `+` create, `~` update, `+-` replace, `-+` delete before replace, `-` delete, with old"
        " and new values; destructive steps first. The real `pulumi preview` of each stack follows in its"
        " own comment (branches of this repository only).",
    ]
    for review in reviews:
        lines += ["", f"### `{review.stack}`: {review.summary}"]
        if review.note:
            lines += ["", "```", review.note, "```"]
        if review.markdown:
            lines += ["", review.markdown]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.review", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision the change is compared with")
    parser.add_argument("--head", help="the revision of the change (default: the working tree)")
    parser.add_argument("--stack", action="append", dest="stacks", help="stack to compare (repeatable; default: all)")
    parser.add_argument("--out", type=Path, help="directory for plans, diffs and review.md (default: a temp dir)")
    parser.add_argument("--summary", type=Path, help="append the Markdown report to this file")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="ml-platform-review-") as scratch:
        out = args.out or Path(scratch) / "out"
        out.mkdir(parents=True, exist_ok=True)
        base = export(args.base, Path(scratch) / "base")
        head = export(args.head, Path(scratch) / "head") if args.head else working_tree()
        reviews = [review_stack(stack, base, head, out) for stack in args.stacks or STACKS]
        report = markdown(reviews, base, head)
        (out / "review.md").write_text(report)
    if args.summary:
        with args.summary.open("a") as summary:
            summary.write(report)
    print(report)
    return exit_status(reviews)


def exit_status(reviews: list[StackReview]) -> int:
    """3 when a change replaces or deletes a protected resource (as `stacks.plan --diff` and `pulumi preview`
    refuse it), 1 when a head cannot be planned, else 0."""
    if any(r.refused for r in reviews):
        return REFUSED
    return 0 if all(r.ok for r in reviews) else 1


if __name__ == "__main__":
    sys.exit(main())
