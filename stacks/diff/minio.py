"""Danger on the NAS: drives that leave MinIO's server pool, a changed pool definition, a renamed
MinIO service, object locking asked of an existing bucket, a backup source that stops, and a backup pipeline that
moves namespace."""

from __future__ import annotations

import re
from typing import Optional

from stacks.diff.core import DangerClass, Entry, Sides, command_env, command_script


def _drive_danger(sides: Sides) -> list[str]:
    return [line for e, old, new in sides.pairs() for line in _nas_drive_danger(e, old, new)]


def _nas_drive_danger(entry: Entry, old: Optional[dict], new: Optional[dict]) -> list[str]:
    """NAS drives that leave MinIO's server pool: a whole NAS host removed, drives taken off or replaced."""
    if old is None or command_script(old["inputs"].get("create")) != "minio-nas.sh" or entry.action == "create":
        return []
    old_drives = _drives(command_env(old["inputs"].get("create")))
    new_drives = _drives(command_env(new["inputs"].get("create"))) if new and entry.action != "delete" else []
    gone = [f"drive{slot} {old_drives[slot - 1]}" for slot in _gone_slots(old_drives, new_drives)]
    if not gone:
        return []
    host = f"{entry.name} [NAS host {entry.name.removesuffix('-minio')}]"
    if not new_drives:
        return [
            f"{host}: NAS host removed from MinIO's pool with all its drives: {', '.join(gone)} (the step has "
            "no delete: MinIO keeps running there until stopped by hand)"
        ]
    if len(new_drives) < len(old_drives):
        return [f"{host}: drives removed from MinIO's pool: {', '.join(gone)}"]
    swapped = [
        f"drive{slot} {old_drives[slot - 1]} -> {new_drives[slot - 1]}" for slot in _gone_slots(old_drives, new_drives)
    ]
    return [
        f"{host}: drives replaced in MinIO's pool: {', '.join(swapped)}. MinIO heals each new drive from the "
        "other drives of its erasure set; until then that set survives one drive loss fewer: replace no more "
        "drives of a set than its parity at once (docs/runbook.md §11)"
    ]


def _gone_slots(old_drives: list[str], new_drives: list[str]) -> list[int]:
    return [slot for slot, device in enumerate(old_drives, 1) if device not in new_drives]


def _pool_danger(sides: Sides) -> list[str]:
    """A change of MinIO's pool definition (MINIO_VOLUMES, set size, parity), which MinIO fixes at first start."""
    before, after = sides.before, sides.after
    old, new = _pool(before), _pool(after)
    if not old or not new or old == new:
        return []
    (volumes, sets, parity), (new_volumes, new_sets, new_parity) = old, new
    return [
        f"MinIO's server pool changes: {volumes} ({pool_size(volumes)} drives, erasure sets of {sets}, {parity}) -> "
        f"{new_volumes} ({pool_size(new_volumes)} drives, sets of {new_sets}, {new_parity}). MinIO fixes the pool "
        "when it first starts (format.json on every drive) and cannot shrink or re-stripe it: it does not start "
        "with another drive count, and minio-nas.sh refuses the change on every NAS host whose drives hold data "
        "(the up stops at those steps). To change the layout, build a new deployment and copy the data "
        "(docs/minio-tier.md, 'Layout and what it survives')"
    ]


def _pool(resources: dict[str, dict]) -> Optional[tuple[str, str, str]]:
    """MINIO_VOLUMES, set size and parity of the NAS steps' env file (the same on every NAS host)."""
    for resource in resources.values():
        if command_script(resource["inputs"].get("create")) == "minio-nas.sh":
            env = command_env(resource["inputs"]["create"]).get("ENV_FILE", "")
            keys = ("MINIO_VOLUMES", "MINIO_ERASURE_SET_DRIVE_COUNT", "MINIO_STORAGE_CLASS_STANDARD")
            return tuple(env_file_value(env, key) for key in keys)  # type: ignore[return-value]
    return None


def _drives(params: dict[str, str]) -> list[str]:
    """The devices of minio-nas.sh's `DRIVES` (`DEVICE=ACTION ...`, in slot order)."""
    return [entry.rpartition("=")[0] for entry in params.get("DRIVES", "").split()]


def env_file_value(env_file: str, key: str) -> str:
    """One `KEY=value` line of the MinIO env file (quotes removed); '?' when absent."""
    for line in env_file.splitlines():
        name, sep, value = line.partition("=")
        if sep and name == key:
            return value.strip('"')
    return "?"


def pool_size(volumes: str) -> str:
    """Drives in a MINIO_VOLUMES pool: the product of its `{a...b}` ranges."""
    size = 1
    for low, high in re.findall(r"\{(\d+)\.\.\.(\d+)\}", volumes):
        size *= int(high) - int(low) + 1
    return "?" if volumes == "?" else str(size)


def _service_rename_danger(sides: Sides) -> list[str]:
    """minio-nas.sh's SERVICE or BINARY changed: refused on every host while the old unit runs."""
    lines = []
    for e, old, new in sides.pairs():
        if not old or not new or command_script(old["inputs"].get("create")) != "minio-nas.sh":
            continue
        was, now = command_env(old["inputs"]["create"]), command_env(new["inputs"]["create"])
        names = [(key, was.get(key), now.get(key)) for key in ("SERVICE", "BINARY") if was.get(key) != now.get(key)]
        if names:
            change = ", ".join(f"{key.lower()} {a} -> {b}" for key, a, b in names)
            lines.append(
                f"{e.name}: MinIO {change}: the step refuses to start a second server on the same drives while "
                f"the old unit runs; first `systemctl disable --now {was.get('SERVICE')}` on every NAS host "
                "(docs/minio-tier.md, 'Moving to a fork')"
            )
    return lines


def _object_lock_danger(sides: Sides) -> list[str]:
    """Object locking asked of a bucket that exists without it: S3 allows it only at creation."""
    return [
        f"{e.name}: object locking asked of the existing bucket {new['inputs'].get('bucket')}: S3 turns it "
        "on only when a bucket is created, so the up stops at this bucket; use a new bucket name "
        "(docs/minio-tier.md, 'Object locking')"
        for e, old, new in sides.pairs()
        if old and new and e.action != "create" and not old["inputs"].get("lockDays") and new["inputs"].get("lockDays")
    ]


def _backup_stop_danger(sides: Sides) -> list[str]:
    """A backup source's CronJob deleted: no more backups of it (its copy in MinIO stays)."""
    return [
        f"{e.name}: the backup of source {sides.before[e.urn]['inputs']['metadata']['name']} stops (its CronJob, "
        "credentials and status go; what MinIO holds stays, old versions expire after noncurrentRetentionDays)"
        for e in sides.entries
        if e.action == "delete" and e.type == "kubernetes:batch/v1:CronJob" and e.name.startswith("backup-")
    ]


def _backup_move_danger(sides: Sides) -> list[str]:
    """A source's backup CronJob replaced into another namespace (the pipeline moving into ml-backup): the up
    deletes the old CronJob, key and accounts after creating the new ones."""
    lines = []
    for e, old, new in sides.pairs():
        if e.type != "kubernetes:batch/v1:CronJob" or not e.name.startswith("backup-") or not old or not new:
            continue
        was, now = old["inputs"]["metadata"]["namespace"], new["inputs"]["metadata"]["namespace"]
        if was != now:
            source = new["inputs"]["metadata"]["name"]
            lines.append(
                f"{e.name}: the backup pipeline of source {source} moves from namespace {was} to {now}: the up "
                f"deletes its CronJob, rclone key, ServiceAccounts and run spec in {was}. A run in progress there "
                "keeps copying but cannot record its result (its account is gone): its status stays at the last "
                f"success and the Job fails; its Job and VolumeSnapshot backup-{source} stay in {was} (the first "
                "new run deletes the snapshot; delete the Job by hand). Let a running backup finish first "
                "(docs/runbook.md, 'Moving the backups into ml-backup')"
            )
    return lines


CLASSES = (
    DangerClass("NAS drives leaving MinIO's pool: a NAS host removed, drives taken off or replaced", _drive_danger),
    DangerClass("MinIO's pool definition changed (drive count, erasure set size, parity)", _pool_danger),
    DangerClass("MinIO's service or binary renamed on the NAS hosts", _service_rename_danger),
    DangerClass("Object locking asked of an existing bucket", _object_lock_danger),
    DangerClass("A backup source removed: its backups stop", _backup_stop_danger),
    DangerClass("A backup pipeline moved to another namespace: its old objects are deleted", _backup_move_danger),
)
