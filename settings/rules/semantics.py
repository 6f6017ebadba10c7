"""What values mean next to what they feed, beyond their syntax: schedules against their retention and monitoring,
versions against the compatibility their own fields document, alert thresholds against the inventory they watch."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING

from settings.rules.base import rule
from settings.schedules import Intervals, intervals

if TYPE_CHECKING:
    from settings.root import Settings

# The monitoring computes each schedule's age alert ({$ETCD.SNAPSHOT.MAXAGE}, {$BACKUP.MAXAGE}) from its longest gap
# over four weeks (components/monitoring/config.py, cron_interval_seconds), which needs two runs in them.
MONITORED_GAP = timedelta(days=14)
# Less history than this is no restore point for a problem noticed the next working day.
MIN_ETCD_HISTORY = timedelta(days=1)


def _gap_problem(path: str, expression: str, what: str) -> str | None:
    longest = intervals(expression).longest
    if longest <= MONITORED_GAP:
        return None
    return (
        f"{path}: {expression!r} leaves up to {Intervals.text(longest)} between {what}; the monitoring's age alert is "
        f"computed from the schedule over four weeks and needs a run at least every {MONITORED_GAP.days} days: "
        "run it more often"
    )


def _schedule_problems(s: Settings, add) -> None:
    etcd = s.cluster.etcd_snapshots
    kept = intervals(etcd.schedule_cron).shortest * etcd.retention
    if kept < MIN_ETCD_HISTORY:
        add(
            f"cluster.etcdSnapshots.retention: {etcd.retention} snapshots at {etcd.schedule_cron!r} (every "
            f"{Intervals.text(intervals(etcd.schedule_cron).shortest)} at the most) keep only {Intervals.text(kept)} "
            "of history: RKE2 prunes older ones, so a problem noticed the next day has no snapshot from before it; "
            "keep more snapshots or take them less often (e.g. '0 */6 * * *' with 28)"
        )
    problem = _gap_problem("cluster.etcdSnapshots.scheduleCron", etcd.schedule_cron, "etcd snapshots")
    if problem:
        add(problem)
    backup, minio = s.storage.minio.backup, s.storage.minio
    if not backup.sources:
        return
    gaps = intervals(backup.schedule)
    problem = _gap_problem("storage.minio.backup.schedule", backup.schedule, "backups")
    if problem:
        add(problem)
    if gaps.shortest.total_seconds() < backup.deadline_seconds:
        add(
            f"storage.minio.backup.deadlineSeconds: {backup.deadline_seconds} s is longer than the "
            f"{Intervals.text(gaps.shortest)} between two runs of {backup.schedule!r}: the backup CronJobs forbid "
            "overlapping runs, so a run that takes its allowed time skips the next one; lower the deadline below the "
            "interval or space the schedule"
        )
    retention = timedelta(days=minio.noncurrent_retention_days)
    if gaps.longest >= retention:
        add(
            f"storage.minio.noncurrentRetentionDays: {minio.noncurrent_retention_days} days is not longer than the "
            f"{Intervals.text(gaps.longest)} between backups ({backup.schedule!r}): a version a run replaces expires "
            "before the next run, so the bucket never holds an earlier restore point; keep versions longer than the "
            "interval or back up more often"
        )


_ZABBIX_VERSION = re.compile(r"^(?:\d+:)?(\d+)\.(\d+)\.")
_ZABBIX_TAG = re.compile(r"^[a-z]+-(\d+)\.(\d+)\.")
_SUITES = {"bullseye": "debian11", "bookworm": "debian12", "trixie": "debian13", "jammy": "ubuntu22.04"}
_SUITES |= {"noble": "ubuntu24.04"}
# What CephSettings.ceph_image documents: Rook v1.20 runs Ceph v19 (Squid) and v20 (Tentacle).
CEPH_MAJORS = (19, 20)


def _version_problems(s: Settings, add) -> None:
    ceph = s.storage.ceph.ceph_image
    tag = ceph.split("@")[0].rsplit(":", 1)[-1] if ":" in ceph.split("@")[0].rsplit("/", 1)[-1] else ""
    major = re.match(r"^v?(\d+)\.", tag)
    if s.storage_hosts and major and int(major[1]) not in CEPH_MAJORS:
        add(
            f"storage.ceph.cephImage: {ceph!r} is Ceph v{major[1]}; the pinned Rook v1.20 runs Ceph "
            f"v{' and v'.join(map(str, CEPH_MAJORS))} only (its field documents it): pick a v19 or v20 image"
        )
    agent = s.monitoring.nas_agent
    if not s.nas.hosts:
        return
    wanted = _ZABBIX_VERSION.match(agent.version)
    server = _ZABBIX_TAG.match(s.monitoring.image_tag)
    repo = re.search(r"/zabbix/(\d+)\.(\d+)/", agent.apt_repository + "/")
    if wanted and repo and wanted.groups() != repo.groups():
        add(
            f"monitoring.nasAgent.version: {agent.version!r} is Zabbix {'.'.join(wanted.groups())}, but "
            f"monitoring.nasAgent.aptRepository is the {'.'.join(repo.groups())} repository: apt cannot find it there"
        )
    if wanted and server and tuple(map(int, wanted.groups())) > tuple(map(int, server.groups())):
        add(
            f"monitoring.nasAgent.version: agent {'.'.join(wanted.groups())} is newer than the Zabbix server "
            f"({s.monitoring.image_tag!r}); Zabbix supports agents up to the server's own version (Zabbix manual, "
            f"Compatibility): pin an agent of {'.'.join(server.groups())} or older"
        )
    distro = _SUITES.get(agent.apt_suite)
    if distro and "+" in agent.version and not agent.version.rsplit("+", 1)[1].startswith(distro):
        add(
            f"monitoring.nasAgent.version: {agent.version!r} is a build for {agent.version.rsplit('+', 1)[1]}, but "
            f"monitoring.nasAgent.aptSuite {agent.apt_suite!r} is {distro}: pin that suite's build"
        )


# Ceph stops writes at mon_osd_full_ratio (0.95 by default; docs.ceph.com, "Storage Capacity").
CEPH_FULL_PERCENT = 95


def _threshold_problems(s: Settings, add) -> None:
    limits = s.monitoring.thresholds
    nccl = s.acceptance.nccl
    if s.gpu_nodes and limits.ib_min_rate_gbps > nccl.ib_port_gbps:
        # The threshold is per port (a port trained down), so it is bounded by one port's rate from the hardware
        # table, not by all ports together.
        add(
            f"monitoring.thresholds.ibMinRateGbps: {limits.ib_min_rate_gbps} Gb/s is above one port's rate "
            f"({nccl.ib_port_width}X {nccl.ib_generation}: {nccl.ib_port_gbps:g} Gb/s, acceptance.nccl and "
            "settings/hardware.py): every port would alert as degraded; set it below the rate a port trains at"
        )
    if s.storage_hosts and limits.ceph_pool_used_percent >= CEPH_FULL_PERCENT:
        add(
            f"monitoring.thresholds.cephPoolUsedPercent: {limits.ceph_pool_used_percent} alerts only once Ceph has "
            f"stopped writes (full ratio {CEPH_FULL_PERCENT} %): alert below it, e.g. 80"
        )
    upgrade = s.cluster.upgrade
    drains = {"gpu": upgrade.gpu.drain, "storage": upgrade.storage.drain, "cpu": upgrade.cpu.drain}
    pool, drain = max(drains.items(), key=lambda item: item[1].timeout_seconds)
    if limits.node_cordoned_max_minutes * 60 < drain.timeout_seconds:
        add(
            f"monitoring.thresholds.nodeCordonedMaxMinutes: {limits.node_cordoned_max_minutes} min is shorter than "
            f"the {pool} pool's drain timeout ({drain.timeout_seconds} s, cluster.upgrade.{pool}.drain): every upgrade "
            "whose drain takes its allowed time would alert; raise it above the drain timeout"
        )


RULES = (
    rule(_schedule_problems, "the schedules against their retention and the monitoring", "cluster storage"),
    rule(_version_problems, "versions against the compatibility their fields document", "storage nodes monitoring nas"),
    rule(_threshold_problems, "alert thresholds against the inventory", "monitoring nodes acceptance cluster"),
)
