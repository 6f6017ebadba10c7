"""The CephFS -> MinIO backup: one rclone CronJob per tier-2 shared volume named in the settings.

Layout in the backup bucket, per source (bucket versioning keeps what a run overwrote or deleted):
- `<source>/`               the tree as of the last successful run, symbolic links as `*.rclonelink`
                            objects, mode/owner/group/times as object metadata;
- `status/<source>.json`    the last successful run (objects, bytes, times): the shrink guard's reference.

Consistency: each run backs up a CSI snapshot of the claim, never the live tree. Per source, in the
claim's namespace (a team's: a pod mounts only claims of its own namespace, and a snapshot lives
beside its claim):
- the CronJob named after the source (the *launcher*, kubectl only): deletes the previous run's Job
  and snapshot, takes a VolumeSnapshot `backup-<source>` (the tier-2 CephFS snapshot class), waits
  until it is ready, then creates the Job `backup-<source>` from the ConfigMap `backup-<source>-run`;
- that Job's pod mounts a read-only shallow clone of the snapshot (generic ephemeral volume, CephFS
  `backingSnapshot`: no data copied, deleted with the pod) and runs, in order, `backup`
  (`container/cephfs-backup.sh` beside this module: guards, sync, check, record; always exits 0 once its
  result is written), `status` (kubectl patch of the status ConfigMap `backup-status-<source>` in the
  platform namespace `ml-backup`: the monitoring contract `lastSuccessTime`, `lastRunTime`,
  `lastResult`, `bytes`, `objects`) and `result` (exits with the backup's code, so the Job fails
  exactly when the backup did).
Each source has its own MinIO user (its prefix only) and two ServiceAccounts: the launcher's may
handle only its snapshot and Job, the backup's may only patch its status ConfigMap. Every pod is
non-root and admissible under Pod Security `restricted`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.minio.backup_specs import (
    CA_CONFIGMAP,
    SNAPSHOT_API,
    backup_user,
    cronjob_spec,
    job_manifest,
    labels,
    launcher_account,
    rclone_environment,
    rclone_secret,
    run_name,
    shallow_class,
    snapshot_manifest,
    status_configmap,
)
from components.namespaces import platform_namespace
from settings import BackupSource, CephSettings, MinioSettings
from settings.storage import BACKUP_NAMESPACE


def backup_jobs(
    minio: MinioSettings,
    endpoint: str,
    secret_keys: Mapping[str, pulumi.Input[str]],
    ca_pem: pulumi.Input[str],
    ceph: CephSettings,
    team_namespaces: Mapping[str, pulumi.Resource],
    *,
    parent: pulumi.Resource,
    provider: pulumi.ProviderResource,
    depends_on: Sequence[pulumi.Resource],
) -> Sequence[pulumi.Resource]:
    """The platform namespace `ml-backup` (status ConfigMaps, their Roles), the clones' StorageClass,
    and per source, in its team's namespace (waited for): its MinIO credentials, ServiceAccounts,
    RBAC, run spec and CronJob."""
    if not minio.backup.sources:
        return []
    opts = pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=list(depends_on))
    status_namespace = platform_namespace(
        "backup-namespace",
        BACKUP_NAMESPACE,
        "restricted",
        "Backup status ConfigMaps and the Roles that let each backup job patch only its own; no pods.",
        provider=provider,
        parent=parent,
        depends_on=depends_on,
    )
    driver = f"{ceph.namespace}.cephfs.csi.ceph.com"
    secrets = ceph.namespace
    clones = k8s.storage.v1.StorageClass(
        "backup-snapshot-clones",
        metadata={"name": shallow_class(ceph)},
        provisioner=driver,
        # ceph-csi "snapshot-backed volumes" (docs/cephfs-snapshot-backed-volumes.md): a ReadOnlyMany
        # volume from a CephFS snapshot that copies nothing and is deleted with the pod.
        parameters={
            "clusterID": ceph.namespace,
            "fsName": ceph.filesystem_name,
            "backingSnapshot": "true",
            "csi.storage.k8s.io/provisioner-secret-name": "rook-csi-cephfs-provisioner",
            "csi.storage.k8s.io/provisioner-secret-namespace": secrets,
            "csi.storage.k8s.io/node-stage-secret-name": "rook-csi-cephfs-node",
            "csi.storage.k8s.io/node-stage-secret-namespace": secrets,
        },
        reclaim_policy="Delete",
        volume_binding_mode="Immediate",
        opts=opts,
    )
    resources: list[pulumi.Resource] = [status_namespace, clones]
    for namespace in sorted({s.namespace for s in minio.backup.sources}):
        resources.append(
            k8s.core.v1.ConfigMap(
                f"backup-ca-{namespace}",
                metadata={"name": CA_CONFIGMAP, "namespace": namespace},
                data={"ca.crt": ca_pem},
                opts=_in(opts, team_namespaces.get(namespace)),
            )
        )
    in_backup_ns = _in(opts, status_namespace)
    for source in minio.backup.sources:
        here = _in(opts, team_namespaces.get(source.namespace), clones)
        resources += _source_resources(minio, ceph, endpoint, secret_keys[source.name], source, here, in_backup_ns)
    return resources


def _in(opts: pulumi.ResourceOptions, *after: Any) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[r for r in after if r is not None]))


def _role(name: str, namespace: str, rules: list[dict], subject: str, subject_ns: str, opts) -> list:
    role = k8s.rbac.v1.Role(f"{name}-role", metadata={"name": name, "namespace": namespace}, rules=rules, opts=opts)
    binding = k8s.rbac.v1.RoleBinding(
        f"{name}-binding",
        metadata={"name": name, "namespace": namespace},
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        subjects=[{"kind": "ServiceAccount", "name": subject, "namespace": subject_ns}],
        opts=opts,
    )
    return [role, binding]


def _source_resources(
    minio: MinioSettings,
    ceph: CephSettings,
    endpoint: str,
    secret_key: pulumi.Input[str],
    source: BackupSource,
    here: pulumi.ResourceOptions,
    in_backup_ns: pulumi.ResourceOptions,
) -> list[pulumi.Resource]:
    name, namespace = source.name, source.namespace
    env = pulumi.Output.from_input(secret_key).apply(
        lambda key: rclone_environment(f"https://{endpoint}", backup_user(name), key)
    )
    created: list[pulumi.Resource] = [
        k8s.core.v1.Secret(
            f"backup-{name}-rclone",
            metadata={"name": rclone_secret(name), "namespace": namespace},
            string_data=pulumi.Output.secret(env),
            opts=here,
        ),
        k8s.core.v1.ServiceAccount(
            f"backup-{name}-account", metadata={"name": backup_user(name), "namespace": namespace}, opts=here
        ),
        k8s.core.v1.ServiceAccount(
            f"backup-{name}-launcher", metadata={"name": launcher_account(name), "namespace": namespace}, opts=here
        ),
        # The job writes the data; the program only creates the object (a refresh must not reset it).
        k8s.core.v1.ConfigMap(
            f"backup-status-{name}",
            metadata={"name": status_configmap(name), "namespace": BACKUP_NAMESPACE, "labels": labels(name)},
            opts=pulumi.ResourceOptions.merge(in_backup_ns, pulumi.ResourceOptions(ignore_changes=["data"])),
        ),
        k8s.core.v1.ConfigMap(
            f"backup-{name}-run",
            metadata={"name": f"{run_name(name)}-run", "namespace": namespace, "labels": labels(name)},
            data={
                "snapshot.json": json.dumps(snapshot_manifest(ceph, source), indent=2, sort_keys=True),
                "job.json": json.dumps(job_manifest(minio, ceph, source), indent=2, sort_keys=True),
            },
            opts=here,
        ),
    ]
    status_rule = {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [status_configmap(name)],
        "verbs": ["patch"],
    }
    created += _role(
        status_configmap(name), BACKUP_NAMESPACE, [status_rule], backup_user(name), namespace, in_backup_ns
    )
    # The launcher: its own snapshot and Job only (create cannot be limited by name; delete can).
    launcher_rules = [
        {"apiGroups": [group], "resources": [kind], "verbs": ["create", "get", "list", "watch"]}
        for group, kind in ((SNAPSHOT_API, "volumesnapshots"), ("batch", "jobs"))
    ] + [
        {"apiGroups": [group], "resources": [kind], "resourceNames": [run_name(name)], "verbs": ["delete"]}
        for group, kind in ((SNAPSHOT_API, "volumesnapshots"), ("batch", "jobs"))
    ]
    created += _role(launcher_account(name), namespace, launcher_rules, launcher_account(name), namespace, here)
    created.append(
        k8s.batch.v1.CronJob(
            f"backup-{name}",
            metadata={"name": name, "namespace": namespace, "labels": labels(name)},
            spec=cronjob_spec(minio, source),
            opts=pulumi.ResourceOptions.merge(here, pulumi.ResourceOptions(depends_on=list(created))),
        )
    )
    return created
