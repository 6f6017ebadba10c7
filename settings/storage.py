"""`ml-platform:storage`: tier 2 (Ceph through Rook) and tier 3 (MinIO on the NAS)."""

from __future__ import annotations

from pydantic import Field

from settings.types import Model, Name, Version


class CephSettings(Model):
    namespace: Name = Field(default="rook-ceph", description="Namespace of Rook and the Ceph cluster.")
    mon_count: int = Field(
        default=3,
        ge=1,
        le=9,
        description="MON daemons: odd, at least 3, at most the storage hosts (5 keep quorum through two host losses).",
    )
    block_storage_class: Name = Field(
        default="tier2-block", description="The RBD StorageClass (ReadWriteOnce), the cluster's default class."
    )
    shared_storage_class: Name = Field(default="tier2-shared", description="The CephFS StorageClass (ReadWriteMany).")
    filesystem_name: Name = Field(
        default="tier2fs", description="The CephFS filesystem (renaming it creates a new, empty filesystem)."
    )
    ceph_image: str = Field(
        default="quay.io/ceph/ceph:v20.2.4",
        description="The pinned Ceph image, `<repository>:<tag>`; Rook v1.19 supports Ceph v19 (Squid) and "
        "v20 (Tentacle). Point it at a mirror for air-gapped sites.",
    )


class MinioSettings(Model):
    version: Version = Field(default="RELEASE.2025-09-07T16-13-09Z", description="The MinIO release on the NAS hosts.")


class StorageSettings(Model):
    ceph: CephSettings = Field(default=CephSettings(), description="Tier 2: Rook-Ceph on the storage hosts' disks.")
    minio: MinioSettings = Field(default=MinioSettings(), description="Tier 3: MinIO on the NAS hosts.")
