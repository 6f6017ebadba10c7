"""MinioTier: erasure arithmetic, settings rules, the plan, the NAS host script (stubbed host), the
bucket/user provider (S3 half against a real `rclone serve s3`, admin half against a stub)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pickle
import re
import stat
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest
from argon2.low_level import Type, hash_secret_raw
from Crypto.Cipher import AES

import components.minio.tier as minio_tier
from components import pki
from components.cluster.config import rke2_config
from components.hosts.remote import script_text
from components.minio import objects as minio_objects
from components.minio.backup_specs import backup_command, backup_environment
from components.minio.tier import drives_param, env_file, nas_params, stdin_text
from settings import load
from settings.erasure import ErasureLayout, default_parity, default_set_size, erasure_layout, host_range
from stacks.engine import SECRET
from tests.conftest import ROOT, evaluate, problems, run_plan, stack_doc
from tests.disk_stubs import DISK_STUBS, install
from tests.minio.s3server import ACCESS_KEY, SECRET_KEY, serve_s3

# --- erasure arithmetic: 4 hosts, the parities MinIO allows on them ----------------------------


@pytest.mark.parametrize(
    ("hosts", "drives", "parity", "set_size", "usable", "read", "write"),
    [
        (4, 1, None, 4, 0.5, 2, 1),  # 4 x 1, EC:2 default (= N/2)
        (4, 2, None, 8, 0.5, 2, 1),  # 4 x 2, EC:4 default (= N/2)
        (4, 4, None, 16, 0.75, 1, 1),  # 4 x 4, EC:4 default
        (4, 8, None, 16, 0.75, 1, 1),  # 4 x 8 = 2 sets of 16
        (4, 4, 6, 16, 0.625, 1, 1),
        (4, 4, 8, 16, 0.5, 2, 1),  # max parity: reads survive 2, writes 1
        (5, 3, 6, 15, 0.6, 2, 2),  # 5 hosts: two-host read AND write tolerance
    ],
)
def test_erasure_layouts_of_the_research_table(hosts, drives, parity, set_size, usable, read, write):
    size = default_set_size(hosts, drives)
    assert size == set_size
    layout = ErasureLayout(hosts, drives, size, parity or default_parity(size))
    assert (layout.usable_fraction, layout.read_tolerance_hosts, layout.write_tolerance_hosts) == (usable, read, write)


def test_write_quorum_is_one_more_at_half_parity():
    assert ErasureLayout(4, 4, 16, 8).write_quorum == 9
    assert ErasureLayout(4, 4, 16, 7).write_quorum == 9
    assert ErasureLayout(4, 4, 16, 4).write_quorum == 12


def test_no_parity_gives_two_host_writes_on_four_hosts():
    for parity in range(1, 9):
        assert ErasureLayout(4, 12, 16, parity).write_tolerance_hosts <= 1


def test_prod_layout_is_three_sets_of_sixteen_at_ec8():
    prod = load(stack_doc("prod"))
    layout = erasure_layout(prod.storage.minio, prod.nas)
    assert (layout.sets, layout.set_size, layout.parity) == (3, 16, 8)


def test_host_range_needs_consecutive_addresses():
    assert host_range(["10.20.3.11", "10.20.3.12", "10.20.3.13"]) == "10.20.3.{11...13}"
    assert host_range(["10.0.0.9"]) == "10.0.0.9"
    assert host_range(["10.20.3.11", "10.20.3.13"]) == ""
    assert host_range(["10.20.3.11", "10.20.4.12"]) == ""


# --- settings rules ------------------------------------------------------------------------------


def _minio(raw: dict) -> dict:
    return raw["storage"]["minio"]


def only(found: list[str], path: str) -> str:
    lines = [p for p in found if p.startswith(path + ":")]
    assert len(lines) == 1, (path, found)
    return lines[0]


def test_reference_stacks_are_valid():
    assert problems("prod") == [] and problems("lab") == []


def test_nas_without_artifact_says_why_and_what_to_set():
    found = problems(mutate=lambda raw: _minio(raw).pop("artifact"))
    line = only(found, "storage.minio.artifact")
    assert "stopped publishing community binaries" in line and "artifact.url" in line and "sha256" in line


def test_sha256_must_be_64_hex():
    found = problems(mutate=lambda raw: _minio(raw)["artifact"].update(sha256="abc123"))
    assert "64 lower-case hex" in only(found, "storage.minio.artifact.sha256")


def test_drive_lists_must_match_between_hosts():
    found = problems(mutate=lambda raw: raw["nas"]["hosts"][2]["drives"].pop())
    assert "same drive set on every host" in only(found, "nas.hosts[2].drives")


def test_kernel_names_refused_for_drives_marked_format():
    def mutate(raw):
        raw["nas"]["hosts"][1]["drives"][0]["device"] = "/dev/sdb"

    assert "kernel name" in only(problems(mutate=mutate), "nas.hosts[1].drives[0].device")

    def unmarked(raw):
        raw["nas"]["hosts"][1]["drives"][0].update(device="/dev/sdb", format=False)

    assert problems(mutate=unmarked) == []


def test_parity_above_half_the_set_is_refused():
    found = problems(mutate=lambda raw: _minio(raw).update(parity=9, requireHostLoss={"read": 0, "write": 0}))
    assert "at most EC:8" in only(found, "storage.minio.parity")


def test_unreachable_tolerance_gives_the_real_figures():
    found = problems(mutate=lambda raw: _minio(raw)["requireHostLoss"].update(write=2))
    line = only(found, "storage.minio.requireHostLoss")
    assert "4 hosts x 12 drives = 3 set(s) of 16, EC:8: reads survive 2 host loss(es), writes 1, 50.0% usable" in line


def test_default_parity_cannot_keep_reads_through_two_hosts():
    found = problems(mutate=lambda raw: _minio(raw).pop("parity"))
    assert "EC:4: reads survive 1" in only(found, "storage.minio.requireHostLoss")


def test_backup_source_must_be_a_tier2_shared_volume():
    found = problems(mutate=lambda raw: _minio(raw)["backup"]["sources"][0].update(storageClass="tier2-block"))
    assert "not the tier-2 shared class 'tier2-shared'" in only(found, "storage.minio.backup.sources[0].storageClass")


def test_nas_addresses_must_be_consecutive():
    found = problems(mutate=lambda raw: raw["nas"]["hosts"][3].update(address="10.20.3.40"))
    assert "consecutive" in only(found, "nas.hosts")


def _run_cli(tmp_path: Path, mutate) -> tuple[subprocess.CompletedProcess, Path]:
    # `mutate` takes keys without the namespace; the values it edits are the config's own objects.
    return run_plan(tmp_path, lambda config: mutate({k.split(":", 1)[1]: v for k, v in config.items()}))


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda c: _minio(c).pop("artifact"), "storage.minio.artifact:"),
        (lambda c: _minio(c)["artifact"].update(sha256="XYZ"), "storage.minio.artifact.sha256:"),
        (lambda c: c["nas"]["hosts"][1]["drives"].pop(), "nas.hosts[1] (nas-02).drives:"),
        (lambda c: _minio(c).update(parity=9), "storage.minio.parity:"),
        (lambda c: _minio(c)["requireHostLoss"].update(write=2), "storage.minio.requireHostLoss:"),
        (lambda c: _minio(c)["backup"]["sources"][0].update(storageClass="tier1-nvme"), "storageClass:"),
    ],
    ids=["no-artifact", "bad-sha256", "drive-lists-differ", "parity-too-high", "tolerance", "backup-source"],
)
def test_bad_input_exits_2_naming_the_field(tmp_path, mutate, field):
    proc, out = _run_cli(tmp_path, mutate)
    assert proc.returncode == 2 and not out.exists(), proc.stderr
    assert field in proc.stderr


# --- the plan ------------------------------------------------------------------------------------


def test_one_nas_step_per_nas_host_with_the_same_env_file(prod_plan):
    steps = [r for r in prod_plan.by_type("command:remote:Command") if r["name"].endswith("-minio")]
    assert sorted(s["name"] for s in steps) == ["nas-01-minio", "nas-02-minio", "nas-03-minio", "nas-04-minio"]
    settings = load(stack_doc("prod"))
    expected = env_file(settings.storage.minio, settings.nas, erasure_layout(settings.storage.minio, settings.nas))
    assert expected.splitlines() == [
        'MINIO_VOLUMES="https://10.20.3.{11...14}:9000/mnt/minio/drive{1...12}/data"',
        'MINIO_OPTS="--address :9000 --console-address :9001 --certs-dir /etc/minio/certs"',
        "MINIO_ERASURE_SET_DRIVE_COUNT=16",
        "MINIO_STORAGE_CLASS_STANDARD=EC:8",
    ]
    for step in steps:
        assert step["inputs"]["stdin"] == SECRET
        assert "ENV_FILE=" in step["inputs"]["create"]
        assert expected.splitlines()[0].replace('"', "") in step["inputs"]["create"].replace("'", "").replace('"', "")


@pytest.fixture(scope="module")
def known_plan():
    """prod evaluated with known values for the generated secrets and certificates (the mock engine
    leaves computed outputs unknown), so tests can see where they go and whether they leak."""

    def secret(attr: str, text: str):
        return lambda name, **_: SimpleNamespace(**{attr: minio_tier.pulumi.Output.secret(text.format(name=name))})

    def plain(attr: str, text: str):
        return lambda name, **_: SimpleNamespace(**{attr: minio_tier.pulumi.Output.from_input(text.format(name=name))})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(minio_tier.random, "RandomPassword", secret("result", "KNOWN-{name}-0123456789"))
        mp.setattr(pki.tls, "PrivateKey", secret("private_key_pem", "-----BEGIN PRIVATE KEY-----{name}"))
        mp.setattr(pki.tls, "SelfSignedCert", plain("cert_pem", "-----BEGIN CERTIFICATE-----{name}"))
        mp.setattr(pki.tls, "CertRequest", plain("cert_request_pem", "CSR {name}"))
        mp.setattr(pki.tls, "LocallySignedCert", plain("cert_pem", "-----BEGIN CERTIFICATE-----{name}"))
        yield evaluate("prod")


def test_plan_json_holds_no_credentials_or_keys(known_plan):
    text = known_plan.to_json()
    assert "KNOWN-" not in text and "BEGIN PRIVATE KEY" not in text
    # ... and they did reach the hosts, on stdin: the test would notice a renamed field.
    nas = known_plan.named("nas-01-minio")
    stdin = known_plan.revealed[nas["urn"]]["stdin"]
    assert stdin_text({"ROOT_PASSWORD": "KNOWN-minio-root-password-0123456789"}).strip() in stdin
    assert stdin_text({"TLS_KEY": "-----BEGIN PRIVATE KEY-----minio-server-key"}).strip() in stdin
    assert known_plan.outputs["minioCaCert"] == "-----BEGIN CERTIFICATE-----minio-ca"


def test_buckets_and_users_are_tracked_resources(prod_plan):
    dynamic = {r["name"]: r["inputs"] for r in prod_plan.by_type("pulumi-python:dynamic:Resource")}
    assert sorted(dynamic) == [
        "minio-bucket-cephfs-backup",
        "minio-bucket-etcd-snapshots",
        "minio-user-backup-checkpoints",
        "minio-user-backup-datasets",
        "minio-user-etcd-restore",
        "minio-user-etcd-snapshot-writer",
        "minio-user-restore-checkpoints",
        "minio-user-restore-datasets",
    ]
    assert dynamic["minio-bucket-cephfs-backup"]["versioning"] is True
    assert dynamic["minio-bucket-cephfs-backup"]["noncurrentDays"] == 30
    # Prod locks both buckets (governance mode), each version at least as long as the lifecycle keeps it.
    assert dynamic["minio-bucket-cephfs-backup"]["lockDays"] == dynamic["minio-bucket-etcd-snapshots"]["lockDays"] == 30
    for inputs in dynamic.values():
        assert inputs["accessKey"] == SECRET and inputs["secretKey"] == SECRET


def statements(plan, user: str) -> list[dict]:
    return json.loads(plan.named(f"minio-user-{user}")["inputs"]["policy"])["Statement"]


def allowed(plan, user: str, action: str, resource: str, prefix: str = "") -> bool:
    """Whether the user's policy allows `action` on `resource` (AWS wildcard matching, s3:prefix)."""
    from fnmatch import fnmatchcase

    for st in statements(plan, user):
        if action not in st["Action"] or not any(fnmatchcase(resource, r) for r in st["Resource"]):
            continue
        condition = st.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        if condition is None or any(fnmatchcase(prefix, c) for c in condition):
            return True
    return False


@pytest.mark.parametrize("source", ["datasets", "checkpoints"])
def test_each_source_has_its_own_writer_and_reader_confined_to_its_prefix(prod_plan, source):
    other = "checkpoints" if source == "datasets" else "datasets"
    bucket = "arn:aws:s3:::cephfs-backup"
    writer, reader = f"backup-{source}", f"restore-{source}"
    assert allowed(prod_plan, writer, "s3:PutObject", f"{bucket}/{source}/dir/file")
    assert allowed(prod_plan, writer, "s3:PutObject", f"{bucket}/status/{source}.json")
    assert allowed(prod_plan, writer, "s3:ListBucket", bucket, prefix=f"{source}/")
    assert not allowed(prod_plan, writer, "s3:PutObject", f"{bucket}/{other}/dir/file")
    assert not allowed(prod_plan, writer, "s3:PutObject", f"{bucket}/status/{other}.json")
    assert not allowed(prod_plan, writer, "s3:ListBucket", bucket, prefix=f"{other}/")
    assert not allowed(prod_plan, writer, "s3:DeleteObjectVersion", f"{bucket}/{source}/dir/file")
    assert allowed(prod_plan, reader, "s3:GetObjectVersion", f"{bucket}/{source}/dir/file")
    assert not allowed(prod_plan, reader, "s3:PutObject", f"{bucket}/{source}/dir/file")
    assert not allowed(prod_plan, reader, "s3:GetObject", f"{bucket}/{other}/dir/file")
    for user in (writer, reader):
        assert not any(a.startswith("admin:") for st in statements(prod_plan, user) for a in st["Action"])


def test_etcd_snapshots_are_readable_only_by_rke2_and_the_platform_restore_identity(prod_plan):
    snapshot = "arn:aws:s3:::etcd-snapshots/ml-prod/etcd-snapshot-cpu-01-1795600800"
    users = [r["name"].removeprefix("minio-user-") for r in prod_plan.by_type("pulumi-python:dynamic:Resource")]
    readers = {
        u
        for u in users
        if u.startswith(("backup-", "restore-", "etcd-")) and allowed(prod_plan, u, "s3:GetObject", snapshot)
    }
    assert readers == {"etcd-restore", "etcd-snapshot-writer"}
    assert not allowed(prod_plan, "etcd-restore", "s3:PutObject", snapshot)


def run_spec(plan, source: str) -> tuple[dict, dict]:
    """The VolumeSnapshot and the backup Job the launcher creates (ConfigMap backup-<source>-run)."""
    data = plan.named(f"backup-{source}-run")["inputs"]["data"]
    return json.loads(data["snapshot.json"]), json.loads(data["job.json"])


def test_object_locking_takes_delete_away_and_makes_the_jobs_copy(prod_plan):
    def unlock(raw):
        raw["storage"]["minio"]["objectLockDays"] = None

    unlocked = evaluate("prod", unlock)
    for plan, lock_days, mode in ((prod_plan, 30, "copy"), (unlocked, 0, "sync")):
        dynamic = {r["name"]: r["inputs"] for r in plan.by_type("pulumi-python:dynamic:Resource")}
        assert dynamic["minio-bucket-cephfs-backup"]["lockDays"] == lock_days
        assert dynamic["minio-bucket-etcd-snapshots"]["lockDays"] == lock_days
        for user in ("backup-datasets", "backup-checkpoints", "etcd-snapshot-writer"):
            deletes = [a for st in statements(plan, user) for a in st["Action"] if "Delete" in a]
            # Without locking a run's deletions leave delete markers (versions stay); never a version delete.
            assert deletes == ([] if lock_days else ["s3:DeleteObject"]), (user, deletes)
        pod = run_spec(plan, "datasets")[1]["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value") for e in pod["initContainers"][0]["env"]}
        assert env["MODE"] == mode


def test_backup_job_runs_the_tested_script_on_cpu_nodes(prod_plan):
    _, job = run_spec(prod_plan, "datasets")
    assert job["metadata"] == {
        "name": "backup-datasets",
        "namespace": "ml-backup",
        "labels": {"app.kubernetes.io/name": "cephfs-backup", "ml-platform.io/source": "datasets"},
    }
    assert job["spec"]["activeDeadlineSeconds"] == 72000 and job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"ml-platform.io/role": "cpu"}
    backup, status = pod["initContainers"]
    (result,) = pod["containers"]
    assert backup["command"] == backup_command() and backup["image"] == "docker.io/rclone/rclone:1.75.0"
    env = {e["name"]: e["value"] for e in backup["env"]}
    expected = backup_environment(
        "datasets",
        "cephfs-backup",
        mode="copy",  # prod locks the bucket: the backup identity may not delete
        max_delete=10000,
        max_shrink_percent=50,
        verify="size",
        source_dir="/data",
    )
    assert {k: env[k] for k in expected} == expected
    assert status["image"] == "docker.io/rancher/kubectl:v1.30.3"
    assert status["args"][:6] == ["patch", "configmap", "backup-status-datasets", "--namespace", "ml-backup", "--type"]
    assert result["command"][-1] == 'exit "$(cat /status/rc)"'
    assert {"name": "data", "mountPath": "/data", "readOnly": True} in backup["volumeMounts"]
    assert prod_plan.named("backup-datasets-rclone")["inputs"]["stringData"] == SECRET
    checkpoints = run_spec(prod_plan, "checkpoints")[1]["spec"]["template"]["spec"]
    assert checkpoints["securityContext"]["runAsUser"] == 1000


def test_the_status_configmap_and_the_only_rbac_the_job_gets(prod_plan):
    for source in ("datasets", "checkpoints"):
        cm = prod_plan.named(f"backup-status-{source}")["inputs"]
        assert cm["metadata"]["name"] == f"backup-status-{source}" and cm["metadata"]["namespace"] == "ml-backup"
        assert "data" not in cm  # the job writes it (the program ignores changes to it)
        role = prod_plan.named(f"backup-status-{source}-role")["inputs"]
        assert role["metadata"]["namespace"] == "ml-backup"
        assert role["rules"] == [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [f"backup-status-{source}"],
                "verbs": ["patch"],
            }
        ]
        binding = prod_plan.named(f"backup-status-{source}-binding")["inputs"]
        # The account lives in ml-backup: only a pod there can run as it, and no team can create one there.
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"backup-{source}", "namespace": "ml-backup"}]
        pod = run_spec(prod_plan, source)[1]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == f"backup-{source}"  # the only account bound to that Role


def test_rclone_secret_configures_the_remote_from_the_environment(known_plan):
    for source in ("datasets", "checkpoints"):
        secret = known_plan.named(f"backup-{source}-rclone")
        assert secret["inputs"]["metadata"]["namespace"] == "ml-backup"
        data = known_plan.revealed[secret["urn"]]["stringData"]
        assert data["RCLONE_CONFIG_NAS_TYPE"] == "s3" and data["RCLONE_CONFIG_NAS_PROVIDER"] == "Minio"
        assert data["RCLONE_CONFIG_NAS_ENDPOINT"] == "https://minio.dc.example.internal:9000"
        assert data["RCLONE_CONFIG_NAS_ACCESS_KEY_ID"] == f"backup-{source}"
        assert data["RCLONE_CONFIG_NAS_SECRET_ACCESS_KEY"] == f"KNOWN-minio-backup-{source}-secret-0123456789"
        assert secret["inputs"]["stringData"] == SECRET


def test_restore_credentials_are_one_secret_output_per_source_and_etcd(known_plan):
    assert known_plan.outputs["minioRestoreCredentials"] == SECRET
    readers = minio_tier.restore_users(load(stack_doc("prod")).storage.minio)
    assert readers == {"datasets": "restore-datasets", "checkpoints": "restore-checkpoints", "etcd": "etcd-restore"}
    shape = minio_tier.restore_credentials(readers, ["k1", "k2", "k3"])
    assert shape["etcd"] == {"accessKey": "etcd-restore", "secretKey": "k3"}


def test_servers_name_only_the_etcd_s3_secret(prod_plan):
    settings = load(stack_doc("prod"))
    extra = minio_tier.etcd_s3_server_config(settings.cluster.etcd_snapshots, settings.nas)
    server = rke2_config(settings.servers[0], True, settings.cluster, settings.network, extra)
    # Any other etcd-s3-* key would make RKE2 ignore the Secret.
    assert {k: v for k, v in server.items() if k.startswith("etcd-s3")} == {
        "etcd-s3": True,
        "etcd-s3-config-secret": "rke2-etcd-s3",
    }
    assert server["etcd-snapshot-retention"] == 28  # local snapshots kept as well
    agent = next(n for n in settings.nodes if not n.control_plane)
    assert not any(k.startswith("etcd") for k in rke2_config(agent, False, settings.cluster, settings.network, extra))
    rke2 = prod_plan.named("cpu-01-rke2")["inputs"]["create"]
    assert "etcd-s3-config-secret: rke2-etcd-s3" in rke2


def test_etcd_s3_secret_has_the_keys_rke2_reads(known_plan):
    secret = known_plan.named("rke2-etcd-s3")
    assert secret["inputs"]["type"] == "etcd.k3s.cattle.io/s3-config-secret"
    assert secret["inputs"]["metadata"]["namespace"] == "kube-system"
    data = known_plan.revealed[secret["urn"]]["stringData"]
    assert data["etcd-s3-endpoint"] == "minio.dc.example.internal:9000"  # host:port, no scheme
    assert data["etcd-s3-bucket"] == "etcd-snapshots" and data["etcd-s3-bucket-lookup-type"] == "path"
    assert data["etcd-s3-access-key"] == "etcd-snapshot-writer"
    assert data["etcd-s3-secret-key"] == "KNOWN-minio-etcd-snapshot-writer-secret-0123456789"
    assert data["etcd-s3-endpoint-ca"] == "-----BEGIN CERTIFICATE-----minio-ca"
    assert data["etcd-s3-folder"] == "ml-prod"


def test_outputs_give_the_computed_tolerance(prod_plan, lab_plan):
    assert prod_plan.outputs["minioReadToleranceHosts"] == 2
    assert prod_plan.outputs["minioWriteToleranceHosts"] == 1
    assert prod_plan.outputs["minioUsableFraction"] == 0.5
    assert prod_plan.outputs["rke2Token"] == SECRET
    assert (lab_plan.outputs["minioReadToleranceHosts"], lab_plan.outputs["minioWriteToleranceHosts"]) == (0, 0)


# --- the bucket/user provider --------------------------------------------------------------------


def connection(endpoint: str) -> dict:
    return {"endpoint": endpoint, "secure": False, "caPem": "", "accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}


def test_diff_shows_a_retention_or_policy_change():
    bucket = {**connection("h:9000"), "bucket": "b", "versioning": True, "noncurrentDays": 30, "lockDays": 0}
    provider = minio_objects.BucketProvider()
    assert not provider.diff("b", bucket, dict(bucket)).changes
    changed = provider.diff("b", bucket, {**bucket, "noncurrentDays": 60})
    assert changed.changes and not changed.replaces
    assert provider.diff("b", bucket, {**bucket, "bucket": "c"}).replaces == ["bucket"]
    user = {**connection("h:9000"), "user": "u", "userSecret": "s", "policyName": "u", "policy": "{}"}
    users = minio_objects.UserProvider()
    assert not users.diff("u", user, dict(user)).changes
    assert users.diff("u", user, {**user, "policy": '{"Statement": []}'}).changes


@pytest.mark.real_server
def test_bucket_create_rerun_and_delete_against_a_real_s3_endpoint(tmp_path):
    """`rclone serve s3` has no versioning or lifecycle API (501): those calls are checked against
    the stub below; here the bucket itself is created, found on a re-run, and removed."""
    with serve_s3(tmp_path) as s3:
        props = {**connection(s3.endpoint.removeprefix("http://")), "bucket": "etcd-snapshots", "versioning": False}
        client = minio_objects.s3_client(props)
        assert minio_objects.ensure_bucket(client, props) == ["created"]
        assert (s3.root / "etcd-snapshots").is_dir()
        assert minio_objects.ensure_bucket(client, props) == []
        provider = minio_objects.BucketProvider()
        client.put_object("etcd-snapshots", "kept.db", io.BytesIO(b"snapshot"), 8)
        provider.delete("etcd-snapshots", props)
        assert (s3.root / "etcd-snapshots" / "kept.db").exists(), "a bucket holding data is never removed"
        client.remove_object("etcd-snapshots", "kept.db")
        provider.delete("etcd-snapshots", props)
        assert not (s3.root / "etcd-snapshots").exists()


class _Recorder(BaseHTTPRequestHandler):
    """Answers like MinIO for the calls the provider makes, and records them. Not a MinIO: MinIO's
    community edition publishes no binaries since October 2025, and `rclone serve s3` has no admin API; the point
    is the request shapes MinIO's admin API (madmin v3) and S3 bucket configuration expect."""

    calls: list[tuple[str, str, dict, bytes, str, dict]] = []
    missing_buckets: set[str] = set()  # HEAD answers 404 (NoSuchBucket)
    missing_users: set[str] = set()  # user-info answers 404 (XMinioAdminNoSuchUser)
    no_lock = False  # GET ?object-lock answers 404 (ObjectLockConfigurationNotFoundError)

    def _handle(self) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        query = parse_qs(url.query, keep_blank_values=True)
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.calls.append((self.command, url.path, query, body, self.headers.get("Authorization", ""), headers))
        status = 200
        if self.command == "HEAD" and url.path.strip("/") in self.missing_buckets:
            status, payload = 404, b""
        elif url.path.endswith("/user-info") and query.get("accessKey", [""])[0] in self.missing_users:
            status, payload = 404, b'{"Code":"XMinioAdminNoSuchUser","Message":"The specified user does not exist"}'
        elif self.command == "GET" and "object-lock" in query and self.no_lock:
            status = 404
            payload = b"<Error><Code>ObjectLockConfigurationNotFoundError</Code><Message>none</Message></Error>"
        elif self.command == "GET" and "object-lock" in query:
            payload = (
                b"<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled></ObjectLockConfiguration>"
            )
        elif self.command == "GET" and "versioning" in query:
            payload = b"<VersioningConfiguration></VersioningConfiguration>"
        else:
            payload = b""
        self.send_response(status)
        if payload.startswith(b"<"):
            self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PUT = do_DELETE = do_HEAD = _handle  # noqa: N815 (http.server's method names)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[tuple[str, list]]:
    _Recorder.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", _Recorder.calls
    finally:
        server.shutdown()


def decrypt(payload: bytes, password: str) -> bytes:
    """MinIO's admin payload encryption (madmin EncryptData: sio DARE, Argon2id key), one chunk."""
    salt, aead, nonce, sealed = payload[:32], payload[32], payload[33:41], payload[41:]
    assert aead == 0  # AES-256-GCM
    key = hash_secret_raw(
        password.encode(), salt, time_cost=1, memory_cost=65536, parallelism=4, hash_len=32, type=Type.ID
    )
    header = AES.new(key, AES.MODE_GCM, nonce + b"\0\0\0\0").digest()
    cipher = AES.new(key, AES.MODE_GCM, nonce + (1).to_bytes(4, "little"))
    cipher.update(b"\x80" + header)
    return cipher.decrypt_and_verify(sealed[:-16], sealed[-16:])


def test_user_requests_have_the_admin_api_shapes(stub):
    endpoint, calls = stub
    policy = minio_objects.bucket_policy(["cephfs-backup"], ["s3:GetObject"])
    props = {**connection(endpoint), "user": "backup-writer", "userSecret": "w" * 40, "policyName": "backup-writer"}
    props["policy"] = policy
    minio_objects.UserProvider().create(props)
    (add_policy, add_user, set_policy) = calls
    assert add_policy[:3] == ("PUT", "/minio/admin/v3/add-canned-policy", {"name": ["backup-writer"]})
    assert json.loads(add_policy[3]) == json.loads(policy)
    assert add_user[:3] == ("PUT", "/minio/admin/v3/add-user", {"accessKey": ["backup-writer"]})
    assert b"w" * 40 not in add_user[3], "the user's secret must travel encrypted with the root secret"
    assert json.loads(decrypt(add_user[3], SECRET_KEY)) == {"status": "enabled", "secretKey": "w" * 40}
    assert set_policy[:3] == (
        "PUT",
        "/minio/admin/v3/set-user-or-group-policy",
        {"userOrGroup": ["backup-writer"], "isGroup": ["false"], "policyName": ["backup-writer"]},
    )
    assert all(call[4].startswith("AWS4-HMAC-SHA256 Credential=" + ACCESS_KEY) for call in calls)
    calls.clear()
    minio_objects.UserProvider().delete("backup-writer", props)
    assert [(c[0], c[1], c[2]) for c in calls] == [
        ("DELETE", "/minio/admin/v3/remove-user", {"accessKey": ["backup-writer"]}),
        ("DELETE", "/minio/admin/v3/remove-canned-policy", {"name": ["backup-writer"]}),
    ]


def test_bucket_versioning_and_lifecycle_requests(stub):
    endpoint, calls = stub
    props = {**connection(endpoint), "bucket": "cephfs-backup", "versioning": True, "noncurrentDays": 30}
    minio_objects.ensure_bucket(minio_objects.s3_client(props), props)
    puts = {next(iter(c[2]), ""): c[3].decode() for c in calls if c[0] == "PUT"}
    assert "<Status>Enabled</Status>" in puts["versioning"]
    lifecycle = puts["lifecycle"]
    assert "<NoncurrentVersionExpiration><NoncurrentDays>30</NoncurrentDays>" in lifecycle
    # MinIO's ILM removes a delete marker once no version is left behind it (versions expire above).
    assert "<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>" in lifecycle
    assert "deleted/" not in lifecycle  # no second copy of what versioning already keeps
    assert "object-lock" not in puts


def test_object_locking_is_set_when_the_bucket_is_made(stub):
    endpoint, calls = stub
    props = {**connection(endpoint), "bucket": "etcd-snapshots", "versioning": True, "noncurrentDays": 30}
    props["lockDays"] = 30
    _Recorder.missing_buckets = {"etcd-snapshots"}
    try:
        minio_objects.ensure_bucket(minio_objects.s3_client(props), props)
    finally:
        _Recorder.missing_buckets = set()
    make = next(c for c in calls if c[0] == "PUT" and c[1] == "/etcd-snapshots" and not c[2])
    assert make[5].get("x-amz-bucket-object-lock-enabled") == "true"
    lock = next(c[3].decode() for c in calls if c[0] == "PUT" and "object-lock" in c[2])
    assert "<Mode>GOVERNANCE</Mode>" in lock and "<Days>30</Days>" in lock


def test_object_locking_cannot_be_added_to_an_existing_bucket(stub):
    endpoint, calls = stub
    props = {**connection(endpoint), "bucket": "cephfs-backup", "versioning": True, "noncurrentDays": 30}
    props["lockDays"] = 30
    _Recorder.no_lock = True
    try:
        with pytest.raises(minio_objects.ObjectLockError, match="only when a bucket is created"):
            minio_objects.ensure_bucket(minio_objects.s3_client(props), props)
    finally:
        _Recorder.no_lock = False
    assert not [c for c in calls if c[0] == "PUT" and "lifecycle" in c[2]], "nothing else changed"


def test_providers_read_a_removed_object_as_gone(stub, tmp_path):
    endpoint, _ = stub
    props = {**connection(endpoint), "bucket": "cephfs-backup", "versioning": True, "noncurrentDays": 30}
    assert minio_objects.BucketProvider().read("cephfs-backup", props).id == "cephfs-backup"
    _Recorder.missing_buckets = {"cephfs-backup"}
    try:
        assert minio_objects.BucketProvider().read("cephfs-backup", props).id is None
    finally:
        _Recorder.missing_buckets = set()
    user = {**connection(endpoint), "user": "restore-datasets", "userSecret": "s", "policyName": "p", "policy": "{}"}
    assert minio_objects.UserProvider().read("restore-datasets", user).id == "restore-datasets"
    _Recorder.missing_users = {"restore-datasets"}
    try:
        assert minio_objects.UserProvider().read("restore-datasets", user).id is None
    finally:
        _Recorder.missing_users = set()


# --- the NAS host script against stubbed system tools -------------------------------------------

STUBS = {
    **DISK_STUBS,
    # findmnt -n -o SOURCE --mountpoint DIR: the device whose mounts list DIR
    "findmnt": """
mnt=${!#}
for f in "$STUB_STATE"/*.mounts; do
  [[ -e $f ]] && grep -qxF -- "$mnt" "$f" && { echo "/dev/$(basename "$f" .mounts)"; exit 0; }
done
exit 1
""",
    "systemctl": """
echo "systemctl $*" >>"$STUB_STATE/log"
case $1 in
  is-enabled) [[ -e $STUB_STATE/enabled ]] ;;
  is-active) [[ -e $STUB_STATE/enabled ]] ;;
  enable) touch "$STUB_STATE/enabled" ;;
esac
""",
    # curl -fsSL --retry 3 -o FILE URL (the artifact) | curl -fsS --cacert CA URL (health)
    "curl": """
echo "curl $*" >>"$STUB_STATE/log"
out=""
while (($#)); do
  case $1 in -o) out=$2; shift ;; --cacert | --connect-timeout | --max-time | --retry) shift ;; -*) ;; *) url=$1 ;; esac
  shift
done
if [[ -n $out ]]; then cp "$STUB_STATE/artifact" "$out"; else [[ $url == */minio/health/cluster ]]; fi
""",
    "id": '[[ -e "$STUB_STATE/user-$1" ]]',
    "useradd": 'echo "useradd $*" >>"$STUB_STATE/log"; touch "$STUB_STATE/user-${!#}"',
    "chown": 'echo "chown $*" >>"$STUB_STATE/log"',
    # dpkg-query -W -f=... PKG: installed when $STUB_STATE/pkg-PKG exists; apt-get install marks them.
    "dpkg-query": '[[ -e "$STUB_STATE/pkg-${!#}" ]] && echo "install ok installed"; true',
    "apt-get": """
echo "apt-get $*" >>"$STUB_STATE/log"
if [[ $* == *install* ]]; then for p in "$@"; do [[ $p == -* || $p == install ]] || touch "$STUB_STATE/pkg-$p"; done; fi
""",
}

ARTIFACT = b"#!/bin/sh\necho minio version RELEASE.2025-09-07T16-13-09Z\n"
SECRETS = {
    "ROOT_USER": "rootuser0123456789",
    "ROOT_PASSWORD": "rootpassword0123456789abcdefghij",
    "TLS_CERT": "-----BEGIN CERTIFICATE-----\nserver\n-----END CERTIFICATE-----",
    "TLS_KEY": "-----BEGIN EC PRIVATE KEY-----\nkey\n-----END EC PRIVATE KEY-----",
    "CA_CERT": "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----",
}


class NasHost:
    def __init__(self, tmp: Path) -> None:
        self.state, self.root, bin_dir = tmp / "state", tmp / "root", tmp / "bin"
        for d in (self.state, self.root / "etc", bin_dir):
            d.mkdir(parents=True)
        (self.state / "log").touch()
        (self.state / "artifact").write_bytes(ARTIFACT)
        install(bin_dir, STUBS)
        self.path = f"{bin_dir}:/usr/bin:/bin"
        settings = load(stack_doc("prod"))
        self.settings = settings
        self.drives = [self.disk(f"nasdisk{i}") for i in range(1, 5)]

    def disk(self, name: str, signature: str = "") -> str:
        (self.state / f"{name}.disk").touch()
        if signature:
            (self.state / f"{name}.sig").write_text(signature)
        return f"/dev/{name}"

    def params(self, drives: str = "", parity: int = 8) -> dict[str, str]:
        s = self.settings
        minio = s.storage.minio.model_copy(update={"parity": parity})
        layout = ErasureLayout(4, 4, 16, parity)
        host = s.nas.hosts[0]
        params = nas_params(minio, s.nas, layout, host)
        params["DRIVES"] = drives or " ".join(f"{d}=format" for d in self.drives)
        params["ARTIFACT_SHA256"] = hashlib.sha256(ARTIFACT).hexdigest()
        return params

    def run(self, params: dict[str, str], secrets: dict[str, str] = SECRETS) -> subprocess.CompletedProcess:
        env = {"PATH": self.path, "STUB_STATE": str(self.state), "HOST_ROOT": str(self.root), **params}
        env["HOME"] = os.environ.get("HOME", "/tmp")
        return subprocess.run(
            ["bash", "-c", script_text("minio-nas.sh"), "minio-nas.sh"],
            env=env,
            input=stdin_text(secrets),
            capture_output=True,
            text=True,
            timeout=60,
        )

    def log(self) -> list[str]:
        return (self.state / "log").read_text().splitlines()

    def files(self) -> dict[Path, bytes]:
        """What the step left on the host, but its runtime files in /run (the package lock: lib.sh)."""
        run = self.root / "run"
        return {p: p.read_bytes() for p in self.root.rglob("*") if p.is_file() and run not in p.parents}


@pytest.fixture
def nas(tmp_path) -> NasHost:
    return NasHost(tmp_path)


def test_fresh_host_is_set_up_and_health_checked(nas):
    result = nas.run(nas.params())
    assert result.returncode == 0, result.stderr
    assert (nas.root / "usr/local/bin/minio").read_bytes() == ARTIFACT
    env = nas.root / "etc/default/minio"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    text = env.read_text()
    assert "MINIO_STORAGE_CLASS_STANDARD=EC:8\n" in text and f"MINIO_ROOT_PASSWORD={SECRETS['ROOT_PASSWORD']}\n" in text
    assert SECRETS["ROOT_PASSWORD"] not in result.stdout + result.stderr
    key = nas.root / "etc/minio/certs/private.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and (nas.root / "etc/minio/certs/CAs/ca.crt").exists()
    fstab = (nas.root / "etc/fstab").read_text().splitlines()
    assert fstab[0] == (
        "UUID=uuid-nasdisk1 /mnt/minio/drive1 xfs defaults,noatime,nofail,x-systemd.device-timeout=30s 0 2"
    )
    assert len(fstab) == 4 and all(",nofail," in line for line in fstab)  # a dead drive does not stop the boot
    log = nas.log()
    assert "mkfs.xfs -q -L mlminio-d01 /dev/nasdisk1" in log and "mkfs.xfs -q -L mlminio-d04 /dev/nasdisk4" in log
    unit = (nas.root / "etc/systemd/system/minio.service").read_text()
    assert "ExecStart=/usr/local/bin/minio server $MINIO_OPTS $MINIO_VOLUMES" in unit
    assert "EnvironmentFile=/etc/default/minio\n" in unit and "LimitNOFILE=1048576" in unit and "Restart=always" in unit
    assert "systemctl enable --now --no-block minio" in log  # never blocks on Type=notify
    assert "TimeoutStartSec=600" in unit and "TimeoutStopSec=300" in unit and "TimeoutSec=infinity" not in unit
    assert log[-1].startswith("curl -fsS --connect-timeout 5 --max-time 10 --cacert")
    assert log[-1].endswith("/minio/health/cluster")
    # lib.sh's package_manager appends apt's bounds (-o Acquire::http::Timeout=30 ...) to every apt-get call.
    install = [
        line for line in log if line.startswith("apt-get install -y -q --no-install-recommends xfsprogs curl chrony")
    ]
    assert len(install) == 1 and "-o Acquire::http::Timeout=30" in install[0]
    assert log.index(install[0]) < log.index("mkfs.xfs -q -L mlminio-d01 /dev/nasdisk1")


def test_second_run_changes_nothing(nas):
    assert nas.run(nas.params()).returncode == 0
    files, before = nas.files(), len(nas.log())
    again = nas.run(nas.params())
    assert again.returncode == 0, again.stderr
    assert "changed:" not in again.stdout
    assert nas.files() == files
    new = nas.log()[before:]
    assert not any(w in line for line in new for w in ("mkfs", "wipefs", "mount -t", "restart", "enable --now", "-o /"))


def test_non_blank_unmarked_drive_is_refused(nas):
    other = nas.disk("nasdisk5", "TYPE=ext4\nUUID=u5\n")
    drives = " ".join(f"{d}=format" for d in nas.drives[:3]) + f" {other}=keep"
    result = nas.run(nas.params(drives))
    assert result.returncode != 0
    assert "refused: drive 4: /dev/nasdisk5 holds ext4" in result.stderr
    assert not any("nasdisk5" in line for line in nas.log() if line.startswith(("mkfs", "wipefs", "mount")))
    assert not (nas.root / "etc/default/minio").exists(), "MinIO must not be configured with a drive missing"


def test_forced_drive_with_data_is_wiped(nas):
    other = nas.disk("nasdisk5", "TYPE=ext4\nUUID=u5\n")
    drives = " ".join(f"{d}=format" for d in nas.drives[:3]) + f" {other}=format-force"
    result = nas.run(nas.params(drives))
    assert result.returncode == 0, result.stderr
    assert nas.log().index("wipefs -a -- /dev/nasdisk5") < nas.log().index("mkfs.xfs -q -L mlminio-d04 /dev/nasdisk5")


def test_reordered_drives_are_refused(nas):
    assert nas.run(nas.params()).returncode == 0
    swapped = [nas.drives[1], nas.drives[0], *nas.drives[2:]]
    result = nas.run(nas.params(" ".join(f"{d}=format" for d in swapped)))
    assert result.returncode != 0 and "drive order must never change" in result.stderr


def test_a_swapped_drive_is_not_mounted_over_the_old_ones_mount(nas):
    assert nas.run(nas.params()).returncode == 0
    new = nas.disk("nasdisk6")  # blank, in slot 2; nasdisk2 is still mounted at drive2
    drives = [nas.drives[0], new, *nas.drives[2:]]
    params = nas.params(" ".join(f"{d}=format" for d in drives))
    before = len(nas.log())
    result = nas.run(params)
    assert result.returncode != 0
    assert "drive 2: /mnt/minio/drive2 still has /dev/nasdisk2 mounted" in result.stderr, result.stderr
    assert not any("nasdisk6" in line for line in nas.log()[before:]), "nothing formatted or mounted"
    (nas.state / "nasdisk2.mounts").unlink()  # the operator's `umount`
    again = nas.run(params)
    assert again.returncode == 0, again.stderr
    assert "mount -t xfs -o noatime /dev/nasdisk6 /mnt/minio/drive2" in nas.log()


def test_sha256_mismatch_aborts_before_anything_is_installed(nas):
    params = nas.params()
    params["ARTIFACT_SHA256"] = "0" * 64
    result = nas.run(params)
    assert result.returncode != 0
    assert "nothing was installed" in result.stderr
    assert nas.files() == {}
    # only the tools the step uses (packages) were installed before the download
    assert [line.split()[0] for line in nas.log()] == ["apt-get", "apt-get", "curl"]


def test_parity_change_of_a_deployment_with_data_is_refused(nas):
    assert nas.run(nas.params(parity=8)).returncode == 0
    (nas.root / "mnt/minio/drive1/data/.minio.sys").mkdir()
    files = nas.files()
    result = nas.run(nas.params(parity=4))
    assert result.returncode != 0
    assert "MINIO_STORAGE_CLASS_STANDARD is 'EC:8' in the running deployment and the settings ask for 'EC:4'" in (
        result.stderr
    )
    assert nas.files() == files


def test_a_drive_removed_from_a_deployment_with_data_is_refused(nas):
    # MinIO cannot shrink a pool (it would not start): the step stops before touching drives or files.
    assert nas.run(nas.params()).returncode == 0
    (nas.root / "mnt/minio/drive1/data/.minio.sys").mkdir()
    files, before = nas.files(), len(nas.log())
    params = nas.params(" ".join(f"{d}=format" for d in nas.drives[:3]))
    assert "drive{1...4}" in params["ENV_FILE"]
    params["ENV_FILE"] = params["ENV_FILE"].replace("drive{1...4}", "drive{1...3}")
    result = nas.run(params)
    assert result.returncode != 0
    assert "MINIO_VOLUMES is '\"https://10.20.3.{11...14}:9000/mnt/minio/drive{1...4}/data\"' in the running" in (
        result.stderr
    )
    assert nas.files() == files
    assert not any(line.startswith(("mkfs", "wipefs", "mount", "umount", "systemctl")) for line in nas.log()[before:])


def test_parity_may_change_before_first_data(nas):
    assert nas.run(nas.params(parity=8)).returncode == 0
    result = nas.run(nas.params(parity=4))
    assert result.returncode == 0, result.stderr
    assert "EC:4" in (nas.root / "etc/default/minio").read_text()
    assert "restarted minio" in result.stdout


@pytest.mark.parametrize("rename", [{"SERVICE": "silo"}, {"BINARY": "silo"}, {"SERVICE": "silo", "BINARY": "silo"}])
def test_a_renamed_service_or_binary_does_not_start_a_second_server(nas, rename):
    assert nas.run(nas.params()).returncode == 0
    (nas.root / "mnt/minio/drive1/data/.minio.sys").mkdir()
    files, before = nas.files(), len(nas.log())
    result = nas.run({**nas.params(), **rename})
    assert result.returncode != 0
    assert "served by minio (minio)" in result.stderr and "systemctl disable --now minio" in result.stderr
    assert nas.files() == files
    assert not any(
        line.startswith(("mkfs", "mount", "systemctl enable", "systemctl restart")) for line in nas.log()[before:]
    )


def test_a_rename_after_the_old_service_was_disabled_keeps_the_layout_guard(nas):
    assert nas.run(nas.params(parity=8)).returncode == 0
    (nas.root / "mnt/minio/drive1/data/.minio.sys").mkdir()
    (nas.state / "enabled").unlink()  # the operator's `systemctl disable --now minio`
    changed = nas.run({**nas.params(parity=4), "SERVICE": "silo", "BINARY": "silo"})
    assert changed.returncode != 0 and "MINIO_STORAGE_CLASS_STANDARD is 'EC:8'" in changed.stderr
    moved = nas.run({**nas.params(parity=8), "SERVICE": "silo", "BINARY": "silo"})
    assert moved.returncode == 0, moved.stderr
    assert (nas.root / "var/lib/ml-platform/minio-deployment").read_text() == "silo silo\n"
    assert "systemctl enable --now --no-block silo" in nas.log()


def test_drive_actions_follow_the_settings_marks():
    settings = load(stack_doc("prod"))
    assert drives_param(settings.nas.hosts[0].drives).split()[0] == "/dev/disk/by-id/wwn-0x5000c500d1a00100=format"


def test_docs_tolerance_table_matches_the_arithmetic():
    doc = (ROOT / "docs" / "minio-tier.md").read_text()
    rows = re.findall(
        r"^\| 16 \| EC:(\d+)[^|]*\| ([\d.]+)% \| (yes|no) \| (yes|no) \| (yes|no) \| (yes|no) \|$", doc, re.M
    )
    assert [int(r[0]) for r in rows] == list(range(1, 9))
    for parity, usable, *survives in rows:
        layout = ErasureLayout(4, 12, 16, int(parity))
        expected = [layout.read_tolerance_hosts >= 1, layout.write_tolerance_hosts >= 1]
        expected += [layout.read_tolerance_hosts >= 2, layout.write_tolerance_hosts >= 2]
        assert [s == "yes" for s in survives] == expected, parity
        assert abs(float(usable) - 100 * layout.usable_fraction) < 0.06, parity


@pytest.mark.parametrize("provider", [minio_objects.BucketProvider(), minio_objects.UserProvider()])
def test_providers_are_pickled_by_reference_to_an_importable_module(provider):
    """The engine stores the provider in the state and imports `components.minio_objects` to run it;
    pickled by value it would carry the code (and any captured value) into the state instead."""
    from pulumi.dynamic.dynamic import serialize_provider

    blob = base64.b64decode(serialize_provider(provider))
    assert b"components.minio_objects" in blob and len(blob) < 200
    assert type(pickle.loads(blob)) is type(provider)


def test_docs_rpo_rto_table_matches_the_sources():
    doc = (ROOT / "docs" / "minio-tier.md").read_text()
    rows = re.findall(r"^\| (\w+) \| (\d+)(Ti|Gi) \| 24 h \+ run \| ([\d.]+) h \|$", doc, re.M)
    sources = load(stack_doc("prod")).storage.minio.backup.sources
    assert load(stack_doc("prod")).storage.minio.backup.schedule == "30 1 * * *"  # daily: RPO 24 h + a run
    assert [(name, f"{size}{unit}") for name, size, unit, _ in rows] == [(s.name, s.size) for s in sources]
    for _, size, unit, hours in rows:
        seconds = int(size) * (2**40 if unit == "Ti" else 2**30) / 1.25e9
        assert abs(seconds / 3600 - float(hours)) < 0.06


def test_runbook_watches_healing_with_the_header_minio_sets():
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    section = runbook.split("## 11. Replacing a failed NAS host", 1)[1].split("\n## ", 1)[0]
    # MinIO sets X-Minio-Healing-Drives on /minio/health/cluster, counting healing drives only for
    # ?maintenance=true (minio cmd/healthcheck-handler.go); the status code alone does not say "healing".
    probe = next(line for line in section.splitlines() if "curl" in line and "maintenance=true" in line)
    assert "-D -" in probe and "x-minio-healing-drives" in section.lower()


def test_a_source_in_the_status_namespace_is_refused():
    found = problems(mutate=lambda raw: _minio(raw)["backup"]["sources"][1].update(namespace="ml-backup"))
    line = only(found, "storage.minio.backup.sources[1].namespace")
    assert "is the backup pipeline's platform namespace and holds no team data" in line


def test_a_source_without_its_size_is_refused():
    found = problems(mutate=lambda raw: _minio(raw)["backup"]["sources"][0].pop("size"))
    assert only(found, "storage.minio.backup.sources[0].size")


# --- the review names what stops or is refused ---------------------------------------------------


def danger_after(mutate, before=None) -> list[str]:
    from stacks import diff as diffs

    base = evaluate("prod", before)
    changed = evaluate("prod", mutate)
    return diffs.compare(json.loads(base.to_json()), json.loads(changed.to_json())).danger


def test_review_names_a_removed_backup_source():
    danger = danger_after(lambda raw: _minio(raw)["backup"]["sources"].pop(1))
    assert any("backup-checkpoints: the backup of source checkpoints stops" in line for line in danger), danger


def test_review_names_object_locking_on_existing_buckets():
    # A stack deployed before prod locked its buckets: the buckets exist unlocked, the settings now lock them.
    danger = danger_after(lambda raw: None, before=lambda raw: _minio(raw).update(objectLockDays=None))
    assert sum("object locking asked of the existing bucket" in line for line in danger) == 2, danger


def test_review_names_a_renamed_minio_service():
    danger = danger_after(lambda raw: _minio(raw).update(service="silo", binary="silo"))
    lines = [line for line in danger if "service minio -> silo, binary minio -> silo" in line]
    assert len(lines) == 4 and "systemctl disable --now minio" in lines[0], danger


@pytest.mark.parametrize(("source", "team"), [("datasets", "llm-train"), ("checkpoints", "research")])
def test_review_names_the_pipeline_moving_out_of_the_team_namespace(source, team):
    from stacks import diff as diffs

    # A stack deployed with the pipeline in the team's namespace (its CronJob, key, accounts and run spec there).
    head = json.loads(evaluate("prod").to_json())
    base = json.loads(json.dumps(head))
    moved = {f"backup-{source}", f"backup-{source}-rclone", f"backup-{source}-account", f"backup-{source}-run"}
    for resource in base["resources"]:
        if resource["name"] in moved:
            resource["inputs"]["metadata"]["namespace"] = team
    danger = diffs.compare(base, head).danger
    (line,) = [d for d in danger if f"backup pipeline of source {source} moves" in d]
    assert f"from namespace {team} to ml-backup" in line and "cannot record its result" in line
    assert "Moving the backups into ml-backup" in line
    unchanged = diffs.compare(head, head).danger
    assert not any("moves from namespace" in d for d in unchanged)


# What would destroy a locked version or loosen the lock, in MinIO's policy actions (minio/pkg policy/action.go).
# s3:GetBucketObjectLockConfiguration is here too: MinIO lets a governance-mode delete through with the bypass
# header for a holder of either it or s3:BypassGovernanceRetention (minio/minio cmd/bucket-object-lock.go,
# enforceRetentionBypassForDelete).
LOCK_BREAKING = [
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:BypassGovernanceRetention",
    "s3:GetBucketObjectLockConfiguration",
    "s3:PutObjectRetention",
    "s3:PutObjectLegalHold",
    "s3:PutBucketObjectLockConfiguration",
    "s3:PutBucketVersioning",
    "s3:PutLifecycleConfiguration",
    "s3:PutBucketPolicy",
    "s3:DeleteBucket",
    "s3:ForceDeleteBucket",
]


def may(plan, user: str, action: str, resource: str) -> bool:
    """Like `allowed`, with wildcards in the policy's actions too (`s3:*`, `s3:Delete*`), no prefix condition."""
    from fnmatch import fnmatchcase

    return any(
        any(fnmatchcase(action, a) for a in st["Action"]) and any(fnmatchcase(resource, r) for r in st["Resource"])
        for st in statements(plan, user)
        if st["Effect"] == "Allow"
    )


@pytest.mark.parametrize("source", ["datasets", "checkpoints"])
def test_no_identity_a_team_can_hold_may_delete_or_overwrite_a_locked_object(prod_plan, source):
    # The identities whose keys ever sit in the cluster: the backup writer (ml-backup; a stolen key) and the
    # restore reader (in the team's namespace during a restore, runbook 9).
    bucket = "arn:aws:s3:::cephfs-backup"
    for user in (f"backup-{source}", f"restore-{source}"):
        for key in (f"{source}/dir/file", f"status/{source}.json", "datasets/x", "checkpoints/x", "status/other.json"):
            for action in LOCK_BREAKING:
                assert not may(prod_plan, user, action, f"{bucket}/{key}"), (user, action, key)
        for action in LOCK_BREAKING:
            assert not may(prod_plan, user, action, bucket), (user, action)
    # A put never replaces a locked version: the bucket keeps versions, and each is locked (governance mode).
    inputs = prod_plan.named("minio-bucket-cephfs-backup")["inputs"]
    assert inputs["versioning"] is True and inputs["lockDays"] >= inputs["noncurrentDays"]
    # The reader cannot even add a version.
    assert not may(prod_plan, f"restore-{source}", "s3:PutObject", f"{bucket}/{source}/dir/file")


def test_the_lock_check_finds_a_policy_that_could_break_the_lock(prod_plan):
    # The same check against policies a mistake could produce: each is caught.
    import copy

    plan = copy.deepcopy(prod_plan)
    resource = plan.named("minio-user-backup-datasets")
    for extra in (["s3:*"], ["s3:Delete*"], ["s3:GetBucketObjectLockConfiguration"]):
        policy = json.loads(prod_plan.named("minio-user-backup-datasets")["inputs"]["policy"])
        policy["Statement"][-1]["Action"] += extra
        resource["inputs"]["policy"] = json.dumps(policy)
        assert any(may(plan, "backup-datasets", a, "arn:aws:s3:::cephfs-backup/datasets/x") for a in LOCK_BREAKING)
