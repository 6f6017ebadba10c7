"""MinioTier: tier 3, MinIO on the NAS hosts outside the cluster, and the backups that land there.

1. `<nas>-minio` on each NAS host (`minio-nas.sh`): the server binary from the pinned artifact
   (sha256 checked first), XFS drives mounted by UUID, `/etc/default/<service>` (identical on every
   host: the non-secret lines are a plain input of every step, the root credentials a secret one on
   stdin), TLS material, the upstream systemd unit; done when `/minio/health/cluster` answers 200.
2. TLS: a CA and one server certificate (SANs: every NAS address and name, the client endpoint),
   generated and kept as secrets in the state; the CA is a stack output for clients.
3. Buckets, users and policies (`components.minio_objects`, dynamic resources): the backup and etcd
   buckets with versioning, noncurrent-version and delete-marker expiry, optional object locking;
   per backup source a writer (`backup-<source>`, its prefix only) and a reader (`restore-<source>`);
   `etcd-snapshot-writer` (RKE2) and `etcd-restore`, the only readers of the etcd snapshots.
4. In the cluster: the rclone CronJobs (`backup.py`) and RKE2's etcd S3 config Secret.

The erasure layout (`settings.erasure`) gives the honest fault-tolerance outputs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components import pki
from components.common import InCluster
from components.hosts.remote import HostAccess, host_script
from components.minio.backup import backup_jobs
from components.minio.backup_specs import backup_user, rclone_environment, restore_user
from components.minio.objects import Bucket, User, bucket_policy, prefix_policy
from settings import CephSettings, EtcdSnapshots, MinioSettings, NasHost, NasSettings
from settings.backup_layout import bucket_keys
from settings.erasure import ErasureLayout, erasure_layout, host_range

ETCD_S3_SECRET = "rke2-etcd-s3"
CA_VALIDITY_HOURS = 10 * 8760
# The server certificate is renewed by any `pulumi up` in its last year (early renewal), so a
# platform that is deployed at least yearly never serves an expired certificate.
SERVER_VALIDITY_HOURS = 3 * 8760
SERVER_EARLY_RENEWAL_HOURS = 8760

# Writes a backup run needs; s3:DeleteObject only without object locking (on a versioned bucket it
# leaves a delete marker; the versions stay). Never DeleteObjectVersion or BypassGovernanceRetention.
WRITE_ACTIONS = ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]
LIST_ACTIONS = ["s3:ListBucket", "s3:ListBucketMultipartUploads"]
READ_ACTIONS = ["s3:GetObject", "s3:GetObjectVersion"]
READ_LIST_ACTIONS = ["s3:ListBucket", "s3:ListBucketVersions"]
ETCD_RESTORE_USER = "etcd-restore"
ETCD_WRITER = "etcd-snapshot-writer"


def user_policies(minio: MinioSettings) -> dict[str, str]:
    """Every MinIO user of the tier and its policy (JSON). Per backup source a writer confined to the
    source's prefix and run record, and a reader of the same; the etcd snapshots are readable only by
    RKE2's own writer (it lists and prunes them) and the platform's restore identity."""
    write = WRITE_ACTIONS + ([] if minio.object_lock_days else ["s3:DeleteObject"])
    bucket = minio.cephfs_backup_bucket
    policies = {}
    for source in minio.backup.sources:
        prefixes = bucket_keys(source.name)
        policies[backup_user(source.name)] = prefix_policy(bucket, prefixes, write, LIST_ACTIONS)
        policies[restore_user(source.name)] = prefix_policy(bucket, prefixes, READ_ACTIONS, READ_LIST_ACTIONS)
    etcd = minio.etcd_snapshot_bucket
    policies[ETCD_WRITER] = bucket_policy([etcd], ["s3:GetBucketLocation", *LIST_ACTIONS, *write])
    policies[ETCD_RESTORE_USER] = bucket_policy([etcd], ["s3:GetBucketLocation", *READ_LIST_ACTIONS, *READ_ACTIONS])
    return policies


def restore_users(minio: MinioSettings) -> dict[str, str]:
    """What each restore identity restores -> its MinIO user: every backup source, and `etcd`."""
    readers = {s.name: restore_user(s.name) for s in minio.backup.sources}
    readers["etcd"] = ETCD_RESTORE_USER
    return readers


def restore_credentials(readers: Mapping[str, str], secret_keys: Sequence[str]) -> dict[str, dict[str, str]]:
    """The stack output `minioRestoreCredentials`: {what: {accessKey, secretKey}}."""
    return {
        what: {"accessKey": user, "secretKey": key}
        for (what, user), key in zip(readers.items(), secret_keys, strict=True)
    }


@dataclass(frozen=True)
class MinioTierArgs:
    minio: MinioSettings
    nas: NasSettings
    hosts: Mapping[str, HostAccess]
    etcd: EtcdSnapshots
    cluster_name: str
    in_cluster: InCluster
    ceph: CephSettings = CephSettings()  # tier 2: the sources' snapshot class and driver
    team_namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)  # by name, the teams' component's


def prometheus_bearer_token(access_key: str, secret_key: str) -> str:
    """The bearer token MinIO accepts on its metrics endpoints, as `mc admin prometheus generate` makes
    it: a JWT signed HS512 with the secret key, subject the access key, issuer "prometheus". The
    expiry is a fixed date (2100-01-01) so that a re-run changes nothing."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "HS512", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"exp": 4102444800, "iss": "prometheus", "sub": access_key}
    payload = b64(json.dumps(claims, separators=(",", ":")).encode())
    signature = hmac.new(secret_key.encode(), f"{header}.{payload}".encode(), hashlib.sha512).digest()
    return f"{header}.{payload}.{b64(signature)}"


def endpoint(minio: MinioSettings, nas: NasSettings) -> str:
    """host:port clients use."""
    return f"{minio.endpoint or nas.hosts[0].address}:{minio.port}"


def env_file(minio: MinioSettings, nas: NasSettings, layout: ErasureLayout) -> str:
    """The non-secret lines of /etc/default/<service>, the same on every NAS host."""
    hosts = host_range([h.address for h in nas.hosts])
    drives = f"drive{{1...{layout.drives_per_host}}}" if layout.drives_per_host > 1 else "drive1"
    return "\n".join(
        [
            f'MINIO_VOLUMES="https://{hosts}:{minio.port}{minio.mount_root}/{drives}/data"',
            f'MINIO_OPTS="--address :{minio.port} --console-address :{minio.port + 1} '
            f'--certs-dir /etc/{minio.service}/certs"',
            f"MINIO_ERASURE_SET_DRIVE_COUNT={layout.set_size}",
            f"MINIO_STORAGE_CLASS_STANDARD=EC:{layout.parity}",
        ]
    )


def drives_param(drives: Sequence[Any]) -> str:
    action = {(False, False): "keep", (True, False): "format", (True, True): "format-force"}
    return " ".join(f"{d.device}={action[(d.format, d.force)]}" for d in drives)


def etcd_s3_server_config(etcd: EtcdSnapshots, nas: NasSettings) -> dict[str, Any]:
    """Keys for the servers' RKE2 config. Only these two: RKE2 ignores the Secret as soon as any
    other etcd-s3-* key is set (k3s pkg/etcd/s3/config_secret.go)."""
    if not (etcd.s3 and nas.hosts):
        return {}
    return {"etcd-s3": True, "etcd-s3-config-secret": ETCD_S3_SECRET}


def stdin_text(values: Mapping[str, str]) -> str:
    """Secret material for minio-nas.sh: one 'NAME BASE64' line each."""
    return "".join(f"{name} {base64.b64encode(values[name].encode()).decode()}\n" for name in sorted(values))


def _stdin(**values: pulumi.Input[str]) -> pulumi.Output[str]:
    names = sorted(values)
    texts = pulumi.Output.all(*[values[n] for n in names])
    return pulumi.Output.secret(texts.apply(lambda t: stdin_text(dict(zip(names, t, strict=True)))))


def nas_params(minio: MinioSettings, nas: NasSettings, layout: ErasureLayout, host: NasHost) -> dict[str, str]:
    """The parameters of minio-nas.sh on one NAS host (everything but the secrets)."""
    return {
        "ARTIFACT_URL": minio.artifact.url if minio.artifact else "",
        "ARTIFACT_SHA256": minio.artifact.sha256 if minio.artifact else "",
        "BINARY": minio.binary,
        "SERVICE": minio.service,
        "DRIVES": drives_param(host.drives),
        "MOUNT_ROOT": minio.mount_root,
        "ENV_FILE": env_file(minio, nas, layout),
        "HEALTH_URL": f"https://{host.address}:{minio.port}/minio/health/cluster",
        "HEALTH_TIMEOUT": "900",
    }


class MinioTier(pulumi.ComponentResource):
    ca_cert: pulumi.Output[str]
    restore_credentials: pulumi.Output[dict]
    read_tolerance_hosts: int
    write_tolerance_hosts: int
    usable_fraction: float

    def __init__(self, name: str, args: MinioTierArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:storage:MinioTier", name, None, opts)
        layout = erasure_layout(args.minio, args.nas)
        self.read_tolerance_hosts = layout.read_tolerance_hosts if layout else 0
        self.write_tolerance_hosts = layout.write_tolerance_hosts if layout else 0
        self.usable_fraction = round(layout.usable_fraction, 4) if layout else 0.0
        self.ca_cert = pulumi.Output.from_input("")
        self.restore_credentials = pulumi.Output.secret({})
        self.metrics_token: Optional[pulumi.Output[str]] = None
        self.backup_rclone_env: dict[str, pulumi.Output[dict]] = {}
        self.ready: list[pulumi.Resource] = []
        """The buckets and users (which come after every NAS host's server): what S3 clients wait for."""
        if layout is not None and args.nas.hosts:
            self._build(name, args, layout)
        self.register_outputs({"caCert": self.ca_cert, "restoreCredentials": self.restore_credentials})

    def _build(self, name: str, args: MinioTierArgs, layout: ErasureLayout) -> None:
        child = pulumi.ResourceOptions(parent=self)
        minio, nas = args.minio, args.nas
        ca, server_key, server_cert = self._tls(name, minio, nas, child)
        self.ca_cert = ca.cert_pem
        root_user = random.RandomPassword(f"{name}-root-user", length=20, special=False, opts=child).result
        root_password = random.RandomPassword(f"{name}-root-password", length=40, special=False, opts=child).result
        # What `mc admin prometheus generate` prints, for the monitoring's /minio/v2/metrics items.
        self.metrics_token = pulumi.Output.secret(
            pulumi.Output.all(root_user, root_password).apply(lambda v: prometheus_bearer_token(v[0], v[1]))
        )
        stdin = _stdin(
            ROOT_USER=root_user,
            ROOT_PASSWORD=root_password,
            TLS_CERT=server_cert.cert_pem,
            TLS_KEY=server_key.private_key_pem,
            CA_CERT=ca.cert_pem,
        )
        steps = [
            host_script(
                f"{host.name}-minio",
                args.hosts[host.name],
                "minio-nas.sh",
                nas_params(minio, nas, layout, host),
                stdin=stdin,
                opts=child,
            )
            for host in nas.hosts
        ]
        connection = {
            "endpoint": endpoint(minio, nas),
            "secure": True,
            "caPem": ca.cert_pem,
            "accessKey": pulumi.Output.secret(root_user),
            "secretKey": pulumi.Output.secret(root_password),
        }
        after_minio = pulumi.ResourceOptions(parent=self, depends_on=steps)
        buckets = self._buckets(name, minio, connection, after_minio)
        users = self._users(name, minio, connection, pulumi.ResourceOptions(parent=self, depends_on=buckets))
        self.ready = [*buckets, *[u for u, _ in users.values()]]
        ready = [*args.in_cluster.ready, *self.ready]
        in_cluster = pulumi.ResourceOptions(parent=self, provider=args.in_cluster.provider, depends_on=ready)
        secret_keys = {s.name: users[backup_user(s.name)][1] for s in minio.backup.sources}
        # The rclone remote of each backup identity: the acceptance check's S3 round trip uses one.
        self.backup_rclone_env = {
            source: pulumi.Output.secret(
                pulumi.Output.from_input(key).apply(
                    lambda k, source=source: rclone_environment(
                        f"https://{endpoint(minio, nas)}", backup_user(source), k
                    )
                )
            )
            for source, key in secret_keys.items()
        }
        backup_jobs(
            minio,
            endpoint(minio, nas),
            secret_keys,
            ca.cert_pem,
            args.ceph,
            args.team_namespaces,
            parent=self,
            provider=args.in_cluster.provider,
            depends_on=ready,
        )
        if etcd_s3_server_config(args.etcd, nas):
            self._etcd_secret(args, users[ETCD_WRITER][1], ca.cert_pem, in_cluster)
        readers = restore_users(minio)
        keys = pulumi.Output.all(*[users[user][1] for user in readers.values()])
        self.restore_credentials = pulumi.Output.secret(keys.apply(lambda k: restore_credentials(readers, k)))

    def _tls(self, name: str, minio: MinioSettings, nas: NasSettings, child: pulumi.ResourceOptions):
        ca_key, ca = pki.own_ca(f"{name}-ca", "ml-platform MinIO tier CA", CA_VALIDITY_HOURS, child)
        names = [h.name for h in nas.hosts] + ([minio.endpoint] if minio.endpoint else [])
        server_key, cert = pki.issued_certificate(
            f"{name}-server",
            (ca_key, ca),
            f"{minio.service}.nas",
            sorted({n for n in names if not n[0].isdigit()}),
            sorted({h.address for h in nas.hosts} | {n for n in names if n[0].isdigit()}),
            validity_hours=SERVER_VALIDITY_HOURS,
            early_renewal_hours=SERVER_EARLY_RENEWAL_HOURS,
            uses=["digital_signature", "key_encipherment", "server_auth", "client_auth"],
            opts=child,
        )
        return ca, server_key, cert

    def _buckets(self, name: str, minio: MinioSettings, connection: dict, opts: pulumi.ResourceOptions) -> list:
        return [
            Bucket(
                f"{name}-bucket-{purpose}",
                connection,
                bucket,
                versioning=True,
                noncurrent_days=minio.noncurrent_retention_days,
                lock_days=minio.object_lock_days,
                opts=opts,
            )
            for purpose, bucket in (
                ("cephfs-backup", minio.cephfs_backup_bucket),
                ("etcd-snapshots", minio.etcd_snapshot_bucket),
            )
        ]

    def _users(self, name: str, minio: MinioSettings, connection: dict, opts: pulumi.ResourceOptions) -> dict:
        users = {}
        for user, policy in user_policies(minio).items():
            secret = random.RandomPassword(f"{name}-{user}-secret", length=40, special=False, opts=opts).result
            users[user] = (User(f"{name}-user-{user}", connection, user, secret, policy, opts=opts), secret)
        return users

    def _etcd_secret(
        self, args: MinioTierArgs, secret_key: pulumi.Output[str], ca_pem: pulumi.Output[str], opts
    ) -> k8s.core.v1.Secret:
        """RKE2 reads this on every snapshot save/list/prune (the servers' config names it)."""
        data = pulumi.Output.all(secret_key, ca_pem).apply(
            lambda v: {
                "etcd-s3-endpoint": endpoint(args.minio, args.nas),  # host:port, no scheme
                "etcd-s3-endpoint-ca": v[1],
                "etcd-s3-access-key": ETCD_WRITER,
                "etcd-s3-secret-key": v[0],
                "etcd-s3-bucket": args.minio.etcd_snapshot_bucket,
                "etcd-s3-bucket-lookup-type": "path",
                "etcd-s3-region": "us-east-1",
                "etcd-s3-folder": args.cluster_name,
                # Read from the Secret by some RKE2 versions only; otherwise S3 keeps RKE2's default 5.
                "etcd-s3-retention": str(args.etcd.retention),
            }
        )
        return k8s.core.v1.Secret(
            f"{ETCD_S3_SECRET}",
            metadata={"name": ETCD_S3_SECRET, "namespace": "kube-system"},
            type="etcd.k3s.cattle.io/s3-config-secret",
            string_data=pulumi.Output.secret(data),
            opts=opts,
        )
