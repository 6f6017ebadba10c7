"""A small evaluator of `networking.k8s.io/v1` NetworkPolicy, written from the Kubernetes docs
(concepts/services-networking/network-policies) and the API reference:

- a pod is isolated for ingress (egress) when any policy of its namespace selects it (`podSelector`) and
  has `Ingress` (`Egress`) in `policyTypes` (default: Ingress, plus Egress when the policy has `egress`);
- a connection is allowed when the source's egress allows it (or the source is not isolated / not a pod)
  and the destination's ingress allows it (likewise); policies are additive: any rule of any selecting
  policy allows;
- a rule with no `from`/`to` (or an empty list) matches every peer, with no `ports` every port;
- a peer: `podSelector` alone selects pods of the policy's namespace, `namespaceSelector` alone every pod
  of the selected namespaces, both together the selected pods of the selected namespaces; `ipBlock`
  an address in `cidr` and in no `except`;
- a port: `protocol` (default TCP), a number or a name (resolved on the destination pod's container ports),
  `endPort` a range.

And what the two CNIs add that matters here: with Cilium an `ipBlock` never selects a cluster node (CIDR
rules exclude the host and remote-node identities), and a CiliumNetworkPolicy's `toEntities:
[kube-apiserver]` allows egress to the API server (additively with the NetworkPolicies).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class Endpoint:
    """A pod (`namespace` set) or a host address (a node, the NAS, something outside the cluster)."""

    name: str
    ip: str
    namespace: Optional[str] = None
    labels: dict[str, str] = field(default_factory=dict)
    ports: dict[str, tuple[int, str]] = field(default_factory=dict)  # named container ports
    node: bool = False  # a cluster node's address (host network)
    entities: frozenset[str] = frozenset()  # Cilium entities, e.g. kube-apiserver


def selects(selector: Optional[dict[str, Any]], labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


class Cluster:
    def __init__(self, namespaces: dict[str, dict[str, str]], policies: list[dict[str, Any]], cni: str = "calico"):
        """`namespaces`: name -> labels; `policies`: NetworkPolicy objects ({metadata, spec}) and
        CiliumNetworkPolicy objects ({kind, metadata, spec})."""
        self.namespaces = {n: {**labels, "kubernetes.io/metadata.name": n} for n, labels in namespaces.items()}
        self.policies = [p for p in policies if p.get("kind", "NetworkPolicy") == "NetworkPolicy"]
        self.cilium = [p for p in policies if p.get("kind") == "CiliumNetworkPolicy"]
        self.cni = cni

    def _selecting(self, pod: Endpoint, direction: str) -> list[dict[str, Any]]:
        found = []
        for policy in self.policies:
            spec = policy["spec"]
            types = spec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in spec else []))
            if (
                policy["metadata"]["namespace"] == pod.namespace
                and direction in types
                and selects(spec.get("podSelector") or {}, pod.labels)
            ):
                found.append(policy)
        return found

    def _peer(self, peer: dict[str, Any], policy_ns: str, other: Endpoint) -> bool:
        if "ipBlock" in peer:
            if other.node and self.cni == "cilium":
                return False
            address = ipaddress.ip_address(other.ip)
            block = peer["ipBlock"]
            return address in ipaddress.ip_network(block["cidr"]) and not any(
                address in ipaddress.ip_network(e) for e in block.get("except") or []
            )
        if other.namespace is None:
            return False  # selectors select pods only
        if "namespaceSelector" in peer:
            if not selects(peer["namespaceSelector"], self.namespaces[other.namespace]):
                return False
        elif other.namespace != policy_ns:
            return False
        return selects(peer.get("podSelector") or {}, other.labels)

    @staticmethod
    def _port(rule_ports: Optional[list[dict[str, Any]]], dest: Endpoint, port: int, protocol: str) -> bool:
        if not rule_ports:
            return True
        for p in rule_ports:
            if p.get("protocol", "TCP") != protocol:
                continue
            value = p.get("port")
            if value is None:
                return True
            if isinstance(value, str) and not value.isdigit():
                named = dest.ports.get(value)
                if named is not None and named == (port, protocol):
                    return True
                continue
            low = int(value)
            if low <= port <= int(p.get("endPort", low)):
                return True
        return False

    def _allows(self, pod: Endpoint, other: Endpoint, dest: Endpoint, port: int, protocol: str, direction: str):
        policies = self._selecting(pod, direction)
        if not policies:
            return True
        key, peers = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
        for policy in policies:
            for rule in policy["spec"].get(key) or []:
                listed = rule.get(peers) or []
                if (not listed or any(self._peer(p, pod.namespace, other) for p in listed)) and self._port(
                    rule.get("ports"), dest, port, protocol
                ):
                    return True
        return direction == "Egress" and self._cilium_egress(pod, dest, port, protocol)

    def _cilium_egress(self, pod: Endpoint, dest: Endpoint, port: int, protocol: str) -> bool:
        for policy in self.cilium:
            spec = policy["spec"]
            if policy["metadata"]["namespace"] != pod.namespace or not selects(
                spec.get("endpointSelector"), pod.labels
            ):
                continue
            for rule in spec.get("egress") or []:
                if not set(rule.get("toEntities") or []) & dest.entities:
                    continue
                ports = [p for tp in rule.get("toPorts") or [] for p in tp["ports"]]
                if not ports or any(int(p["port"]) == port and p.get("protocol", "TCP") == protocol for p in ports):
                    return True
        return False

    def allowed(self, source: Endpoint, dest: Endpoint, port: int, protocol: str = "TCP") -> bool:
        egress = source.namespace is None or self._allows(source, dest, dest, port, protocol, "Egress")
        return egress and (dest.namespace is None or self._allows(dest, source, dest, port, protocol, "Ingress"))
