"""Rules about tier 2 (Rook-Ceph): storage hosts, MON count, storage classes, the Ceph image and Rook's charts."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from settings.rules.base import rule

if TYPE_CHECKING:
    from settings.root import Settings

RETIRE_TIER2 = "docs/runbook.md, 'Retire tier 2'"


def _storage_host_problems(s: Settings, add) -> None:
    if not s.storage_hosts:
        # Settings cannot see the stack state, so `storage.ceph.deployed` says that tier 2 exists. Without
        # it, emptying every osdDevices list (or losing them in an inventory edit) would uninstall the
        # CephCluster, pools and filesystem in one run; the protected Rook releases would stop that run
        # half-way, this stops it before anything is planned.
        if s.storage.ceph.deployed:
            add(
                "nodes: no node has osdDevices, but storage.ceph.deployed is true: this would remove every storage "
                "host of a deployed tier 2 and uninstall its CephCluster with the data on it. If that is not what "
                f"you meant, restore the osdDevices lists. To retire tier 2, follow {RETIRE_TIER2} (back up, "
                "delete the PVCs, unprotect the Rook releases), then set storage.ceph.deployed: false"
            )
        return  # no Ceph tier in this environment
    mons = s.storage.ceph.mon_count
    hosts = len(s.storage_hosts)
    if hosts < 3:
        add(
            f"nodes: {hosts} Ceph storage host(s); replicated pools of size 3 with failure domain 'host' need at "
            "least 3 CPU nodes with osdDevices"
        )
    if mons > hosts:
        add(f"storage.ceph.monCount: {mons} MONs but only {hosts} storage hosts; MONs need distinct hosts, lower it")


def _storage_problems(s: Settings, add) -> None:
    if not s.storage_hosts:
        return  # no Ceph tier in this environment (or its hosts' entries were set aside)
    mons = s.storage.ceph.mon_count
    if mons % 2 == 0 or mons < 3:
        add(f"storage.ceph.monCount: {mons}; MON quorum needs an odd count of at least 3 (3 or 5)")
    ceph = s.storage.ceph
    # Two classes of one name (tier 1 and tier 2, or RBD and CephFS): the claims rule (storage-class claims).
    if not re.fullmatch(r"([^\s@]+/)?[^\s@:/]+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", ceph.ceph_image):
        add(
            f"storage.ceph.cephImage: {ceph.ceph_image!r} is not '<repository>:<tag>'; give a pinned tag such as "
            "'quay.io/ceph/ceph:v20.2.4' (the Rook cluster chart takes repository and tag separately)"
        )
    if s.charts.rook_ceph.version != s.charts.rook_ceph_cluster.version:
        add(
            f"charts.rookCephCluster.version: {s.charts.rook_ceph_cluster.version!r} differs from "
            f"charts.rookCeph.version {s.charts.rook_ceph.version!r}; install both charts of the same Rook release"
        )


RULES = (
    rule(_storage_host_problems, "the Ceph storage host count", "nodes storage", "nodes"),
    rule(_storage_problems, "the Ceph settings", "nodes storage gpu charts"),
)
