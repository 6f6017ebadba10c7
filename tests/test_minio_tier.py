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

import components.minio_tier as minio_tier
from components import minio_objects
from components.cluster import rke2_config
from components.minio_backup import backup_command
from components.minio_tier import drives_param, env_file, nas_params, stdin_text
from components.remote import script_text
from settings import load
from settings.erasure import ErasureLayout, default_parity, default_set_size, host_range
from settings.rules import minio_layout
from stacks.engine import SECRET
from tests.conftest import ROOT, evaluate, problems, run_plan, stack_doc
from tests.s3server import ACCESS_KEY, SECRET_KEY, serve_s3

# --- erasure arithmetic: the cases of ../shared/research/reliability-security.md §1.2 ------------


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
    layout = minio_layout(load(stack_doc("prod")))
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
    expected = env_file(settings.storage.minio, settings.nas, minio_layout(settings))
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
        mp.setattr(minio_tier.tls, "PrivateKey", secret("private_key_pem", "-----BEGIN PRIVATE KEY-----{name}"))
        mp.setattr(minio_tier.tls, "SelfSignedCert", plain("cert_pem", "-----BEGIN CERTIFICATE-----{name}"))
        mp.setattr(minio_tier.tls, "CertRequest", plain("cert_request_pem", "CSR {name}"))
        mp.setattr(minio_tier.tls, "LocallySignedCert", plain("cert_pem", "-----BEGIN CERTIFICATE-----{name}"))
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
        "minio-user-backup-writer",
        "minio-user-etcd-snapshot-writer",
        "minio-user-restore-reader",
    ]
    assert dynamic["minio-bucket-cephfs-backup"]["versioning"] is True
    assert dynamic["minio-bucket-cephfs-backup"]["noncurrentDays"] == 30
    for inputs in dynamic.values():
        assert inputs["accessKey"] == SECRET and inputs["secretKey"] == SECRET
    reader = json.loads(dynamic["minio-user-restore-reader"]["policy"])["Statement"][0]
    assert not any(a.startswith("admin:") or a.endswith("Put" + "Object") for a in reader["Action"])
    writer = json.loads(dynamic["minio-user-backup-writer"]["policy"])["Statement"][0]
    assert writer["Resource"] == ["arn:aws:s3:::cephfs-backup", "arn:aws:s3:::cephfs-backup/*"]


def test_backup_cronjob_runs_the_tested_command_on_cpu_nodes(prod_plan):
    job = prod_plan.named("cephfs-backup-datasets")["inputs"]
    spec = job["spec"]
    assert spec["concurrencyPolicy"] == "Forbid" and spec["startingDeadlineSeconds"] == 3600
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert spec["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 72000
    assert pod["nodeSelector"] == {"ml-platform.io/role": "cpu"}
    (container,) = pod["containers"]
    assert container["command"] == backup_command("/data", "datasets", "cephfs-backup", 10000, "hash")
    assert container["image"] == "docker.io/rclone/rclone:1.75.0"
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    assert data["persistentVolumeClaim"] == {"claimName": "shared-datasets", "readOnly": True}
    assert {"name": "data", "mountPath": "/data", "readOnly": True} in container["volumeMounts"]
    assert job["metadata"]["namespace"] == "llm-train"
    assert prod_plan.named("cephfs-backup-llm-train-rclone")["inputs"]["stringData"] == SECRET


def test_rclone_secret_configures_the_remote_from_the_environment(known_plan):
    secret = known_plan.named("cephfs-backup-llm-train-rclone")
    data = known_plan.revealed[secret["urn"]]["stringData"]
    assert data["RCLONE_CONFIG_NAS_TYPE"] == "s3" and data["RCLONE_CONFIG_NAS_PROVIDER"] == "Minio"
    assert data["RCLONE_CONFIG_NAS_ENDPOINT"] == "https://minio.dc.example.internal:9000"
    assert data["RCLONE_CONFIG_NAS_ACCESS_KEY_ID"] == "backup-writer"
    assert data["RCLONE_CONFIG_NAS_SECRET_ACCESS_KEY"] == "KNOWN-minio-backup-writer-secret-0123456789"
    assert known_plan.named("cephfs-backup-llm-train-rclone")["inputs"]["stringData"] == SECRET


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
    bucket = {**connection("h:9000"), "bucket": "b", "versioning": True, "noncurrentDays": 30, "expirePrefixes": {}}
    provider = minio_objects.BucketProvider()
    assert not provider.diff("b", bucket, dict(bucket)).changes
    changed = provider.diff("b", bucket, {**bucket, "noncurrentDays": 60})
    assert changed.changes and not changed.replaces
    assert provider.diff("b", bucket, {**bucket, "bucket": "c"}).replaces == ["bucket"]
    user = {**connection("h:9000"), "user": "u", "userSecret": "s", "policyName": "u", "policy": "{}"}
    users = minio_objects.UserProvider()
    assert not users.diff("u", user, dict(user)).changes
    assert users.diff("u", user, {**user, "policy": '{"Statement": []}'}).changes


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
    """Answers like MinIO for the calls the provider makes, and records them. Not a MinIO: MinIO is
    not installable here (no community binaries), and `rclone serve s3` has no admin API; the point
    is the request shapes MinIO's admin API (madmin v3) and S3 bucket configuration expect."""

    calls: list[tuple[str, str, dict, bytes]] = []

    def _handle(self) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        query = parse_qs(url.query, keep_blank_values=True)
        self.calls.append((self.command, url.path, query, body, self.headers.get("Authorization", "")))
        if self.command == "GET" and "versioning" in query:
            payload = b"<VersioningConfiguration></VersioningConfiguration>"
        else:
            payload = b""
        self.send_response(200)
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
    props = {
        **connection(endpoint),
        "bucket": "cephfs-backup",
        "versioning": True,
        "noncurrentDays": 30,
        "expirePrefixes": {"deleted/": 30},
    }
    minio_objects.ensure_bucket(minio_objects.s3_client(props), props)
    puts = {next(iter(c[2]), ""): c[3].decode() for c in calls if c[0] == "PUT"}
    assert "<Status>Enabled</Status>" in puts["versioning"]
    lifecycle = puts["lifecycle"]
    assert "<NoncurrentVersionExpiration><NoncurrentDays>30</NoncurrentDays>" in lifecycle
    assert "<Prefix>deleted/</Prefix>" in lifecycle and "<Expiration><Days>30</Days></Expiration>" in lifecycle


# --- the NAS host script against stubbed system tools -------------------------------------------

STUBS = {
    "blkid": """
dev=${!#}; f="$STUB_STATE/$(basename "$dev")"
[[ -s $f.sig ]] || exit 2
cat "$f.sig"
""",
    "lsblk": """
dev=${!#}; f="$STUB_STATE/$(basename "$dev")"
[[ -e $f.disk ]] || { echo "lsblk: $dev: not a block device" >&2; exit 32; }
case "$*" in
  *TYPE*) echo disk ;;
  *MOUNTPOINT*) [[ -e $f.mounts ]] && cat "$f.mounts"; true ;;
esac
""",
    # findmnt -n -o SOURCE --mountpoint DIR: the device whose mounts list DIR
    "findmnt": """
mnt=${!#}
for f in "$STUB_STATE"/*.mounts; do
  [[ -e $f ]] && grep -qxF -- "$mnt" "$f" && { echo "/dev/$(basename "$f" .mounts)"; exit 0; }
done
exit 1
""",
    "wipefs": 'dev=${!#}; echo "wipefs $*" >>"$STUB_STATE/log"; rm -f "$STUB_STATE/$(basename "$dev").sig"',
    "mkfs.xfs": """
dev=${!#}; name=$(basename "$dev"); echo "mkfs.xfs $*" >>"$STUB_STATE/log"
printf 'TYPE=xfs\\nUUID=uuid-%s\\nLABEL=%s\\n' "$name" "$3" >"$STUB_STATE/$name.sig"
""",
    "mount": """
echo "mount $*" >>"$STUB_STATE/log"; dev=${*: -2:1}; echo "${!#}" >>"$STUB_STATE/$(basename "$dev").mounts"
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
out=""; while (($#)); do case $1 in -o) out=$2; shift ;; --cacert) shift ;; -*) ;; *) url=$1 ;; esac; shift; done
if [[ -n $out ]]; then cp "$STUB_STATE/artifact" "$out"; else [[ $url == */minio/health/cluster ]]; fi
""",
    "id": '[[ -e "$STUB_STATE/user-$1" ]]',
    "useradd": 'echo "useradd $*" >>"$STUB_STATE/log"; touch "$STUB_STATE/user-${!#}"',
    "chown": 'echo "chown $*" >>"$STUB_STATE/log"',
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
        for name, body in STUBS.items():
            stub = bin_dir / name
            stub.write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + body)
            stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
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
        return {p: p.read_bytes() for p in self.root.rglob("*") if p.is_file()}


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
    assert fstab[0] == "UUID=uuid-nasdisk1 /mnt/minio/drive1 xfs defaults,noatime 0 2" and len(fstab) == 4
    log = nas.log()
    assert "mkfs.xfs -q -L mlminio-d01 /dev/nasdisk1" in log and "mkfs.xfs -q -L mlminio-d04 /dev/nasdisk4" in log
    unit = (nas.root / "etc/systemd/system/minio.service").read_text()
    assert "ExecStart=/usr/local/bin/minio server $MINIO_OPTS $MINIO_VOLUMES" in unit
    assert "EnvironmentFile=/etc/default/minio\n" in unit and "LimitNOFILE=1048576" in unit and "Restart=always" in unit
    assert "systemctl enable --now minio" in log
    assert log[-1].startswith("curl -fsS --cacert") and log[-1].endswith("/minio/health/cluster")


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
    assert [line.split()[0] for line in nas.log()] == ["curl"]


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
