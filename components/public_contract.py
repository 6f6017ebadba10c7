"""PublicContract: the platform's public stack outputs, in the cluster, for every authenticated user.

The platform stack holds platform secrets (admin kubeconfig, RKE2 token, Zabbix credentials) and is
for the platform operators alone. Teams read the public part of the contract from here instead: the
ConfigMap `kube-public/ml-platform-contract`, one key per public output, its value the output as JSON.
Any authenticated identity (an OIDC user, a team's CI ServiceAccount) may read this one ConfigMap and
nothing else in `kube-public`. The `teams/` program publishes the same values as the stack outputs of
each team's stack (docs/teams.md, docs/outputs.md). Nothing secret may be given to it: the
constructor refuses a secret value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.common import InCluster

CONTRACT_NAMESPACE = "kube-public"
CONTRACT_CONFIGMAP = "ml-platform-contract"


@dataclass(frozen=True)
class PublicContractArgs:
    values: Mapping[str, Any]
    """Public output name -> value (plain or Output, never secret)."""
    in_cluster: InCluster


class PublicContract(pulumi.ComponentResource):
    """The ConfigMap of public outputs and the Role/RoleBinding that let authenticated users read it."""

    def __init__(self, name: str, args: PublicContractArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:contract:PublicContract", name, None, opts)
        k8s_opts = args.in_cluster.options(parent=self)
        data = {key: _public_json(key, value) for key, value in args.values.items()}
        k8s.core.v1.ConfigMap(
            f"{name}-configmap",
            metadata={"name": CONTRACT_CONFIGMAP, "namespace": CONTRACT_NAMESPACE},
            data=data,
            opts=k8s_opts,
        )
        reader = f"{CONTRACT_CONFIGMAP}-reader"
        role = k8s.rbac.v1.Role(
            f"{name}-reader",
            metadata={"name": reader, "namespace": CONTRACT_NAMESPACE},
            rules=[
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [CONTRACT_CONFIGMAP],
                    "verbs": ["get"],
                }
            ],
            opts=k8s_opts,
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-reader-binding",
            metadata={"name": reader, "namespace": CONTRACT_NAMESPACE},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": reader},
            subjects=[{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"}],
            opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=[role])),
        )
        self.register_outputs({})


def _public_json(key: str, value: Any) -> pulumi.Output[str]:
    output = pulumi.Output.from_input(value)

    def check(secret: bool) -> pulumi.Output[str]:
        if secret:
            raise ValueError(f"public contract: {key} is a secret; it may not be published to every team")
        return output.apply(lambda v: json.dumps(v, sort_keys=True))

    return pulumi.Output.from_input(output.is_secret()).apply(check)
