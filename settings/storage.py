"""`ml-platform:storage`: tier 2 (Ceph through Rook) and tier 3 (MinIO on the NAS)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional

from pydantic import Field, field_validator

from settings.backup_layout import BACKUP_NAMESPACE
from settings.declare import Claim, Uses, destroys_on_decrease, none, refused, replaces, rerender, restarts
from settings.quantities import QUANTITY_ORDER
from settings.types import Bucket, Cron, Host, Image, Model, Name, Namespace, Port, Sha256, StorageClassName, Url


class CephNetwork(Model):
    provider: Literal["pod", "host"] = "pod"
    """Where Ceph's replication and client traffic flows. `pod`: the CNI's overlay (Rook's default; every byte, three
    times for replicated writes, is encapsulated and crosses Cilium). `host`: the daemons use the nodes' own network
    (no encapsulation, full NIC bandwidth; costs: Ceph ports 3300/6789/6800-7300 open on the hosts, firewalls
    between nodes must allow them, and the MONs' addresses are node IPs). Rook fails the MONs over when this goes
    from pod to host on a running cluster; from host back to pod is not supported."""

    CHANGES: ClassVar = {
        "provider": refused(
            "pod -> host: Rook fails every MON over to host addresses (clients reconnect); host -> pod is not "
            "supported by Rook",
            by="releases",
        ),
    }


class CephSettings(Model):
    namespace: Namespace = "rook-ceph"
    """Namespace of Rook and the Ceph cluster."""
    deployed: bool = False
    """Set true once tier 2 holds data (after its first `pulumi up`). While true, settings refuse a configuration
    without storage hosts: that would uninstall the CephCluster (docs/runbook.md, 'Retire tier 2')."""
    network: CephNetwork
    """Ceph's network (see `provider`)."""
    mon_count: int = Field(default=3, ge=1, le=9)
    """MON daemons: odd, at least 3, at most the storage hosts (5 keep quorum through two host losses)."""
    block_storage_class: StorageClassName = "tier2-block"
    """The RBD StorageClass (ReadWriteOnce), the cluster's default class."""
    shared_storage_class: StorageClassName = "tier2-shared"
    """The CephFS StorageClass (ReadWriteMany)."""
    filesystem_name: Name = "tier2fs"
    """The CephFS filesystem (renaming it creates a new, empty filesystem)."""
    ceph_image: Image = "quay.io/ceph/ceph:v20.2.4"
    """The pinned Ceph image, `<repository>:<tag>`; Rook v1.20 supports Ceph v19 (Squid) and v20 (Tentacle). Point it
    at a mirror for air-gapped sites."""

    CHANGES: ClassVar = {
        "namespace": replaces(
            "the Rook operator and the CephCluster in another namespace: a new, empty Ceph cluster",
            data_lost=True,
            by="releases",
        ),
        "deployed": none("a guard the settings rules read"),
        "network": refused("see storage.ceph.network.provider", by="releases"),
        "mon_count": destroys_on_decrease("MON daemons beyond the new count are removed (quorum shrinks)"),
        "block_storage_class": replaces(
            "the RBD StorageClass (existing volumes keep the old class name)", by="releases"
        ),
        "shared_storage_class": replaces(
            "the CephFS StorageClass (existing volumes keep the old class name)", by="releases"
        ),
        "filesystem_name": replaces(
            "the CephFS filesystem: a new, empty one (the old one's data unreachable)", True, by="releases"
        ),
        "ceph_image": restarts("every Ceph daemon (MON, MGR, OSD, MDS), one at a time by Rook", "storage hosts"),
    }


class MinioArtifact(Model):
    url: Url
    """Where the NAS hosts download the server binary (an internal mirror)."""
    sha256: Sha256
    """The sha256 of the binary at `url`; checked before anything is installed."""

    CHANGES: ClassVar = {
        "url": restarts("MinIO (the binary is installed again)", "NAS hosts"),
        "sha256": restarts("MinIO (the binary is installed again)", "NAS hosts"),
    }


class MinioHostLoss(Model):
    read: int = Field(default=0, ge=0, le=16)
    """NAS hosts that may be lost with reads still served."""
    write: int = Field(default=0, ge=0, le=16)
    """NAS hosts that may be lost with writes still accepted."""

    CHANGES: ClassVar = {
        "read": none("a requirement the settings rules check"),
        "write": none("a requirement the settings rules check"),
    }


class BackupSource(Model):
    name: Name
    """Short name; the tree lands under <name>/ in the backup bucket and its run record at status/<name>.json; the
    CronJob in the platform namespace ml-backup is named after it and its status is the ConfigMap
    backup-status-<name> there. Names whose objects would collide with another source's or the pipeline's own
    (`status`, for one: its prefix would hold every run record), or be too long for their kind, are refused."""
    namespace: Annotated[Name, Uses("namespace")]
    """Namespace of the PersistentVolumeClaim to back up, a team's. Only the claim's CSI snapshot is taken there; the
    pipeline (key, accounts, run spec, CronJob, run records) lives in ml-backup, out of the team's reach."""
    claim_name: Name
    """The PersistentVolumeClaim. Each run takes a CSI snapshot of it, binds the snapshot into ml-backup and mounts a
    read-only clone of it there: a consistent point-in-time copy, not the live tree."""
    size: Annotated[str, QUANTITY_ORDER] = Field(pattern=r"^[0-9]+(Mi|Gi|Ti|Pi)$")
    """The claim's requested size (e.g. `20Ti`): the snapshot's clone must request at least this much (a CephFS shallow
    clone allocates nothing)."""
    storage_class: Annotated[Name, Uses("storage-class")]
    """Its StorageClass: must be storage.ceph.sharedStorageClass (CephFS, ReadWriteMany)."""

    CHANGES: ClassVar = {
        "name": replaces("the backup CronJob and its status; the tree moves to <name>/ in the bucket (a full copy)"),
        "namespace": replaces("the backup CronJob, its identity and its status"),
        "claim_name": rerender("the backup CronJob's source claim"),
        "size": destroys_on_decrease(
            "the snapshot clone's request: below the claim's size the CSI provisioner refuses the clone (smaller than "
            "its snapshot's restoreSize) and every backup run fails until it is raised"
        ),
        "storage_class": rerender("the snapshot clone's class"),
        "run_as_user": rerender("the backup pod's identity"),
        "run_as_group": rerender("the backup pod's identity"),
    }

    @field_validator("namespace")
    @classmethod
    def _not_the_status_namespace(cls, namespace: str) -> str:
        if namespace == BACKUP_NAMESPACE:
            raise ValueError(
                f"{BACKUP_NAMESPACE!r} is the backup pipeline's platform namespace and holds no team data: name "
                "the (team) namespace of the PersistentVolumeClaim"
            )
        return namespace

    run_as_user: int = Field(default=65534, ge=1, le=2147483647)
    """Non-root UID the backup reads as (Pod Security `restricted`): every file of the tree must be readable by it or
    by `runAsGroup`; an unreadable file fails the run (it is never skipped silently)."""
    run_as_group: int = Field(default=65534, ge=1, le=2147483647)
    """GID the backup reads as."""


class CephfsBackup(Model):
    schedule: Cron = "30 1 * * *"
    """Cron schedule of the backup CronJobs (UTC)."""
    image: Image = "docker.io/rclone/rclone:1.75.0"
    """The rclone image (also runs the launcher's binding step with its busybox shell), pinned by tag (no published
    digest could be cited; pin `<image>@sha256:...` from your mirror).
    Point it at a mirror for air-gapped sites."""
    kubectl_image: Image = "docker.io/rancher/kubectl:v1.30.3"
    """The kubectl image of the launcher's steps (snapshot, bind, start the Job), its read-only API proxy and the
    status write (`kubectl patch`); the same pin as the upgrade Jobs' kubectl."""
    max_delete: int = Field(default=10000, ge=0)
    """rclone `--max-delete`: a run that would delete more files stops."""
    max_shrink_percent: int = Field(default=50, ge=0, le=100)
    """A source with this many percent fewer files or bytes than at its last successful run is refused (the run fails,
    nothing on the target changes). An empty or unmounted source is always refused."""
    verify: Literal["size", "download"] = "size"
    """Post-run `rclone check`: size (listing only, no re-read; every upload is already checked against its MD5 by
    rclone) or download (reads the whole backup back and compares bytes)."""
    deadline_seconds: int = Field(default=72000, ge=600)
    """`activeDeadlineSeconds` of one backup run."""
    sources: list[BackupSource] = []
    """Tier-2 shared volumes to copy to MinIO."""

    CHANGES: ClassVar = {
        "schedule": rerender("the backup CronJobs' schedule and the monitoring's backup age limit"),
        "image": rerender("the next backup runs' image"),
        "kubectl_image": rerender("the next backup runs' status image"),
        "max_delete": rerender("the next backup runs' delete limit"),
        "max_shrink_percent": rerender("the next backup runs' shrink guard"),
        "verify": rerender("the next backup runs' check"),
        "deadline_seconds": rerender("the next backup runs' deadline and the monitoring's backup age limit"),
        "sources": destroys_on_decrease(
            "a source taken off the list loses its CronJob, identity and status; what it copied stays in the bucket "
            "until the noncurrent retention expires it after a later delete"
        ),
    }


class MinioSettings(Model):
    artifact: Optional[MinioArtifact] = None
    """The server binary (required with nas.hosts: there is no community download)."""
    binary: Name = "minio"
    """Binary name in /usr/local/bin: minio, or silo for the fork."""
    service: Name = "minio"
    """The systemd unit name."""
    port: Annotated[Port, Claim("port", scope="host")] = 9000
    """S3 API port (TLS)."""
    endpoint: Optional[Annotated[Host, Uses("ipv4", network="ethernet")]] = None
    """Address clients use (DNS round-robin or VIP); the first NAS host when unset."""
    mount_root: str = Field(default="/mnt/minio", pattern=r"^/[A-Za-z0-9._/-]+$")
    """Drive i mounts at <root>/drive<i>."""
    erasure_set_drives: Optional[int] = Field(default=None, ge=2, le=16)
    """Erasure set size; MinIO's choice (largest symmetric) when unset."""
    parity: Optional[int] = Field(default=None, ge=1, le=16)
    """EC parity (MINIO_STORAGE_CLASS_STANDARD), fixed at first start."""
    require_host_loss: Optional[MinioHostLoss] = None
    """Fail unless the layout survives this many host losses."""
    cephfs_backup_bucket: Bucket = "cephfs-backup"
    """Bucket of the CephFS backups."""
    etcd_snapshot_bucket: Bucket = "etcd-snapshots"
    """Bucket of the RKE2 etcd snapshots."""
    noncurrent_retention_days: int = Field(default=30, ge=1, le=3650)
    """Days an overwritten or deleted object version is kept (bucket lifecycle; delete markers left alone are removed
    by the same lifecycle)."""
    object_lock_days: Optional[int] = Field(default=None, ge=1, le=3650)
    """Object locking (governance mode) on both buckets, each object version kept at least this many days: a stolen
    backup key cannot destroy the history (the backup users get no delete at all). At least noncurrentRetentionDays
    (a version must not lose its lock while the lifecycle still keeps it). Prod sets it. Only when a bucket is
    created: turning it on for an existing bucket is refused by the host-side provider."""
    backup: CephfsBackup
    """The CephFS -> MinIO backup CronJob."""

    CHANGES: ClassVar = {
        "artifact": restarts("MinIO (the binary is installed again)", "NAS hosts"),
        "binary": restarts("MinIO under another binary name", "NAS hosts"),
        "service": replaces("the MinIO systemd unit (the old unit is stopped, the new one started)"),
        "port": restarts("MinIO and every client of tier 3 (backups, etcd snapshot uploads)", "NAS hosts"),
        "endpoint": rerender("the address backups and etcd snapshot uploads use"),
        "mount_root": refused("the drives are mounted there; MinIO would start on empty directories", by="minio"),
        "erasure_set_drives": refused("fixed when MinIO's pool is created", by="minio"),
        "parity": refused(
            "fixed at MinIO's first start (MINIO_STORAGE_CLASS_STANDARD applies to new objects)", by="minio"
        ),
        "require_host_loss": none("a requirement the settings rules check"),
        "cephfs_backup_bucket": replaces("the backup bucket: a new, empty one (the old one stays, unused)"),
        "etcd_snapshot_bucket": replaces("the etcd snapshot bucket: a new, empty one; RKE2 restarts on the servers"),
        "noncurrent_retention_days": destroys_on_decrease(
            "overwritten and deleted object versions older than the new number of days (bucket lifecycle)"
        ),
        "object_lock_days": refused("set when a bucket is created; the host-side provider refuses it"),
    }


class StorageSettings(Model):
    ceph: CephSettings
    """Tier 2: Rook-Ceph on the storage hosts' disks."""
    minio: MinioSettings
    """Tier 3: MinIO on the NAS hosts."""
