"""The runbook's certificate rotation (section 18) and etcd restore (section 17), rehearsed: the shell
blocks are taken from docs/runbook.md as they stand and run against stub hosts (tests/stubs: ssh
into a fake root per host, sudo confined to it, rke2, systemctl, kubectl, pulumi); the tests assert
the order of what ran and its effects on the hosts."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from stacks import diff as diffs
from tests.conftest import ROOT, evaluate

RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
STUBS = Path(__file__).parent / "stubs"
SERVERS = ["cpu-01", "cpu-02", "cpu-03"]  # prod: the init server first, in join order


def shell_blocks(title: str) -> list[str]:
    """The ```sh blocks of the runbook section `## N. <title>`, in order."""
    match = re.search(rf"^## \d+\. {re.escape(title)}\n(.*?)(?=^## |\Z)", RUNBOOK, re.M | re.S)
    assert match, f"docs/runbook.md has no section {title!r}"
    return re.findall(r"^```sh\n(.*?)^```", match.group(1), re.M | re.S)


class Site:
    """A workstation and three stub servers, every call logged in one file, in order."""

    def __init__(self, tmp_path: Path):
        self.home = tmp_path / "home"
        (self.home / ".kube").mkdir(parents=True)
        self.hosts = tmp_path / "hosts"
        self.log = tmp_path / "calls.log"
        self.state = tmp_path / "kubectl.json"
        nodes = {name: {"labels": {}, "annotations": {}, "taints": [], "unschedulable": False} for name in SERVERS}
        self.state.write_text(json.dumps({"nodes": nodes}))
        for name in SERVERS:
            self.file(name, "/etc/rancher/rke2").mkdir(parents=True)
            self.file(name, "/etc/rancher/rke2/config.yaml").write_text(f"node-name: {name}\ntoken-file: x\n")
            self.file(name, "/var/lib/rancher/rke2/server/db/etcd").mkdir(parents=True)
            (self.hosts / name / "fake" / "systemd").mkdir(parents=True)
            self.set_running(name)

    def file(self, host: str, path: str) -> Path:
        return self.hosts / host / "root" / path.lstrip("/")

    def set_running(self, host: str) -> None:
        (self.hosts / host / "fake" / "systemd" / "active-rke2-server.service").touch()

    def running(self, host: str) -> bool:
        return (self.hosts / host / "fake" / "systemd" / "active-rke2-server.service").exists()

    def run(self, block: str) -> subprocess.CompletedProcess:
        env = {
            "PATH": f"{STUBS / 'workstation'}:{STUBS}:{os.environ['PATH']}",
            "HOME": str(self.home),
            "STUB_HOSTS": str(self.hosts),
            "STUB_LOG": str(self.log),
            "FAKE_LOG": str(self.log),  # kubectl's calls in the same order
            "FAKE_STATE": str(self.state),
            "STUB_URNS": "/dev/null",
        }
        return subprocess.run(["bash", "-euo", "pipefail", "-c", block], env=env, capture_output=True, text=True)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines()


def position(calls: list[str], line: str) -> int:
    assert line in calls, f"{line!r} did not run; ran:\n" + "\n".join(calls)
    return calls.index(line)


@pytest.fixture
def site(tmp_path):
    return Site(tmp_path)


def test_certificate_rotation_runs_per_server_in_order_then_rereads_the_kubeconfig(site):
    (block,) = shell_blocks("Rotating the cluster certificates")
    result = site.run(block)
    assert result.returncode == 0, result.stderr
    calls = site.calls()
    previous_ready = -1
    for host in SERVERS:
        stop = position(calls, f"{host}: sudo systemctl stop rke2-server")
        new_certs = position(calls, f"{host}: sudo rke2 certificate rotate")
        start = position(calls, f"{host}: sudo systemctl start rke2-server")
        ready = position(calls, f"wait --for=condition=Ready node/{host} --timeout=900s")
        # One server at a time: this one is stopped only once the previous one is Ready again.
        assert previous_ready < stop < new_certs < start < ready, host
        previous_ready = ready
        assert site.file(host, "/var/lib/rancher/rke2/server/tls/rotations").read_text() == "1\n"
        assert site.running(host)
    # Then the kubeconfig is read again through the settings counter, after every server.
    pulumi = [c for c in calls if c.startswith("pulumi ")]
    assert calls.index(pulumi[0]) > previous_ready
    assert "pulumi config set --path ml-platform:cluster.certificateRotation 1" in pulumi
    assert "pulumi up" in pulumi
    assert not any("--replace" in c for c in pulumi)  # the counter, not a replace of anything
    kubeconfig = site.home / ".kube" / "ml-prod"
    assert kubeconfig.read_text().startswith("apiVersion: v1") and oct(kubeconfig.stat().st_mode & 0o777) == "0o600"


def test_the_rotation_counter_replaces_only_the_kubeconfig_read(prod_plan):
    def bump(raw):
        raw["cluster"]["certificateRotation"] = 1

    bumped = evaluate("prod", bump)
    result = diffs.compare(json.loads(prod_plan.to_json()), json.loads(bumped.to_json()))
    assert {e.name: e.action for e in result.entries} == {"cluster-kubeconfig": "replace"}
    # Replacing it runs nothing on the host (no delete) and replaces nothing that stands on it; the
    # provider keeps its identity (tests/test_day2_runbook.py).
    assert "delete" not in bumped.named("cluster-kubeconfig")["inputs"]


def assert_servers_rejoin_one_by_one(calls: list[str], reset: int) -> int:
    """After the etcd reset (at `reset` in `calls`) the init server starts and is Ready; then each other
    server in turn wipes its etcd data, starts and is Ready before the next. Where the last is Ready."""
    previous = position(calls, "wait --for=condition=Ready node/cpu-01 --timeout=900s")
    assert reset < position(calls, "cpu-01: sudo systemctl start rke2-server") < previous
    for host in SERVERS[1:]:
        wipe = position(calls, f"{host}: sudo rm -rf /var/lib/rancher/rke2/server/db")
        start = position(calls, f"{host}: sudo systemctl start rke2-server")
        ready = position(calls, f"wait --for=condition=Ready node/{host} --timeout=900s")
        assert previous < wipe < start < ready, host
        previous = ready
    return previous


def test_etcd_restore_from_a_local_snapshot(site):
    (block,) = shell_blocks("Restoring etcd from a local snapshot")
    snapshot = re.search(r"^SNAPSHOT=(\S+)$", block, re.M).group(1)
    site.file("cpu-01", snapshot).parent.mkdir(parents=True)
    site.file("cpu-01", snapshot).write_text("etcd snapshot")
    # cpu-01 was rebuilt once (section 14): it joined, so its config names the registration address.
    config = site.file("cpu-01", "/etc/rancher/rke2/config.yaml")
    config.write_text(config.read_text() + "server: https://10.20.0.10:9345\n")
    for host in SERVERS[1:]:
        site.file(host, "/var/lib/rancher/rke2/server/db/etcd/member").write_text("old member")

    result = site.run(block)
    assert result.returncode == 0, result.stderr
    assert "restart without --cluster-reset flag now" in result.stdout
    calls = site.calls()
    reset = position(calls, f"cpu-01: sudo rke2 server --cluster-reset --cluster-reset-restore-path={snapshot}")
    for host in SERVERS:
        # Every server stopped, its static pods too, before the reset.
        assert position(calls, f"{host}: sudo systemctl stop rke2-server") < reset
        assert position(calls, f"{host}: sudo rke2-killall.sh") < reset
    assert position(calls, "cpu-01: sudo sed -i /^server:/d /etc/rancher/rke2/config.yaml") < reset
    assert_servers_rejoin_one_by_one(calls, reset)
    for host in SERVERS[1:]:
        assert not site.file(host, "/var/lib/rancher/rke2/server/db").exists()  # rejoins the restored etcd
    # The init server holds the restored data and starts as the first server of a cluster again.
    restored = site.file("cpu-01", "/var/lib/rancher/rke2/server/db/etcd/restored-from")
    assert restored.read_text() == snapshot + "\n"
    assert "server:" not in config.read_text()
    assert all(site.running(host) for host in SERVERS)


def test_stub_sudo_never_reaches_this_machine(site):
    # The rehearsals run as whatever user runs the tests (root in CI): the stub keeps every path in
    # the fake root and refuses others.
    result = site.run("ssh cpu-02 sudo rm -rf /usr/local/bin/rke2")
    assert result.returncode == 99 and "outside the stub host's fake root" in result.stderr


# --- Rolling an RKE2 upgrade back (section 16) ------------------------------------------------------------

OLD, NEW = "v1.35.7+rke2r1", "v1.36.3+rke2r1"
AGENTS = ["cpu-20", "gpu-01"]  # a CPU agent and a GPU agent stand for the 47
SNAPSHOTS = "/var/lib/rancher/rke2/server/db/snapshots"


def subsection_blocks(section: str, title: str) -> list[str]:
    """The ```sh blocks of `### <title>` inside the runbook section `## N. <section>`."""
    pattern = rf"^## \d+\. {re.escape(section)}\n(.*?)(?=^## |\Z)"
    (text,) = [m.group(1) for m in re.finditer(pattern, RUNBOOK, re.M | re.S)]
    match = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^### |\Z)", text, re.M | re.S)
    assert match, f"docs/runbook.md section {section!r} has no subsection {title!r}"
    return re.findall(r"^```sh\n(.*?)^```", match.group(1), re.M | re.S)


class UpgradedSite(Site):
    """Prod mid-upgrade: every node (servers and agents) already runs NEW; the Plans exist."""

    def __init__(self, tmp_path: Path):
        super().__init__(tmp_path)
        state = json.loads(self.state.read_text())
        for name in SERVERS:
            state["nodes"][name]["labels"]["node-role.kubernetes.io/control-plane"] = "true"
        for name in AGENTS:
            state["nodes"][name] = {"labels": {"ml-platform.io/role": name[:3]}, "annotations": {}, "taints": []}
            self.file(name, "/etc/rancher/rke2").mkdir(parents=True)
            self.file(name, "/etc/rancher/rke2/config.yaml").write_text(f"node-name: {name}\n")
            (self.hosts / name / "fake" / "systemd").mkdir(parents=True)
            (self.hosts / name / "fake" / "systemd" / "active-rke2-agent.service").touch()
        state["plans"] = {p: {"annotations": {}} for p in ("server-plan", "gpu-agent-plan", "cpu-agent-plan")}
        self.state.write_text(json.dumps(state))
        for name in [*SERVERS, *AGENTS]:
            binary = self.file(name, "/usr/local/bin/rke2")
            binary.parent.mkdir(parents=True)
            binary.write_text(f'#!/bin/sh\necho "rke2 version {NEW} (0000000)"\n')
        snapshots = self.file("cpu-01", SNAPSHOTS)
        snapshots.mkdir(parents=True)
        # An older attempt at the same release, the scheduled snapshots, and this attempt's (the newest).
        for age, name in enumerate(
            [
                f"pre-upgrade-v1.36.3-rke2r1-1795000000-cpu-01-{1795000005}",
                "etcd-snapshot-cpu-01-1795500000",
                f"pre-upgrade-v1.36.3-rke2r1-1795600000-cpu-01-{1795600005}",
            ]
        ):
            (snapshots / name).write_text("etcd data")
            os.utime(snapshots / name, (1795000000 + age * 1000, 1795000000 + age * 1000))

    def agent_running(self, host: str) -> bool:
        return (self.hosts / host / "fake" / "systemd" / "active-rke2-agent.service").exists()

    def installed(self, host: str) -> list[str]:
        log = self.hosts / host / "fake" / "calls.log"
        return [line for line in log.read_text().splitlines() if line.startswith("installer ")]


def test_rolling_an_upgrade_back_reinstalls_every_node_restores_etcd_then_reverts_the_settings(tmp_path):
    site = UpgradedSite(tmp_path)
    (block,) = subsection_blocks("Upgrading RKE2", "Rolling an RKE2 upgrade back")
    result = site.run(block)
    assert result.returncode == 0, result.stderr
    calls = site.calls()
    stop_plans = position(calls, "-n system-upgrade delete plans --all")
    assert json.loads(site.state.read_text())["plans"] == {}  # no upgrade Job starts again
    drain = position(
        calls,
        "drain --ignore-daemonsets --delete-emptydir-data --disable-eviction --timeout=900s "
        + " ".join([*AGENTS, "cpu-02", "cpu-03", "cpu-01"]),
    )
    newest = f"{SNAPSHOTS}/pre-upgrade-v1.36.3-rke2r1-1795600000-cpu-01-1795600005"
    reset = position(calls, f"cpu-01: sudo rke2 server --cluster-reset --cluster-reset-restore-path={newest}")
    assert stop_plans < drain
    for host in [*AGENTS, *SERVERS]:
        unit = "rke2-agent" if host in AGENTS else "rke2-server"
        stop = position(calls, f"{host}: sudo systemctl stop {unit}")
        killall = position(calls, f"{host}: sudo rke2-killall.sh")
        install_env = f"INSTALL_RKE2_VERSION={OLD}" + (" INSTALL_RKE2_TYPE=agent" if host in AGENTS else "")
        install = position(calls, f"{host}: sudo {install_env} sh -")
        # Every node down and at the old release before etcd is restored; agents too.
        assert drain < stop < killall < install < reset, host
        installer = ["installer", OLD, *(["agent"] if host in AGENTS else [])]
        assert [line.split() for line in site.installed(host)] == [installer], host
        assert f"rke2 version {OLD}" in site.file(host, "/usr/local/bin/rke2").read_text()
    # Every node stopped before any is reinstalled (no old and new release running side by side).
    installs = [c for c in calls if f": sudo INSTALL_RKE2_VERSION={OLD}" in c]
    assert len(installs) == 5
    assert max(position(calls, f"{h}: sudo rke2-killall.sh") for h in [*AGENTS, *SERVERS]) < calls.index(installs[0])
    # The init server first, from this attempt's snapshot; then each other server on a fresh etcd member.
    assert site.file("cpu-01", "/var/lib/rancher/rke2/server/db/etcd/restored-from").read_text() == newest + "\n"
    previous = assert_servers_rejoin_one_by_one(calls, reset)
    for host in AGENTS:
        assert previous < position(calls, f"{host}: sudo systemctl start rke2-agent"), host
        assert site.agent_running(host)
    assert all(site.running(host) for host in SERVERS)
    # The settings go back last: rke2Version to the old release, nothing pending, then the up.
    agents_ready = max(position(calls, f"wait --for=condition=Ready node/{h} --timeout=900s") for h in AGENTS)
    pulumi = [c for c in calls if c.startswith("pulumi ")]
    assert pulumi == [
        f"pulumi config set --path ml-platform:cluster.rke2Version {OLD}",
        "pulumi config rm --path ml-platform:cluster.deployedRke2Version",
        "pulumi preview --diff",
        "pulumi up --parallel 64",
    ]
    assert calls.index(pulumi[0]) > agents_ready


def test_the_preview_of_a_revert_names_the_abandoned_upgrade(prod_plan):
    def pending(raw):
        raw["cluster"]["deployedRke2Version"] = OLD
        raw["cluster"]["rke2Version"] = NEW

    before = json.loads(evaluate("prod", pending).to_json())
    result = diffs.compare(before, json.loads(prod_plan.to_json()))  # rke2Version back, nothing pending
    text = diffs.render_text(result)
    assert f"RKE2 upgrade to {NEW} abandoned (rke2Version {OLD}): its Plans are deleted" in text
    assert "roll them back first (docs/runbook.md §16, rolling an RKE2 upgrade back)" in text
    assert {e.name: e.action for e in result.entries if e.action == "delete"} == {
        "upgrades-pre-upgrade-snapshot": "delete",
        "upgrades-server-plan": "delete",
        "upgrades-gpu-agent-plan": "delete",
        "upgrades-storage-agent-plan": "delete",
        "upgrades-cpu-agent-plan": "delete",
    }
    assert {e.name: e.action for e in result.entries if e.action == "create"} == {"upgrades-node-versions": "create"}
