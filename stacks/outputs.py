"""The stack outputs: the operators' view of the platform, and the public contract with the teams.

The platform stack holds platform secrets (its config, its state, the secret outputs below) and is read
by the platform operators only. The non-secret outputs are the public contract: the program also writes
them to the cluster (`components/public_contract.py`), and each team reads them from its own stack of
the `teams/` program, which holds no platform secret (docs/outputs.md, docs/teams.md). A team never
references the platform stack: a StackReference copies every output of the stack it reads, secret ones
included, into the referencing stack's state.

Renaming or removing an output, or changing its type or secrecy, breaks consumers silently: every output
is declared here once, the outputs table of docs/outputs.md is checked against this list, and
`tests/test_outputs_contract.py` pins it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi


@dataclass(frozen=True)
class OutputSpec:
    name: str
    type: str  # "string", "integer", "number", "list[string]", "map[string]"
    secret: bool


# What each output means is written once, in the outputs table of docs/outputs.md (tests/test_docs.py
# holds that table's names, types and secrecy to this list).
CONTRACT: tuple[OutputSpec, ...] = (
    OutputSpec("apiEndpoint", "string", False),
    OutputSpec("kubeconfig", "string", True),
    OutputSpec("gpuNodes", "list[string]", False),
    OutputSpec("gpuTotal", "integer", False),
    OutputSpec("gpuSchedulable", "integer", False),
    OutputSpec("storageClasses", "map[string]", False),
    OutputSpec("cephNamespace", "string", False),
    OutputSpec("cephFaultTolerance", "string", False),
    OutputSpec("cni", "string", False),
    OutputSpec("rdmaResourceName", "string", False),
    OutputSpec("ibNetworkName", "string", False),
    OutputSpec("minioReadToleranceHosts", "integer", False),
    OutputSpec("minioWriteToleranceHosts", "integer", False),
    OutputSpec("minioUsableFraction", "number", False),
    OutputSpec("minioCaCert", "string", False),
    OutputSpec("minioRestoreCredentials", "map[map[string]]", True),
    OutputSpec("rke2Token", "string", True),
    OutputSpec("teamNamespaces", "map[list[string]]", False),
    OutputSpec("teamLocalQueues", "map[string]", False),
    OutputSpec("teamClusterQueues", "map[string]", False),
    OutputSpec("oidcLogin", "map[string]", False),
    OutputSpec("workloadPriorityClasses", "list[string]", False),
    OutputSpec("zabbixUrl", "string", False),
    OutputSpec("zabbixCaCert", "string", False),
    OutputSpec("zabbixApiUser", "string", False),
    OutputSpec("zabbixApiToken", "string", True),
    OutputSpec("zabbixAdminPassword", "string", True),
    OutputSpec("monitoredHosts", "list[string]", False),
    OutputSpec("acceptance", "map[map[string]]", False),
)


# Not secret, but the operators' alone: the inventory (node names, GPU counts, storage host counts, the
# Zabbix host list naming every machine, NAS hosts included). It changes with each node, and the
# contract's ConfigMap would be replaced on every node added or removed (ConfigMap data is replace-on-change).
OPERATORS_ONLY = frozenset(
    {"gpuNodes", "gpuTotal", "gpuSchedulable", "cephFaultTolerance", "monitoredHosts", "acceptance"}
)
PUBLIC: tuple[str, ...] = tuple(spec.name for spec in CONTRACT if not spec.secret and spec.name not in OPERATORS_ONLY)
"""The public contract: what every team may read (the cluster's ConfigMap and each team's stack)."""


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
