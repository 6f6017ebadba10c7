"""The layers in order, node groups in parallel, under one `--parallel` budget.

- `up`, `refresh`, `preview`: `<env>-cluster`, then every `<env>-nodes-<group>` at once, then `<env>-platform`.
  `destroy`: the reverse.
- The budget: `--parallel N` is the most resource operations (for host steps: SSH sessions through the bastion)
  running at once across all stacks. The cluster and platform stacks run alone and get all N. Node groups run in
  `min(groups, N)` slots; slot i gets `N // slots` (+1 for the first `N % slots` slots), so the slots add up to N
  exactly. A group takes the first free slot and that slot's share; with fewer slots than groups the others wait.
- A group that fails does not stop the others. `up` runs the platform layer only when every group of the
  environment is up to date: its last update succeeded and its `clusterDigest` equals the digest of the cluster
  stack's current outputs. Otherwise it says which groups hold it back and why, and does not run it.
- `up --resume` runs only the groups that are not up to date (failed, never deployed, or stale).
- `destroy` stops at the first layer that fails: groups are not destroyed under a platform that is still there,
  nor the cluster under groups that are.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional

from stacks.layers import DIGEST_OUTPUT, NODE_INPUTS, StackSpec, digest_of
from stacks.orchestration import guards
from stacks.orchestration.workspace import Environment

ACTIONS = ("preview", "up", "refresh", "destroy")


def shares(budget: int, stacks: int) -> list[int]:
    """The `--parallel` of each concurrent slot: `min(stacks, budget)` slots whose shares add up to `budget`."""
    if budget < 1:
        raise ValueError(f"--parallel {budget}: give at least 1 (the most operations at once across all stacks)")
    slots = max(1, min(stacks, budget))
    return [budget // slots + (1 if i < budget % slots else 0) for i in range(slots)]


@dataclass
class Result:
    stack: str
    layer: str
    group: Optional[str]
    status: str  # succeeded | failed | not run | up to date
    parallel: Optional[int] = None
    note: str = ""
    changes: dict[str, int] = field(default_factory=dict)


@dataclass
class Report:
    action: str
    results: list[Result] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)  # group stack -> why
    held: str = ""  # why the platform layer (or the next destroy layer) did not run

    @property
    def ok(self) -> bool:
        return all(r.status in ("succeeded", "up to date") for r in self.results)


class Orchestrator:
    def __init__(self, environment: Environment, specs: Sequence[Any], out: Callable[[str], None] = print):
        self.environment = environment
        self.specs = list(specs)
        self.out = out
        self._lock = threading.Lock()
        self._stacks: dict[str, Any] = {}
        self.allowed: set[str] = set()  # preview --check: URNs that may be created
        self.members: dict[str, list[str]] = {}  # group -> its agents, by the settings (moved nodes are refused)
        # up: a failed step stops only what depends on it in its stack (one dead host in a group of 64)
        self.continue_on_error = False

    # --- the stacks ---------------------------------------------------------------------------------------

    def layer(self, name: str) -> list[Any]:
        return [s for s in self.specs if s.layer == name]

    def stack(self, spec: Any) -> Any:
        if spec.name not in self._stacks:
            self._stacks[spec.name] = self.environment.open(spec.name, spec.layer)
        return self._stacks[spec.name]

    def stack_of(self, name: str) -> Any:
        return self._stacks[name]

    def say(self, line: str) -> None:
        with self._lock:
            self.out(line)

    def _printer(self, name: str) -> Callable[[str], None]:
        def emit(text: str) -> None:
            for line in text.rstrip("\n").splitlines():
                self.say(f"[{name}] {line}")

        return emit

    def _op(self, spec: Any, action: str, parallel: int, check: bool = False) -> Result:
        auto = self.environment.auto
        result = Result(spec.name, spec.layer, spec.group, "failed", parallel)
        self.say(f"{spec.name}: {action} --parallel {parallel}")
        try:
            stack = self.stack(spec)
            if spec.layer == "nodes" and action in ("up", "preview"):  # the two that run the program
                cluster = {k: v.value for k, v in self.stack(self.layer("cluster")[0]).outputs().items()}
                if action == "preview" and not all(cluster.get(key) for key in NODE_INPUTS):
                    result.status = "not run"
                    result.note = "the cluster stack has no outputs yet: a node group previews after its first up"
                    self.say(f"{spec.name}: preview not run: {result.note}")
                    return result
                self.environment.pass_cluster_values(stack, cluster)
            kwargs: dict[str, Any] = {"parallel": parallel, "on_output": self._printer(spec.name)}
            if action == "preview":
                steps: list[Any] = []
                if check:
                    kwargs["on_event"] = lambda event: steps.append(event)
                done = stack.preview(**kwargs)
                result.changes = _counts(done.change_summary)
                changed = [
                    f"{op} {urn}" for op, urn in changes_of(steps) if not (op == "create" and urn in self.allowed)
                ]
                if changed:
                    raise RuntimeError(f"{len(changed)} change(s) where none may be: " + "; ".join(changed[:5]))
            elif action == "up":
                done = stack.up(show_secrets=False, continue_on_error=self.continue_on_error or None, **kwargs)
                result.changes = _counts(done.summary.resource_changes)
            elif action == "refresh":
                stack.refresh(show_secrets=False, **kwargs)
            else:
                stack.destroy(show_secrets=False, **kwargs)
            result.status = "succeeded"
        except auto.CommandError as exc:
            result.note = _last_error_line(str(exc))
        except Exception as exc:  # noqa: BLE001 - one stack's failure must not stop the others: reported
            result.note = f"{type(exc).__name__}: {exc}"
        self.say(f"{spec.name}: {action} {result.status}{': ' + result.note if result.note else ''}")
        return result

    def _groups(self, specs: list[Any], action: str, budget: int, check: bool = False) -> list[Result]:
        if not specs:
            return []
        slots = shares(budget, len(specs))
        free = list(slots)
        free_lock = threading.Lock()

        def one(spec: Any) -> Result:
            with free_lock:
                share = free.pop(0)
            try:
                return self._op(spec, action, share, check)
            finally:
                with free_lock:
                    free.append(share)

        self.say(f"node groups: {len(specs)} stacks, {len(slots)} at once, --parallel {'+'.join(map(str, slots))}")
        with ThreadPoolExecutor(max_workers=len(slots)) as pool:
            return list(pool.map(one, specs))

    # --- what is up to date --------------------------------------------------------------------------------

    def current_digest(self) -> Optional[str]:
        cluster = self.layer("cluster")[0]
        outputs = {key: value.value for key, value in self.stack(cluster).outputs().items()}
        if any(outputs.get(key) is None for key in NODE_INPUTS):
            return None
        return digest_of({key: outputs[key] for key in NODE_INPUTS})

    def group_state(self, spec: Any, digest: Optional[str]) -> tuple[str, str]:
        """("up to date" | "failed" | "running" | "never" | "stale", why)."""
        stack = self.stack(spec)
        history = stack.history(page_size=1, show_secrets=False)
        if not history:
            return "never", "never deployed"
        last = history[0]
        if last.kind == "destroy":
            return "never", "destroyed"
        if last.result == "in-progress":
            return "running", f"an {last.kind} is in progress (another run, or one that was killed: its lock)"
        if last.result != "succeeded":
            return "failed", f"its last {last.kind} {last.result}"
        exported = stack.outputs().get(DIGEST_OUTPUT)
        if digest is None:
            return "stale", "the cluster stack has no outputs to join with"
        if exported is None:
            return "stale", f"it exports no {DIGEST_OUTPUT}"
        if exported.value != digest:
            return "stale", "the cluster's outputs changed since its last up (CA, agent token or node credential)"
        return "up to date", ""

    def states(self, digest: Optional[str]) -> dict[str, tuple[str, str]]:
        return {spec.name: self.group_state(spec, digest) for spec in self.layer("nodes")}

    # --- the actions ------------------------------------------------------------------------------------------

    def run(
        self,
        action: str,
        parallel: int,
        groups: Optional[Sequence[str]] = None,
        resume: bool = False,
        check: bool = False,
        allowed: frozenset[str] | set[str] = frozenset(),
    ) -> Report:
        shares(parallel, 1)  # the budget's own check, before anything runs
        self.allowed = set(allowed)
        if action not in ACTIONS:
            raise ValueError(f"{action}: not one of {', '.join(ACTIONS)}")
        retired = self.retired()
        if action == "destroy" and groups is not None:
            return self._destroy(Report(action), parallel, self.choose_retired(groups, retired), True)
        chosen = self.choose(groups)
        report = Report(action)
        if action == "destroy":
            return self._destroy(report, parallel, chosen, False)
        self.refuse_unsafe(action, retired)
        (cluster,) = self.layer("cluster")
        report.results.append(self._op(cluster, action, parallel, check))
        if action == "up" and report.results[-1].status != "succeeded":
            report.held = f"{cluster.name} failed: no node group or platform stack ran"
            return self._finish(report)
        digest = self.current_digest()
        before = self.states(digest) if (action == "up" and resume) or action == "preview" else {}
        if action == "up" and resume:
            todo = [s for s in chosen if before[s.name][0] != "up to date"]
            for spec in chosen:
                if spec not in todo:
                    report.results.append(Result(spec.name, "nodes", spec.group, "up to date"))
        else:
            todo = chosen
        report.results += self._groups(todo, action, parallel, check)
        (platform,) = self.layer("platform")
        if action == "up":
            after = self.states(digest)
            report.stale = {name: why for name, (state, why) in after.items() if state == "stale"}
            behind = {name: f"{state}: {why}" for name, (state, why) in after.items() if state != "up to date"}
            if behind:
                report.held = f"{platform.name} not run: it waits for every node group, and " + "; ".join(
                    f"{name} is {why}" for name, why in sorted(behind.items())
                )
                report.results.append(Result(platform.name, "platform", None, "not run", note="held back"))
                return self._finish(report)
        else:
            report.stale = {name: why for name, (state, why) in before.items() if state == "stale"}
        report.results.append(self._op(platform, action, parallel, check))
        return self._finish(report)

    def run_stack(
        self,
        action: str,
        name: str,
        parallel: int,
        check: bool = False,
        allowed: frozenset[str] | set[str] = frozenset(),
    ) -> Report:
        """One stack of the environment (a CI job per stack): the platform's `up` refuses to run unless every
        node group is up to date, as in a whole run."""
        spec = next((s for s in self.specs if s.name == name), None)
        if spec is None:
            raise ValueError(
                f"--stack {name}: not a stack of {self.environment.env} ({', '.join(s.name for s in self.specs)})"
            )
        report = Report(action)
        if action != "destroy":
            self.refuse_unsafe(action, self.retired())
        if action == "up" and spec.layer == "platform":
            behind = {
                n: f"{state}: {why}"
                for n, (state, why) in self.states(self.current_digest()).items()
                if state != "up to date"
            }
            report.stale = {n: why for n, why in behind.items() if why.startswith("stale")}
            if behind:
                report.held = f"{name} not run: it waits for every node group, and " + "; ".join(
                    f"{n} is {why}" for n, why in sorted(behind.items())
                )
                report.results.append(Result(name, "platform", None, "not run", note="held back"))
                return self._finish(report)
        self.allowed = set(allowed)
        report.results.append(self._op(spec, action, parallel, check))
        return self._finish(report)

    def _destroy(self, report: Report, parallel: int, chosen: list[Any], only_groups: bool) -> Report:
        if only_groups:
            # Retired groups: once destroyed, their stacks go too (nothing declares them any more).
            report.results += self._groups(chosen, "destroy", parallel)
            for result in report.results:
                if result.status == "succeeded":
                    self.stack_of(result.stack).workspace.remove_stack(result.stack)
                    result.note = "stack removed"
            return self._finish(report)
        (platform,) = self.layer("platform")
        (cluster,) = self.layer("cluster")
        report.results.append(self._op(platform, "destroy", parallel))
        if report.results[-1].status != "succeeded":
            report.held = f"{platform.name} failed to destroy: node groups and the cluster are kept"
            return self._finish(report)
        report.results += self._groups(chosen, "destroy", parallel)
        failed = [r.stack for r in report.results if r.status != "succeeded"]
        if failed:
            report.held = f"{cluster.name} kept: {', '.join(failed)} failed to destroy"
            report.results.append(Result(cluster.name, "cluster", None, "not run", note="held back"))
            return self._finish(report)
        report.results.append(self._op(cluster, "destroy", parallel))
        return self._finish(report)

    def retired(self) -> list[StackSpec]:
        """This environment's node-group stacks of groups the settings no longer declare (their last nodes
        removed): `guards.retired`."""
        return guards.retired(self.environment, self.specs, self.environment.existing())

    def refuse_unsafe(self, action: str, retired: list[StackSpec]) -> None:
        """`up` refuses (a preview or refresh warns) when running would break the environment (`guards`)."""
        env = self.environment.env
        problems = []
        unmigrated = guards.unmigrated(self.environment)
        if unmigrated:
            problems.append(unmigrated)
        if retired:
            problems.append(
                f"{', '.join(s.name for s in retired)}: the stack of a node group the settings no longer declare; its "
                f"nodes are neither drained nor deleted until `python -m stacks.orchestrate destroy {env} --groups "
                f"{','.join(s.group for s in retired)}` (a renamed group: docs/runbook.md, section 24's moves)"
            )
        moves = guards.moved_nodes(self.environment, self.specs, self.members, self.environment.existing())
        if moves:
            problems.append(
                "a node changes group: its old group's stack would drain and uninstall it while the new one joins it. "
                "Move its resources first:\n  " + "\n  ".join(moves)
            )
        if problems and action == "up":
            raise ValueError("\n".join(problems))
        for problem in problems:
            self.say(f"warning: {problem}")

    def choose_retired(self, groups: Sequence[str], retired: list[StackSpec]) -> list[StackSpec]:
        """`destroy --groups`: only groups the settings no longer declare (a declared group's nodes leave by
        being removed from the settings, then `up`)."""
        by_group = {s.group: s for s in retired}
        declared = [g for g in groups if g not in by_group]
        if declared:
            raise ValueError(
                f"--groups {','.join(declared)}: destroy takes a group only once the settings no longer declare it "
                f"(retired groups: {', '.join(sorted(by_group)) or 'none'}); to retire a group, remove its nodes from "
                "the settings and run up, or destroy the whole environment without --groups"
            )
        return [by_group[g] for g in dict.fromkeys(groups)]

    def choose(self, groups: Optional[Sequence[str]]) -> list[Any]:
        specs = self.layer("nodes")
        if groups is None:
            return specs
        known = {s.group: s for s in specs}
        unknown = [g for g in groups if g not in known]
        if unknown:
            raise ValueError(
                f"--groups: {', '.join(unknown)} not a node group of {self.environment.env} "
                f"(its groups: {', '.join(sorted(known))})"
            )
        return [known[g] for g in dict.fromkeys(groups)]

    def _finish(self, report: Report) -> Report:
        self.say("")
        self.say(f"{report.action} {self.environment.env}:")
        for r in report.results:
            budget = f"--parallel {r.parallel}" if r.parallel else ""
            changes = ", ".join(f"{k} {v}" for k, v in sorted(r.changes.items()) if k != "same" and v)
            detail = "; ".join(x for x in (budget, changes, r.note) if x)
            self.say(f"  {r.stack:<40} {r.status:<10} {detail}")
        if report.stale:
            self.say("stale node groups (their cluster digest differs from the cluster stack's current outputs):")
            for name, why in sorted(report.stale.items()):
                self.say(f"  {name}: {why}")
        if report.held:
            self.say(report.held)
        if not report.ok and report.action == "up":
            self.say(
                f"to resume: python -m stacks.orchestrate up {self.environment.env} --resume "
                "(runs the cluster stack, then only the groups that failed or are stale, then the platform)"
            )
        return report


def changes_of(events: Sequence[Any]) -> list[tuple[str, str]]:
    """The steps of a preview that change a deployed resource. Not counted: `same`; `read` (the stack
    reference a layered stack reads the cluster's outputs through); `create` of a component (no state outside
    Pulumi's); `create` or `update` of a provider (a configuration, nothing deployed: a node group's provider
    moved from the single stack takes the Node-patching kubeconfig; what that does to a resource shows as that
    resource's own step)."""
    found = []
    for event in events:
        pre = getattr(event, "resource_pre_event", None)
        if pre is None:
            continue
        step = pre.metadata
        op = getattr(step.op, "value", step.op)
        if op in ("same", "read"):
            continue
        if op == "create" and not step.new.custom:
            continue
        if op in ("create", "update") and step.type.startswith("pulumi:providers:"):
            continue
        found.append((op, step.urn))
    return found


def _counts(summary: Any) -> dict[str, int]:
    return {getattr(op, "value", op): n for op, n in dict(summary or {}).items()}


def _last_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line[line.index("error:") :] for line in lines if "error:" in line]
    return (errors or lines or ["failed"])[-1][:300]
