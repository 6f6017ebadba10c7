"""Danger in the cluster: stateful releases and storage classes replaced or removed, namespaces deleted,
and Ceph changes that Rook cannot apply in place (the network provider, a filesystem or pool renamed)."""

from __future__ import annotations

from typing import Any, Optional

from stacks.diff.core import DangerClass, Entry, Sides

RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
# Releases whose replacement or removal loses data or takes the platform down, and what is lost.
STATEFUL_CHARTS = {
    "rook-ceph-cluster": "the Ceph cluster (tier-2 data)",
    "rook-ceph": "the Ceph operator and CSI (every tier-2 volume's driver)",
    "minio": "MinIO (tier-3 object data)",
    "cilium": "the CNI (pod networking on every node)",
    "tigera-operator": "the CNI (pod networking on every node)",
    "zabbix": "Zabbix and its PostgreSQL database (history, trends, events, the API token)",
    "kueue": "Kueue (every admitted and queued workload of every team is evicted and requeued)",
    "gpu-operator": "the GPU Operator (driver, toolkit and device plugin leave every GPU node: GPU jobs fail)",
}


def _release_danger(sides: Sides) -> list[str]:
    out = []
    for entry, old, new in sides.pairs():
        resource = old or new
        if resource is None or entry.action in ("create", "update"):
            continue
        if entry.type == RELEASE:
            what = STATEFUL_CHARTS.get(str(resource["inputs"].get("chart")).rsplit("/", 1)[-1])
            if what:
                out.append(f"{entry.name}: Helm release of {what} would be {_verb(entry)}")
        if entry.type == "kubernetes:storage.k8s.io/v1:StorageClass":
            out.append(
                f"{entry.name}: StorageClass would be {_verb(entry)}: claims that name it cannot provision meanwhile"
            )
    return out


def _namespace_danger(sides: Sides) -> list[str]:
    """A namespace that would really be deleted: Kubernetes deletes everything in it. One kept by
    retainOnDelete is dropped from the state only; the namespace and its contents stay."""
    return [
        f"{e.name}: namespace {old['inputs'].get('metadata', {}).get('name', '?')} would be {_verb(e)}: Kubernetes "
        "deletes every object in it: running jobs and their pods, PersistentVolumeClaims (their data too where the "
        "class reclaims with Delete), Secrets, queues. Copy what must stay first (docs/runbook.md §9 for tier-2 data)"
        for e, old, _ in sides.pairs()
        if e.type == NAMESPACE and old and e.action not in ("create", "update") and not e.options.get("retainOnDelete")
    ]


def _team_danger(sides: Sides) -> list[str]:
    """A team removed: its ClusterQueue and everything keyed to it go; its namespaces are kept (retainOnDelete)."""
    out = []
    for entry in sides.entries:
        if entry.type != CLUSTER_QUEUE or entry.action != "delete":
            continue
        team = sides.before[entry.urn]["inputs"].get("metadata", {}).get("name", "?")
        kept = sorted(
            r["inputs"]["metadata"]["name"]
            for e in sides.entries
            if e.type == NAMESPACE and e.action == "delete"
            for r in [sides.before[e.urn]]
            if (r["inputs"]["metadata"].get("labels") or {}).get("ml-platform.io/team") == team
        )
        out.append(
            f"team {team} removed: its ClusterQueue, LocalQueues, quotas, role bindings and CI account are deleted: "
            "its members lose access, queued jobs are never admitted, running ones finish (Kueue holds the queue until "
            f"then). Its namespaces {', '.join(kept) or '(none)'} are kept with everything in them (retainOnDelete): "
            "delete them by hand once their data is safe (kubectl delete namespace NAME)"
        )
    return out


def _ceph_values(resource: Optional[dict]) -> dict[str, Any]:
    if resource is None or resource["type"] != RELEASE or resource["inputs"].get("chart") != "rook-ceph-cluster":
        return {}
    return resource["inputs"].get("values") or {}


def _names(values: dict[str, Any], key: str) -> list[str]:
    return [item.get("name") for item in values.get(key) or [] if isinstance(item, dict)]


def _ceph_danger(sides: Sides) -> list[str]:
    """Ceph changes Rook cannot apply in place to a cluster with data."""
    entries, before, after = sides.entries, sides.before, sides.after
    out = []
    for entry in entries:
        if entry.action != "update":
            continue
        old, new = _ceph_values(before.get(entry.urn)), _ceph_values(after.get(entry.urn))
        if not old or not new:
            continue
        old_net = (old.get("cephClusterSpec") or {}).get("network", {}).get("provider")
        new_net = (new.get("cephClusterSpec") or {}).get("network", {}).get("provider")
        if old_net != new_net:
            out.append(
                f"{entry.name}: Ceph's network provider changes {old_net or 'pod network'!r} -> "
                f"{new_net or 'pod network'!r}: Rook does not move a running cluster between networks (MONs keep "
                "their addresses in the monmap); the operator stops reconciling or the MONs lose quorum and every "
                "tier-2 volume hangs. Keep the provider; moving means a new cluster and a data copy "
                "(docs/ceph-tier.md, docs/runbook.md §12)"
            )
        for key, what in (("cephFileSystems", "CephFS filesystem"), ("cephBlockPools", "block pool")):
            gone = [n for n in _names(old, key) if n not in _names(new, key)]
            added = [n for n in _names(new, key) if n not in _names(old, key)]
            if gone:
                out.append(
                    f"{entry.name}: {what} {', '.join(gone)} renamed or removed"
                    f"{' (new: ' + ', '.join(added) + ')' if added else ''}: Rook creates a new, EMPTY {what}; "
                    "existing volumes and their data stay on the old one (Helm deletes its object; this program sets "
                    "preserveFilesystemOnDelete, and Rook refuses to delete a pool that still holds volumes), "
                    "while the StorageClass and new claims move to the empty one. Keep the name; copy the data "
                    "first if it must change (docs/runbook.md §9)"
                )
    return out


def _verb(entry: Entry) -> str:
    return {"delete": "deleted (uninstalled)", "replace": "replaced (a new one is created, then the old deleted)"}.get(
        entry.action, "deleted, then created again"
    )


CLASSES = (
    DangerClass("a stateful Helm release or a StorageClass replaced or removed", _release_danger),
    DangerClass("a namespace deleted (its workloads, claims and secrets go with it)", _namespace_danger),
    DangerClass("a team removed (its queues and access go; its namespaces are kept)", _team_danger),
    DangerClass("Ceph's network provider changed; a CephFS filesystem or pool renamed", _ceph_danger),
)
