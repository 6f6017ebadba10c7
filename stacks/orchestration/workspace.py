"""The stacks of one environment on Pulumi's Automation API (`pulumi.automation`).

Every stack of the layered layout runs the project's own `__main__.py` (a local program: `work_dir` is the
project directory). The environment's settings live in `Pulumi.<env>.yaml`, whose stack `<env>` holds the
settings and their secrets and no resources. Each layered stack gets:
- the environment's secrets provider (`secretsprovider` of `Pulumi.<env>.yaml`; `passphrase` where the file
  carries an `encryptionsalt`; else the backend's default), given to `pulumi stack init` when the orchestrator
  creates the stack: one secrets provider per environment;
- a copy of the environment's config, made by `pulumi config cp --stack <env> --dest <stack>`: the CLI decrypts
  each secret with the environment's key and encrypts it with the stack's. No secret passes through this process
  or a command line (the Automation API's `set_all_config` puts every value on `pulumi config set-all`'s command
  line, readable in `ps` on a shared runner). Keys the environment no longer has are removed from the copy.
- Node-group stacks get no credential but the SSH key (`NODE_SECRETS`): every other secret of the environment
  (the RKE2 server token, the Zabbix admin password, any `secure:` value) is removed from their copy before
  they run. What they need from the cluster (the CA hash, the agent token and a credential that may only get and
  patch Nodes) the orchestrator copies from the cluster stack's outputs into their config before each preview or
  up (`cluster-stack:*`, stacks/layers.py), each value on the CLI's standard input: a StackReference would keep
  every output of the cluster stack, the admin kubeconfig too, in the group's state.
"""

from __future__ import annotations

import importlib
import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import yaml

from settings.secrets import SECRET_KEYS
from stacks.layers import CLUSTER_CONFIG, NODE_INPUTS, SECRET_NODE_INPUTS

# Runs `pulumi ARGS` with VALUE on standard input: (workspace, args, value).
ConfigInput = Callable[[Any, list[str], str], None]

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "ml-platform"
# The only credentials a node-group stack's config keeps: its steps log in to its hosts over SSH.
NODE_SECRETS = frozenset({f"{NAMESPACE}:sshPrivateKey"})


class StackFileError(ValueError):
    """The environment's stack file cannot be used: what is wrong and the fix."""


@dataclass(frozen=True)
class EnvironmentFile:
    """What the orchestrator reads of `Pulumi.<env>.yaml` itself (never a secret's value)."""

    path: Path
    secrets_provider: Optional[str]
    keys: tuple[str, ...]
    secret_keys: frozenset[str]


def _holds_secret(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"secure"} or any(_holds_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_secret(v) for v in value)
    return False


def read_stack_file(path: Path) -> EnvironmentFile:
    if not path.is_file():
        raise StackFileError(f"{path.name}: no such file; the environment's settings and secrets live there")
    doc = yaml.safe_load(path.read_text()) or {}
    if not isinstance(doc, dict):
        raise StackFileError(f"{path.name}: not a Pulumi stack file (a mapping with `config:`)")
    config = doc.get("config") or {}
    provider = doc.get("secretsprovider") or ("passphrase" if doc.get("encryptionsalt") else None)
    if doc.get("environment"):
        raise StackFileError(
            f"{path.name}: environment: the layered stacks get the environment's config by `pulumi config cp`, which "
            "does not carry Pulumi ESC imports, and a node-group stack must not import credentials it cannot be "
            "stripped of; put those values in `config:` (secrets with `pulumi config set --secret`)"
        )
    secret = {key for key, value in config.items() if _holds_secret(value)}
    secret |= {f"{NAMESPACE}:{key}" for key in SECRET_KEYS if f"{NAMESPACE}:{key}" in config}
    return EnvironmentFile(path, provider, tuple(config), frozenset(secret))


def withheld(layer: str, env_file: EnvironmentFile) -> list[str]:
    """The environment's config keys a stack of `layer` must not hold."""
    if layer != "nodes":
        return []
    return sorted(env_file.secret_keys - NODE_SECRETS)


class Environment:
    """Opens the layered stacks of `env` (created on first use) with the environment's provider and config."""

    def __init__(
        self,
        env: str,
        work_dir: Path = ROOT,
        auto: Optional[ModuleType] = None,
        env_vars: Optional[dict[str, str]] = None,
        config_input: Optional[ConfigInput] = None,
    ):
        self.env = env
        self.work_dir = Path(work_dir)
        self.auto = auto or importlib.import_module("pulumi.automation")
        self.file = read_stack_file(self.work_dir / f"Pulumi.{env}.yaml")
        self.env_vars = env_vars or {}
        self.config_input = config_input or _cli_with_input

    def options(self) -> Any:
        return self.auto.LocalWorkspaceOptions(
            work_dir=str(self.work_dir), secrets_provider=self.file.secrets_provider, env_vars=self.env_vars
        )

    def open(self, name: str, layer: str) -> Any:
        """The stack `name` (created with the environment's secrets provider if new), its config re-copied."""
        stack = self.auto.create_or_select_stack(name, work_dir=str(self.work_dir), opts=self.options())
        self.copy_config(stack, layer)
        return stack

    def copy_config(self, stack: Any, layer: str) -> None:
        workspace = stack.workspace
        self._cli(workspace, ["config", "cp", "--stack", self.env, "--dest", stack.name])
        copied = read_stack_file(self.work_dir / f"Pulumi.{stack.name}.yaml")
        drop = sorted((set(copied.keys) - set(self.file.keys)) | set(withheld(layer, self.file)))
        if drop:
            workspace.remove_all_config(stack.name, drop)
        left = read_stack_file(self.work_dir / f"Pulumi.{stack.name}.yaml")
        kept = sorted(set(withheld(layer, self.file)) & set(left.keys))
        if kept:
            raise StackFileError(f"stack {stack.name} still holds {', '.join(kept)} after removing it")

    def pass_cluster_values(self, stack: Any, cluster_outputs: Mapping[str, Any]) -> None:
        """The cluster stack's values a node group needs, into the group stack's config: `pulumi config set
        [--secret] KEY` reads each value from standard input (never a command line)."""
        missing = [key for key in NODE_INPUTS if cluster_outputs.get(key) in (None, "")]
        if missing:
            raise StackFileError(
                f"{self.env}-cluster has no {', '.join(missing)} output yet: run its `up` first "
                f"(python -m stacks.orchestrate up {self.env})"
            )
        for key in NODE_INPUTS:
            kind = "--secret" if key in SECRET_NODE_INPUTS else "--plaintext"
            args = ["config", "set", kind, "--stack", stack.name, f"{CLUSTER_CONFIG}:{key}"]
            self.config_input(stack.workspace, args, str(cluster_outputs[key]))

    def _cli(self, workspace: Any, args: list[str]) -> Any:
        env = {**({"PULUMI_HOME": workspace.pulumi_home} if workspace.pulumi_home else {}), **workspace.env_vars}
        return workspace.pulumi_command.run([*args, "--non-interactive"], workspace.work_dir, env)

    def existing(self) -> list[str]:
        """Names of the project's stacks the backend has."""
        workspace = self.auto.LocalWorkspace(**vars(self.options()))
        return sorted(summary.name.rsplit("/", 1)[-1] for summary in workspace.list_stacks())

    def outputs_of(self, name: str) -> dict[str, Any]:
        """A stack's outputs (secret ones as the engine returns them to its owner)."""
        workspace = self.auto.LocalWorkspace(**vars(self.options()))
        return {key: value.value for key, value in workspace.stack_outputs(name).items()}

    def urns_of(self, name: str) -> list[str]:
        """The URNs a stack's state holds (`pulumi stack export`)."""
        workspace = self.auto.LocalWorkspace(**vars(self.options()))
        return [r["urn"] for r in (workspace.export_stack(name).deployment or {}).get("resources") or []]

    def resources_in_own_stack(self) -> int:
        """Resources in the stack named like the environment, its root and providers aside (0: none, or no such
        stack; after `migrate` it keeps just those)."""
        if self.env not in self.existing():
            return 0
        return sum(1 for urn in self.urns_of(self.env) if not _root_or_provider(urn))


def _cli_with_input(workspace: Any, args: list[str], value: str) -> None:
    """`pulumi ARGS --non-interactive` with `value` on standard input (the CLI reads a config value from there when
    the command line has none), in the workspace's directory and environment."""
    env = {**os.environ, **({"PULUMI_HOME": workspace.pulumi_home} if workspace.pulumi_home else {})}
    env.update(workspace.env_vars)
    done = subprocess.run(
        [workspace.pulumi_command.command, *args, "--non-interactive"],
        input=value,
        text=True,
        capture_output=True,
        cwd=workspace.work_dir,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise StackFileError(f"pulumi {' '.join(args[:2])} {args[-1]}: {done.stderr.strip() or done.returncode}")


def _root_or_provider(urn: str) -> bool:
    kind = urn.split("::")[2] if urn.count("::") >= 3 else ""
    return kind.endswith("pulumi:pulumi:Stack") or kind.rsplit("$", 1)[-1].startswith("pulumi:providers:")
