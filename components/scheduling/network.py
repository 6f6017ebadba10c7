"""The network policy of a team namespace: default deny both ways, then what the team needs.

Plain `networking.k8s.io/v1` NetworkPolicies, which Cilium and Calico both enforce, except the API server:
- Cilium does not let a NetworkPolicy `ipBlock` select cluster nodes (CIDR rules exclude the host and
  remote-node identities unless `policy-cidr-match-mode: nodes`), and the API server runs on the servers'
  host network; so with Cilium the allow is a namespaced CiliumNetworkPolicy to the `kube-apiserver`
  entity (Cilium docs, Policy Language, "Entities Based": kube-apiserver).
- Calico evaluates policy after the `kubernetes` Service's DNAT to a server's address, so an `ipBlock` of
  each server (and of the API endpoint) on the API port is the allow.

What a team pod reaches (docs/teams.md, "Network"): its own team's namespaces (all ports), cluster DNS
(CoreDNS in kube-system, `k8s-app: kube-dns` as RKE2's rke2-coredns chart labels it, the selector Cilium's
chart also assumes, values.yaml `dnsProxy`/`k8s-app=kube-dns`), the API server, and the `egressCidrs` the
settings give it, never the cluster's pod or service networks, its nodes or the NAS. What reaches a team pod:
its own team, and with KubeRay the operator on the Ray head's dashboard port (it submits and follows RayJobs).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from components.cluster.config import API_PORT
from components.scheduling.config import TEAM_LABEL
from settings import NodeSettings
from settings.cluster import ClusterSettings
from settings.network import NetworkSettings
from settings.nodes import NasHost
from settings.scheduling import Team, TrainingOperators
from settings.types import looks_like_ipv4

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}
RAY_HEAD_LABELS = {"ray.io/node-type": "head"}
RAY_DASHBOARD_PORT = 8265
CILIUM_API = "cilium.io/v2"


@dataclass(frozen=True)
class TenantNetwork:
    """What a team namespace's policies need to know of the cluster around it."""

    cni: str
    api_addresses: Sequence[str]  # the servers' addresses and the API endpoint when it is an address
    # Never reachable through `egressCidrs`: pod and service networks, every node, every NAS host.
    cluster_networks: Sequence[str]
    kuberay_namespace: Optional[str]


def team_network_policies(team: Team, net: TenantNetwork) -> list[tuple[str, dict[str, Any]]]:
    """(name, spec) of each NetworkPolicy in each of the team's namespaces."""
    same_team = {"namespaceSelector": {"matchLabels": {TEAM_LABEL: team.name}}}
    policies = [
        ("default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        (
            "same-team",
            {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [same_team]}],
                "egress": [{"to": [same_team]}],
            },
        ),
        (
            "dns",
            {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}},
                                "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
                            }
                        ],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                    }
                ],
            },
        ),
    ]
    if net.cni == "calico":
        policies.append(
            (
                "api-server",
                {
                    "podSelector": {},
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [{"ipBlock": {"cidr": f"{a}/32"}} for a in net.api_addresses],
                            "ports": [{"protocol": "TCP", "port": API_PORT}],
                        }
                    ],
                },
            )
        )
    if net.kuberay_namespace is not None:
        policies.append(
            (
                "kuberay-operator",
                {
                    "podSelector": {"matchLabels": dict(RAY_HEAD_LABELS)},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [
                                {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: net.kuberay_namespace}}}
                            ],
                            "ports": [{"protocol": "TCP", "port": RAY_DASHBOARD_PORT}],
                        }
                    ],
                },
            )
        )
    if team.egress_cidrs:
        policies.append(
            (
                "egress-cidrs",
                {
                    "podSelector": {},
                    "policyTypes": ["Egress"],
                    "egress": [{"to": [_ip_block(c, net.cluster_networks) for c in team.egress_cidrs]}],
                },
            )
        )
    return policies


def _ip_block(cidr: str, cluster_networks: Sequence[str]) -> dict[str, Any]:
    """`cidr` without every cluster network inside it (an `except` must lie strictly inside its `cidr`;
    settings refuse a `cidr` that lies inside a cluster network)."""
    outer = ipaddress.ip_network(cidr)
    inside = sorted(
        {str(n) for n in map(ipaddress.ip_network, cluster_networks) if n.subnet_of(outer) and n != outer},
        key=lambda n: (ipaddress.ip_network(n).network_address, ipaddress.ip_network(n).prefixlen),
    )
    return {"ipBlock": {"cidr": str(outer), **({"except": inside} if inside else {})}}


def cilium_api_policy() -> dict[str, Any]:
    """The CiliumNetworkPolicy spec allowing every pod of its namespace to the API server (Cilium only)."""
    return {
        "endpointSelector": {},
        "egress": [
            {
                "toEntities": ["kube-apiserver"],
                "toPorts": [{"ports": [{"port": str(API_PORT), "protocol": "TCP"}]}],
            }
        ],
    }


def tenant_network(
    network: NetworkSettings,
    cluster: ClusterSettings,
    nodes: Sequence[NodeSettings],
    nas_hosts: Sequence[NasHost],
    operators: TrainingOperators,
) -> TenantNetwork:
    """What the team namespaces' policies need, from the settings."""
    servers = [n.address for n in nodes if n.control_plane]
    endpoint = [cluster.api_endpoint] if looks_like_ipv4(cluster.api_endpoint) else []
    hosts = [*(n.address for n in nodes), *(h.address for h in nas_hosts)]
    return TenantNetwork(
        cni=network.cni,
        api_addresses=sorted({*servers, *endpoint}),
        cluster_networks=[network.cluster_cidr, network.service_cidr, *(f"{a}/32" for a in hosts)],
        kuberay_namespace=operators.kuberay_namespace if operators.kuberay else None,
    )
