"""The offline preview of a layered environment: each of its stacks evaluated on the mock engine in the order
the orchestrator runs them (stacks/layers.py), the node-group and platform stacks reading the cluster stack's
outputs through their StackReference. Before the cluster stack's first `up` those outputs are unknown, as a real
preview of a fresh environment shows them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pulumi.runtime import rpc

from stacks import layers
from stacks.engine import PROJECT, Plan, StackOutputs, load_stack_config, run
from stacks.plan import stack_settings

ORGANIZATION = "organization"  # what a self-managed backend calls every stack's organization


def evaluate_layered(env: str, config_file: Optional[Path] = None) -> dict[str, Plan]:
    """Stack name -> its plan, in run order, from `Pulumi.<env>.yaml` (or `config_file`)."""
    settings = stack_settings(env, config_file)
    config, secret_keys = load_stack_config(env, config_file)
    cluster = StackOutputs(
        values=dict.fromkeys(layers.CLUSTER_OUTPUTS, rpc.UNKNOWN),
        secret=frozenset({"agentToken", "nodeKubeconfig", "kubeconfig", "rke2Token"}),
    )
    references = {f"{ORGANIZATION}/{PROJECT}/{env}-cluster": cluster}
    return {
        spec.name: run(spec.name, config, secret_keys, stack_references=references)
        for spec in layers.stack_specs(env, settings)
    }
