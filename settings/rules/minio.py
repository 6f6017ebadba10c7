"""Rules about tier 3 (MinIO on the NAS) and the backups into it: the binary, drives, erasure layout, backup sources."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from settings.backup_layout import layout_problems
from settings.erasure import ErasureLayout, default_parity, default_set_size, host_range, set_size_problem
from settings.rules.base import rule
from settings.rules.scheduling import not_created, team_namespaces
from settings.types import is_kernel_name

if TYPE_CHECKING:
    from settings.root import Settings


NO_COMMUNITY_BINARIES = (
    "MinIO stopped publishing community binaries (source-only since 2025-10; its download site answers "
    "410 Gone since 2026-09), so there is no working default download"
)


def _nas_problems(s: Settings, add) -> None:
    if s.nas.hosts and s.storage.minio.artifact is None:
        add(
            f"storage.minio.artifact: required with nas.hosts. {NO_COMMUNITY_BINARIES}. Mirror a pinned build on "
            "an internal server (the last official minio RELEASE.2025-09-07T16-13-09Z, a binary built from the "
            "final tag, or a maintained fork such as Silo with storage.minio.binary: silo and service: silo) and "
            "set storage.minio.artifact.url and storage.minio.artifact.sha256 (the file's `sha256sum`)"
        )
    for i, host in enumerate(s.nas.hosts):
        for j, drive in enumerate(host.drives):
            path = f"nas.hosts[{i}].drives[{j}]"
            if drive.force and not drive.format:
                add(f"{path}.force: force only applies with format: true; set format: true or drop force")
            if drive.format and is_kernel_name(drive.device):
                add(
                    f"{path}.device: {drive.device!r} is a kernel name, which can point at another disk after a "
                    "reboot; a drive marked format: true must be named stably: use its /dev/disk/by-id/... path"
                )


def _erasure_problems(s: Settings, add) -> None:
    minio = s.storage.minio
    if not s.nas.hosts:
        return
    if not host_range([h.address for h in s.nas.hosts]):
        add(
            f"nas.hosts: MINIO_VOLUMES names the hosts with one {{a...b}} range, so their addresses must be "
            f"consecutive in list order within one /24; got {', '.join(h.address for h in s.nas.hosts)}"
        )
    first = s.nas.hosts[0]
    for i, host in enumerate(s.nas.hosts):
        if len(host.drives) != len(first.drives):
            add(
                f"nas.hosts[{i}].drives: {host.name!r} lists {len(host.drives)} drives, {first.name!r} "
                f"{len(first.drives)}; MinIO needs the same drive set on every host (same count, drive i at the "
                "same mount point everywhere)"
            )
    counts = {len(h.drives) for h in s.nas.hosts}
    if len(counts) > 1:
        return  # reported per host above; no layout to compute
    hosts, drives = len(s.nas.hosts), counts.pop()
    size = minio.erasure_set_drives or default_set_size(hosts, drives)
    if size == 0 or (minio.erasure_set_drives and set_size_problem(hosts, drives, size)):
        why = set_size_problem(hosts, drives, size) if size else "no set size of 2-16 fits"
        add(f"storage.minio.erasureSetDrives: {why}; pick a set size that does, or change the drive count")
        return
    parity = minio.parity or default_parity(size)
    if 2 * parity > size:
        add(
            f"storage.minio.parity: EC:{parity} is more than half the erasure set of {size} drives; "
            f"MinIO allows at most EC:{size // 2}"
        )
        return
    layout = ErasureLayout(hosts, drives, size, parity)
    need = minio.require_host_loss
    if need and (layout.read_tolerance_hosts < need.read or layout.write_tolerance_hosts < need.write):
        add(
            f"storage.minio.requireHostLoss: asks reads to survive {need.read} and writes {need.write} host "
            f"loss(es), but {layout.describe()}. Raise parity (reads only gain at EC = set/2), add NAS hosts "
            "(two-host write tolerance needs at least 5), or lower the requirement"
        )


def _backup_tier_problems(s: Settings, add) -> None:
    for i, _source in enumerate(s.storage.minio.backup.sources):
        path = f"storage.minio.backup.sources[{i}]"
        if not s.nas.hosts:
            add(f"{path}: backups go to the MinIO tier, and nas.hosts is empty; add NAS hosts or remove the source")
        if not s.storage_hosts:
            add(f"{path}: there is no tier 2 (no node has osdDevices), so no tier-2 shared volume to back up")


def _backup_source_problems(s: Settings, add) -> None:
    shared = s.storage.ceph.shared_storage_class
    for i, source in enumerate(s.storage.minio.backup.sources):
        if s.storage_hosts and source.storage_class != shared:
            add(
                f"storage.minio.backup.sources[{i}].storageClass: {source.storage_class!r} is not the tier-2 "
                f"shared class {shared!r}; only tier-2 shared (CephFS, ReadWriteMany) volumes can be mounted "
                "read-only by the backup job while in use (tier-1 local volumes and RBD block volumes cannot)"
            )
    names = Counter(src.name for src in s.storage.minio.backup.sources)
    for i, source in enumerate(s.storage.minio.backup.sources):
        if names[source.name] > 1:
            add(f"storage.minio.backup.sources[{i}].name: {source.name!r} is used twice; names must be unique")


def _backup_layout_problems(s: Settings, add) -> None:
    """Names derived from the layout (settings/backup_layout.py): no two sources, and no source and the pipeline,
    own the same object or bucket key, and every object's name fits its kind."""
    sources = s.storage.minio.backup.sources
    for i, problem in layout_problems((src.name, src.namespace) for src in sources):
        add(f"storage.minio.backup.sources[{i}].name: {sources[i].name!r} {problem}; choose another name")


def _object_lock_problems(s: Settings, add) -> None:
    minio = s.storage.minio
    if minio.object_lock_days is not None and minio.object_lock_days < minio.noncurrent_retention_days:
        add(
            f"storage.minio.objectLockDays: {minio.object_lock_days} is less than noncurrentRetentionDays "
            f"({minio.noncurrent_retention_days}): a version would lose its lock while the lifecycle still keeps it, "
            f"so a key allowed to delete could remove it early; set objectLockDays to at least "
            f"{minio.noncurrent_retention_days} (or lower noncurrentRetentionDays)"
        )


def _backup_namespace_problems(s: Settings, add) -> None:
    created = team_namespaces(s)
    for i, source in enumerate(s.storage.minio.backup.sources):
        if source.namespace not in created:
            consequence = "its PersistentVolumeClaim cannot exist and every backup run would fail"
            add(not_created(f"storage.minio.backup.sources[{i}].namespace", source.namespace, consequence, created))


RULES = (
    rule(_nas_problems, "the MinIO binary and each NAS drive", "nas storage"),
    rule(_erasure_problems, "the NAS drive sets and the MinIO erasure layout", "nas storage", "nas"),
    rule(_backup_tier_problems, "the backup sources against tiers 2 and 3", "storage nodes nas", "nodes nas"),
    rule(_backup_source_problems, "each backup source", "storage nodes"),
    rule(_backup_layout_problems, "the names each backup source owns", "storage", "storage"),
    rule(_object_lock_problems, "object locking against the version retention", "storage"),
    rule(_backup_namespace_problems, "the backup sources' namespaces", "storage scheduling", "scheduling"),
)
