"""CephTier: Tier 2: Rook-Ceph on the CPU nodes' disks, block and shared-filesystem storage classes.

Not built yet: the component registers itself and nothing else until its issue is done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence  # noqa: F401
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.remote import HostAccess
from stacks.settings import CephSettings, Charts, NodeSettings


@dataclass(frozen=True)
class CephTierArgs:
    ceph: CephSettings
    charts: Charts
    storage_hosts: list[NodeSettings]
    hosts: Mapping[str, HostAccess]
    host_ready: Mapping[str, pulumi.Resource]
    provider: k8s.Provider
    cluster_ready: Sequence[pulumi.Resource]


class CephTier(pulumi.ComponentResource):
    def __init__(self, name: str, args: CephTierArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:storage:CephTier", name, None, opts)
        self.register_outputs({})
