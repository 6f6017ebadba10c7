"""The IPoIB networks of the teams: a pool per team (its `scheduling.teams[].ipoibRange`) and a network per team
namespace. NetworkPolicies police only a pod's primary interface; on the secondary one a team's pods share an address
range with no other team, and admission (`<team>-pod-devices`) lets them attach only their own networks. What this
does not isolate (RDMA verbs below IP, on one partition) is in docs/limitations.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from settings import InfinibandSettings, NetworkSettings, NodeSettings
from settings.scheduling import Team


def team_pool_name(ib: InfinibandSettings, team: Team) -> str:
    return f"{ib.ipoib_network.name}-{team.name}"


def team_network_name(ib: InfinibandSettings, namespace: str) -> str:
    """The IPoIBNetwork, and its NetworkAttachmentDefinition in `namespace`, of a team namespace."""
    return f"{ib.ipoib_network.name}-{namespace}"


def team_ib_networks(network: NetworkSettings, gpu_nodes: Sequence[NodeSettings], teams: Sequence[Team]):
    """Per team, the IPoIB networks its pods may attach (none without a range of its own)."""
    ib = network.infiniband
    if not (ib.ipoib_network.enabled and gpu_nodes):
        return {}
    return {t.name: [team_network_name(ib, ns) for ns in t.namespace_names] for t in teams if t.ipoib_range}


def team_networks(
    name: str,
    parent: pulumi.Resource,
    teams: Sequence[Team],
    ib: InfinibandSettings,
    gpu_nodes: Sequence[NodeSettings],
    provider: k8s.Provider,
    depends_on: list[pulumi.Resource],
) -> None:
    """A pool per team with a range, and an IPoIBNetwork per namespace of such a team, children of `parent`."""
    # fabric.py imports this module: its spec builders are taken when called.
    from components.network.fabric import NETWORK_OPERATOR_NAMESPACE, ip_pool_spec, ipoib_network_spec

    for team in teams:
        if team.ipoib_range is None:
            continue
        team_pool = k8s.apiextensions.CustomResource(
            f"{name}-ipoib-pool-{team.name}",
            api_version="nv-ipam.nvidia.com/v1alpha1",
            kind="IPPool",
            metadata={"name": team_pool_name(ib, team), "namespace": NETWORK_OPERATOR_NAMESPACE},
            spec={**ip_pool_spec(ib), "subnet": team.ipoib_range},
            opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=depends_on),
        )
        for ns in team.namespace_names:
            spec = ipoib_network_spec(ib, gpu_nodes)
            spec.update(
                networkNamespace=ns,
                ipam=json.dumps({"type": "nv-ipam", "poolName": team_pool_name(ib, team)}, sort_keys=True),
            )
            k8s.apiextensions.CustomResource(
                f"{name}-ipoib-network-{ns}",
                api_version="mellanox.com/v1alpha1",
                kind="IPoIBNetwork",
                metadata={"name": team_network_name(ib, ns)},
                spec=spec,
                opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=[*depends_on, team_pool]),
            )
