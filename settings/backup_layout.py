"""The backups' layout: every name a backup source owns, in the cluster and in the backup bucket.

The components build the backup pipeline from these names (components/minio/backup.py), and the settings
refuse a source whose names collide with another source's, with the pipeline's fixed objects, or exceed what
Kubernetes accepts for their kind (`layout_problems`): the rule is derived from this table, not from a list of
forbidden words. A source named `status`, for example, would own the bucket prefix `status/`, which holds every
other source's run record.

Where things live (docs/minio-tier.md, "CephFS backup"):
- in the platform namespace `ml-backup` (no team has any right there): the launcher CronJob, the run spec,
  the rclone key, both ServiceAccounts and their Roles, the status ConfigMap, the backup Job, the
  VolumeSnapshot bound to the team's snapshot;
- cluster-wide: the launcher's ClusterRole and binding (VolumeSnapshotContents), the VolumeSnapshotContent
  that binds the team's snapshot into `ml-backup`;
- in the source's (team) namespace: the VolumeSnapshot of the claim, and the Role and binding that let the
  launcher take and delete exactly that snapshot;
- in the backup bucket: `<source>/` (the tree) and `status/<source>.json` (the run record).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

BACKUP_NAMESPACE = "ml-backup"
"""The platform namespace of the whole backup pipeline (the monitoring contract names it)."""
CA_CONFIGMAP = "backup-ca"
"""The MinIO tier's CA in `ml-backup`, for the backup pods."""
STATUS_PREFIX = "status/"
"""Where the run records live in the backup bucket."""
CLUSTER = ""
"""The scope of a cluster-wide object."""

# The longest name each kind accepts. A Job's name becomes the `batch.kubernetes.io/job-name` label of its pods
# (a label value: 63 characters); a CronJob adds an 11-character suffix to its Jobs' names (52). Everything else
# here is a DNS subdomain (253).
MAX_LENGTH = {"CronJob": 52, "Job": 63}
SUBDOMAIN = 253


def cronjob(source: str) -> str:
    return source


def run_name(source: str) -> str:
    """The VolumeSnapshots (team and platform namespace) and the Job of one run (one of each at a time)."""
    return f"backup-{source}"


def run_spec(source: str) -> str:
    return f"backup-{source}-run"


def status_configmap(source: str) -> str:
    return f"backup-status-{source}"


def backup_user(source: str) -> str:
    """The backup pod's ServiceAccount and the source's MinIO writer."""
    return f"backup-{source}"


def restore_user(source: str) -> str:
    return f"restore-{source}"


def launcher_account(source: str) -> str:
    return f"backup-{source}-launcher"


def rclone_secret(source: str) -> str:
    return f"backup-{source}-rclone"


def bound_content(source: str) -> str:
    """The VolumeSnapshotContent that binds the team's snapshot into the platform namespace (cluster-wide)."""
    return f"{BACKUP_NAMESPACE}-{source}"


def launcher_cluster_role(source: str) -> str:
    return f"{BACKUP_NAMESPACE}-{source}-launcher"


def source_prefix(source: str) -> str:
    return f"{source}/"


def run_record(source: str) -> str:
    return f"{STATUS_PREFIX}{source}.json"


@dataclass(frozen=True)
class Owned:
    scope: str  # a namespace, or CLUSTER
    kind: str
    name: str


def owned(source: str, namespace: str) -> list[Owned]:
    """Every Kubernetes object one source's pipeline creates or runs, by scope, kind and name."""
    platform = [
        ("CronJob", cronjob(source)),
        ("Job", run_name(source)),
        ("VolumeSnapshot", run_name(source)),
        ("ConfigMap", run_spec(source)),
        ("ConfigMap", status_configmap(source)),
        ("Secret", rclone_secret(source)),
        ("ServiceAccount", backup_user(source)),
        ("ServiceAccount", launcher_account(source)),
        ("Role", status_configmap(source)),
        ("RoleBinding", status_configmap(source)),
        ("Role", launcher_account(source)),
        ("RoleBinding", launcher_account(source)),
    ]
    cluster = [
        ("VolumeSnapshotContent", bound_content(source)),
        ("ClusterRole", launcher_cluster_role(source)),
        ("ClusterRoleBinding", launcher_cluster_role(source)),
    ]
    team = [
        ("VolumeSnapshot", run_name(source)),
        ("Role", launcher_account(source)),
        ("RoleBinding", launcher_account(source)),
    ]
    return (
        [Owned(BACKUP_NAMESPACE, kind, name) for kind, name in platform]
        + [Owned(CLUSTER, kind, name) for kind, name in cluster]
        + [Owned(namespace, kind, name) for kind, name in team]
    )


FIXED = (Owned(BACKUP_NAMESPACE, "ConfigMap", CA_CONFIGMAP),)
"""Objects of the pipeline that belong to no source."""


def bucket_keys(source: str) -> list[str]:
    """What a source owns in the backup bucket: its prefix (a tree) and its run record (one key)."""
    return [source_prefix(source), run_record(source)]


def layout_problems(sources: Iterable[tuple[str, str]]) -> list[tuple[int, str]]:
    """(index, problem) for every source (name, namespace) whose names collide with another's or with the fixed
    objects, or are too long for their kind."""
    sources = list(sources)
    problems: list[tuple[int, str]] = []
    holder: dict[Owned, str] = {item: "the pipeline itself" for item in FIXED}
    for i, (name, namespace) in enumerate(sources):
        for item in owned(name, namespace):
            limit = MAX_LENGTH.get(item.kind, SUBDOMAIN)
            if len(item.name) > limit:
                problems.append(
                    (
                        i,
                        f"makes the {item.kind} {item.name!r} ({len(item.name)} characters; Kubernetes accepts at "
                        f"most {limit}): use a name of at most {len(name) - (len(item.name) - limit)} characters",
                    )
                )
            other = holder.setdefault(item, f"source {name!r}")
            if other != f"source {name!r}":
                where = "cluster-wide" if item.scope == CLUSTER else f"in namespace {item.scope}"
                problems.append((i, f"would own the {item.kind} {item.name!r} {where}, which {other} already owns"))
    keys = {key: name for name, _ in sources for key in bucket_keys(name)}
    for i, (name, _) in enumerate(sources):
        prefix = source_prefix(name)
        covered = sorted(key for key, owner in keys.items() if key.startswith(prefix) and key != prefix)
        if covered:
            whose = sorted({keys[key] for key in covered})
            problems.append(
                (
                    i,
                    f"would own the bucket prefix {prefix!r}, which holds {', '.join(covered)} (the run record of "
                    f"{', '.join(repr(w) for w in whose)}): its backup user could overwrite those records, and its "
                    f"runs would read them as its own. {STATUS_PREFIX!r} is reserved for the run records",
                )
            )
    return problems
