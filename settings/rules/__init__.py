"""Rules that relate several fields or areas, one module per area. Each problem names its path and the fix.

`hosts` (names, addresses, host keys, control plane, renames, hardware), `cluster` (the RKE2 release, its
upgrade path, the charts' Kubernetes range), `network`, `ceph` (tier 2), `minio` (tier 3 and backups),
`scheduling` (teams, namespaces, quotas), `monitoring` (Zabbix), `claims` (every declared claim: collisions, ranges,
reserved values), `semantics` (schedules, versions and thresholds against what they feed). `base` says what a rule
is. The rules read `settings.root.Settings`; root never imports them (`settings.load` runs them).
"""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING

from settings.rules import (
    ceph,
    claims,
    cluster,
    compatibility,
    dependencies,
    hosts,
    identity,
    minio,
    monitoring,
    network,
    queues,
    scheduling,
    semantics,
)
from settings.rules.base import EVERY_AREA, Rule
from settings.rules.cluster import rke2_release
from settings.rules.scheduling import flavor_capacity, platform_namespaces

if TYPE_CHECKING:
    from settings.root import Settings

# Every rule group, by area, with the areas it reads and those it judges as a whole (see `Rule`).
RULES: tuple[Rule, ...] = (
    *claims.RULES,
    *hosts.RULES,
    *cluster.RULES,
    *network.RULES,
    *ceph.RULES,
    *minio.RULES,
    *scheduling.RULES,
    *monitoring.RULES,
    *semantics.RULES,
    *identity.RULES,
    *compatibility.RULES,
    *queues.RULES,
    *dependencies.RULES,
)

__all__ = [
    "RULES",
    "Rule",
    "cross_field_problems",
    "flavor_capacity",
    "platform_namespaces",
    "rke2_release",
    "settings_warnings",
    "waiting_rules",
]


def cross_field_problems(s: Settings, missing: Set[str] = frozenset(), incomplete: Set[str] = frozenset()) -> list[str]:
    """Every rule that can judge `s`. `missing`: areas that failed validation; `incomplete`: areas with list
    items that failed (settings.partial). Each problem names its path and the fix."""
    problems: list[str] = []
    for rule in RULES:
        if not waits(rule, missing, incomplete):
            rule.check(s, problems.append)
    return problems


def waiting_rules(missing: Set[str], incomplete: Set[str]) -> list[str]:
    """What the rules that wait for `missing` and `incomplete` areas would have checked."""
    return [rule.checks for rule in RULES if waits(rule, missing, incomplete)]


def waits(rule: Rule, missing: Set[str], incomplete: Set[str]) -> bool:
    reads_missing = rule.reads & missing or (rule.reads == EVERY_AREA and missing)
    return bool(reads_missing or rule.whole & incomplete)


def settings_warnings(s: Settings) -> list[str]:
    """Not errors, but worth an operator's look; `pulumi up` and the offline plan print them."""
    return hosts.host_warnings(s) + cluster.version_warnings(s)
