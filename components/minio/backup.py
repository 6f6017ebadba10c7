"""The CephFS -> MinIO backup: one pipeline per tier-2 shared volume named in the settings, all of it in the
platform namespace `ml-backup`, where no team has any right.

Layout in the backup bucket, per source (bucket versioning keeps what a run overwrote or deleted; object locking
in prod keeps every version at least `objectLockDays`):
- `<source>/`               the tree as of the last successful run, symbolic links as `*.rclonelink`
                            objects, mode/owner/group/times as object metadata;
- `status/<source>.json`    the last successful run (objects, bytes, times): the shrink guard's reference.

Per source, in `ml-backup` (settings/backup_layout.py names every object): the rclone key (Secret), the
launcher's and the backup's ServiceAccounts and Roles, the run spec (ConfigMap `backup-<source>-run`), the
launcher CronJob named after the source, and the status ConfigMap `backup-status-<source>` that monitoring
reads (only the backup pod's ServiceAccount may patch it, and only pods in `ml-backup` can run as it). Each run
(`backup_launcher.py`) snapshots the claim in the team's namespace, binds the snapshot into `ml-backup` the way
Velero's data mover does, and starts the Job `backup-<source>`, whose pod mounts a read-only shallow clone of it
(generic ephemeral volume, CephFS `backingSnapshot`) and runs `backup` (`container/cephfs-backup.sh`: guards,
sync or copy, check, record), `status` (kubectl patch of the status ConfigMap: `lastSuccessTime`,
`lastRunTime`, `lastResult`, `bytes`, `objects`) and `result` (fails the Job exactly when the backup failed).
In the team's namespace the program creates only the Role that lets the launcher take and delete the snapshot
`backup-<source>`; cluster-wide, the launcher's ClusterRole on VolumeSnapshotContents. Every pod is non-root
and admissible under Pod Security `restricted`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.minio.backup_launcher import (
    bound_snapshot,
    cluster_rules,
    content_template,
    cronjob_spec,
    csi_driver,
    platform_rules,
    source_rules,
    source_snapshot,
)
from components.minio.backup_specs import job_manifest, labels, rclone_environment, shallow_class
from components.namespaces import platform_namespace
from settings import BackupSource, CephSettings, MinioSettings
from settings.backup_layout import (
    BACKUP_NAMESPACE,
    CA_CONFIGMAP,
    backup_user,
    cronjob,
    launcher_account,
    launcher_cluster_role,
    rclone_secret,
    run_spec,
    status_configmap,
)


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
    """The platform namespace `ml-backup`, the clones' StorageClass, the CA, and per source its pipeline in
    `ml-backup` and the launcher's Role in the source's namespace (which waits for that namespace)."""
    if not minio.backup.sources:
        return []
    opts = pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=list(depends_on))
    status_namespace = platform_namespace(
        "backup-namespace",
        BACKUP_NAMESPACE,
        "restricted",
        "The backup pipeline (keys, accounts, run specs, CronJobs, status records, backup Jobs reading snapshot "
        "clones); no team has any right here. Its pods are non-root and need nothing above restricted.",
        provider=provider,
        parent=parent,
        depends_on=depends_on,
    )
    secrets = ceph.namespace
    clones = k8s.storage.v1.StorageClass(
        "backup-snapshot-clones",
        metadata={"name": shallow_class(ceph)},
        provisioner=csi_driver(ceph),
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
    in_backup_ns = _in(opts, status_namespace)
    ca = k8s.core.v1.ConfigMap(
        "backup-ca",
        metadata={"name": CA_CONFIGMAP, "namespace": BACKUP_NAMESPACE},
        data={"ca.crt": ca_pem},
        opts=in_backup_ns,
    )
    resources: list[pulumi.Resource] = [status_namespace, clones, ca]
    for source in minio.backup.sources:
        in_team_ns = _in(opts, team_namespaces.get(source.namespace))
        resources += _source_resources(
            minio, ceph, endpoint, secret_keys[source.name], source, in_backup_ns, in_team_ns, opts, [clones, ca]
        )
    return resources


def _in(opts: pulumi.ResourceOptions, *after: Any) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[r for r in after if r is not None]))


def _role(
    resource: str, name: str, namespace: str, rules: list[dict], subject: str, opts, *, cluster: bool = False
) -> list:
    """A Role (or ClusterRole) and its binding to one ServiceAccount of `ml-backup`, both named `name`."""
    meta = {"name": name} if cluster else {"name": name, "namespace": namespace}
    role_kind, binding_kind = ("ClusterRole", "ClusterRoleBinding") if cluster else ("Role", "RoleBinding")
    role = getattr(k8s.rbac.v1, role_kind)(f"{resource}-role", metadata=meta, rules=rules, opts=opts)
    binding = getattr(k8s.rbac.v1, binding_kind)(
        f"{resource}-binding",
        metadata=meta,
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
        subjects=[{"kind": "ServiceAccount", "name": subject, "namespace": BACKUP_NAMESPACE}],
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
    in_team_ns: pulumi.ResourceOptions,
    cluster: pulumi.ResourceOptions,
    shared: list[pulumi.Resource],
) -> list[pulumi.Resource]:
    """One source's pipeline. The Pulumi names are those of the pipeline's first home (the team's namespace), so a
    deployed stack sees each object replaced into `ml-backup`, created there before the old one is deleted; the
    launcher's Role in the team namespace keeps its name and is updated in place (a new name would collide)."""
    name = source.name
    env = pulumi.Output.from_input(secret_key).apply(
        lambda key: rclone_environment(f"https://{endpoint}", backup_user(name), key)
    )
    created: list[pulumi.Resource] = [
        k8s.core.v1.Secret(
            f"backup-{name}-rclone",
            metadata={"name": rclone_secret(name), "namespace": BACKUP_NAMESPACE},
            string_data=pulumi.Output.secret(env),
            opts=here,
        ),
        k8s.core.v1.ServiceAccount(
            f"backup-{name}-account", metadata={"name": backup_user(name), "namespace": BACKUP_NAMESPACE}, opts=here
        ),
        k8s.core.v1.ServiceAccount(
            f"backup-{name}-launcher",
            metadata={"name": launcher_account(name), "namespace": BACKUP_NAMESPACE},
            opts=here,
        ),
        # The job writes the data; the program only creates the object (a refresh must not reset it).
        k8s.core.v1.ConfigMap(
            f"backup-status-{name}",
            metadata={"name": status_configmap(name), "namespace": BACKUP_NAMESPACE, "labels": labels(name)},
            opts=pulumi.ResourceOptions.merge(here, pulumi.ResourceOptions(ignore_changes=["data"])),
        ),
        k8s.core.v1.ConfigMap(
            f"backup-{name}-run",
            metadata={"name": run_spec(name), "namespace": BACKUP_NAMESPACE, "labels": labels(name)},
            data={
                file: json.dumps(manifest, indent=2, sort_keys=True)
                for file, manifest in (
                    ("snapshot.json", source_snapshot(ceph, source)),
                    ("content.json", content_template(ceph, source)),
                    ("bound-snapshot.json", bound_snapshot(ceph, source)),
                    ("job.json", job_manifest(minio, ceph, source)),
                )
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
    launcher = launcher_account(name)
    created += _role(
        f"backup-status-{name}", status_configmap(name), BACKUP_NAMESPACE, [status_rule], backup_user(name), here
    )
    created += _role(f"backup-{name}-launcher", launcher, source.namespace, source_rules(source), launcher, in_team_ns)
    created += _role(
        f"backup-{name}-launcher-platform", launcher, BACKUP_NAMESPACE, platform_rules(source), launcher, here
    )
    created += _role(
        f"backup-{name}-launcher-cluster",
        launcher_cluster_role(name),
        "",
        cluster_rules(source),
        launcher,
        cluster,
        cluster=True,
    )
    created.append(
        k8s.batch.v1.CronJob(
            f"backup-{name}",
            metadata={"name": cronjob(name), "namespace": BACKUP_NAMESPACE, "labels": labels(name)},
            spec=cronjob_spec(minio, ceph, source),
            # Its first run needs everything above, the clones' StorageClass and the CA.
            opts=pulumi.ResourceOptions.merge(here, pulumi.ResourceOptions(depends_on=[*created, *shared])),
        )
    )
    return created
