"""What the CephFS backup Job runs, per source (`backup.py` creates it; `backup_launcher.py` starts it): its
pod, the rclone environment, and the restricted pod shape both share. Plain manifests, no resources. The names
come from the layout (settings/backup_layout.py), which the settings check for collisions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from components.cluster.config import ROLE_LABEL
from settings import BackupSource, CephSettings, MinioSettings
from settings.backup_layout import (
    BACKUP_NAMESPACE,
    CA_CONFIGMAP,
    backup_user,
    launcher_account,
    rclone_secret,
    restore_user,
    run_name,
    status_configmap,
)

__all__ = [
    "BACKUP_NAMESPACE",
    "CA_CONFIGMAP",
    "backup_user",
    "launcher_account",
    "rclone_secret",
    "restore_user",
    "run_name",
    "status_configmap",
]

REMOTE = "nas"  # rclone remote configured from RCLONE_CONFIG_NAS_* variables
DATA_MOUNT = "/data"
CA_MOUNT = "/ca"
STATUS_MOUNT = "/status"
SCRIPT = Path(__file__).parent / "container" / "cephfs-backup.sh"


def backup_environment(
    source: str, bucket: str, *, mode: str, max_delete: int, max_shrink_percent: int, verify: str, source_dir: str
) -> dict[str, str]:
    """The parameters of cephfs-backup.sh (what the container's `env` holds; the tests run the same)."""
    return {
        "SOURCE": source,
        "SOURCE_DIR": source_dir,
        "BUCKET": bucket,
        "MODE": mode,
        "MAX_DELETE": str(max_delete),
        "MAX_SHRINK_PERCENT": str(max_shrink_percent),
        "VERIFY": verify,
        "STATUS_DIR": STATUS_MOUNT,
    }


def backup_command() -> list[str]:
    """argv of the backup container: the script's text through sh (busybox ash in the rclone image)."""
    return ["sh", "-c", SCRIPT.read_text(), "cephfs-backup"]


def rclone_environment(endpoint: str, access_key: str, secret_key: str, *, provider: str = "Minio") -> dict[str, str]:
    """The rclone remote `nas`, from the environment only (no config file)."""
    name = f"RCLONE_CONFIG_{REMOTE.upper()}"
    return {
        f"{name}_TYPE": "s3",
        f"{name}_PROVIDER": provider,
        f"{name}_ENV_AUTH": "false",
        f"{name}_ENDPOINT": endpoint,
        f"{name}_REGION": "us-east-1",
        f"{name}_ACCESS_KEY_ID": access_key,
        f"{name}_SECRET_ACCESS_KEY": secret_key,
        # The writer may not create buckets; the bucket exists (MinioTier creates it).
        f"{name}_NO_CHECK_BUCKET": "true",
    }


RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
SNAPSHOT_API = "snapshot.storage.k8s.io"


def shallow_class(ceph: CephSettings) -> str:
    """The StorageClass of the read-only clones: CephFS volumes backed by a snapshot (no copy)."""
    return f"{ceph.shared_storage_class}-snapshot-ro"


def restricted_pod(
    account: str, user: int, group: int, init: list[dict], main: list[dict], volumes: list[dict]
) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "serviceAccountName": account,
        "nodeSelector": {ROLE_LABEL: "cpu"},  # CPU nodes only, never a GPU node
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": user,
            "runAsGroup": group,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": init,
        "containers": main,
        "volumes": volumes,
    }


def pod_spec(minio: MinioSettings, ceph: CephSettings, source: BackupSource) -> dict[str, Any]:
    """The backup pod: the snapshot's clone read-only, non-root, no capability (Pod Security `restricted`)."""
    backup = minio.backup
    env = backup_environment(
        source.name,
        minio.cephfs_backup_bucket,
        mode="copy" if minio.object_lock_days else "sync",
        max_delete=backup.max_delete,
        max_shrink_percent=backup.max_shrink_percent,
        verify=backup.verify,
        source_dir=DATA_MOUNT,
    )
    tmp = {"name": "tmp", "mountPath": "/tmp"}
    status = {"name": "status", "mountPath": STATUS_MOUNT}
    rclone = {
        "name": "backup",
        "image": backup.image,
        "command": backup_command(),
        "envFrom": [{"secretRef": {"name": rclone_secret(source.name)}}],
        "env": [{"name": k, "value": v} for k, v in env.items()]
        + [
            {"name": "RCLONE_CA_CERT", "value": f"{CA_MOUNT}/ca.crt"},
            {"name": "RCLONE_CONFIG", "value": "/tmp/rclone.conf"},  # none: the remote is in the environment
            {"name": "RCLONE_CACHE_DIR", "value": "/tmp/rclone"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT, "readOnly": True},
            {"name": "ca", "mountPath": CA_MOUNT, "readOnly": True},
            tmp,
            status,
        ],
        "securityContext": RESTRICTED_CONTAINER,
    }
    report = {
        "name": "status",
        "image": backup.kubectl_image,
        "args": [
            "patch",
            "configmap",
            status_configmap(source.name),
            "--namespace",
            BACKUP_NAMESPACE,
            "--type",
            "merge",
            "--patch-file",
            f"{STATUS_MOUNT}/patch.json",
        ],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [tmp, {**status, "readOnly": True}],
        "securityContext": RESTRICTED_CONTAINER,
    }
    result = {
        "name": "result",
        "image": backup.image,
        "command": ["sh", "-c", f'exit "$(cat {STATUS_MOUNT}/rc)"'],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": [{**status, "readOnly": True}],
        "securityContext": RESTRICTED_CONTAINER,
    }
    clone = {
        "metadata": {"labels": {"app.kubernetes.io/name": "cephfs-backup", "ml-platform.io/source": source.name}},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": shallow_class(ceph),
            "dataSource": {"apiGroup": SNAPSHOT_API, "kind": "VolumeSnapshot", "name": run_name(source.name)},
            "resources": {"requests": {"storage": source.size}},
        },
    }
    return restricted_pod(
        backup_user(source.name),
        source.run_as_user,
        source.run_as_group,
        [rclone, report],
        [result],
        [
            {"name": "data", "ephemeral": {"volumeClaimTemplate": clone}},
            {"name": "ca", "configMap": {"name": CA_CONFIGMAP}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "status", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        ],
    )


def labels(source: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "cephfs-backup", "ml-platform.io/source": source}


def job_manifest(minio: MinioSettings, ceph: CephSettings, source: BackupSource) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": run_name(source.name), "namespace": BACKUP_NAMESPACE, "labels": labels(source.name)},
        "spec": {
            # A failed run is recorded and waits for the next schedule (or a manual run): repeating
            # a refused run would only repeat the refusal.
            "backoffLimit": 0,
            "activeDeadlineSeconds": minio.backup.deadline_seconds,
            "template": {"metadata": {"labels": labels(source.name)}, "spec": pod_spec(minio, ceph, source)},
        },
    }
