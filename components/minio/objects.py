"""Buckets, users and policies in the MinIO tier, as Pulumi dynamic resources.

Why a dynamic provider: the objects are tracked state (a changed policy or retention is a diff in
`pulumi preview`, a removed user is deleted), and the `minio` package's `Minio` (S3 API) and
`MinioAdmin` (admin API, natively since 7.2.0) need no `mc` binary and no extra Pulumi plugin
(pulumi-minio bridges a Terraform provider line in maintenance mode).

Pulumi pickles the provider objects by reference into the state and imports their module again to run
them: they keep the name they were first deployed under, `components.minio_objects` (which re-exports
them; see `STATE_MODULE`). The providers hold no
credentials themselves; the connection is a (secret) input of every resource.

Root credentials are used only here, to create the per-purpose users; the users get bucket-scoped
policies and never `admin:*`.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pulumi
import urllib3
from minio import Minio, MinioAdmin
from minio.commonconfig import ENABLED, Filter
from minio.credentials import StaticProvider
from minio.error import S3Error
from minio.lifecycleconfig import Expiration, LifecycleConfig, NoncurrentVersionExpiration, Rule
from minio.objectlockconfig import DAYS, GOVERNANCE, ObjectLockConfig
from minio.versioningconfig import VersioningConfig
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

# Pulumi pickles each provider by reference (module and class name) into every resource's `__provider`
# input, and the provider process imports that module to run it. The providers keep the module name the
# first stacks were deployed with, which re-exports them, so deployed state and plans stay the same.
STATE_MODULE = "components.minio_objects"

# The region MinIO answers for by default; giving it skips a GetBucketLocation round trip.
REGION = "us-east-1"
CONNECTION_KEYS = ("endpoint", "secure", "caPem", "accessKey", "secretKey")


def _http(props: dict[str, Any]) -> Optional[urllib3.PoolManager]:
    """A pool that trusts exactly the tier's CA (none needed for plain HTTP)."""
    if not props["secure"]:
        return None
    return urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_cert_data=props["caPem"])


def s3_client(props: dict[str, Any]) -> Minio:
    return Minio(
        props["endpoint"],
        access_key=props["accessKey"],
        secret_key=props["secretKey"],
        secure=props["secure"],
        region=REGION,
        http_client=_http(props),
    )


def admin_client(props: dict[str, Any]) -> MinioAdmin:
    return MinioAdmin(
        endpoint=props["endpoint"],
        credentials=StaticProvider(props["accessKey"], props["secretKey"]),
        secure=props["secure"],
        http_client=_http(props),
    )


def _changed(olds: dict[str, Any], news: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    return [key for key in keys if olds.get(key) != news.get(key)]


class _EnsuringProvider(ResourceProvider):
    """A provider whose create and update both bring the object to its props (`ensure`, idempotent).
    Its id is `props[identity[0]]`; a change of an `identity` key replaces it, of a `settings` or
    connection key updates it in place."""

    identity: tuple[str, ...]
    settings: tuple[str, ...]
    delete_before_replace: bool

    def ensure(self, props: dict[str, Any]) -> None:
        raise NotImplementedError

    def create(self, props: dict[str, Any]) -> CreateResult:
        self.ensure(props)
        return CreateResult(id_=props[self.identity[0]], outs=props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = _changed(olds, news, self.identity)
        changes = replaces + _changed(olds, news, self.settings + CONNECTION_KEYS)
        return DiffResult(changes=bool(changes), replaces=replaces, delete_before_replace=self.delete_before_replace)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        self.ensure(news)
        return UpdateResult(outs=news)


# --- buckets -------------------------------------------------------------------------------------

BUCKET_KEYS = ("versioning", "noncurrentDays", "lockDays")


class ObjectLockError(Exception):
    pass


def lifecycle(props: dict[str, Any]) -> Optional[LifecycleConfig]:
    """MinIO's ILM rules, whole: noncurrent versions expire after `noncurrentDays`, and a delete marker
    left with no version behind it is removed (it would otherwise stay forever and slow every listing).
    None when nothing expires."""
    if not props.get("noncurrentDays"):
        return None
    return LifecycleConfig(
        [
            Rule(
                ENABLED,
                rule_filter=Filter(prefix=""),
                rule_id="expire-noncurrent",
                noncurrent_version_expiration=NoncurrentVersionExpiration(int(props["noncurrentDays"])),
            ),
            Rule(
                ENABLED,
                rule_filter=Filter(prefix=""),
                rule_id="remove-expired-delete-markers",
                expiration=Expiration(expired_object_delete_marker=True),
            ),
        ]
    )


def ensure_bucket(client: Minio, props: dict[str, Any]) -> list[str]:
    """Make the bucket hold the settings; returns what it changed (nothing on a re-run)."""
    bucket, done = props["bucket"], []
    lock_days = int(props.get("lockDays") or 0)
    if not client.bucket_exists(bucket):
        # Object locking can only be switched on when a bucket is made (it also turns versioning on).
        client.make_bucket(bucket, object_lock=bool(lock_days))
        done.append("created")
    if props.get("versioning") and client.get_bucket_versioning(bucket).status != ENABLED:
        client.set_bucket_versioning(bucket, VersioningConfig(ENABLED))
        done.append("versioning")
    if lock_days:
        try:
            current = client.get_object_lock_config(bucket)
        except S3Error as err:
            if err.code != "ObjectLockConfigurationNotFoundError":
                raise
            raise ObjectLockError(
                f"bucket {bucket} exists without object locking, and storage.minio.objectLockDays asks for it: "
                "S3 can switch it on only when a bucket is created. Create a new bucket (another "
                "cephfsBackupBucket / etcdSnapshotBucket name) and let the next runs fill it, or unset objectLockDays"
            ) from err
        if (current.mode, current.duration) != (GOVERNANCE, (lock_days, DAYS)):
            client.set_object_lock_config(bucket, ObjectLockConfig(GOVERNANCE, lock_days, DAYS))
            done.append("object lock")
    wanted = lifecycle(props)
    if wanted is not None:
        # The rules are ours alone: set them whole whenever the settings change them (update) or
        # the bucket was new; an unchanged re-run does not rewrite them.
        client.set_bucket_lifecycle(bucket, wanted)
        done.append("lifecycle")
    return done


class BucketProvider(_EnsuringProvider):
    __module__ = STATE_MODULE

    identity = ("bucket",)
    settings = BUCKET_KEYS
    delete_before_replace = False

    def ensure(self, props: dict[str, Any]) -> None:
        ensure_bucket(s3_client(props), props)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        """`pulumi refresh`: a bucket removed behind the program's back leaves the state (the next
        `up` creates it again); otherwise the recorded settings stand (the lifecycle is ours alone)."""
        if not s3_client(props).bucket_exists(props["bucket"]):
            return ReadResult(id_=None, outs={})
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        # Backups are the point of this tier: a bucket that holds anything is left in place (remove
        # it by hand after copying what you need); an empty one is removed.
        client = s3_client(props)
        bucket = props["bucket"]
        versions = bool(props.get("versioning"))
        if (
            client.bucket_exists(bucket)
            and next(iter(client.list_objects(bucket, include_version=versions)), None) is None
        ):
            client.remove_bucket(bucket)


class Bucket(pulumi.dynamic.Resource):
    """A bucket with versioning, a lifecycle and optional object locking, made with the root credentials."""

    def __init__(
        self,
        name: str,
        connection: dict[str, pulumi.Input[Any]],
        bucket: str,
        versioning: bool,
        noncurrent_days: int,
        lock_days: Optional[int] = None,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        props = {
            **connection,
            "bucket": bucket,
            "versioning": versioning,
            "noncurrentDays": noncurrent_days,
            "lockDays": lock_days or 0,
        }
        secret = pulumi.ResourceOptions(additional_secret_outputs=["accessKey", "secretKey"])
        super().__init__(BucketProvider(), name, props, pulumi.ResourceOptions.merge(secret, opts))


# --- users and their policies --------------------------------------------------------------------

USER_KEYS = ("userSecret", "policy")


def bucket_policy(buckets: list[str], actions: list[str]) -> str:
    """An IAM policy allowing `actions` on `buckets` and their objects, nothing else (JSON text)."""
    resources = [f"arn:aws:s3:::{b}" for b in buckets] + [f"arn:aws:s3:::{b}/*" for b in buckets]
    return json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": resources}]},
        sort_keys=True,
    )


def prefix_policy(bucket: str, prefixes: list[str], object_actions: list[str], list_actions: list[str]) -> str:
    """An IAM policy confined to `prefixes` of one bucket (JSON text): listing only under them
    (`s3:prefix` condition), `object_actions` only on their objects."""
    keys = [f"arn:aws:s3:::{bucket}/{p}*" for p in prefixes]
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["s3:GetBucketLocation"], "Resource": [f"arn:aws:s3:::{bucket}"]},
                {
                    "Effect": "Allow",
                    "Action": list_actions,
                    "Resource": [f"arn:aws:s3:::{bucket}"],
                    "Condition": {"StringLike": {"s3:prefix": [f"{p}*" for p in prefixes]}},
                },
                {"Effect": "Allow", "Action": object_actions, "Resource": keys},
            ],
        },
        sort_keys=True,
    )


def ensure_user(admin: MinioAdmin, props: dict[str, Any]) -> None:
    """The policy, the user with its secret, the policy mapped to the user: each call is idempotent
    on the server (add replaces, set maps), so create and update share it."""
    admin.policy_add(props["policyName"], policy=json.loads(props["policy"]))
    admin.user_add(props["user"], props["userSecret"])
    # policy_set (set-user-or-group-policy) replaces the user's mapping; attach_policy would fail
    # on a re-run with "already applied".
    admin.policy_set(props["policyName"], user=props["user"])


class UserProvider(_EnsuringProvider):
    __module__ = STATE_MODULE

    identity = ("user", "policyName")
    settings = USER_KEYS
    delete_before_replace = True  # the same user name cannot exist twice

    def ensure(self, props: dict[str, Any]) -> None:
        ensure_user(admin_client(props), props)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        """`pulumi refresh`: a user removed behind the program's back leaves the state (the next `up`
        creates it again with its policy)."""
        try:
            admin_client(props).user_info(props["user"])
        except Exception as err:  # the admin API answers a missing user with an error status
            if "NoSuchUser" in str(err) or "XMinioAdminNoSuchUser" in str(err):
                return ReadResult(id_=None, outs={})
            raise
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        admin = admin_client(props)
        admin.user_remove(props["user"])
        admin.policy_remove(props["policyName"])


class User(pulumi.dynamic.Resource):
    """A MinIO user with one canned policy of the same purpose."""

    def __init__(
        self,
        name: str,
        connection: dict[str, pulumi.Input[Any]],
        user: str,
        user_secret: pulumi.Input[str],
        policy: str,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        props = {
            **connection,
            "user": user,
            "userSecret": pulumi.Output.secret(user_secret),
            "policyName": user,
            "policy": policy,
        }
        secret = pulumi.ResourceOptions(additional_secret_outputs=["accessKey", "secretKey", "userSecret"])
        super().__init__(UserProvider(), name, props, pulumi.ResourceOptions.merge(secret, opts))
