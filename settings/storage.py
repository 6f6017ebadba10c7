"""`ml-platform:storage`: tier 2 (Ceph through Rook) and tier 3 (MinIO on the NAS)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

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


# The platform namespace of the backups' status ConfigMaps (the monitoring contract names it).
BACKUP_NAMESPACE = "ml-backup"


class BackupSource(Model):
    name: Name = Field(
        description="Short name; the tree lands under <name>/ in the backup bucket, the CronJob is named after it "
        "and its status is the ConfigMap backup-status-<name> in the ml-backup namespace."
    )
    namespace: Name = Field(
        description="Namespace of the PersistentVolumeClaim to back up, a team's (a pod mounts only claims of its "
        "own namespace, so the backup CronJob runs there)."
    )
    claim_name: Name = Field(
        description="The PersistentVolumeClaim. Each run takes a CSI snapshot of it and mounts a read-only clone of "
        "the snapshot: a consistent point-in-time copy, not the live tree."
    )
    size: str = Field(
        pattern=r"^[0-9]+(Mi|Gi|Ti|Pi)$",
        description="The claim's requested size (e.g. `20Ti`): the snapshot's clone must request at least this much "
        "(a CephFS shallow clone allocates nothing).",
    )
    storage_class: Name = Field(
        description="Its StorageClass: must be storage.ceph.sharedStorageClass (CephFS, ReadWriteMany)."
    )

    @field_validator("namespace")
    @classmethod
    def _not_the_status_namespace(cls, namespace: str) -> str:
        if namespace == BACKUP_NAMESPACE:
            raise ValueError(
                f"{BACKUP_NAMESPACE!r} holds only the backups' status ConfigMaps (no pods, no data): name the "
                "namespace of the PersistentVolumeClaim"
            )
        return namespace

    run_as_user: int = Field(
        default=65534,
        ge=1,
        le=2147483647,
        description="Non-root UID the backup reads as (Pod Security `restricted`): every file of the tree must be "
        "readable by it or by `runAsGroup`; an unreadable file fails the run (it is never skipped silently).",
    )
    run_as_group: int = Field(default=65534, ge=1, le=2147483647, description="GID the backup reads as.")


class CephfsBackup(Model):
    schedule: Cron = Field(default="30 1 * * *", description="Cron schedule of the backup CronJobs (UTC).")
    image: Image = Field(
        default="docker.io/rclone/rclone:1.75.0",
        description="The rclone image, pinned by tag (no published digest could be cited; pin `<image>@sha256:...` "
        "from your mirror). Point it at a mirror for air-gapped sites.",
    )
    kubectl_image: Image = Field(
        default="docker.io/rancher/kubectl:v1.30.3",
        description="The image that writes the status ConfigMap (`kubectl patch`; the same pin as the upgrade Jobs' "
        "kubectl).",
    )
    max_delete: int = Field(
        default=10000, ge=0, description="rclone `--max-delete`: a run that would delete more files stops."
    )
    max_shrink_percent: int = Field(
        default=50,
        ge=0,
        le=100,
        description="A source with this many percent fewer files or bytes than at its last successful run is "
        "refused (the run fails, nothing on the target changes). An empty or unmounted source is always refused.",
    )
    verify: Literal["size", "download"] = Field(
        default="size",
        description="Post-run `rclone check`: size (listing only, no re-read; every upload is already checked "
        "against its MD5 by rclone) or download (reads the whole backup back and compares bytes).",
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
        default=30,
        ge=1,
        le=3650,
        description="Days an overwritten or deleted object version is kept (bucket lifecycle; delete markers left "
        "alone are removed by the same lifecycle).",
    )
    object_lock_days: Optional[int] = Field(
        default=None,
        ge=1,
        le=3650,
        description="Object locking (governance mode) on both buckets, each object version kept at least this many "
        "days: a stolen backup key cannot destroy the history (the backup users get no delete at all). Only when a "
        "bucket is created: turning it on for an existing bucket is refused by the host-side provider.",
    )
    backup: CephfsBackup = Field(default=CephfsBackup(), description="The CephFS -> MinIO backup CronJob.")


class StorageSettings(Model):
    ceph: CephSettings = Field(default=CephSettings(), description="Tier 2: Rook-Ceph on the storage hosts' disks.")
    minio: MinioSettings = Field(default=MinioSettings(), description="Tier 3: MinIO on the NAS hosts.")
