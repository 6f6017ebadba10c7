"""Rules about the networks: pod, service and IPoIB ranges against the hosts and the node count."""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import TYPE_CHECKING

from settings.rules.base import rule
from settings.rules.scheduling import component_namespaces, not_created

if TYPE_CHECKING:
    from settings.root import Settings


def _network_problems(s: Settings, add) -> None:
    ib = s.network.infiniband
    if ib.mode == "datagram" and ib.mtu > 4092:
        add(
            f"network.infiniband.mtu: {ib.mtu} is above 4092, the largest IPoIB MTU in datagram mode; "
            "lower it (2044 for a 2K IB MTU, 4092 for 4K) or set network.infiniband.mode: connected"
        )


def _network_capacity_problems(s: Settings, add) -> None:
    # RKE2 (kube-controller-manager) and Cilium's cluster-pool IPAM give every node a /24 of clusterCidr.
    cluster = ipaddress.IPv4Network(s.network.cluster_cidr)
    if cluster.prefixlen > 24:
        add(f"network.clusterCidr: {cluster} is smaller than one node's /24 pod range; use e.g. a /16")
    elif len(s.nodes) > 2 ** (24 - cluster.prefixlen):
        add(
            f"network.clusterCidr: {cluster} holds {2 ** (24 - cluster.prefixlen)} per-node /24 pod ranges but "
            f"there are {len(s.nodes)} nodes; choose a larger range (e.g. a /{24 - (len(s.nodes) - 1).bit_length()})"
        )
    ipoib = s.network.infiniband.ipoib_network
    if not ipoib.enabled:
        return
    net = ipaddress.IPv4Network(ipoib.range)
    gpu_nodes = s.gpu_nodes
    if len(gpu_nodes) * ipoib.per_node_block_size > net.num_addresses - 2:
        add(
            f"network.infiniband.ipoibNetwork.perNodeBlockSize: {len(gpu_nodes)} GPU nodes x "
            f"{ipoib.per_node_block_size} addresses do not fit in {net} ({net.num_addresses - 2} usable); "
            "lower the block size or widen the range"
        )
    interfaces = Counter(n.infiniband.interface for n in gpu_nodes if n.infiniband)
    if len(interfaces) > 1:
        common = interfaces.most_common(1)[0][0]
        for i, node in enumerate(s.nodes):
            if node.infiniband and node.role == "gpu" and node.infiniband.interface != common:
                add(
                    f"nodes[{i}].infiniband.interface: {node.infiniband.interface!r} differs from {common!r} "
                    "on the other GPU nodes; the IPoIB network (network.infiniband.ipoibNetwork) attaches "
                    "pods through one interface name on every GPU node: rename it (udev) or disable the network"
                )


def _ipoib_namespace_problems(s: Settings, add) -> None:
    """The NetworkAttachmentDefinition goes into a namespace that exists: `default` or one the platform's
    components create (a team's namespace is the team's: pods there reference `<namespace>/<name>`)."""
    ipoib = s.network.infiniband.ipoib_network
    if not ipoib.enabled:
        return
    others = component_namespaces(s)
    others.pop("network.infiniband.ipoib_network.namespace")
    created = {"default", *others.values()}
    if ipoib.namespace not in created:
        consequence = "the NetworkAttachmentDefinition cannot be created there"
        add(not_created("network.infiniband.ipoibNetwork.namespace", ipoib.namespace, consequence, created))


RULES = (
    rule(_network_problems, "the pod, service and IPoIB ranges against the hosts", "network nodes"),
    rule(_network_capacity_problems, "the pod and IPoIB ranges against the node count", "network nodes", "nodes"),
    rule(_ipoib_namespace_problems, "the IPoIB network's namespace", "*"),
)
