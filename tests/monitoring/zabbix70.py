"""A real Zabbix 7.0 on loopback for the tests: `tests/monitoring/start-zabbix-api.sh`.

The script runs the 7.0 frontend API (PHP 8.2 + PostgreSQL 15 from Debian 12, the Zabbix 7.0
frontend and schema unpacked from Debian 13's packages) and, when asked, the real 7.0 server
(`zabbix_server` with its trixie dependency closure, chrooted: Debian 12's glibc is too old for it).
The first run installs and caches what it needs under `.cache/zabbix70` (outside git's view); later
runs start in seconds. A missing prerequisite (tests/prerequisites.py: Debian 12, root, a package mirror,
disk) or a start that fails FAILS the test with one line naming the cause: these tests never skip.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from tests.prerequisites import require_zabbix

ROOT = Path(__file__).resolve().parents[2]
START = ROOT / "tests" / "monitoring" / "start-zabbix-api.sh"
STATE = Path(os.environ.get("ZABBIX70_TEST_DIR", ROOT / ".cache" / "zabbix70"))
_HEADER = b"ZBXD\x01"  # Zabbix protocol header, flags: plain JSON (no compression, no large packet)


@dataclass(frozen=True)
class Zabbix70:
    url: str  # the frontend's JSON-RPC API
    server_port: Optional[int]  # the server's trapper on 127.0.0.1, when the server runs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_server_port() -> int:
    """A free port for the server's trapper: zabbix_server's ListenPort must be 1024-32767, below the
    kernel's ephemeral range that `free_port` draws from."""
    for _ in range(100):
        port = random.randint(20000, 32767)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32767 on 127.0.0.1")


@contextmanager
def zabbix70(name: str, with_server: bool = False) -> Iterator[Zabbix70]:
    """A fresh instance (new database) under STATE/name; every instance shares STATE/cache."""
    directory = STATE / name
    env = {**os.environ, "ZABBIX70_CACHE": str(STATE / "cache")}
    server_port = free_server_port() if with_server else None
    if server_port:
        env["ZABBIX70_SERVER_PORT"] = str(server_port)
    what = "API and server" if with_server else "API"
    require_zabbix(STATE / "cache", with_server)
    proc = subprocess.run(
        [str(START), "start", str(directory), str(free_port())], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        errors = [line.split("ERROR: ", 1)[1] for line in proc.stderr.splitlines() if "ERROR: " in line]
        cause = errors[-1] if errors else f"exit {proc.returncode}"
        pytest.fail(
            f"could not start the real Zabbix 7.0 {what} (tests/monitoring/start-zabbix-api.sh): {cause} "
            f"(log: {directory / 'log' / 'setup.log'})",
            pytrace=False,
        )
    try:
        yield Zabbix70(proc.stdout.strip(), server_port)
    finally:
        subprocess.run([str(START), "stop", str(directory)], capture_output=True, text=True, check=False, env=env)


def trapper_request(port: int, request: dict, timeout: float = 60) -> dict:
    """One request to the server's trapper in the Zabbix protocol, as the frontend's CZabbixServer
    sends it: header, 4-byte little-endian length, 4 reserved bytes, JSON."""
    body = json.dumps(request).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(_HEADER + struct.pack("<II", len(body), 0) + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    reply = b"".join(chunks)
    assert reply[:5] == _HEADER, f"not a Zabbix protocol reply: {reply[:40]!r}"
    (length,) = struct.unpack("<I", reply[5:9])
    return json.loads(reply[13 : 13 + length])


def exposition(labels: str, values: dict[str, object]) -> list[str]:
    """Prometheus text lines `metric{labels} value`, as the exporters our HTTP-agent items scrape print them."""
    return [f"{metric}{{{labels}}} {value}" for metric, value in values.items()]
