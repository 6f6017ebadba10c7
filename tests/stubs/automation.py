"""The stand-in for Pulumi's Automation API (`pulumi.automation`) that the orchestrator's tests run against: the
Pulumi CLI and a backend cannot run in the tests. This module is the one place that declares what it does.

It offers what `stacks.orchestration` calls, with the real signatures (every call is bound against the real
`pulumi.automation` function or method first, so a wrong keyword fails here as it would there) and the real
result types (`UpResult`, `PreviewResult`, `UpdateSummary`, `OutputValue`, `EngineEvent`, `CommandError`):
- `create_or_select_stack(name, work_dir=, opts=LocalWorkspaceOptions(secrets_provider=...))`: a stack is
  created with `opts.secrets_provider` the first time, selected after; `LocalWorkspace(...).list_stacks()`.
- `workspace.pulumi_command.run(["config", "cp", "--stack", SRC, "--dest", DST, ...])`: writes the source stack
  file's `config:` into `Pulumi.<DST>.yaml` in `work_dir`, each secret re-encrypted for DST (here: tagged with
  DST's name, so a value copied without re-encryption is visible); `workspace.remove_all_config(name, keys)`.
- `stack.up/preview/refresh/destroy(parallel=..., on_output=..., on_event=...)`, `stack.outputs()`,
  `stack.history(page_size=1)`: the programs are those of a layered environment (`Fleet`): the cluster stack
  exports `Fleet.cluster_outputs` (current values, which a test may change between runs); a node-group stack
  reads the cluster's values from its own config (`cluster-stack:*`, which the orchestrator sets with
  `config_input`: `pulumi config set [--secret] KEY`, the value on standard input), fails without them, exports
  their digest (`stacks.layers.digest_of` of `NODE_INPUTS`) and fails if it is in `Fleet.failing`; the platform
  stack reads the cluster's outputs as its StackReference would.
  Each run is recorded (stack, action, parallel, start and end order) with the config the stack held then.
"""

from __future__ import annotations

import inspect
import itertools
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import yaml
from pulumi import automation as real
from pulumi.automation._cmd import CommandResult

from stacks import layers

LocalWorkspaceOptions = real.LocalWorkspaceOptions
CommandError = real.CommandError
OutputValue = real.OutputValue

# A node's steps in a node-group stack's state, as the stand-in records them.
STEPS = ("prepare", "rke2")
CLUSTER_SECRETS = frozenset({"agentToken", "nodeKubeconfig", "kubeconfig", "rke2Token"})


def _conform(real_callable: Any, *args: Any, **kwargs: Any) -> None:
    """Raise TypeError as the real API would for these arguments."""
    inspect.signature(real_callable).bind(*args, **kwargs)


@dataclass
class Run:
    stack: str
    action: str
    parallel: Optional[int]
    started: int
    ended: int = -1
    config: dict[str, Any] = field(default_factory=dict)
    result: str = "in-progress"


@dataclass
class StackState:
    name: str
    secrets_provider: Optional[str]
    outputs: dict[str, OutputValue] = field(default_factory=dict)
    history: list[real.UpdateSummary] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    """URNs of its state (`pulumi stack export`): the root, and for a node group each node's steps."""


class Fleet:
    """The backend and the programs of one layered environment, as the stand-in runs them."""

    def __init__(self, env: str, work_dir: Path, cluster_outputs: dict[str, str]):
        self.env = env
        self.work_dir = Path(work_dir)
        self.cluster_outputs = dict(cluster_outputs)
        self.failing: set[str] = set()
        self.members: dict[str, list[str]] = {}  # group -> the nodes its program holds (its `nodes` output)
        self.changes: dict[str, list[tuple[str, str, bool]]] = {}  # stack -> preview steps (op, type, custom)
        self.barrier: Optional[threading.Barrier] = None  # node-group runs meet here (proves they overlap)
        self.stacks: dict[str, StackState] = {}
        self.runs: list[Run] = []
        self.cli: list[list[str]] = []
        self.options: list[tuple[str, str, dict[str, Any]]] = []  # stack, action, the call's plain keywords
        self._clock = itertools.count()
        self._lock = threading.Lock()
        self.active: dict[str, int] = {}
        self.peak_parallel = 0
        self.peak_stacks = 0

    # --- the module surface -----------------------------------------------------------------------------

    def create_or_select_stack(self, stack_name: str, project_name=None, program=None, work_dir=None, opts=None):
        _conform(real.create_or_select_stack, stack_name, project_name, program, work_dir=work_dir, opts=opts)
        with self._lock:
            if stack_name not in self.stacks:
                provider = opts.secrets_provider if opts else None
                self.stacks[stack_name] = StackState(stack_name, provider)
        return FakeStack(self, stack_name, Workspace(self, opts))

    def LocalWorkspace(self, **kwargs: Any) -> Workspace:  # noqa: N802 - the real class's name
        _conform(real.LocalWorkspace, **kwargs)
        return Workspace(self, LocalWorkspaceOptions(**kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(real, name)

    # --- stack files ------------------------------------------------------------------------------------------

    def stack_file(self, name: str) -> Path:
        return self.work_dir / f"Pulumi.{name}.yaml"

    def config(self, name: str) -> dict[str, Any]:
        path = self.stack_file(name)
        return (yaml.safe_load(path.read_text()) or {}).get("config") or {} if path.exists() else {}

    def _write_config(self, name: str, config: dict[str, Any]) -> None:
        path = self.stack_file(name)
        doc = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
        doc["config"] = config
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def config_cp(self, source: str, dest: str) -> None:
        if dest not in self.stacks:
            raise CommandError(CommandResult("", f"error: no stack named '{dest}' found", 255))

        def reencrypt(value: Any) -> Any:
            if isinstance(value, dict) and set(value) == {"secure"}:
                return {"secure": f"{dest}:{value['secure'].split(':', 1)[-1]}"}
            if isinstance(value, dict):
                return {k: reencrypt(v) for k, v in value.items()}
            if isinstance(value, list):
                return [reencrypt(v) for v in value]
            return value

        merged = {**self.config(dest), **{k: reencrypt(v) for k, v in self.config(source).items()}}
        self._write_config(dest, merged)

    # --- the programs -------------------------------------------------------------------------------------

    def cluster_now(self) -> dict[str, Any]:
        state = self.stacks.get(f"{self.env}-cluster")
        return {k: v.value for k, v in state.outputs.items()} if state else {}

    def program(self, name: str) -> dict[str, OutputValue]:
        if name == f"{self.env}-cluster":
            return {k: OutputValue(v, k in CLUSTER_SECRETS) for k, v in self.cluster_outputs.items()}
        cluster = self.cluster_now()
        if not cluster:
            raise RuntimeError(f"error: StackReference {self.env}-cluster: the stack has no outputs")
        if name.startswith(f"{self.env}-nodes-"):
            # What the orchestrator copied into the group's config (`cluster-stack:*`), secrets re-encrypted.
            own = self.config(name)
            missing = [k for k in layers.NODE_INPUTS if f"{layers.CLUSTER_CONFIG}:{k}" not in own]
            if missing:
                raise RuntimeError(f"error: {name}: {layers.CLUSTER_CONFIG}:{missing[0]} is not set")
            consumed = {k: _plain(own[f"{layers.CLUSTER_CONFIG}:{k}"]) for k in layers.NODE_INPUTS}
            group = name.removeprefix(f"{self.env}-nodes-")
            return {
                layers.DIGEST_OUTPUT: OutputValue(layers.digest_of(consumed), False),
                "nodes": OutputValue(list(self.members.get(group, [])), False),
                "environment": OutputValue(self.env, False),
                "group": OutputValue(group, False),
            }
        return {"apiEndpoint": OutputValue(cluster["apiEndpoint"], False)}

    def config_input(self, workspace: Any, args: list[str], value: str) -> None:
        """`pulumi config set [--secret|--plaintext] --stack NAME KEY` with the value on standard input."""
        assert value not in " ".join(args), "a config value on the command line"
        self.cli.append(list(args))
        if args[:2] != ["config", "set"]:
            raise CommandError(CommandResult("", f"the stand-in has no `pulumi {' '.join(args[:2])}` with input", 1))
        name, key = args[args.index("--stack") + 1], args[-1]
        config = self.config(name)
        config[key] = {"secure": f"{name}:{value}"} if "--secret" in args else value
        self._write_config(name, config)

    def operate(self, name: str, action: str, parallel: Optional[int], on_output, on_event=None) -> Any:
        with self._lock:
            run = Run(name, action, parallel, next(self._clock), config=self.config(name))
            self.runs.append(run)
            self.active[name] = parallel or 0
            self.peak_parallel = max(self.peak_parallel, sum(self.active.values()))
            self.peak_stacks = max(self.peak_stacks, len(self.active))
        try:
            if self.barrier is not None and name.startswith(f"{self.env}-nodes-") and action == "up":
                self.barrier.wait(timeout=10)
            if on_output:
                on_output(f"{action} {name}: running")
            state = self.stacks[name]
            if action == "preview":
                steps = self.changes.get(name, [("same", "command:remote:Command", True)])
                for op, type_, custom in steps:
                    if on_event:
                        on_event(_pre_event(op, f"urn:pulumi:{name}::ml-platform::{type_}::x", type_, custom))
                run.result = "succeeded"
                counts: dict[Any, int] = {}
                for op, _, _ in steps:
                    counts[real.OpType(op)] = counts.get(real.OpType(op), 0) + 1
                return real.PreviewResult("", "", counts)
            try:
                if name in self.failing:
                    raise RuntimeError(f"error: {action} failed: {name}: a host step exited with status 1")
                outputs = self.program(name) if action in ("up", "refresh") else {}
            except RuntimeError as exc:
                run.result = "failed"
                state.history.insert(0, _summary(action, "failed"))
                raise CommandError(CommandResult("", str(exc), 255)) from exc
            root = f"urn:pulumi:{name}::ml-platform::pulumi:pulumi:Stack::ml-platform-{name}"
            if action == "up":
                state.outputs = outputs
                held = outputs["nodes"].value if "nodes" in outputs else []
                steps = [
                    f"urn:pulumi:{name}::ml-platform::command:remote:Command::{n}-{s}" for n in held for s in STEPS
                ]
                state.resources = [root, *steps]
            if action == "destroy":
                state.outputs = {}
                state.resources = []
            run.result = "succeeded"
            summary = _summary(action, "succeeded")
            state.history.insert(0, summary)
            if action == "up":
                return real.UpResult("", "", summary, dict(state.outputs))
            return (real.RefreshResult if action == "refresh" else real.DestroyResult)("", "", summary)
        finally:
            with self._lock:
                run.ended = next(self._clock)
                del self.active[name]

    # --- what the tests read ------------------------------------------------------------------------------

    def ran(self, action: str = "up") -> list[str]:
        return [r.stack for r in self.runs if r.action == action]


def _plain(value: Any) -> Any:
    """A config value as the program reads it: a secret decrypted (here: its stack tag taken off)."""
    return value["secure"].split(":", 1)[1] if isinstance(value, dict) and set(value) == {"secure"} else value


def _summary(kind: str, result: str) -> real.UpdateSummary:
    now = datetime.now()
    return real.UpdateSummary(
        kind={"up": "update"}.get(kind, kind),
        start_time=now,
        message="",
        environment={},
        config={},
        result=result,
        end_time=now,
        version=1,
        resource_changes={},
    )


def _pre_event(op: str, urn: str, type_: str, custom: bool) -> real.EngineEvent:
    state = {
        "type": type_,
        "urn": urn,
        "custom": custom,
        "delete": False,
        "id": "",
        "parent": "",
        "protect": False,
        "inputs": {},
        "outputs": {},
        "provider": "",
    }
    metadata = {"op": op, "urn": urn, "type": type_, "provider": "", "new": state}
    return real.EngineEvent.from_json({"sequence": 1, "timestamp": 0, "resourcePreEvent": {"metadata": metadata}})


class Command:
    def __init__(self, fleet: Fleet):
        self.fleet = fleet

    def run(self, args, cwd, additional_env, on_output=None, on_error=None):
        _conform(real.PulumiCommand.run, None, args, cwd, additional_env, on_output, on_error)
        self.fleet.cli.append(list(args))
        if args[:2] == ["config", "cp"]:
            self.fleet.config_cp(args[args.index("--stack") + 1], args[args.index("--dest") + 1])
            return CommandResult("", "", 0)
        raise CommandError(CommandResult("", f"the stand-in has no `pulumi {' '.join(args[:2])}`", 1))


class Workspace:
    def __init__(self, fleet: Fleet, opts: Optional[LocalWorkspaceOptions]):
        self.fleet = fleet
        self.work_dir = str(fleet.work_dir)
        self.pulumi_home = opts.pulumi_home if opts else None
        self.env_vars = dict(opts.env_vars or {}) if opts else {}
        self.secrets_provider = opts.secrets_provider if opts else None
        self.pulumi_command = Command(fleet)

    def remove_all_config(self, stack_name: str, keys: list[str], *, path: bool = False) -> None:
        _conform(real.LocalWorkspace.remove_all_config, None, stack_name, keys, path=path)
        self.fleet.cli.append(["config", "rm-all", "--stack", stack_name, *keys])
        config = self.fleet.config(stack_name)
        self.fleet._write_config(stack_name, {k: v for k, v in config.items() if k not in keys})

    def remove_stack(self, stack_name: str, force=None, preserve_config=None) -> None:
        _conform(real.LocalWorkspace.remove_stack, None, stack_name, force, preserve_config)
        if self.fleet.stacks[stack_name].outputs:
            raise CommandError(CommandResult("", f"error: {stack_name} still has resources", 255))
        self.fleet.cli.append(["stack", "rm", "--yes", stack_name])
        del self.fleet.stacks[stack_name]

    def list_stacks(self, include_all: Optional[bool] = None) -> list[real.StackSummary]:
        return [real.StackSummary(name, False) for name in sorted(self.fleet.stacks)]

    def stack_outputs(self, stack_name: str) -> dict[str, OutputValue]:
        return dict(self.fleet.stacks[stack_name].outputs)

    def export_stack(self, stack_name: str) -> real.Deployment:
        _conform(real.LocalWorkspace.export_stack, None, stack_name)
        resources = [{"urn": urn} for urn in self.fleet.stacks[stack_name].resources]
        return real.Deployment(version=3, deployment={"resources": resources})


class FakeStack:
    def __init__(self, fleet: Fleet, name: str, workspace: Workspace):
        self.fleet = fleet
        self.name = name
        self.workspace = workspace

    def _call(self, action: str, real_method: Any, kwargs: dict[str, Any]) -> Any:
        _conform(real_method, None, **kwargs)
        self.fleet.options.append((self.name, action, {k: v for k, v in kwargs.items() if not callable(v)}))
        return self.fleet.operate(
            self.name, action, kwargs.get("parallel"), kwargs.get("on_output"), kwargs.get("on_event")
        )

    def up(self, **kwargs: Any) -> real.UpResult:
        return self._call("up", real.Stack.up, kwargs)

    def preview(self, **kwargs: Any) -> real.PreviewResult:
        return self._call("preview", real.Stack.preview, kwargs)

    def refresh(self, **kwargs: Any) -> real.RefreshResult:
        return self._call("refresh", real.Stack.refresh, kwargs)

    def destroy(self, **kwargs: Any) -> real.DestroyResult:
        return self._call("destroy", real.Stack.destroy, kwargs)

    def outputs(self) -> dict[str, OutputValue]:
        return self.workspace.stack_outputs(self.name)

    def history(self, page_size=None, page=None, show_secrets=True) -> list[real.UpdateSummary]:
        _conform(real.Stack.history, None, page_size, page, show_secrets)
        entries = self.fleet.stacks[self.name].history
        return entries[:page_size] if page_size else list(entries)
