"""`ml-platform:storage`: tier 2 (Ceph through Rook) and tier 3 (MinIO on the NAS)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from settings.types import Cron, Host, Image, Model, Name, Port, Sha256, Url


class CephNetwork(Model):
    provider: Literal["pod", "host"] = Field(
        default="pod",
        description=(
            "Where Ceph's replication and client traffic flows. `pod`: the CNI's overlay (Rook's default; "
            "every byte, three times for replicated writes, is encapsulated and crosses Cilium). `host`: the "
            "daemons use the nodes' own network (no encapsulation, full NIC bandwidth; costs: Ceph ports "
            "3300/6789/6800-7300 open on the hosts, firewalls between nodes must allow them, and the MONs' "
            "addresses are node IPs). Rook fails the MONs over when this goes from pod to host on a running "
            "cluster; from host back to pod is not supported."
        ),
    )


class CephSettings(Model):
    namespace: Name = Field(default="rook-ceph", description="Namespace of Rook and the Ceph cluster.")
    deployed: bool = Field(
        default=False,
        description=(
            "Set true once tier 2 holds data (after its first `pulumi up`). While true, settings refuse a "
            "configuration without storage hosts: that would uninstall the CephCluster (docs/runbook.md, "
            "'Retire tier 2')."
        ),
    )
    network: CephNetwork = Field(default=CephNetwork(), description="Ceph's network (see `provider`).")
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
    ceph_image: Image = Field(
        default="quay.io/ceph/ceph:v20.2.4",
        description="The pinned Ceph image, `<repository>:<tag>`; Rook v1.20 supports Ceph v19 (Squid) and "
        "v20 (Tentacle). Point it at a mirror for air-gapped sites.",
    )


class MinioArtifact(Model):
    url: Url = Field(description="Where the NAS hosts download the server binary (an internal mirror).")
    sha256: Sha256 = Field(description="The sha256 of the binary at `url`; checked before anything is installed.")


class MinioHostLoss(Model):
    read: int = Field(default=0, ge=0, le=16, description="NAS hosts that may be lost with reads still served.")
    write: int = Field(default=0, ge=0, le=16, description="NAS hosts that may be lost with writes still accepted.")


class BackupSource(Model):
    name: Name = Field(description="Short name; the tree lands under current/<name>/ in the backup bucket.")
    namespace: Name = Field(description="Namespace of the PersistentVolumeClaim to back up.")
    claim_name: Name = Field(description="The PersistentVolumeClaim, mounted read-only by the backup job.")
    storage_class: Name = Field(
        description="Its StorageClass: must be storage.ceph.sharedStorageClass (CephFS, ReadWriteMany)."
    )


class CephfsBackup(Model):
    schedule: Cron = Field(default="30 1 * * *", description="Cron schedule of the rclone CronJob (UTC).")
    image: Image = Field(
        default="docker.io/rclone/rclone:1.75.0", description="The rclone image, a pinned tag or digest."
    )
    max_delete: int = Field(
        default=10000, ge=0, description="rclone `--max-delete`: a run that would delete more files stops."
    )
    verify: Literal["hash", "download"] = Field(
        default="hash",
        description="Post-run rclone check: hash (sizes + upload MD5) or download (reads everything back).",
    )
    deadline_seconds: int = Field(default=72000, ge=600, description="`activeDeadlineSeconds` of one backup run.")
    sources: list[BackupSource] = Field(default=[], description="Tier-2 shared volumes to copy to MinIO.")


class MinioSettings(Model):
    artifact: Optional[MinioArtifact] = Field(
        default=None, description="The server binary (required with nas.hosts: there is no community download)."
    )
    binary: Name = Field(default="minio", description="Binary name in /usr/local/bin: minio, or silo for the fork.")
    service: Name = Field(default="minio", description="The systemd unit name.")
    port: Port = Field(default=9000, description="S3 API port (TLS).")
    endpoint: Optional[Host] = Field(
        default=None, description="Address clients use (DNS round-robin or VIP); the first NAS host when unset."
    )
    mount_root: str = Field(
        default="/mnt/minio", pattern=r"^/[A-Za-z0-9._/-]+$", description="Drive i mounts at <root>/drive<i>."
    )
    erasure_set_drives: Optional[int] = Field(
        default=None, ge=2, le=16, description="Erasure set size; MinIO's choice (largest symmetric) when unset."
    )
    parity: Optional[int] = Field(
        default=None, ge=1, le=16, description="EC parity (MINIO_STORAGE_CLASS_STANDARD), fixed at first start."
    )
    require_host_loss: Optional[MinioHostLoss] = Field(
        default=None, description="Fail unless the layout survives this many host losses."
    )
    cephfs_backup_bucket: Name = Field(default="cephfs-backup", description="Bucket of the CephFS backups.")
    etcd_snapshot_bucket: Name = Field(default="etcd-snapshots", description="Bucket of the RKE2 etcd snapshots.")
    noncurrent_retention_days: int = Field(
        default=30, ge=1, le=3650, description="Days overwritten/deleted versions and backup-dir copies are kept."
    )
    backup: CephfsBackup = Field(default=CephfsBackup(), description="The CephFS -> MinIO backup CronJob.")


class StorageSettings(Model):
    ceph: CephSettings = Field(default=CephSettings(), description="Tier 2: Rook-Ceph on the storage hosts' disks.")
    minio: MinioSettings = Field(default=MinioSettings(), description="Tier 3: MinIO on the NAS hosts.")
