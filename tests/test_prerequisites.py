"""The real-server tests say in one line what is missing and how to get it; `make test-fast` leaves out
exactly the tests that start a real server."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests import prerequisites
from tests.conftest import ROOT

DEBIAN12 = {"ID": "debian", "VERSION_ID": "12", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"}


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A Debian 12 Linux root machine without PHP 8.2 or PostgreSQL 15 yet; tests change one thing."""
    monkeypatch.setattr(prerequisites, "zabbix_packages_installed", lambda: False)
    monkeypatch.setattr(prerequisites.platform, "system", lambda: "Linux")
    monkeypatch.setattr(prerequisites, "os_release", lambda: dict(DEBIAN12))
    monkeypatch.setattr(prerequisites.os, "geteuid", lambda: 0)
    monkeypatch.setattr(prerequisites.shutil, "which", lambda name: f"/usr/bin/{name}" if name == "apt-get" else None)
    monkeypatch.setenv("ZABBIX70_MIRROR", "http://deb.example.internal/debian")
    cache = tmp_path / "cache"
    (cache / "debs").mkdir(parents=True)
    return cache


def one_line_failure(cache: Path, with_server: bool) -> str:
    with pytest.raises(pytest.fail.Exception) as failure:
        prerequisites.require_zabbix(cache, with_server)
    message = str(failure.value)
    assert "\n" not in message and message.startswith("missing prerequisite for the real Zabbix 7.0")
    return message


def test_a_debian_12_root_machine_has_what_zabbix_needs(machine):
    assert prerequisites.zabbix_problem(machine, with_server=True) is None


def test_another_os_is_named_with_the_container_to_use(machine, monkeypatch):
    monkeypatch.setattr(prerequisites, "os_release", lambda: {"ID": "ubuntu", "PRETTY_NAME": "Ubuntu 24.04 LTS"})
    message = one_line_failure(machine, with_server=False)
    assert "Debian 12 (bookworm) packages php8.2 and postgresql-15" in message and "Ubuntu 24.04 LTS" in message
    assert "python:3.11-bookworm" in message and "make test-fast" in message
    monkeypatch.setattr(prerequisites.platform, "system", lambda: "Darwin")
    assert "Linux (Debian 12) is needed, this is Darwin" in one_line_failure(machine, with_server=False)


def test_a_user_without_root_is_told_why_root_is_needed(machine, monkeypatch):
    monkeypatch.setattr(prerequisites.os, "geteuid", lambda: 1000)
    assert "root, to apt-get install php8.2-cli" in one_line_failure(machine, with_server=False)
    # With the packages installed the API runs as any user; the server still needs root (chroot).
    monkeypatch.setattr(prerequisites, "zabbix_packages_installed", lambda: True)
    assert prerequisites.zabbix_problem(machine, with_server=False) is None
    assert "root (the Zabbix server runs chrooted" in one_line_failure(machine, with_server=True)


def test_the_first_run_needs_a_mirror_and_disk(machine, monkeypatch):
    (machine / "debs").rmdir()
    monkeypatch.setattr(prerequisites, "ZABBIX_DISK_MIB", 2**40)
    assert "MiB free under" in one_line_failure(machine, with_server=False)
    monkeypatch.setattr(prerequisites.shutil, "which", lambda name: None)
    assert "apt-get (the Zabbix 7.0 packages are downloaded" in one_line_failure(machine, with_server=False)


def test_a_missing_program_is_one_line_with_the_fix():
    with pytest.raises(pytest.fail.Exception, match=r"^missing prerequisite for no-such-tool: the `no-such-tool`"):
        prerequisites.require_binary("no-such-tool", "install requirements-dev.txt")


STARTERS = {"zabbix70", "serve_s3"}


def starts_a_real_server(function: ast.AST) -> bool:
    return any(isinstance(node, ast.Call) and getattr(node.func, "id", None) in STARTERS for node in ast.walk(function))


def marked_real_server(decorators: list[ast.expr]) -> bool:
    return any(ast.unparse(d) == "pytest.mark.real_server" for d in decorators)


@pytest.mark.parametrize(
    "path", sorted(ROOT.glob("tests/**/test_*.py")), ids=lambda p: p.relative_to(ROOT / "tests").as_posix()
)
def test_every_test_that_starts_a_real_server_is_marked(path):
    tree = ast.parse(path.read_text())
    module_marked = any(
        isinstance(node, ast.Assign)
        and [ast.unparse(t) for t in node.targets] == ["pytestmark"]
        and "pytest.mark.real_server" in ast.unparse(node.value)
        for node in tree.body
    )
    unmarked = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and starts_a_real_server(node)
        and not module_marked
        and not marked_real_server(node.decorator_list)
    ]
    assert unmarked == [], f"{path.name}: mark them `real_server` (pytestmark, or a decorator on the test)"
