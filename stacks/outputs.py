"""The stack outputs: the contract with the teams that consume this stack.

Other teams read these with `pulumi stack output` or a StackReference. Renaming or removing one, or
changing its type or secrecy, breaks them silently: every output is declared here once, the README's
outputs table is checked against this list, and `tests/test_outputs_contract.py` pins it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi


@dataclass(frozen=True)
class OutputSpec:
    name: str
    type: str  # "string", "integer", "list[string]", "map[string]"
    secret: bool
    description: str


CONTRACT: tuple[OutputSpec, ...] = (
    OutputSpec("apiEndpoint", "string", False, "The Kubernetes API address: `https://<endpoint>:6443`."),
    OutputSpec(
        "kubeconfig",
        "string",
        True,
        "Admin kubeconfig for the cluster, pointing at `apiEndpoint`. Secret: read with `--show-secrets`.",
    ),
)


def finalize(outputs: Mapping[str, Any]) -> dict[str, Any]:
    """The outputs to export: exactly the declared ones, in contract order, the secret ones wrapped
    as secrets whatever they hold."""
    declared = [spec.name for spec in CONTRACT]
    if set(outputs) != set(declared):
        missing, extra = sorted(set(declared) - set(outputs)), sorted(set(outputs) - set(declared))
        raise ValueError(f"stack outputs do not match stacks/outputs.py: missing {missing}, undeclared {extra}")
    return {
        spec.name: pulumi.Output.secret(outputs[spec.name]) if spec.secret else outputs[spec.name] for spec in CONTRACT
    }
