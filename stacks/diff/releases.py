"""Danger in the cluster: stateful Helm releases and storage classes replaced or removed."""

from __future__ import annotations

from typing import Optional

from stacks.diff.core import Entry

# Releases whose replacement or removal loses data or takes the platform down.
STATEFUL_CHARTS = {
    "rook-ceph-cluster": "the Ceph cluster (tier-2 data)",
    "rook-ceph": "the Ceph operator and CSI (every tier-2 volume's driver)",
    "minio": "MinIO (tier-3 object data)",
    "cilium": "the CNI (pod networking on every node)",
    "tigera-operator": "the CNI (pod networking on every node)",
}


def danger(entries: list[Entry], before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    return [line for e in entries for line in _release_danger(e, before.get(e.urn) or after.get(e.urn))]


def _release_danger(entry: Entry, resource: Optional[dict]) -> list[str]:
    if resource is None or entry.action in ("create", "update"):
        return []
    if entry.type == "kubernetes:helm.sh/v3:Release":
        what = STATEFUL_CHARTS.get(str(resource["inputs"].get("chart")))
        if what:
            return [f"{entry.name}: Helm release of {what} would be {_verb(entry)}"]
    if entry.type == "kubernetes:storage.k8s.io/v1:StorageClass":
        return [f"{entry.name}: StorageClass would be {_verb(entry)}: claims that name it cannot provision meanwhile"]
    return []


def _verb(entry: Entry) -> str:
    return {"delete": "deleted (uninstalled)", "replace": "replaced (a new one is created, then the old deleted)"}.get(
        entry.action, "deleted, then created again"
    )
