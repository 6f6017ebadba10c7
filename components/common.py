"""What the components' args share: the chart pins, where their host steps run and where their Kubernetes
objects go.

stacks/platform.py builds these once, bundles them as a `Wiring` and hands it to every component that needs it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

from components.hosts.remote import HostAccess, host_script
from components.namespaces import Level, platform_namespace
from settings import Charts


@dataclass(frozen=True)
class HostSteps:
    """Each node's SSH access, and the step on that node (its preparation) a component's host steps wait for."""

    hosts: Mapping[str, HostAccess]
    ready: Mapping[str, pulumi.Resource]

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

    def waiting_for(self, ready: Sequence[pulumi.Resource]) -> Wiring:
        """The same wiring, with the Kubernetes objects also waiting for `ready`."""
        in_cluster = InCluster(self.in_cluster.provider, [*self.in_cluster.ready, *ready])
        return dataclasses.replace(self, in_cluster=in_cluster)
