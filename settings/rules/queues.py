"""What Kueue, the upgrade Plans and the alerts would make of values that each pass their own bounds: lending that
leaves a cohort nothing to borrow, a fair-sharing weight of 0, two priority classes of one value, a requeue backoff
whose base exceeds its maximum, an upgrade concurrency that drains a whole pool at once, and alert thresholds beyond
what they watch (borrowed GPUs above the inventory, a certificate warning as long as the certificate lives)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from settings.quantities import parse_quantity
from settings.rules.base import rule
from settings.rules.scheduling import flavor_capacity

if TYPE_CHECKING:
    from settings.root import Settings

# RKE2 issues its certificates for 365 days and renews those within 90 days of expiry at start
# (https://docs.rke2.io/security/certificates, "Client and server certificates are valid for 365 days").
CERTIFICATE_DAYS = 365


def _zero(value) -> bool:
    if value is None:
        return False
    return parse_quantity(value) == 0 if isinstance(value, str) else value == 0


def _lending_problems(s: Settings, add) -> None:
    """With a cohort, someone must lend what others may borrow."""
    if s.scheduling.cohort is None or len(s.scheduling.teams) < 2:
        return
    flavors = {flavor for team in s.scheduling.teams for flavor in team.quotas}
    for flavor in sorted(flavors):
        quotas = [(i, t.quotas[flavor]) for i, t in enumerate(s.scheduling.teams) if flavor in t.quotas]
        for resource in ("gpus", "cpu", "memory"):
            nominal = [q for _, q in quotas if not _zero(getattr(q, resource))]
            lent = [q for q in nominal if not (q.lending_limit and _zero(getattr(q.lending_limit, resource)))]
            borrowers = [
                i for i, q in quotas if not (q.borrowing_limit and _zero(getattr(q.borrowing_limit, resource)))
            ]
            if len(nominal) >= 2 and not lent and borrowers:
                first = borrowers[0]
                add(
                    f"scheduling.teams[{first}].quotas.{flavor}.borrowingLimit.{resource}: every team lends 0 "
                    f"{resource} on {flavor} (lendingLimit), so there is nothing in the cohort to borrow; let a team "
                    "lend (raise or drop its lendingLimit) or set the borrowing limits to 0"
                )


def _weight_problems(s: Settings, add) -> None:
    if s.scheduling.cohort is None:
        return
    for i, team in enumerate(s.scheduling.teams):
        if team.fair_sharing_weight == 0:
            add(
                f"scheduling.teams[{i}].fairSharingWeight: 0 gives {team.name!r} an infinite share in Kueue's fair "
                "sharing: it is always the first to be preempted and the last admitted when borrowing "
                "(kueue.sigs.k8s.io, Fair Sharing: weight); give it 1 or more, or drop the team from the cohort"
            )


def _priority_value_problems(s: Settings, add) -> None:
    seen: dict[int, str] = {}
    for i, pc in enumerate(s.scheduling.priority_classes):
        if pc.value in seen:
            add(
                f"scheduling.priorityClasses[{i}].value: {pc.value} is also {seen[pc.value]!r}'s value: Kueue orders "
                "and preempts by value, so the two classes cannot be told apart; give distinct values (higher first)"
            )
        else:
            seen[pc.value] = pc.name


def _backoff_problems(s: Settings, add) -> None:
    wait = s.scheduling.wait_for_pods_ready
    if wait.backoff_base_seconds > wait.backoff_max_seconds:
        add(
            f"scheduling.waitForPodsReady.backoffBaseSeconds: {wait.backoff_base_seconds} s is above backoffMaxSeconds "
            f"({wait.backoff_max_seconds} s): the first requeue delay already exceeds the longest; lower the base or "
            "raise the maximum"
        )


def _pool_sizes(s: Settings) -> dict[str, int]:
    agents = [n for n in s.nodes if not n.control_plane]
    return {
        "gpu": sum(1 for n in agents if n.role == "gpu"),
        "storage": sum(1 for n in agents if n.role == "cpu" and n.storage_host),
        "cpu": sum(1 for n in agents if n.role == "cpu" and not n.storage_host),
    }


def _concurrency_problems(s: Settings, add) -> None:
    upgrade = s.cluster.upgrade
    for pool, size in _pool_sizes(s).items():
        concurrency = getattr(upgrade, pool).concurrency
        if size >= 2 and concurrency >= size:
            add(
                f"cluster.upgrade.{pool}.concurrency: {concurrency} drains all {size} nodes of the {pool} pool at "
                f"once: every workload the pool runs stops together while they upgrade; keep it below {size} (e.g. "
                f"{max(1, size // 4)})"
            )


def _threshold_problems(s: Settings, add) -> None:
    limits = s.monitoring.thresholds
    gpus = sum(flavor_capacity(s).values())  # schedulable: time-sliced replicas count
    if s.scheduling.teams and gpus and limits.queue_borrowed_gpus > gpus:
        add(
            f"monitoring.thresholds.queueBorrowedGpus: {limits.queue_borrowed_gpus} is above the {gpus} "
            "schedulable GPUs of the inventory: no ClusterQueue can borrow that many, so the alert never fires; set "
            "it below the GPUs a team could borrow"
        )
    if limits.certificate_expiry_days >= CERTIFICATE_DAYS:
        add(
            f"monitoring.thresholds.certificateExpiryDays: {limits.certificate_expiry_days} days is not shorter than "
            f"the {CERTIFICATE_DAYS} days RKE2's certificates live: every certificate alerts from the day it is "
            "issued; warn within the last weeks, e.g. 21"
        )


RULES = (
    rule(_lending_problems, "lending limits leave the cohort something to borrow", "scheduling", whole="scheduling"),
    rule(_weight_problems, "fair-sharing weights", "scheduling"),
    rule(_priority_value_problems, "distinct priority values", "scheduling", whole="scheduling"),
    rule(_backoff_problems, "the requeue backoff", "scheduling"),
    rule(_concurrency_problems, "upgrade concurrency against each pool", "cluster nodes", whole="nodes"),
    rule(
        _threshold_problems,
        "alert thresholds against what they watch",
        "monitoring nodes scheduling gpu",
        whole="nodes",
    ),
)
