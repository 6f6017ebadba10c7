"""The offline preview of a layered environment: each of its stacks evaluated on the mock engine in the order
the orchestrator runs them (stacks/layers.py), the node-group and platform stacks reading the cluster stack's
outputs through their StackReference. Before the cluster stack's first `up` those outputs are unknown, as a real
preview of a fresh environment shows them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pulumi.runtime import rpc

from settings import SettingsError
from stacks import layers
from stacks.engine import PROJECT, Plan, StackOutputs, load_stack_config, run
from stacks.plan import stack_settings

ORGANIZATION = "organization"  # what a self-managed backend calls every stack's organization


def evaluate_layered(env: str, config_file: Optional[Path] = None, only: Optional[str] = None) -> dict[str, Plan]:
    """Stack name -> its plan, in run order, from `Pulumi.<env>.yaml` (or `config_file`); `only`: that stack alone."""
    settings = stack_settings(env, config_file)
    config, secret_keys = load_stack_config(env, config_file)
    cluster = StackOutputs(
        values=dict.fromkeys(layers.CLUSTER_OUTPUTS, rpc.UNKNOWN),
        secret=frozenset({"agentToken", "nodeKubeconfig", "kubeconfig", "rke2Token"}),
    )
    references = {f"{ORGANIZATION}/{PROJECT}/{env}-cluster": cluster}
    plans = {}
    specs = layers.stack_specs(env, settings)
    if only is not None and only not in {s.name for s in specs}:
        raise SettingsError([f"--only {only}: not a stack of {env} (its stacks: {', '.join(s.name for s in specs)})"])
    for spec in specs:
        if only is not None and spec.name != only:
            continue
        own, own_secrets = node_config(config, secret_keys) if spec.layer == "nodes" else (config, secret_keys)
        plans[spec.name] = run(spec.name, own, own_secrets, stack_references=references)
    return plans


def node_config(
    config: dict[str, str], secret_keys: list[str], values: Optional[dict[str, str]] = None
) -> tuple[dict[str, str], list[str]]:
    """A node-group stack's config: the environment's, and the cluster stack's values the orchestrator sets
    (`values`; in a preview before the cluster's first `up`, placeholders of their form)."""
    values = values or {"caHash": "0" * 64, "agentToken": "agent-token", "nodeKubeconfig": "node-kubeconfig"}
    own = {**config, **{f"{layers.CLUSTER_CONFIG}:{k}": v for k, v in values.items()}}
    secrets = [*secret_keys, *(f"{layers.CLUSTER_CONFIG}:{k}" for k in sorted(layers.SECRET_NODE_INPUTS))]
    return own, secrets
