"""NetworkFabric: Ethernet CNI (Cilium or Calico) and InfiniBand for GPU pods.

Not built yet: the component registers itself and nothing else until its issue is done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence  # noqa: F401
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.remote import HostAccess
from stacks.settings import Charts, ClusterSettings, NetworkSettings, NodeSettings


@dataclass(frozen=True)
class NetworkFabricArgs:
    network: NetworkSettings
    cluster: ClusterSettings
    charts: Charts
    gpu_nodes: list[NodeSettings]
    hosts: Mapping[str, HostAccess]
    host_ready: Mapping[str, pulumi.Resource]
    provider: k8s.Provider
    cluster_ready: Sequence[pulumi.Resource]


class NetworkFabric(pulumi.ComponentResource):
    def __init__(self, name: str, args: NetworkFabricArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:network:NetworkFabric", name, None, opts)
        self.ready: list[pulumi.Resource] = []
        self.register_outputs({})
