"""What the tests that run real servers need, checked before they start one.

A missing prerequisite FAILS the test with one line naming it and how to get it, never a skip: a green
`make test` means the real Zabbix, PostgreSQL and rclone ran. Those tests carry the `real_server` marker;
`make test-fast` runs every other test, on any OS and as any user.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Optional

import pytest

FAST = "or run `make test-fast` (every test that needs no real server)"
# What the first run of tests/monitoring/start-zabbix-api.sh puts under .cache/zabbix70 (about 400 MiB), with room.
ZABBIX_DISK_MIB = 1024


def fail(what: str, problem: str) -> None:
    """Fail the running test with the one line `missing prerequisite for <what>: <problem>`."""
    pytest.fail(f"missing prerequisite for {what}: {problem}", pytrace=False)


def os_release() -> dict[str, str]:
    try:
        lines = Path("/etc/os-release").read_text().splitlines()
    except OSError:
        return {}
    return {k: v.strip('"') for k, _, v in (line.partition("=") for line in lines) if k}


def zabbix_packages_installed() -> bool:
    """PHP 8.2 and PostgreSQL 15 as start-zabbix-api.sh uses them (else it apt-get installs them, as root)."""
    return bool(shutil.which("php8.2")) and Path("/usr/lib/postgresql/15/bin/initdb").exists()


def zabbix_problem(cache: Path, with_server: bool) -> Optional[str]:
    """Why the real Zabbix 7.0 (frontend API on PHP 8.2 + PostgreSQL 15, and the server) cannot start here."""
    if platform.system() != "Linux":
        return f"Linux (Debian 12) is needed, this is {platform.system()}; {FAST}"
    release = os_release()
    installed = zabbix_packages_installed()
    if not installed and (release.get("ID"), release.get("VERSION_ID")) != ("debian", "12"):
        name = release.get("PRETTY_NAME", "an unknown system")
        return (
            f"Debian 12 (bookworm) packages php8.2 and postgresql-15 are needed, this is {name}; "
            f"run the tests in a `python:3.11-bookworm` container, {FAST}"
        )
    is_root = os.geteuid() == 0
    if with_server and not is_root:
        return f"root (the Zabbix server runs chrooted into a Debian 13 root); run `make test` as root, {FAST}"
    if not installed and not is_root:
        return (
            "root, to apt-get install php8.2-cli php8.2-pgsql php8.2-bcmath php8.2-gd php8.2-mbstring "
            f"php8.2-xml postgresql-15; install them or run `make test` as root, {FAST}"
        )
    if not (cache / "debs").is_dir():
        if not shutil.which("apt-get"):
            return "apt-get (the Zabbix 7.0 packages are downloaded from Debian 13 with apt); use Debian 12"
        if (
            os.environ.get("ZABBIX70_MIRROR") is None
            and not any(Path("/etc/apt").rglob("*.sources"))
            and not (Path("/etc/apt/sources.list").is_file() and "deb " in Path("/etc/apt/sources.list").read_text())
        ):
            return "a Debian package mirror in apt's sources (or ZABBIX70_MIRROR=<mirror URL>) for the first run"
        cache.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(cache).free // 2**20
        if free < ZABBIX_DISK_MIB:
            return f"{ZABBIX_DISK_MIB} MiB free under {cache} for the first run's packages, {free} MiB free"
    return None


def require_zabbix(cache: Path, with_server: bool = False) -> None:
    what = "the real Zabbix 7.0 API and server" if with_server else "the real Zabbix 7.0 API (PHP, PostgreSQL)"
    problem = zabbix_problem(cache, with_server)
    if problem:
        fail(what, problem)


def require_binary(name: str, how: str) -> str:
    """The path of a program from the dev requirements (on PATH or beside the venv's Python)."""
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not os.access(found, os.X_OK):
        fail(name, f"the `{name}` program; {how}")
    return found


CHROMIUM = "/usr/bin/chromium"


def require_debian_package(what: str, path: str, package: str) -> str:
    """`path` from Debian's `package`, installed with apt-get when it is missing and this runs as root."""
    if not Path(path).exists():
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            fail(what, f"Debian's `{package}` package ({path}): apt-get install {package}")
        import subprocess

        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
            proc = subprocess.run(command, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                fail(what, f"`{' '.join(command)}` failed: {proc.stderr.strip()[-300:]}")
    return path


def require_chromium() -> str:
    """Debian's chromium (installed with apt-get when missing and root) and the playwright package
    that drives it; playwright never downloads a browser here."""
    require_debian_package("the dashboard rendering", CHROMIUM, "chromium")
    try:
        import playwright  # noqa: F401
    except ImportError:
        fail("the dashboard rendering", "the `playwright` package: pip install -r requirements-dev.lock")
    return CHROMIUM
