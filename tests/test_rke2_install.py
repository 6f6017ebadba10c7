"""rke2-install.sh against stub systemctl/curl/kubectl in a scratch root (tests/stubs/host)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from components.cluster import rke2_params
from components.remote import script_text
from settings import load
from tests.conftest import stack_doc

STUBS = Path(__file__).parent / "stubs"
TOKEN = "K10-secret-join-token"


class Host:
    """A scratch root with stubbed systemd, installer download and kubectl."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path / "root"
        self.fake = tmp_path / "fake"
        self.root.mkdir()
        self.fake.mkdir()
        self.state = tmp_path / "kubectl.json"
        self.state.write_text(json.dumps({"nodes": {}}))

    def register(self, name: str) -> None:
        self.state.write_text(
            json.dumps({"nodes": {name: {"labels": {}, "annotations": {}, "taints": [], "unschedulable": False}}})
        )

    def run(self, params: dict[str, str], token: str = TOKEN, timeout: str = "5") -> subprocess.CompletedProcess:
        env = {
            "PATH": f"{STUBS / 'host'}:{os.environ['PATH']}",
            "HOST_ROOT": str(self.root),
            "FAKE_DIR": str(self.fake),
            "KUBECTL": str(STUBS / "kubectl"),
            "FAKE_STATE": str(self.state),
            "FAKE_LOG": str(self.fake / "kubectl.log"),
            **params,
            "JOIN_TIMEOUT": timeout,
        }
        program = script_text("rke2-install.sh")
        return subprocess.run(
            ["bash", "-c", program, "rke2-install.sh"], input=token, env=env, capture_output=True, text=True
        )

    def calls(self) -> list[str]:
        log = self.fake / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def file(self, path: str) -> Path:
        return self.root / path.lstrip("/")


def lab_params(node: str, **changes) -> dict[str, str]:
    raw = stack_doc("lab")
    raw["cluster"].update(changes)
    settings = load(raw)
    target = next(n for n in settings.nodes if n.name == node)
    return rke2_params(target, target is settings.init_server, settings.cluster, settings.network)


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


def test_agent_joins_once_and_a_second_run_changes_nothing(host):
    host.register("lab-gpu")
    (host.fake / "ping-ok").touch()
    first = host.run(lab_params("lab-gpu"))
    assert first.returncode == 0, first.stderr
    token_file = host.file("/etc/rancher/rke2/join-token")
    assert token_file.read_text() == TOKEN + "\n"
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    config = yaml.safe_load(host.file("/etc/rancher/rke2/config.yaml").read_text())
    assert config["server"] == "https://192.168.50.11:9345" and config["token-file"] == "/etc/rancher/rke2/join-token"
    calls = host.calls()
    assert "installer v1.35.7+rke2r1 agent tar " in calls
    # The registration address answered before the agent started.
    ping = next(i for i, c in enumerate(calls) if c.endswith("/ping"))
    assert ping < calls.index("systemctl start rke2-agent.service")
    assert TOKEN not in first.stdout + first.stderr

    second = host.run(lab_params("lab-gpu"))
    assert second.returncode == 0, second.stderr
    assert "changed:" not in second.stdout
    new_calls = host.calls()[len(calls) :]
    assert not any(c.startswith("installer") or "restart" in c or " start " in c for c in new_calls)


def test_changes_restart_and_version_bumps_reinstall(host):
    host.register("lab-server")
    (host.fake / "ping-ok").touch()
    assert host.run(lab_params("lab-server")).returncode == 0
    before = len(host.calls())

    rotated = host.run(lab_params("lab-server"), token="K10-rotated")
    assert rotated.returncode == 0, rotated.stderr
    assert "changed: restarted rke2-server.service" in rotated.stdout
    assert host.file("/etc/rancher/rke2/join-token").read_text() == "K10-rotated\n"

    bumped = host.run(lab_params("lab-server", rke2Version="v1.35.8+rke2r1"), token="K10-rotated")
    assert bumped.returncode == 0, bumped.stderr
    assert "changed: installed RKE2 v1.35.8+rke2r1 (was: v1.35.7+rke2r1)" in bumped.stdout
    assert "installer v1.35.8+rke2r1 server tar " in host.calls()[before:]


def test_init_server_starts_without_waiting_and_reports_when_the_endpoint_answers(host):
    host.register("lab-server")
    params = lab_params("lab-server")
    config = yaml.safe_load(params["RKE2_CONFIG"])
    assert "server" not in config  # the init server starts the cluster
    result = host.run(params)
    # It started, but the registration address never answered: it does not report done.
    assert "systemctl start rke2-server.service" in host.calls()
    assert result.returncode != 0
    assert "the registration address 192.168.50.11:9345 to answer" in result.stderr


def test_joiner_does_not_start_while_the_registration_address_is_down(host):
    result = host.run(lab_params("lab-cpu-1"))
    assert result.returncode != 0
    assert "timed out after 5s waiting for the registration address 192.168.50.11:9345" in result.stderr
    assert not any(" start " in c for c in host.calls())


def test_no_token_no_install(host):
    result = host.run(lab_params("lab-gpu"), token="")
    assert result.returncode != 0 and "no join token on standard input" in result.stderr
    assert host.calls() == []
