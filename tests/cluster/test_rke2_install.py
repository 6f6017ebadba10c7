"""rke2-install.sh against stub systemctl/curl/kubectl in a scratch root (tests/stubs/host)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from components.cluster.config import rke2_params
from components.hosts.remote import script_text
from settings import load
from tests.cluster.test_bootstrap import params_of
from tests.conftest import evaluate, stack_doc

STUBS = Path(__file__).parents[1] / "stubs"
TOKEN = "K10-secret-join-token"
AGENT_TOKEN = "secret-agent-token"


class Host:
    """A scratch root with stubbed systemd, journal, installer download and kubectl."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path / "root"
        self.fake = tmp_path / "fake"
        self.root.mkdir()
        self.fake.mkdir()
        self.state = tmp_path / "kubectl.json"
        self.state.write_text(json.dumps({"nodes": {}}))

    def register(self, name: str, **status) -> None:
        """The Node object exists (status: ready=bool, version=kubelet version)."""
        node = {"labels": {}, "annotations": {}, "taints": [], "unschedulable": False, **status}
        self.state.write_text(json.dumps({"nodes": {name: node}}))

    def run(
        self,
        params: dict[str, str],
        token: str = TOKEN,
        timeout: str = "5",
        script: str = "rke2-install.sh",
        agent_token: str = AGENT_TOKEN,
    ) -> subprocess.CompletedProcess:
        """Run `script` as its step does; stdin as the step sends it: the join token, and on servers
        the agent token on a second line."""
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
        program = script_text(script)
        stdin = token + "\n" + (agent_token + "\n" if params.get("RKE2_TYPE") == "server" else "")
        return subprocess.run(["bash", "-c", program, script], input=stdin, env=env, capture_output=True, text=True)

    def calls(self) -> list[str]:
        log = self.fake / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def file(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def config(self) -> dict:
        return yaml.safe_load(self.file("/etc/rancher/rke2/config.yaml").read_text())

    def runs_rke2_as(self, name: str, version: str = "v1.35.7+rke2r1") -> None:
        """A host where RKE2 `version` is installed and configured as node `name`."""
        bin_dir = self.file("/usr/local/bin")
        bin_dir.mkdir(parents=True, exist_ok=True)
        (bin_dir / "rke2").write_text(f'#!/bin/sh\necho "rke2 version {version} (0000000)"\n')
        (bin_dir / "rke2-uninstall.sh").write_text(
            f'#!/bin/sh\necho "rke2-uninstall" >>"{self.fake}/calls.log"\n'
            f"rm -rf '{self.root}/etc/rancher/rke2' '{self.root}/var/lib/rancher/rke2' '{bin_dir}/rke2'\n"
        )
        for tool in ("rke2", "rke2-uninstall.sh"):
            (bin_dir / tool).chmod(0o755)
        self.file("/etc/rancher/rke2").mkdir(parents=True, exist_ok=True)
        self.file("/etc/rancher/rke2/config.yaml").write_text(f"node-name: {name}\ntoken-file: x\n")


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
    config = host.config()
    assert config["server"] == "https://192.168.50.11:9345" and config["token-file"] == "/etc/rancher/rke2/join-token"
    calls = host.calls()
    assert "installer v1.35.7+rke2r1 agent tar " in calls
    # The registration address answered before the agent started, and the start does not block.
    ping = next(i for i, c in enumerate(calls) if c.endswith("/ping"))
    assert ping < calls.index("systemctl start --no-block rke2-agent.service")
    assert TOKEN not in first.stdout + first.stderr

    second = host.run(lab_params("lab-gpu"))
    assert second.returncode == 0, second.stderr
    assert "changed:" not in second.stdout
    new_calls = host.calls()[len(calls) :]
    assert not any(c.startswith("installer") or "restart" in c or " start " in c for c in new_calls)


def test_changes_restart_and_a_version_bump_leaves_the_binary_to_the_plans(host):
    host.register("lab-server")
    (host.fake / "ping-ok").touch()
    assert host.run(lab_params("lab-server")).returncode == 0
    before = len(host.calls())

    rotated = host.run(lab_params("lab-server"), token="K10-rotated")
    assert rotated.returncode == 0, rotated.stderr
    assert "changed: restarted rke2-server.service" in rotated.stdout
    assert "systemctl restart --no-block rke2-server.service" in host.calls()[before:]
    assert host.file("/etc/rancher/rke2/join-token").read_text() == "K10-rotated\n"

    # A version bump re-runs the step: no snapshot, no installer, no restart (the Plans upgrade it, drained).
    before = len(host.calls())
    bumped = host.run(lab_params("lab-server", rke2Version="v1.35.8+rke2r1"), token="K10-rotated")
    assert bumped.returncode == 0, bumped.stderr
    assert "changed:" not in bumped.stdout
    assert "RKE2 v1.35.7+rke2r1 is installed and kept: the upgrade Plans change releases" in bumped.stderr
    assert not any(c.startswith(("installer", "rke2 ", "systemctl restart")) for c in host.calls()[before:])


def test_a_fresh_host_installs_the_wanted_release(host):
    host.register("lab-gpu", version="v1.36.3+rke2r1")
    (host.fake / "ping-ok").touch()
    result = host.run(lab_params("lab-gpu", rke2Version="v1.36.3+rke2r1"))
    assert result.returncode == 0, result.stderr
    assert "installer v1.36.3+rke2r1 agent tar " in host.calls()
    assert "changed: installed RKE2 v1.36.3+rke2r1" in result.stdout


def test_a_config_change_on_an_older_node_restarts_it_at_its_release(host):
    # The node runs v1.35.7 while settings already ask for v1.36.3 (its Plan has not reached it yet).
    host.runs_rke2_as("lab-gpu", version="v1.35.7+rke2r1")
    host.register("lab-gpu", version="v1.35.7+rke2r1")
    (host.fake / "ping-ok").touch()
    result = host.run(lab_params("lab-gpu", rke2Version="v1.36.3+rke2r1"))
    assert result.returncode == 0, result.stderr
    assert host.config()["node-name"] == "lab-gpu" and "server" in host.config()  # the new config.yaml
    calls = host.calls()
    assert not any(c.startswith("installer") for c in calls)  # not reinstalled: no upgrade without a drain
    assert "RKE2 v1.35.7+rke2r1 agent running on lab-gpu" in result.stdout


def _on_restart_node_becomes(host: Host, **status) -> None:
    """At the next start or restart of RKE2, the Node's status changes (the kubelet came back)."""
    node = {"labels": {}, "annotations": {}, "taints": [], "unschedulable": False, **status}
    state = json.dumps({"nodes": {"lab-gpu": node}})
    (host.fake / "on-start").write_text(f"cat >'{host.state}' <<'JSON'\n{state}\nJSON\n")


def test_a_restart_of_a_ready_node_waits_until_it_is_ready_again(host):
    host.register("lab-gpu")
    (host.fake / "ping-ok").touch()
    assert host.run(lab_params("lab-gpu")).returncode == 0
    # After the restart (new token) the Node never becomes Ready again.
    _on_restart_node_becomes(host, ready=False, version="v1.35.7+rke2r1")
    stuck = host.run(lab_params("lab-gpu"), token="K10-rotated")
    assert stuck.returncode != 0
    assert "waiting for node lab-gpu to be Ready" in stuck.stderr
    assert "Node password rejected" in stuck.stderr  # the journal excerpt explains it

    # Ready again (at whatever release an upgrade Plan may have put there meanwhile): done.
    host.register("lab-gpu", ready=True, version="v1.35.8+rke2r1")
    done = host.run(lab_params("lab-gpu"), token="K10-rotated")
    assert done.returncode == 0, done.stderr
    assert "changed:" not in done.stdout


def test_a_unit_that_never_becomes_active_fails_within_the_timeout_with_its_journal(host):
    host.register("lab-gpu")
    (host.fake / "ping-ok").touch()
    (host.fake / "never-active").touch()
    started = time.monotonic()
    result = host.run(lab_params("lab-gpu"), timeout="6")
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert elapsed < 6 + 10, elapsed  # one poll interval (5 s) past the deadline at most, never unbounded
    assert "timed out after 6s waiting for rke2-agent.service to be active" in result.stderr
    assert "last lines of the rke2-agent.service journal:" in result.stderr
    assert "Node password rejected" in result.stderr
    assert "journalctl -u rke2-agent.service -n 40 --no-pager" in host.calls()
    # systemctl itself never blocked on the Type=notify unit.
    assert "systemctl start --no-block rke2-agent.service" in host.calls()


def test_init_server_starts_without_waiting_and_reports_when_the_endpoint_answers(host):
    host.register("lab-server")
    params = lab_params("lab-server")
    assert "server" not in yaml.safe_load(params["RKE2_CONFIG"])  # the init server starts the cluster
    result = host.run(params)
    assert "server" not in host.config()  # nothing answered: it initialises
    # It started, but the registration address never answered: it does not report done.
    assert "systemctl start --no-block rke2-server.service" in host.calls()
    assert result.returncode != 0
    assert "the registration address 192.168.50.11:9345 to answer" in result.stderr


def _plan_params(plan, step: str) -> dict[str, str]:
    return params_of(plan.named(step)["inputs"]["create"])


def test_a_rebuilt_init_server_joins_the_running_cluster(host, lab_plan):
    # `pulumi up --replace lab-server-rke2` (runbook section 12): the uninstall removed the etcd data; the
    # cluster still answers at the registration address (the other servers). The init server's own
    # plan step must join it, never initialise a second cluster with the same token and VIP.
    params = _plan_params(lab_plan, "lab-server-rke2")
    assert "server" not in yaml.safe_load(params["RKE2_CONFIG"])
    host.register("lab-server")
    (host.fake / "ping-ok").touch()
    result = host.run(params)
    assert result.returncode == 0, result.stderr
    assert host.config()["server"] == "https://192.168.50.11:9345"
    assert "joining it, not initialising a new one" in result.stderr
    # Once joined it stays joined: a re-run changes nothing (no restart).
    again = host.run(params)
    assert again.returncode == 0 and "changed:" not in again.stdout, again.stdout


def test_an_init_server_with_its_etcd_data_keeps_its_config(host, lab_plan):
    # The init server of a running cluster: the address answers (itself), but it holds etcd data.
    params = _plan_params(lab_plan, "lab-server-rke2")
    host.file("/var/lib/rancher/rke2/server/db/etcd").mkdir(parents=True)
    host.register("lab-server")
    (host.fake / "ping-ok").touch()
    assert host.run(params).returncode == 0
    assert "server" not in host.config()


def test_joiner_does_not_start_while_the_registration_address_is_down(host):
    result = host.run(lab_params("lab-cpu-1"))
    assert result.returncode != 0
    assert "timed out after 5s waiting for the registration address 192.168.50.11:9345" in result.stderr
    assert not any(" start " in c for c in host.calls())


def test_no_token_no_install(host):
    result = host.run(lab_params("lab-gpu"), token="")
    assert result.returncode != 0 and "no join token on standard input" in result.stderr
    assert host.calls() == []


def test_a_host_running_another_node_is_refused_unless_renamed(host):
    host.runs_rke2_as("lab-cpu-1")
    host.register("lab-gpu")
    (host.fake / "ping-ok").touch()
    refused = host.run(lab_params("lab-gpu"))
    assert refused.returncode != 0
    assert "this host runs RKE2 as node 'lab-cpu-1', not 'lab-gpu'; changed nothing" in refused.stderr
    assert "renamedFrom: lab-cpu-1" in refused.stderr
    assert host.config()["node-name"] == "lab-cpu-1" and host.calls() == []

    renamed = host.run({**lab_params("lab-gpu"), "RENAMED_FROM": "lab-cpu-1"})
    assert renamed.returncode == 0, renamed.stderr
    assert host.config()["node-name"] == "lab-gpu"


def test_a_config_change_on_a_node_the_plans_already_upgraded_keeps_its_release(host):
    # Mid-upgrade: settings still name the running release for fresh hosts (deployedRke2Version).
    host.runs_rke2_as("lab-gpu", version="v1.36.3+rke2r1")
    host.register("lab-gpu", version="v1.36.3+rke2r1")
    (host.fake / "ping-ok").touch()
    result = host.run(lab_params("lab-gpu", rke2Version="v1.36.3+rke2r1", deployedRke2Version="v1.35.7+rke2r1"))
    assert result.returncode == 0, result.stderr
    assert not any(c.startswith("installer") for c in host.calls())
    assert "RKE2 v1.36.3+rke2r1 agent running on lab-gpu" in result.stdout


@pytest.mark.parametrize(
    ("installed", "wanted", "why"),
    [("v1.35.7+rke2r1", "v1.35.6+rke2r1", "downgrade"), ("v1.33.5+rke2r1", "v1.35.7+rke2r1", "skips a minor")],
)
def test_downgrades_and_minor_skips_are_refused_before_the_plans_change(host, installed, wanted, why):
    host.runs_rke2_as("lab-server", version=installed)
    result = host.run({"RKE2_VERSION": wanted}, script="pre-upgrade.sh")
    assert result.returncode != 0 and why in result.stderr
    assert "no upgrade Plan was created" in result.stderr
    assert host.calls() == []  # no snapshot either


def uninstall(host: Host, node: str) -> subprocess.CompletedProcess:
    return host.run({"NODE_NAME": node}, script="rke2-uninstall.sh")


def test_uninstall_refuses_a_host_that_runs_another_node(host):
    # After a rename (cpu-30 -> cpu-99, same address), the old name's delete reaches the live host.
    host.runs_rke2_as("lab-cpu-9")
    result = uninstall(host, "lab-cpu-1")
    assert result.returncode == 0, result.stderr
    assert "refused: this host runs RKE2 as node 'lab-cpu-9', not 'lab-cpu-1'; left RKE2 alone" in result.stdout
    assert "rke2-uninstall" not in host.calls()


def test_uninstall_keeps_the_etcd_snapshots(host):
    host.runs_rke2_as("lab-server")
    snapshots = host.file("/var/lib/rancher/rke2/server/db/snapshots")
    snapshots.mkdir(parents=True)
    (snapshots / "etcd-snapshot-lab-server-1763900000").write_text("etcd data")
    result = uninstall(host, "lab-server")
    assert result.returncode == 0, result.stderr
    assert "rke2-uninstall" in host.calls()
    kept = list(host.file("/var/backups/rke2-etcd-snapshots").glob("lab-server-*/etcd-snapshot-lab-server-1763900000"))
    assert len(kept) == 1 and kept[0].read_text() == "etcd data"
    assert "changed: kept the etcd snapshots in /var/backups/rke2-etcd-snapshots/lab-server-" in result.stdout


def test_a_rename_leaves_the_live_hosts_rke2_alone(host, lab_plan):
    # lab-cpu-2 becomes lab-cpu-9 on the same host. `up` creates the new name's steps first, then
    # runs the old name's recorded deletes against the same address.
    def rename(raw):
        node = next(n for n in raw["nodes"] if n["name"] == "lab-cpu-2")
        node.update(name="lab-cpu-9", renamedFrom="lab-cpu-2")

    renamed = evaluate("lab", rename)
    new_step = _plan_params(renamed, "lab-cpu-9-rke2")
    assert new_step["RENAMED_FROM"] == "lab-cpu-2"
    host.runs_rke2_as("lab-cpu-2")
    host.register("lab-cpu-9")
    (host.fake / "ping-ok").touch()
    assert host.run(new_step).returncode == 0
    assert host.config()["node-name"] == "lab-cpu-9"

    old_delete = params_of(lab_plan.named("lab-cpu-2-rke2")["inputs"]["delete"])
    result = host.run(old_delete, script="rke2-uninstall.sh")
    assert result.returncode == 0, result.stderr
    assert "refused: this host runs RKE2 as node 'lab-cpu-9', not 'lab-cpu-2'" in result.stdout
    assert "rke2-uninstall" not in host.calls()
    assert host.file("/usr/local/bin/rke2-uninstall.sh").exists()


def _prod_server_params(name: str) -> dict[str, str]:
    return _plan_params(evaluate("prod"), f"{name}-rke2")


@pytest.mark.parametrize(("server", "earlier"), [("cpu-02", []), ("cpu-03", ["10.20.1.12"])])
def test_further_servers_keep_their_join_order_on_the_hosts(server, earlier):
    # Every joining server's step starts once the init server runs (no chain through the others), so
    # the order lives in JOIN_AFTER: the servers before it, which it waits for on a fresh join.
    params = _prod_server_params(server)
    assert params.get("JOIN_AFTER", "").split() == [f"{a}:6443" for a in earlier]


def test_a_joining_server_waits_for_the_server_before_it(tmp_path):
    params = {**_prod_server_params("cpu-03"), "NODE_NAME": "cpu-03"}
    host = Host(tmp_path)
    host.register("cpu-03")
    (host.fake / "ping-ok").touch()
    (host.fake / "server-ca.crt").write_text("ca")
    token = f"K10{hashlib.sha256(b'ca').hexdigest()}::server:secret"
    # cpu-02 has not joined yet: cpu-03 does not start, and says whom it waits for.
    waiting = host.run(params, token=token, timeout="3")
    assert waiting.returncode != 0
    assert "the server before this one (10.20.1.12:6443) to answer: servers join one at a time" in waiting.stderr
    assert not any(" start " in c for c in host.calls())
    # Once cpu-02's API answers (even 401 to an anonymous request), cpu-03 starts its join.
    (host.fake / "api-10.20.1.12").touch()
    joined = host.run(params, token=token, timeout="3")
    assert joined.returncode == 0, joined.stderr
    assert "systemctl start --no-block rke2-server.service" in host.calls()


def test_a_server_with_etcd_data_does_not_wait_for_the_others(tmp_path):
    # A running server (an update of its step) never waits: the order matters only for a fresh join.
    params = {**_prod_server_params("cpu-03"), "NODE_NAME": "cpu-03"}
    host = Host(tmp_path)
    host.file("/var/lib/rancher/rke2/server/db/etcd").mkdir(parents=True)
    host.register("cpu-03")
    (host.fake / "ping-ok").touch()
    (host.fake / "server-ca.crt").write_text("ca")
    result = host.run(params, token=f"K10{hashlib.sha256(b'ca').hexdigest()}::server:secret", timeout="3")
    assert result.returncode == 0, result.stderr
    assert not any("readyz" in c for c in host.calls())
