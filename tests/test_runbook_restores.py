"""The runbook's restores from MinIO, rehearsed: the ```sh blocks of docs/runbook.md sections 9 (a CephFS
tree: a dataset and a checkpoint tree) and 10 (an etcd snapshot) are taken from the runbook as they
stand and run in one shell, with the real rclone against a real S3 endpoint over TLS (`rclone serve
s3` with a self-signed certificate, the runbook's CA handling included). Only the example's variables
on the blocks' first lines are replaced (each replacement must match exactly once, so a changed
runbook fails here). The backup being restored is made by the backup job's own script.

What is stubbed: `pulumi` (prints the outputs in the shape `pulumi stack output --json --show-secrets`
gives: plain values), `kubectl` (`exec` runs the command here with the pod's Secret, CA and volume
mapped, the CA from the ConfigMap the runbook makes from `minioCaCert`) and `scp`. `rclone serve s3`
accepts each restore identity's key but has no policies: what each identity may read is checked against
its MinIO policy in tests/minio/test_tier.py.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from components.minio import tier as minio_tier
from settings import load
from tests.conftest import ROOT, stack_doc
from tests.minio.s3server import serve_s3
from tests.minio.test_backup_rclone import Job

RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
STUBS = Path(__file__).parent / "stubs" / "restore"
BUCKET = "cephfs-backup"
TOKEN = "K10feedface::server:0123456789abcdef"


def shell_blocks(title: str) -> str:
    """The ```sh blocks of the runbook section `## N. <title>`, in order, as one script."""
    match = re.search(rf"^## \d+\. {re.escape(title)}\n(.*?)(?=^## |\Z)", RUNBOOK, re.M | re.S)
    assert match, f"docs/runbook.md has no section {title!r}"
    blocks = re.findall(r"^ *```sh\n(.*?)^ *```", match.group(1), re.M | re.S)
    return "\n".join(_dedent(b) for b in blocks)


def _dedent(block: str) -> str:
    lines = block.splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines) + "\n"


def substitute(script: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert script.count(old) == 1, f"the runbook block should contain {old!r} exactly once"
        script = script.replace(old, new)
    return script


def credentials() -> tuple[dict, dict[str, str]]:
    """minioRestoreCredentials as the stack holds it (one identity per source and etcd), and the
    keys `rclone serve s3` must accept."""
    readers = minio_tier.restore_users(load(stack_doc("prod")).storage.minio)
    keys = [f"restoresecret{i:02d}abcdefghij0123456789" for i in range(len(readers))]
    output = minio_tier.restore_credentials(readers, keys)
    return output, {c["accessKey"]: c["secretKey"] for c in output.values()}


class Workstation:
    def __init__(self, tmp_path: Path, outputs: dict, secret: list[str]) -> None:
        self.dir = tmp_path / "workstation"
        self.dir.mkdir()
        self.log = tmp_path / "calls.log"
        self.scp = tmp_path / "scp"
        self.scp.mkdir()
        (tmp_path / "outputs.json").write_text(json.dumps(outputs))
        (tmp_path / "secret-outputs.json").write_text(json.dumps(secret))
        self.env = {
            "PATH": f"{STUBS}:{Path(os.sys.executable).parent}:{os.environ['PATH']}",
            "HOME": str(tmp_path),
            "RCLONE_CONFIG": str(tmp_path / "no-rclone.conf"),
            "STUB_LOG": str(self.log),
            "STUB_STATE": str(tmp_path / "kubectl.json"),
            "STUB_OUTPUTS": str(tmp_path / "outputs.json"),
            "STUB_SECRET_OUTPUTS": str(tmp_path / "secret-outputs.json"),
            "STUB_SCP_DIR": str(self.scp),
        }

    def run(self, script: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            env={**self.env, **env},
            cwd=self.dir,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines()


# --- a tree with what a restore must bring back exactly ------------------------------------------


def make_tree(root: Path, kind: str) -> None:
    """A dataset (shared files, several owners, read-only modes) or a checkpoint tree (large shards,
    a `latest` link to the newest step, a private file)."""
    files: dict[str, tuple[bytes, int, int, int]] = {}
    if kind == "dataset":
        files["train/part-0000.jsonl"] = (b'{"text": "a"}\n' * 2000, 0o444, 1000, 2000)
        files["train/part-0001.jsonl"] = (b'{"text": "b"}\n' * 1500, 0o444, 1001, 2000)
        files["README with spaces.md"] = (b"# dataset\n", 0o664, 1000, 2000)
        links = {"current": "train", "train/first": "part-0000.jsonl"}
    else:
        files["step-100/model.safetensors"] = (os.urandom(300_000), 0o640, 1000, 1000)
        files["step-200/model.safetensors"] = (os.urandom(300_000), 0o640, 1000, 1000)
        files["step-200/optimizer.pt"] = (os.urandom(50_000), 0o600, 1000, 1000)
        links = {"latest": "step-200"}
    for i, (name, (data, mode, uid, gid)) in enumerate(sorted(files.items())):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.chown(path, uid, gid)
        path.chmod(mode)
        os.utime(path, ns=(1_700_000_000_000_000_000 + i, 1_700_000_000_123_456_789 + i * 1_000_000_000))
    for name, target in links.items():
        (root / name).symlink_to(target)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and link under root: content, mode, owner, group and modification time; link target."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_file():
            found[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns)
    return found


@pytest.mark.real_server
@pytest.mark.skipif(os.geteuid() != 0, reason="owners can only be set and restored as root")
@pytest.mark.parametrize(
    ("source", "tree", "kind", "namespace", "level"),
    [
        ("datasets", "projects/x", "dataset", "llm-train", "privileged"),
        ("checkpoints", "run-7", "checkpoint", "research", "baseline"),
        ("datasets", "projects/x", "dataset", "llm-train", "restricted"),
    ],
)
def test_section_9_restores_a_tree_byte_for_byte(tmp_path, source, tree, kind, namespace, level):
    outputs, users = credentials()
    with serve_s3(tmp_path, (BUCKET,), tls=True, users=users) as s3:
        pvc = tmp_path / "pvc"
        make_tree(pvc / tree, kind)
        original = snapshot(pvc / tree)
        backup = Job(s3, tmp_path, pvc, name=source).run()
        assert backup.rc == 0, backup.stderr
        # After the backup: one file lost, one replaced by an older copy, one changed later (newer).
        files = sorted(name for name, entry in original.items() if entry[0] == "file")
        lost, older, newer = (pvc / tree / files[0]), (pvc / tree / files[1]), (pvc / tree / files[2])
        lost.unlink()
        older.write_bytes(b"stale")
        os.utime(older, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
        newer.write_bytes(b"edited after the backup")
        os.utime(newer, ns=(1_900_000_000_000_000_000, 1_900_000_000_000_000_000))

        station = Workstation(
            tmp_path,
            {"minioRestoreCredentials": outputs, "minioCaCert": s3.ca.read_text()},
            ["minioRestoreCredentials"],
        )
        enforce = "pod-security.kubernetes.io/enforce"
        labels = {"secrets": {}, "pods": {}, "suspend": {}, "labels": {namespace: {enforce: level}}}
        Path(station.env["STUB_STATE"]).write_text(json.dumps(labels))
        script = substitute(
            shell_blocks("Restoring a CephFS tree from MinIO"),
            {
                "NS=llm-train": f"NS={namespace}",
                "SRC=datasets": f"SRC={source}",
                "TREE=projects/x": f"TREE={tree}",
                "ENDPOINT=https://minio.dc.example.internal:9000": f"ENDPOINT={s3.endpoint}",
            },
        )
        result = station.run(script, STUB_PVC=str(pvc))
        assert result.returncode == 0, result.stderr

    # Beside the live tree: exactly what was saved (content, links, modes, owners, times).
    assert snapshot(pvc / f"{tree}.restored") == original
    # In place with --update: the lost and the older file are back, the newer one is kept.
    live = snapshot(pvc / tree)
    assert live[files[0]] == original[files[0]] and live[files[1]] == original[files[1]]
    assert (pvc / tree / files[2]).read_bytes() == b"edited after the backup"
    calls = station.calls()
    secret = outputs[source]["secretKey"]
    assert not any(secret in call for call in calls), "a secret on a command line"
    # The backup's CronJob lives in ml-backup, whatever the source's namespace: paused there, resumed last.
    assert f"kubectl -n ml-backup patch cronjob {source} -p " + '{"spec":{"suspend":true}}' in calls
    assert calls[-1] == f"kubectl -n ml-backup patch cronjob {source} -p " + '{"spec":{"suspend":false}}'
    state = json.loads(Path(station.env["STUB_STATE"]).read_text())
    assert state["suspend"] == {f"ml-backup/{source}": False}
    assert state["labels"][namespace][enforce] == level, "the namespace's level is back as it was"
    lowered = [c for c in calls if c.startswith("kubectl label")]
    # Only a restricted namespace is lowered (to baseline, for the root restore pod), and set back.
    assert lowered == (
        [
            f"kubectl label namespace {namespace} --overwrite {enforce}=baseline",
            f"kubectl label namespace {namespace} --overwrite {enforce}=restricted",
        ]
        if level == "restricted"
        else []
    )
    assert state["pods"] == {} and state["secrets"] == {} and state["configmaps"] == {}


@pytest.mark.real_server
def test_section_10_gets_the_etcd_restore_identity_and_lists_the_snapshots(tmp_path):
    outputs, users = credentials()
    snapshot_name = "etcd-snapshot-cpu-01-1795600800"
    with serve_s3(tmp_path, ("etcd-snapshots",), tls=True, users=users) as s3:
        stored = s3.root / "etcd-snapshots" / "ml-prod" / snapshot_name
        stored.parent.mkdir()
        stored.write_bytes(b"etcd snapshot bytes")
        station = Workstation(
            tmp_path,
            {"minioRestoreCredentials": outputs, "rke2Token": TOKEN, "minioCaCert": s3.ca.read_text()},
            ["minioRestoreCredentials", "rke2Token"],
        )
        endpoint = s3.endpoint.removeprefix("https://")
        script = substitute(
            shell_blocks("Restoring etcd from a MinIO snapshot"),
            {"ENDPOINT=minio.dc.example.internal:9000": f"ENDPOINT={endpoint}"},
        )
        result = station.run(script)
        assert result.returncode == 0, result.stderr
    assert snapshot_name in result.stdout  # rclone listed it with the etcd-restore identity, over TLS
    config = yaml.safe_load((station.scp / "99-restore-s3.yaml").read_text())
    etcd = outputs["etcd"]
    assert config["etcd-s3-access-key"] == etcd["accessKey"] == "etcd-restore"
    assert config["etcd-s3-secret-key"] == etcd["secretKey"]  # the plain key, not a secret wrapper
    assert config["etcd-s3-endpoint"] == endpoint and config["etcd-s3-folder"] == "ml-prod"
    assert set(config) <= {
        "etcd-s3-endpoint",
        "etcd-s3-endpoint-ca",
        "etcd-s3-bucket",
        "etcd-s3-folder",
        "etcd-s3-bucket-lookup-type",
        "etcd-s3-region",
        "etcd-s3-access-key",
        "etcd-s3-secret-key",
    }
    assert (station.scp / "rke2-token").read_text().strip() == TOKEN
    assert (station.scp / "nas-ca.crt").read_text().startswith("-----BEGIN CERTIFICATE-----")
    for name in ("rke2-token", "99-restore-s3.yaml"):
        assert stat.S_IMODE((station.scp / name).stat().st_mode) == 0o600, name
        assert not (station.dir / name).exists(), f"{name} must not stay on the workstation"
    assert not (station.dir / "restore-credentials.json").exists()
    assert not any(etcd["secretKey"] in call or TOKEN in call for call in station.calls())


def test_the_stub_prints_what_the_cli_prints_for_a_secret_output(tmp_path):
    # Without --show-secrets a secret output is "[secret]": the runbook must ask for the plain values.
    station = Workstation(tmp_path, {"minioRestoreCredentials": {"etcd": {}}}, ["minioRestoreCredentials"])
    hidden = station.run("pulumi stack output --json minioRestoreCredentials")
    assert json.loads(hidden.stdout) == "[secret]"
    shown = station.run("pulumi stack output --json --show-secrets minioRestoreCredentials")
    assert json.loads(shown.stdout) == {"etcd": {}}
    assert "--json --show-secrets minioRestoreCredentials" in shell_blocks("Restoring etcd from a MinIO snapshot")
