"""What the components' args share: the chart pins, where their host steps run and where their Kubernetes
objects go.

stacks/platform.py builds these once, bundles them as a `Wiring` and hands it to every component that needs it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Optional

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

from components.hosts.remote import HostAccess, host_script
from components.namespaces import Level, platform_namespace
from settings import Charts, NodeSettings

Layer = Literal["single", "cluster", "nodes", "platform"]


@dataclass(frozen=True)
class Scope:
    """The part of the platform the running stack holds (stacks/layers.py). `single`: all of it. With
    `layout: layered`: `cluster` the servers' host steps, the tokens, the kubeconfig, the CNI and the upgrade
    plans; `nodes` one group's agents (host steps, membership, Node patch, role steps); `platform` the rest
    (every other object in the cluster, the NAS, the aggregates, the public contract)."""

    layer: Layer = "single"
    group: Optional[str] = None

    def holds_host(self, node: NodeSettings) -> bool:
        """Whether this stack runs the node's host steps (and its membership and Node patch)."""
        if self.layer == "single":
            return True
        if self.layer == "cluster":
            return node.control_plane
        return self.layer == "nodes" and not node.control_plane and node.group_name == self.group

    @property
    def cluster_base(self) -> bool:
        """The init server's reads (CA hash, kubeconfig), the CNI and the upgrade plans."""
        return self.layer in ("single", "cluster")

    @property
    def platform(self) -> bool:
        """The in-cluster objects other than the CNI and the upgrade plans, the NAS, the aggregates."""
        return self.layer in ("single", "platform")


@dataclass(frozen=True)
class HostSteps:
    """Each node's SSH access, and the step on that node (its preparation) a component's host steps wait for."""

    hosts: Mapping[str, HostAccess]
    ready: Mapping[str, pulumi.Resource]

    def holds(self, node: str) -> bool:
        """Whether this stack runs `node`'s host steps (every node but in a layered stack: its own)."""
        return node in self.ready

    def script(
        self, resource_name: str, node: str, script: str, params: Mapping[str, str], *, parent: pulumi.Resource
    ) -> command.remote.Command:
        """`script` with `params` on `node`, after that node's preparation."""
        return host_script(
            resource_name,
            self.hosts[node],
            script,
            params,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[self.ready[node]]),
        )


@dataclass(frozen=True)
class InCluster:
    """The cluster's Kubernetes provider, and what a component's Kubernetes objects wait for."""

    provider: k8s.Provider
    ready: Sequence[pulumi.Resource]

    def options(self, *, parent: pulumi.Resource) -> pulumi.ResourceOptions:
        """Resource options of an object that needs nothing more than the cluster."""
        return pulumi.ResourceOptions(parent=parent, provider=self.provider, depends_on=list(self.ready))

    def namespace(
        self, resource_name: str, name: str, level: Level, reason: str, *, parent: pulumi.Resource
    ) -> k8s.core.v1.Namespace:
        """`platform_namespace` in this cluster, once it is ready."""
        return platform_namespace(
            resource_name, name, level, reason, provider=self.provider, parent=parent, depends_on=self.ready
        )


@dataclass(frozen=True)
class Wiring:
    """What the composition root hands a component besides its slice of the settings: the pinned charts its
    releases install, each host's SSH access and preparation step, and the cluster its objects go to."""

    charts: Charts
    host_steps: HostSteps
    in_cluster: InCluster
    scope: Scope = Scope()

    def waiting_for(self, ready: Sequence[pulumi.Resource]) -> Wiring:
        """The same wiring, with the Kubernetes objects also waiting for `ready`."""
        in_cluster = InCluster(self.in_cluster.provider, [*self.in_cluster.ready, *ready])
        return dataclasses.replace(self, in_cluster=in_cluster)
