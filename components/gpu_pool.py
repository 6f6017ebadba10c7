"""GpuPool: NVIDIA GPU Operator, time-slicing and tier-1 local NVMe volumes on the GPU nodes.

Not built yet: the component registers itself and nothing else until its issue is done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence  # noqa: F401
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.remote import HostAccess
from stacks.settings import Charts, GpuSettings, NodeSettings


@dataclass(frozen=True)
class GpuPoolArgs:
    gpu: GpuSettings
    charts: Charts
    gpu_nodes: list[NodeSettings]
    hosts: Mapping[str, HostAccess]
    host_ready: Mapping[str, pulumi.Resource]
    provider: k8s.Provider
    cluster_ready: Sequence[pulumi.Resource]


class GpuPool(pulumi.ComponentResource):
    def __init__(self, name: str, args: GpuPoolArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:gpu:GpuPool", name, None, opts)
        self.register_outputs({})
