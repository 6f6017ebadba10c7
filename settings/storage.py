"""`ml-platform:storage`: tier 2 (Ceph through Rook) and tier 3 (MinIO on the NAS)."""

from __future__ import annotations

from pydantic import Field

from settings.types import Model, Name, Version


class CephSettings(Model):
    namespace: Name = "rook-ceph"
    mon_count: int = Field(default=3, ge=1, le=9)
    block_storage_class: Name = "tier2-block"
    shared_storage_class: Name = "tier2-shared"
    filesystem_name: Name = "tier2fs"
    ceph_image: str = "quay.io/ceph/ceph:v20.2.4"


class MinioSettings(Model):
    version: Version = "RELEASE.2025-09-07T16-13-09Z"


class StorageSettings(Model):
    ceph: CephSettings = CephSettings()
    minio: MinioSettings = MinioSettings()
