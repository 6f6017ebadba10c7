"""Values that determine others: a rack belongs to one InfiniBand block, a claim is backed up by one source, an RDMA
team's Pod Security level is the one its pods need, and `up` waits for an upgrade at least until its pools' windows
open."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from settings.rules.base import rule

if TYPE_CHECKING:
    from settings.root import Settings

WEEK_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
WEEK = 7 * 24 * 60


def _topology_problems(s: Settings, add) -> None:
    blocks: dict[str, tuple[str, int]] = {}
    for i, node in enumerate(s.nodes):
        if node.topology is None:
            continue
        rack, block = node.topology.rack, node.topology.block
        if rack in blocks and blocks[rack][0] != block:
            other_block, j = blocks[rack]
            add(
                f"nodes[{i}].topology.block: rack {rack!r} is in block {other_block!r} on nodes[{j}] and in "
                f"{block!r} here: a rack's leaf switch hangs off one spine group, and Kueue's topology would place "
                "gangs across the fabric as if it were two; correct the block or the rack"
            )
        else:
            blocks.setdefault(rack, (block, i))


def _backup_problems(s: Settings, add) -> None:
    seen: dict[tuple[str, str], int] = {}
    for i, source in enumerate(s.storage.minio.backup.sources):
        key = (source.namespace, source.claim_name)
        if key in seen:
            add(
                f"storage.minio.backup.sources[{i}].claimName: {source.namespace}/{source.claim_name} is already "
                f"backed up by sources[{seen[key]}]: two pipelines would snapshot and copy the same claim into two "
                "trees at the same schedule; keep one source per claim"
            )
        else:
            seen[key] = i


def _rdma_problems(s: Settings, add) -> None:
    for i, team in enumerate(s.scheduling.teams):
        if team.rdma and team.pod_security == "restricted":
            add(
                f"scheduling.teams[{i}].podSecurity: 'restricted' refuses the RDMA pods the team declares (rdma: true: "
                "NCCL/verbs images run as root, which restricted forbids); use 'baseline' or unset it, or drop rdma"
            )


def _open_minutes(days: list[str], start: str, end: str) -> set[int]:
    """The minutes of the week (Monday 00:00 = 0) a window is open; an end before the start spans midnight."""
    (sh, sm), (eh, em) = (map(int, t.split(":")) for t in (start, end))
    first, last = sh * 60 + sm, eh * 60 + em
    length = (last - first) % (24 * 60) or 24 * 60
    return {(WEEK_DAYS.index(day) * 1440 + first + m) % WEEK for day in days for m in range(length)}


def longest_closed(days: list[str], start: str, end: str) -> timedelta:
    """The longest stretch of the week the window stays closed."""
    open_ = _open_minutes(days, start, end)
    if not open_:
        return timedelta(days=7)
    longest = run = 0
    for minute in range(2 * WEEK):  # twice round, so a stretch across Sunday night counts whole
        run = 0 if minute % WEEK in open_ else run + 1
        longest = max(longest, min(run, WEEK))
    return timedelta(minutes=longest)


def _wait_problems(s: Settings, add) -> None:
    upgrade = s.cluster.upgrade
    if upgrade.wait_timeout_seconds == 0:
        return
    for pool in ("gpu", "storage", "cpu"):
        window = getattr(upgrade, pool).window
        if window is None:
            continue
        closed = longest_closed(list(window.days), window.start_time, window.end_time)
        if upgrade.wait_timeout_seconds < closed.total_seconds():
            add(
                f"cluster.upgrade.waitTimeoutSeconds: {upgrade.wait_timeout_seconds} s is shorter than the "
                f"{closed} the {pool} pool's window can stay closed ({', '.join(window.days)} {window.start_time}-"
                f"{window.end_time}): `up` would fail waiting for a Plan that has not been allowed to start; wait at "
                f"least {int(closed.total_seconds())} s plus the pool's upgrade time, or 0 (do not wait)"
            )


RULES = (
    rule(_topology_problems, "one InfiniBand block per rack", "nodes", whole="nodes"),
    rule(_backup_problems, "one backup source per claim", "storage", whole="storage"),
    rule(_rdma_problems, "an RDMA team's Pod Security level", "scheduling"),
    rule(_wait_problems, "the upgrade wait against the pools' windows", "cluster"),
)
