"""The CephFS -> MinIO backup: one rclone CronJob per tier-2 shared volume named in the settings.

Layout in the backup bucket, per source:
- `current/<source>/`        the tree as of the last successful run (`rclone sync`);
- `deleted/<source>/<time>/` files a run deleted or overwrote (`--backup-dir`), expired by the bucket
                             lifecycle after `noncurrentRetentionDays`; versioning keeps earlier
                             object versions as well;
- `status/<source>.json`     written only after the sync AND `rclone check` passed: its time is the
                             last success, for monitoring to alert on.

`backup_command` is the exact command the container runs; the test suite runs the same function's
output with a real rclone against a real S3 endpoint.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import ROLE_LABEL
from settings import BackupSource, MinioSettings

REMOTE = "nas"  # rclone remote configured from RCLONE_CONFIG_NAS_* variables
DATA_MOUNT = "/data"
CA_MOUNT = "/ca"
SECRET_NAME = "cephfs-backup-rclone"
CA_CONFIGMAP = "cephfs-backup-ca"


def backup_command(source_dir: str, source: str, bucket: str, max_delete: int, verify: str = "hash") -> list[str]:
    """argv of the backup container: sync, verify, then record the success.

    verify "hash": sizes and the MD5 recorded at upload (ETag, or rclone's md5 metadata for multipart
    objects): catches every transfer error, costs one listing. "download": reads every object back
    and compares bytes: also catches corruption at rest, at the cost of reading the whole backup."""
    base = f"{REMOTE}:{bucket}"
    q = shlex.quote
    script = "\n".join(
        [
            "set -eu",
            "stamp=$(date -u +%Y-%m-%dT%H%M%SZ)",
            # sync (not copy) so the copy matches the source; what it deletes or overwrites moves to
            # deleted/<source>/<stamp> instead of vanishing; a runaway deletion stops at --max-delete.
            f"rclone sync {q(source_dir)} {q(f'{base}/current/{source}')}"
            f' --backup-dir "{base}/deleted/{source}/$stamp"'
            f" --max-delete {max_delete} --fast-list --transfers 8 --checkers 16 --stats-one-line -v",
            f"rclone check {q(source_dir)} {q(f'{base}/current/{source}')} --fast-list"
            + (" --download" if verify == "download" else ""),
            f'printf \'{{"source":"%s","finished":"%s","started":"%s"}}\\n\' {q(source)}'
            ' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$stamp"'
            f" | rclone rcat {q(f'{base}/status/{source}.json')}",
        ]
    )
    return ["sh", "-c", script]


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


def cronjob_spec(minio: MinioSettings, source: BackupSource) -> dict[str, Any]:
    backup = minio.backup
    container = {
        "name": "rclone",
        "image": backup.image,
        "command": backup_command(
            DATA_MOUNT, source.name, minio.cephfs_backup_bucket, backup.max_delete, backup.verify
        ),
        "envFrom": [{"secretRef": {"name": SECRET_NAME}}],
        "env": [
            {"name": "RCLONE_CA_CERT", "value": f"{CA_MOUNT}/ca.crt"},
            {"name": "RCLONE_CACHE_DIR", "value": "/tmp/rclone"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT, "readOnly": True},
            {"name": "ca", "mountPath": CA_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        # Root with only DAC_OVERRIDE: reads every file whatever its owner and mode, changes nothing
        # (the volume is read-only), and stays within the PSA baseline capability list.
        "securityContext": {
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    return {
        "schedule": backup.schedule,
        "timeZone": "Etc/UTC",
        "concurrencyPolicy": "Forbid",  # never two syncs of one tree at once
        "startingDeadlineSeconds": 3600,
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 3,
        "jobTemplate": {
            "spec": {
                "backoffLimit": 1,
                "activeDeadlineSeconds": backup.deadline_seconds,
                "template": {
                    "metadata": {
                        "labels": {"app.kubernetes.io/name": "cephfs-backup", "ml-platform.io/source": source.name}
                    },
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {ROLE_LABEL: "cpu"},  # CPU nodes only, never a GPU node
                        "containers": [container],
                        "volumes": [
                            {
                                "name": "data",
                                "persistentVolumeClaim": {"claimName": source.claim_name, "readOnly": True},
                            },
                            {"name": "ca", "configMap": {"name": CA_CONFIGMAP}},
                            {"name": "tmp", "emptyDir": {}},
                        ],
                    },
                },
            }
        },
    }


def backup_jobs(
    minio: MinioSettings,
    endpoint: str,
    access_key: pulumi.Input[str],
    secret_key: pulumi.Input[str],
    ca_pem: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> Sequence[pulumi.Resource]:
    """Per namespace a Secret (rclone remote) and the CA; per source a CronJob."""
    resources: list[pulumi.Resource] = []
    namespaces = sorted({s.namespace for s in minio.backup.sources})
    for namespace in namespaces:
        env: Mapping[str, Any] = pulumi.Output.all(access_key, secret_key).apply(
            lambda keys: rclone_environment(f"https://{endpoint}", keys[0], keys[1])
        )
        resources.append(
            k8s.core.v1.Secret(
                f"cephfs-backup-{namespace}-rclone",
                metadata={"name": SECRET_NAME, "namespace": namespace},
                string_data=pulumi.Output.secret(env),
                opts=opts,
            )
        )
        resources.append(
            k8s.core.v1.ConfigMap(
                f"cephfs-backup-{namespace}-ca",
                metadata={"name": CA_CONFIGMAP, "namespace": namespace},
                data={"ca.crt": ca_pem},
                opts=opts,
            )
        )
    deps = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(resources)))
    for source in minio.backup.sources:
        resources.append(
            k8s.batch.v1.CronJob(
                f"cephfs-backup-{source.name}",
                metadata={"name": f"cephfs-backup-{source.name}", "namespace": source.namespace},
                spec=cronjob_spec(minio, source),
                opts=deps,
            )
        )
    return resources
