"""Danger on the NAS: drives that leave MinIO's server pool, and a changed pool definition."""

from __future__ import annotations

import re
from typing import Optional

from stacks.diff.core import DangerClass, Entry, Sides, command_env, command_script


def _drive_danger(sides: Sides) -> list[str]:
    entries, before, after = sides.entries, sides.before, sides.after
    return [line for e in entries for line in _nas_drive_danger(e, before.get(e.urn), after.get(e.urn))]


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


CLASSES = (
    DangerClass("NAS drives leaving MinIO's pool: a NAS host removed, drives taken off or replaced", _drive_danger),
    DangerClass("MinIO's pool definition changed (drive count, erasure set size, parity)", _pool_danger),
)
