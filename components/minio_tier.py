"""MinioTier: Tier 3: MinIO on the NAS hosts, outside the cluster.

Not built yet: the component registers itself and nothing else until its issue is done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence  # noqa: F401
from dataclasses import dataclass
from typing import Optional

import pulumi

from components.remote import HostAccess
from settings import MinioSettings, NasSettings


@dataclass(frozen=True)
class MinioTierArgs:
    minio: MinioSettings
    nas: NasSettings
    hosts: Mapping[str, HostAccess]


class MinioTier(pulumi.ComponentResource):
    def __init__(self, name: str, args: MinioTierArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:storage:MinioTier", name, None, opts)
        self.register_outputs({})
