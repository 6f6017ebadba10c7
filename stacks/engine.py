"""Runs the real program on Pulumi's mock engine and records what the engine would receive.

No CLI, no backend, no credentials, no network: `pulumi.runtime.set_mocks` replaces the engine, and a
recording monitor keeps every `RegisterResource` request (type, name, parent, provider,
dependencies, inputs). The offline preview (`stacks.plan`) and the tests share this module.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pulumi
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import mocks
from pulumi.runtime import resource as pulumi_resource
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.proto import resource_pb2, source_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from settings import NAMESPACE, SettingsError
from settings import config_file as stack_file
from stacks.stack_config import PLACEHOLDER_SECRETS, PROJECT, load_stack_config

ROOT = Path(__file__).resolve().parent.parent

# How the engine marks secret and unknown values in a RegisterResource request.
_SECRET_SIG = "4dabf18193072939515e22adb298388d"
_SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
# The same key marks an asset (a file the engine reads, e.g. the host-script bundle): shown by its path.
_ASSET_VALUE = "c44067f5952c0a294b673a41bacd8c17"
# Types the mock engine answers itself (the stack; a StackReference reads `_Mocks.stack_references`).
_MOCKED_TYPES = ("pulumi:pulumi:Stack", "pulumi:pulumi:StackReference")
SECRET = "[secret]"
UNKNOWN = "[unknown]"


@dataclass
class Plan:
    project: str
    stack: str
    resources: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    # Inputs with secrets revealed, by URN: for tests that check what goes inside a secret (which
    # host a connection targets, that a token travels on stdin). Never written out.
    revealed: dict[str, Any] = field(default_factory=dict, repr=False)
    # Resource options the engine receives that are not inputs (deleteBeforeReplace, ...), by URN.
    options: dict[str, Any] = field(default_factory=dict, repr=False)
    # Objects the program reads and does not manage (`Resource.get`): type, name, the id it reads, parent,
    # provider and what it waits for. `pulumi up` reads them at every run; deleting one breaks the program.
    reads: list[dict[str, Any]] = field(default_factory=list)
    # Digest of each secret config value the stack file holds (of its ciphertext: public data), by key, so
    # that a diff can say a secret such as the join token changed where the resources carrying it do not show it.
    secret_config: dict[str, str] = field(default_factory=dict)
    # Stack outputs with secrets revealed (unknowns still marked): what a reader of the stack can decrypt.
    revealed_outputs: dict[str, Any] = field(default_factory=dict, repr=False)
    # The stack file's plain `ml-platform:` config (secrets are never in it): the review compares two plans'
    # settings field by field against what each field declares (stacks/diff/declared.py).
    settings: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        doc = {
            "project": self.project,
            "stack": self.stack,
            "resources": self.resources,
            "reads": self.reads,
            "outputs": self.outputs,
        }
        if self.secret_config:
            doc["secretConfig"] = self.secret_config
        if self.settings:
            doc["settings"] = self.settings
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"

    def by_type(self, type_: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r["type"] == type_]

    def named(self, name: str) -> dict[str, Any]:
        matches = [r for r in self.resources if r["name"] == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} resources named {name!r}")
        return matches[0]

    def by_urn(self) -> dict[str, dict[str, Any]]:
        return {r["urn"]: r for r in self.resources}


@dataclass(frozen=True)
class StackOutputs:
    """The outputs of another stack, as a `pulumi.StackReference` to it reads them."""

    values: Mapping[str, Any]
    secret: frozenset[str] = frozenset()


class _Mocks(mocks.Mocks):
    """A preview: resources echo their inputs; every computed output stays unknown. A StackReference
    reads the outputs given for its stack, the secret ones marked secret as the engine marks them."""

    def __init__(
        self, stack_references: Mapping[str, StackOutputs], reads: Optional[Mapping[tuple[str, str], dict]] = None
    ) -> None:
        self.stack_references = stack_references
        self.reads = reads or {}

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[Optional[str], dict]:
        if args.typ == "pulumi:pulumi:StackReference":
            name = args.inputs["name"]
            if name not in self.stack_references:
                raise KeyError(f"StackReference to {name!r}: no such stack (known: {sorted(self.stack_references)})")
            ref = self.stack_references[name]
            values = {k: _secret(v) if k in ref.secret else v for k, v in ref.values.items()}
            return name, {"name": name, "outputs": values, "secretOutputNames": sorted(ref.secret)}
        if (args.typ, args.resource_id) in self.reads:  # `Resource.get` of an object the caller described
            return args.resource_id, dict(self.reads[(args.typ, args.resource_id)])
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: mocks.MockCallArgs) -> tuple[dict, Optional[list[tuple[str, str]]]]:
        return {}, None


def _secret(value: Any) -> dict[str, Any]:
    """`value` marked secret, as the engine marks secret values it returns."""
    return {_SECRET_SIG: _SECRET_VALUE, "value": value}


class _RecordingMonitor(mocks.MockMonitor):
    def __init__(
        self,
        stack_references: Mapping[str, StackOutputs],
        computed: Optional[Mapping[str, Mapping[str, Any]]] = None,
        reads: Optional[Mapping[tuple[str, str], dict]] = None,
    ) -> None:
        super().__init__(_Mocks(stack_references, reads))
        self.computed = computed or {}
        self.requests: list[dict[str, Any]] = []
        self.reads: list[dict[str, Any]] = []
        self.revealed: dict[str, Any] = {}
        self.options: dict[str, Any] = {}

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = self._echo(request) if request.type not in _MOCKED_TYPES else super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            inputs = json_format.MessageToDict(request.object)
            self.revealed[response.urn] = _reveal(inputs)
            self.options[response.urn] = {
                "deleteBeforeReplace": bool(request.deleteBeforeReplace),
                "additionalSecretOutputs": sorted(request.additionalSecretOutputs),
                "protect": bool(request.protect),
                "retainOnDelete": bool(request.retainOnDelete),
                "replaceOnChanges": sorted(request.replaceOnChanges),
                "aliases": sorted(a.spec.name or a.urn for a in request.aliases),
                # Which inputs depend on which resources: a delete-before-replace deletes first the
                # dependents whose replace-on-change inputs depend on the replaced resource.
                "propertyDependencies": {
                    key: sorted(deps.urns) for key, deps in request.propertyDependencies.items() if deps.urns
                },
            }
            self.requests.append(
                {
                    "urn": response.urn,
                    "type": request.type,
                    "name": request.name,
                    "custom": bool(request.custom),
                    "parent": request.parent or None,
                    "provider": request.provider.rsplit("::", 1)[0] if request.provider else None,
                    "dependencies": sorted(set(request.dependencies)),
                    "inputs": _clean(inputs),
                    "options": _options(request),
                    "secretDigests": _secret_digests(inputs),
                }
            )
        return response

    def ReadResource(self, request):  # noqa: N802 (gRPC method name)
        """A read (`Resource.get`, StackReference): what it returns is kept in the reading stack's state."""
        response = super().ReadResource(request)
        self.reads.append(
            {
                "urn": response.urn,
                "type": request.type,
                "name": request.name,
                "id": request.id,
                "parent": request.parent or None,
                "provider": request.provider.rsplit("::", 1)[0] if request.provider else None,
                "dependencies": sorted(set(request.dependencies)),
            }
        )
        self.revealed[response.urn] = _reveal(json_format.MessageToDict(response.properties))
        return response

    def _echo(self, request) -> resource_pb2.RegisterResourceResponse:
        """A preview resource: its outputs are its inputs, as `_Mocks.new_resource` gives them.

        The request's own properties are the response. `MockMonitor` gets the same result by
        deserialising them and serialising them again, which is most of a large preview's time
        (docs/benchmarks.md, profile); secrets and unknowns pass through unchanged either way.
        `MockMonitor.resources` stays empty for these: the program reads no resource back by URN.
        """
        urn = self.make_urn(request.parent, request.type, request.name)
        outputs = request.object
        if request.name in self.computed:
            outputs = struct_pb2.Struct()
            outputs.CopyFrom(request.object)
            outputs.update(self.computed[request.name])
        return resource_pb2.RegisterResourceResponse(urn=urn, id=f"{request.name}-id", object=outputs)


def _options(request) -> dict[str, Any]:
    """The resource options that decide replace and delete (what `pulumi preview` applies to a diff)."""
    return {
        "protect": bool(request.protect),
        "deleteBeforeReplace": bool(request.deleteBeforeReplace),
        "replaceOnChanges": sorted(request.replaceOnChanges),
        "retainOnDelete": bool(request.retainOnDelete),
        "ignoreChanges": sorted(request.ignoreChanges),
    }


def _secret_digests(value: Any, path: str = "inputs") -> dict[str, str]:
    """A short digest of each secret input, by path, so a diff can say a secret changed without its value.

    Offline, every secret is a placeholder derived from public data (the `secure:` ciphertext in the
    stack file, see `load_stack_config`), so its digest reveals nothing the repository does not hold."""
    if isinstance(value, dict):
        if value.get(_SECRET_SIG) == _SECRET_VALUE:
            revealed = json.dumps(_reveal(value.get("value")), sort_keys=True)
            return {path: hashlib.sha256(revealed.encode()).hexdigest()[:16]}
        return {k: v for key, item in value.items() for k, v in _secret_digests(item, f"{path}.{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _secret_digests(item, f"{path}[{i}]").items()}
    return {}


def _clean(value: Any) -> Any:
    """Inputs as a reviewer should see them: secrets and unknowns replaced, integral floats as ints."""
    if isinstance(value, dict):
        if value.get(_SECRET_SIG) == _ASSET_VALUE:
            return {"asset": value.get("path")}
        if _SECRET_SIG in value:
            return SECRET
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if value == _UNKNOWN:
        return UNKNOWN
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _reveal(value: Any) -> Any:
    """Inputs with secret wrappers removed (unknowns still marked)."""
    if isinstance(value, dict):
        if value.get(_SECRET_SIG) == _ASSET_VALUE:
            return _clean(value)
        if _SECRET_SIG in value:
            return _reveal(value.get("value"))
        return {k: _reveal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_reveal(v) for v in value]
    return _clean(value)


def run(
    stack: str,
    config: dict[str, str],
    secret_keys: list[str],
    program: Optional[Callable[[], dict[str, Any]]] = None,
    *,
    project: str = PROJECT,
    stack_references: Optional[Mapping[str, StackOutputs]] = None,
    computed: Optional[Mapping[str, Mapping[str, Any]]] = None,
    reads: Optional[Mapping[tuple[str, str], dict]] = None,
) -> Plan:
    """Evaluate `program` (default: the real one, `stacks.platform.run`) for `stack` on the mock engine.

    `project`: the program's project (its `pulumi.Config()` namespace); `stack_references`: the
    outputs of the stacks it reads with `pulumi.StackReference`, by fully qualified stack name;
    `computed`: outputs that a real deployment computes, by resource name (tests: a generated
    password's `result`, a step's `stdout`), known to the program instead of unknown; `reads`: the
    objects `Resource.get` finds, by (type, id); their state is kept in `Plan.revealed` like inputs."""
    if program is None:
        from stacks import platform

        program = platform.run
    runtime_settings.reset_options(project=project, stack=stack)
    runtime_settings.set_root_resource(None)  # type: ignore[arg-type]
    pulumi.runtime.set_all_config(config, secret_keys)
    monitor = _RecordingMonitor(stack_references or {}, computed, reads)
    pulumi.runtime.set_mocks(monitor.mocks, project=project, stack=stack, preview=True, monitor=monitor)

    outputs: dict[str, Any] = {}
    revealed_outputs: dict[str, Any] = {}

    async def evaluate() -> None:
        for name, value in program().items():
            output = pulumi.Output.from_input(value)
            outputs[name] = await _resolve(output)
            revealed_outputs[name] = _clean(await output.future()) if await output.is_known() else UNKNOWN

    with _fewer_collections(), _no_stack_traces():
        _sync_await(run_pulumi_func(evaluate))
    resources = sorted(monitor.requests, key=lambda r: r["urn"])
    return Plan(
        project=project,
        stack=stack,
        resources=resources,
        outputs=dict(sorted(outputs.items())),
        revealed=monitor.revealed,
        options=monitor.options,
        reads=sorted(monitor.reads, key=lambda r: r["urn"]),
        revealed_outputs=revealed_outputs,
        settings=plain_settings(config, secret_keys) if project == PROJECT else {},
    )


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """Collect young objects every 50,000 allocations instead of 700 while the program runs.

    The SDK creates several futures, tasks and Outputs per input of every resource, nearly all
    alive until the end; with the default threshold the cycle collector scans them again and
    again, a third of a 1000-node preview's CPU time (docs/benchmarks.md). Memory stays bounded:
    collections still happen, only less often.
    """
    thresholds = gc.get_threshold()
    gc.set_threshold(50_000, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


@contextmanager
def _no_stack_traces() -> Iterator[None]:
    """Register resources without the caller's stack trace while the program runs on the mock engine.

    The SDK walks the Python stack of every resource it registers (`traceback.extract_stack`, with the
    source lines) for the engine's diagnostics (`sourcePosition`, `stackTrace` of RegisterResource); the
    mock engine and the plan use neither. At 1000 nodes that walk is several percent of the preview."""
    original = pulumi_resource._get_stack_trace
    pulumi_resource._get_stack_trace = lambda: source_pb2.StackTrace()
    try:
        yield
    finally:
        pulumi_resource._get_stack_trace = original


async def _resolve(output: pulumi.Output) -> Any:
    if await output.is_secret():
        return SECRET
    if not await output.is_known():
        return UNKNOWN
    return _clean(await output.future())


def plain_settings(config: dict[str, str], secret_keys: list[str]) -> dict[str, Any]:
    """The `ml-platform:` keys of a stack config that are not secrets, objects parsed from their JSON form."""
    found: dict[str, Any] = {}
    for full, value in config.items():
        namespace, _, key = full.partition(":")
        if namespace != NAMESPACE or full in secret_keys:
            continue
        try:
            found[key] = json.loads(value)
        except ValueError:
            found[key] = value
    return found


def evaluate_stack(stack: str, config_file: Optional[Path] = None) -> Plan:
    """The plan of `stack` from `Pulumi.<stack>.yaml` (or `config_file`). SettingsError lists the file's own
    problems (YAML syntax, duplicate keys, a misspelt project prefix) and the settings' problems together,
    each at its file:line."""
    path = config_file or ROOT / f"Pulumi.{stack}.yaml"
    located, file_problems = stack_file.read(path, NAMESPACE)
    if located is None:
        raise SettingsError(file_problems)
    config, secret_keys = load_stack_config(stack, config_file)
    previous = os.environ.get(stack_file.STACK_FILE_ENV)
    os.environ[stack_file.STACK_FILE_ENV] = str(path)
    try:
        plan = run(stack, config, secret_keys)
    except SettingsError as exc:
        # A misspelt prefix is also what the program itself finds among the config keys: say it once.
        known = tuple(p.split(": ", 1)[1] for p in file_problems)
        problems = [p for p in exc.problems if not p.endswith(known)]
        shown = [p for p in exc.shown if not p.endswith(known)]
        raise SettingsError(file_problems + problems, file_problems + shown) from None
    finally:
        if previous is None:
            os.environ.pop(stack_file.STACK_FILE_ENV, None)
        else:
            os.environ[stack_file.STACK_FILE_ENV] = previous
    if file_problems:
        raise SettingsError(file_problems)
    plan.secret_config = {
        key: config[key].rsplit("-", 1)[-1]
        for key in secret_keys
        if key not in PLACEHOLDER_SECRETS or config[key] != PLACEHOLDER_SECRETS[key]
    }
    return plan
