"""The backup launcher, per source (`backup.py` creates it): the CronJob in the platform namespace `ml-backup`
that brings the team's data to the backup Job the way Velero's CSI data mover does
(vmware-tanzu/velero pkg/exposer/csi_snapshot.go: createBackupVS, createBackupVSC), its manifests and its RBAC.

One run, one kubectl command per container (the kubectl image has no shell), in order:
1. delete the previous run: the Job (foreground: its pod and clone go with it), the VolumeSnapshot in
   `ml-backup`, the VolumeSnapshotContent that bound it (`Retain`: the Ceph snapshot stays), and the team's
   VolumeSnapshot (its class deletes the Ceph snapshot);
2. take a VolumeSnapshot `backup-<source>` of the claim in the team's namespace and wait until it is ready;
3. bind it into `ml-backup`: `bind-snapshot.sh` (rclone image: busybox sh, wget) reads the snapshot's content
   through the pod's own kubectl proxy (loopback, GET only, the two paths only) and writes a
   VolumeSnapshotContent `ml-backup-<source>` with the same snapshotHandle, `deletionPolicy: Retain`, pre-bound
   to the VolumeSnapshot `ml-backup/backup-<source>`; kubectl creates both and waits until that one is ready;
4. create the backup Job from the run spec (`backup_specs.job_manifest`).

Why the Ceph snapshot survives what the team does meanwhile: the team has no right on VolumeSnapshots, and
ceph-csi counts the snapshot-backed volume as a reference to the snapshot, so even a deleted team snapshot
keeps its data until the clone is gone (ceph/ceph-csi docs/design/proposals/cephfs-snapshot-shallow-ro-vol.md,
"Reference counting for shallow volumes"). A pre-provisioned content is ready as soon as it is bound: ceph-csi
does not list snapshots, and the snapshotter then takes the handle as valid (kubernetes-csi/external-snapshotter
v8.6.0 pkg/snapshotter/snapshotter.go, GetSnapshotStatus).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from components.minio.backup_specs import RESTRICTED_CONTAINER, SNAPSHOT_API, labels, restricted_pod
from settings import BackupSource, CephSettings, MinioSettings
from settings.backup_layout import (
    BACKUP_NAMESPACE,
    bound_content,
    launcher_account,
    run_name,
    run_spec,
)

BIND_SCRIPT = Path(__file__).parent / "container" / "bind-snapshot.sh"
RUN_SPEC_MOUNT = "/run-spec"
BIND_MOUNT = "/bind"
PROXY_PORT = 8001
HANDLE_PLACEHOLDER = "@snapshotHandle@"
TIMEOUT = "--timeout=1800s"


def csi_driver(ceph: CephSettings) -> str:
    """The tier-2 CephFS CSI driver (Rook names it after its namespace)."""
    return f"{ceph.namespace}.cephfs.csi.ceph.com"


def source_snapshot(ceph: CephSettings, source: BackupSource) -> dict[str, Any]:
    """The team's snapshot of the claim (the tier-2 CephFS snapshot class Rook creates with the shared class's name)."""
    return {
        "apiVersion": f"{SNAPSHOT_API}/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": run_name(source.name), "namespace": source.namespace, "labels": labels(source.name)},
        "spec": {
            "volumeSnapshotClassName": ceph.shared_storage_class,
            "source": {"persistentVolumeClaimName": source.claim_name},
        },
    }


def bound_snapshot(ceph: CephSettings, source: BackupSource) -> dict[str, Any]:
    """The snapshot in `ml-backup`, pre-bound to the content below (Velero's createBackupVS)."""
    return {
        "apiVersion": f"{SNAPSHOT_API}/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": run_name(source.name), "namespace": BACKUP_NAMESPACE, "labels": labels(source.name)},
        "spec": {
            "volumeSnapshotClassName": ceph.shared_storage_class,
            "source": {"volumeSnapshotContentName": bound_content(source.name)},
        },
    }


def content_template(ceph: CephSettings, source: BackupSource) -> dict[str, Any]:
    """The content that binds the team's Ceph snapshot into `ml-backup` (Velero's createBackupVSC), its handle
    filled in by bind-snapshot.sh. `Retain`: deleting it never deletes the Ceph snapshot, which stays the team
    snapshot's (deleted by the next run)."""
    return {
        "apiVersion": f"{SNAPSHOT_API}/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": bound_content(source.name), "labels": labels(source.name)},
        "spec": {
            "deletionPolicy": "Retain",
            "driver": csi_driver(ceph),
            "source": {"snapshotHandle": HANDLE_PLACEHOLDER},
            "volumeSnapshotClassName": ceph.shared_storage_class,
            "volumeSnapshotRef": {"name": run_name(source.name), "namespace": BACKUP_NAMESPACE},
        },
    }


def proxy_paths(source: BackupSource) -> list[str]:
    """What the launcher's kubectl proxy forwards (Go regular expressions, kubectl proxy --accept-paths): the team
    snapshot, and a content by name (the one bound to it has a generated name)."""
    group = "^/apis/" + re.escape(SNAPSHOT_API) + "/v1"
    return [
        f"{group}/namespaces/{source.namespace}/volumesnapshots/{run_name(source.name)}$",
        f"{group}/volumesnapshotcontents/[a-z0-9][-a-z0-9.]*$",
    ]


def launcher_pod(minio: MinioSettings, ceph: CephSettings, source: BackupSource) -> dict[str, Any]:
    name = run_name(source.name)
    tmp = {"name": "tmp", "mountPath": "/tmp"}
    spec = {"name": "run-spec", "mountPath": RUN_SPEC_MOUNT, "readOnly": True}
    bind = {"name": "bind", "mountPath": BIND_MOUNT}

    def kubectl(step: str, *args: str, namespace: str | None = BACKUP_NAMESPACE, **extra: Any) -> dict[str, Any]:
        return {
            "name": step,
            "image": minio.backup.kubectl_image,
            "args": [*args, *(["--namespace", namespace] if namespace else [])],
            "env": [{"name": "HOME", "value": "/tmp"}],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
            "volumeMounts": [tmp, spec, {**bind, "readOnly": True}],
            "securityContext": RESTRICTED_CONTAINER,
            **extra,
        }

    ready = "--for=jsonpath={.status.readyToUse}=true"
    team = source.namespace
    proxy = kubectl(
        "api-proxy",
        "proxy",
        "--address=127.0.0.1",
        f"--port={PROXY_PORT}",
        f"--accept-paths={','.join(proxy_paths(source))}",
        "--reject-methods=^(POST|PUT|PATCH|DELETE)$",
        namespace=None,
        # A native sidecar (Kubernetes >= 1.29): runs beside the next steps, stopped when the pod's work is done.
        restartPolicy="Always",
    )
    binder = {
        "name": "bind",
        "image": minio.backup.image,
        "command": ["sh", "-c", BIND_SCRIPT.read_text(), "bind-snapshot"],
        "env": [
            {"name": "API", "value": f"http://127.0.0.1:{PROXY_PORT}"},
            {"name": "SOURCE_NAMESPACE", "value": team},
            {"name": "SNAPSHOT", "value": name},
            {"name": "CSI_DRIVER", "value": csi_driver(ceph)},
            {"name": "TEMPLATE", "value": f"{RUN_SPEC_MOUNT}/content.json"},
            {"name": "OUT", "value": f"{BIND_MOUNT}/content.json"},
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": [spec, bind],
        "securityContext": RESTRICTED_CONTAINER,
    }
    init = [
        # The previous run, newest object first: its Job (pod and clone with it), then what bound its snapshot.
        kubectl("delete-job", "delete", "job", name, "--ignore-not-found", "--cascade=foreground", TIMEOUT),
        kubectl("delete-bound-snapshot", "delete", "volumesnapshot", name, "--ignore-not-found", TIMEOUT),
        kubectl(
            "delete-content",
            "delete",
            "volumesnapshotcontent",
            bound_content(source.name),
            "--ignore-not-found",
            TIMEOUT,
            namespace=None,
        ),
        kubectl("delete-snapshot", "delete", "volumesnapshot", name, "--ignore-not-found", TIMEOUT, namespace=team),
        kubectl("snapshot", "create", "--filename", f"{RUN_SPEC_MOUNT}/snapshot.json", namespace=team),
        kubectl("wait-snapshot", "wait", ready, f"volumesnapshot/{name}", TIMEOUT, namespace=team),
        proxy,
        binder,
        kubectl(
            "create-bound",
            "create",
            "--filename",
            f"{BIND_MOUNT}/content.json",
            "--filename",
            f"{RUN_SPEC_MOUNT}/bound-snapshot.json",
            namespace=None,
        ),
        kubectl("wait-bound", "wait", ready, f"volumesnapshot/{name}", TIMEOUT),
    ]
    return restricted_pod(
        launcher_account(source.name),
        65534,
        65534,
        init,
        [kubectl("start-backup", "create", "--filename", f"{RUN_SPEC_MOUNT}/job.json")],
        [
            {"name": "tmp", "emptyDir": {}},
            {"name": "bind", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            {"name": "run-spec", "configMap": {"name": run_spec(source.name)}},
        ],
    )


def cronjob_spec(minio: MinioSettings, ceph: CephSettings, source: BackupSource) -> dict[str, Any]:
    return {
        "schedule": minio.backup.schedule,
        "timeZone": "Etc/UTC",
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": 3600,
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 3,
        "jobTemplate": {
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": 3600,
                "template": {"metadata": {"labels": labels(source.name)}, "spec": launcher_pod(minio, ceph, source)},
            }
        },
    }


def _named(group: str, kind: str, name: str) -> list[dict[str, Any]]:
    """Create (which RBAC cannot limit by name), and everything else the steps do on this one object only
    (list and watch by name: kubectl's waits select it with metadata.name)."""
    return [
        {"apiGroups": [group], "resources": [kind], "verbs": ["create"]},
        {
            "apiGroups": [group],
            "resources": [kind],
            "resourceNames": [name],
            "verbs": ["get", "list", "watch", "delete"],
        },
    ]


def platform_rules(source: BackupSource) -> list[dict[str, Any]]:
    """The launcher in `ml-backup`: its run's Job and bound VolumeSnapshot."""
    name = run_name(source.name)
    return _named("batch", "jobs", name) + _named(SNAPSHOT_API, "volumesnapshots", name)


def source_rules(source: BackupSource) -> list[dict[str, Any]]:
    """The launcher in the team's namespace: the snapshot `backup-<source>`, nothing else."""
    return _named(SNAPSHOT_API, "volumesnapshots", run_name(source.name))


def cluster_rules(source: BackupSource) -> list[dict[str, Any]]:
    """The launcher cluster-wide: read a content (the team snapshot's has a generated name), create and delete
    its own."""
    content = bound_content(source.name)
    return [
        {"apiGroups": [SNAPSHOT_API], "resources": ["volumesnapshotcontents"], "verbs": ["create", "get"]},
        {
            "apiGroups": [SNAPSHOT_API],
            "resources": ["volumesnapshotcontents"],
            "resourceNames": [content],
            "verbs": ["list", "watch", "delete"],
        },
    ]
