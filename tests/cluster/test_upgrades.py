"""ClusterUpgrades: the system-upgrade-controller from its vendored manifest; while an upgrade is pending
(and only then) the pre-upgrade etcd snapshot and the RKE2 Plans (servers one at a time, then one Plan
per agent pool); otherwise the check that every node runs `rke2Version`."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from components.cluster import upgrades as component
from components.cluster.config import GPU_TAINT, registration_labels
from components.cluster.upgrades import (
    HOLD_LABEL,
    PLAN_CRD_FILE,
    SUC_MANIFESTS,
    SUC_RELEASE,
    UPGRADE_SECONDS,
    plan_specs,
)
from components.hosts.remote import script_text
from settings import load
from stacks import diff, engine, upgrade
from stacks.diff import upgrades as review
from tests.cluster.test_bootstrap import params_of
from tests.cluster.test_rke2_install import Host, lab_params
from tests.conftest import evaluate, problems, run_plan, stack_doc, tolerates
from tests.upstream import crd_schema_errors, requires_upstream, spec_schema, unknown_fields

NEW = "v1.36.3+rke2r1"
OLD = "v1.35.7+rke2r1"
PLAN_TYPE = "kubernetes:upgrade.cattle.io/v1:Plan"
STUBS = Path(__file__).parents[1] / "stubs"
AGENT_PLANS = ("gpu-agent-plan", "storage-agent-plan", "cpu-agent-plan")


def bump(raw: dict) -> None:
    raw["cluster"]["deployedRke2Version"] = raw["cluster"]["rke2Version"]
    raw["cluster"]["rke2Version"] = NEW


@pytest.fixture(scope="module")
def bumped():
    return evaluate("prod", bump)


def plans(plan) -> dict[str, dict]:
    return {r["inputs"]["metadata"]["name"]: r for r in plan.by_type(PLAN_TYPE)}


def plan_spec(plan, name: str) -> dict:
    return plan.named(f"upgrades-{name}")["inputs"]["spec"]


def selects(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector's matchExpressions select a node with `labels` (Kubernetes' semantics)."""
    for e in selector["matchExpressions"]:
        value = labels.get(e["key"])
        ok = {
            "In": value in e.get("values", []),
            "NotIn": value not in e.get("values", []),
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[e["operator"]]
        if not ok:
            return False
    return True


def node_labels_as_registered(stack: str) -> dict[str, dict[str, str]]:
    """The labels each node carries once registered: the program's, and RKE2's control-plane role label."""
    settings = load(stack_doc(stack))
    out = {}
    for node in settings.nodes:
        labels = registration_labels(node)
        if node.control_plane:
            labels["node-role.kubernetes.io/control-plane"] = "true"
        out[node.name] = labels
    return out


# --- 1. Plans only while an upgrade is pending ---------------------------------------------------------


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_make_plan_with_nothing_pending_has_no_plan_and_no_snapshot(tmp_path, stack):
    proc, out = run_plan(tmp_path, lambda config: None, stack)  # `make plan` = python -m stacks.plan STACK
    assert proc.returncode == 0, proc.stderr
    resources = json.loads(out.read_text())["resources"]
    assert not [r for r in resources if r["type"] == PLAN_TYPE]  # no Plan: no node can be selected, cordoned, drained
    assert not [r for r in resources if r["name"].endswith("-pre-upgrade-snapshot")]
    # The controller stays installed (no Plan, no Job).
    assert any(r["name"] == "upgrades-deployment-system-upgrade-controller" for r in resources)


def test_after_the_rollout_the_plans_go_and_the_node_versions_are_checked(bumped):
    def done(raw):
        bump(raw)
        raw["cluster"]["deployedRke2Version"] = NEW

    finished = evaluate("prod", done)
    assert plans(finished) == {}
    check = finished.named("upgrades-node-versions")
    assert params_of(check["inputs"]["create"]) == {"RKE2_VERSION": NEW}
    assert finished.revealed[check["urn"]]["connection"]["host"] == "10.20.1.11"  # cpu-01, the init server
    with pytest.raises(KeyError):
        bumped.named("upgrades-node-versions")  # not while the Plans are at work


def test_a_pending_upgrade_has_one_server_plan_with_a_delay_and_agent_plans_gated_by_the_snapshot(bumped):
    found = plans(bumped)
    assert sorted(found) == sorted(["server-plan", *AGENT_PLANS])
    server = found["server-plan"]
    assert server["inputs"]["spec"]["postCompleteDelay"] == "120s"
    snapshot = bumped.named("upgrades-pre-upgrade-snapshot")
    assert params_of(snapshot["inputs"]["create"]) == {"RKE2_VERSION": NEW}
    assert bumped.revealed[snapshot["urn"]]["connection"]["host"] == "10.20.1.11"
    assert bumped.named("cpu-01-rke2")["urn"] in snapshot["dependencies"]
    assert snapshot["urn"] in server["dependencies"]
    for name in AGENT_PLANS:
        agent = found[name]
        assert snapshot["urn"] in agent["dependencies"], name  # the pre-upgrade step gates every agent Plan
        assert server["urn"] in agent["dependencies"], name
        assert agent["inputs"]["spec"]["prepare"]["args"] == ["prepare", "server-plan"]
        assert agent["inputs"]["spec"]["version"] == NEW
    # No host RKE2 step changes: fresh hosts install the release the cluster runs.
    assert params_of(bumped.named("cpu-20-rke2")["inputs"]["create"])["RKE2_VERSION"] == OLD


def test_a_pool_without_nodes_gets_no_plan():
    lab = evaluate("lab", bump)  # every lab CPU agent is a storage host
    lab_nodes = load(stack_doc("lab")).nodes
    assert not [n for n in lab_nodes if not n.control_plane and n.role == "cpu" and not n.storage_host]
    assert sorted(plans(lab)) == ["gpu-agent-plan", "server-plan", "storage-agent-plan"]

    settings = load(stack_doc("prod"))
    servers_and_storage = [n for n in settings.nodes if n.control_plane or n.storage_host]
    assert sorted(plan_specs(settings.cluster, servers_and_storage)) == ["server-plan", "storage-agent-plan"]


# --- 3. Pools under the operator's control ---------------------------------------------------------------


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_every_node_is_in_exactly_one_plan_and_the_hold_label_keeps_agents_out(stack):
    pending = evaluate(stack, bump)
    specs = {name: r["inputs"]["spec"] for name, r in plans(pending).items()}
    for node, labels in node_labels_as_registered(stack).items():
        chosen = [name for name, spec in specs.items() if selects(spec["nodeSelector"], labels)]
        assert len(chosen) == 1, (node, chosen)
        server = "node-role.kubernetes.io/control-plane" in labels
        assert (chosen == ["server-plan"]) == server, (node, chosen)
        held = {**labels, HOLD_LABEL: "long-training-run"}
        held_in = [name for name, spec in specs.items() if selects(spec["nodeSelector"], held)]
        # Agents may be held; a server may not (an agent must never run a kubelet newer than a server).
        assert held_in == (["server-plan"] if server else []), (node, held_in)


def test_gpu_nodes_storage_hosts_and_the_rest_are_separate_plans(bumped):
    counts = {name: 0 for name in AGENT_PLANS}
    specs = {name: plan_spec(bumped, name) for name in AGENT_PLANS}
    settings = load(stack_doc("prod"))
    for node in settings.nodes:
        labels = node_labels_as_registered("prod")[node.name]
        for name, spec in specs.items():
            if selects(spec["nodeSelector"], labels):
                counts[name] += 1
                expected = "gpu" if node.role == "gpu" else "storage" if node.storage_host else "cpu"
                assert name == f"{expected}-agent-plan", node.name
    assert counts == {"gpu-agent-plan": 15, "storage-agent-plan": 12, "cpu-agent-plan": 20}
    assert all(any(tolerates(t, GPU_TAINT) for t in spec["tolerations"]) for spec in specs.values())


def test_each_pool_has_its_own_concurrency_window_and_drain():
    def pools(raw):
        bump(raw)
        raw["cluster"]["upgrade"] = {
            "gpu": {
                "concurrency": 3,
                "window": {"days": ["saturday"], "startTime": "22:00", "endTime": "06:00", "timeZone": "Europe/Berlin"},
                "drain": {"timeoutSeconds": 3600, "gracePeriodSeconds": 600},
            },
            "cpu": {"concurrency": 5, "drain": {"timeoutSeconds": 300, "force": True}},
        }

    pending = evaluate("prod", pools)
    gpu, storage, cpu = (plan_spec(pending, name) for name in AGENT_PLANS)
    assert (gpu["concurrency"], storage["concurrency"], cpu["concurrency"]) == (3, 1, 5)
    window = {"days": ["saturday"], "startTime": "22:00", "endTime": "06:00", "timeZone": "Europe/Berlin"}
    assert gpu["window"] == window
    assert "window" not in storage and "window" not in cpu
    assert gpu["drain"] == {
        "deleteEmptydirData": True,
        "ignoreDaemonSets": True,
        "force": False,
        "timeout": "3600s",
        "gracePeriod": 600,
    }
    assert cpu["drain"]["force"] is True and cpu["drain"]["timeout"] == "300s"
    assert storage["drain"] == {"deleteEmptydirData": True, "ignoreDaemonSets": True, "force": False, "timeout": "900s"}


@pytest.mark.parametrize(
    ("upgrade", "field", "says"),
    [
        ({"storage": {"concurrency": 2}}, "cluster.upgrade.storage.concurrency", "one OSD host down at a time"),
        ({"gpu": {"concurrency": 0}}, "cluster.upgrade.gpu.concurrency", "greater than or equal to 1"),
        ({"cpu": {"drain": {"timeoutSeconds": 0}}}, "cluster.upgrade.cpu.drain.timeoutSeconds", "30"),
        (
            {"cpu": {"drain": {"timeoutSeconds": 300, "gracePeriodSeconds": 300}}},
            "cluster.upgrade.cpu.drain",
            "gracePeriodSeconds: 300 is not below timeoutSeconds 300",
        ),
        (
            {"gpu": {"window": {"days": ["sat"], "startTime": "02:00", "endTime": "06:00"}}},
            "cluster.upgrade.gpu.window.days[0]",
            "'saturday'",
        ),
        (
            {"gpu": {"window": {"days": ["saturday"], "startTime": "2am", "endTime": "06:00"}}},
            "cluster.upgrade.gpu.window.startTime",
            "HH:MM",
        ),
        (
            {"gpu": {"window": {"days": ["saturday"], "startTime": "02:00", "endTime": "02:00"}}},
            "cluster.upgrade.gpu.window",
            "never be open",
        ),
        (
            {"gpu": {"window": {"days": ["sunday"], "startTime": "02:00", "endTime": "06:00", "timeZone": "CEST"}}},
            "cluster.upgrade.gpu.window.timeZone",
            "IANA time zone",
        ),
        ({"agentConcurrency": 2}, "cluster.upgrade.agentConcurrency", "unknown key"),
    ],
)
def test_bad_pool_settings_name_the_field(upgrade, field, says):
    found = problems("prod", lambda raw: raw["cluster"].update({"upgrade": upgrade}))
    assert any(p.startswith(f"{field}:") and says in p for p in found), found


def test_bad_pool_settings_exit_2_and_create_nothing(tmp_path):
    def bad(config):
        config["ml-platform:cluster"]["upgrade"] = {"storage": {"concurrency": 3}}

    proc, out = run_plan(tmp_path, bad)
    assert proc.returncode == 2
    assert "cluster.upgrade.storage.concurrency: 3 storage hosts at a time: use 1" in proc.stdout + proc.stderr
    assert not out.exists()


# --- 2. Failed Jobs: deadlines, retry -------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "servers"), [("prod", 3), ("lab", 1)])
def test_agent_deadlines_cover_the_wait_for_every_server_then_the_drain(stack, servers):
    def slow(raw):
        bump(raw)
        raw["cluster"]["upgrade"] = {"serverPostCompleteDelaySeconds": 300, "gpu": {"drain": {"timeoutSeconds": 7200}}}

    pending = evaluate(stack, slow)
    server = plan_spec(pending, "server-plan")
    # The worst case of the server Plan: every server's Job to its deadline, then the delay.
    server_plan_worst = servers * (server["jobActiveDeadlineSecs"] + 300)
    for name in ("gpu-agent-plan", "storage-agent-plan"):
        spec = plan_spec(pending, name)
        drain = int(spec["drain"]["timeout"].rstrip("s"))
        assert spec["jobActiveDeadlineSecs"] == server_plan_worst + drain + UPGRADE_SECONDS, name
    gpu, storage = (plan_spec(pending, n)["jobActiveDeadlineSecs"] for n in ("gpu-agent-plan", "storage-agent-plan"))
    assert gpu - storage == 7200 - 900  # each pool's own drain timeout


class Cluster:
    """A kubectl stub holding upgrade Jobs and Plans (tests/stubs/kubectl)."""

    def __init__(self, tmp_path: Path, jobs: list[dict]):
        self.state = tmp_path / "kubectl.json"
        self.log = tmp_path / "kubectl.log"
        self.state.write_text(
            json.dumps({"nodes": {}, "jobs": jobs, "plans": {p: {"annotations": {}} for p in upgrade.PLANS}})
        )
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "kubectl").symlink_to(STUBS / "kubectl")
        self.env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_STATE": str(self.state)}
        self.env["FAKE_LOG"] = str(self.log)

    def retry(self, plan: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "stacks.upgrade", "retry", plan],
            cwd=Path(__file__).resolve().parents[2],
            env=self.env,
            capture_output=True,
            text=True,
        )

    def read(self) -> dict:
        return json.loads(self.state.read_text())


def job(plan: str, node: str, condition: str | None) -> dict:
    status = (
        {
            "conditions": [
                {
                    "type": condition,
                    "status": "True",
                    "reason": "DeadlineExceeded",
                    "message": "Job was active longer than specified deadline",
                }
            ]
        }
        if condition
        else {}
    )
    return {
        "metadata": {
            "name": f"apply-{plan}-on-{node}-with-0123abcd",
            "labels": {"upgrade.cattle.io/plan": plan, "upgrade.cattle.io/node": node},
        },
        "status": status,
    }


def test_retry_deletes_the_failed_jobs_of_that_plan_only_and_touches_the_plan(tmp_path):
    cluster = Cluster(
        tmp_path,
        [
            job("storage-agent-plan", "cpu-07", "Failed"),
            job("storage-agent-plan", "cpu-08", None),  # running: left alone
            job("cpu-agent-plan", "cpu-30", "Failed"),  # another Plan: left alone
            job("storage-agent-plan", "cpu-09", "Complete"),
        ],
    )
    result = cluster.retry("storage-agent-plan")
    assert result.returncode == 0, result.stderr
    assert "failed: apply-storage-agent-plan-on-cpu-07-with-0123abcd on node cpu-07 (DeadlineExceeded" in result.stdout
    left = sorted(j["metadata"]["name"] for j in cluster.read()["jobs"])
    assert left == [
        "apply-cpu-agent-plan-on-cpu-30-with-0123abcd",
        "apply-storage-agent-plan-on-cpu-08-with-0123abcd",
        "apply-storage-agent-plan-on-cpu-09-with-0123abcd",
    ]
    touched = cluster.read()["plans"]
    assert "ml-platform.io/retry-at" in touched["storage-agent-plan"]["annotations"]
    assert touched["cpu-agent-plan"]["annotations"] == {}
    calls = cluster.log.read_text().splitlines()
    # The Job goes before the Plan is touched: otherwise the controller finds the failed Job still there.
    assert [c.split()[0] for c in calls] == ["get", "delete", "annotate"]


def test_retry_without_a_failed_job_left_still_touches_the_plan(tmp_path):
    cluster = Cluster(tmp_path, [])
    result = cluster.retry("server-plan")
    assert result.returncode == 0, result.stderr
    assert "no failed Job of server-plan is left" in result.stdout
    assert "ml-platform.io/retry-at" in cluster.read()["plans"]["server-plan"]["annotations"]


def test_retry_refuses_a_plan_that_is_not_ours(tmp_path):
    cluster = Cluster(tmp_path, [])
    result = cluster.retry("agent-plan")
    assert result.returncode == 2
    assert "error: plan: 'agent-plan' is not an upgrade Plan of this program; use one of server-plan, " in result.stderr
    assert not cluster.log.exists()  # kubectl never ran


# --- 4. The pre-upgrade step gates every Plan; a new snapshot per attempt -------------------------------


def test_when_the_pre_upgrade_guard_refuses_no_plan_targets_the_version(monkeypatch, tmp_path):
    # On the init server: the guard refuses (it runs a newer release than the one asked for).
    host = Host(tmp_path)
    host.runs_rke2_as("cpu-01", version=NEW)
    refused = host.run({"RKE2_VERSION": "v1.35.7+rke2r1"}, script="pre-upgrade.sh")
    assert refused.returncode != 0 and "no upgrade Plan was created" in refused.stderr

    # The step fails in `up`: the engine registers nothing that depends on it, so no Plan at all.
    registered = []
    register = engine._RecordingMonitor.RegisterResource

    def failing(self, request):
        if request.name == "upgrades-pre-upgrade-snapshot":
            raise RuntimeError(refused.stderr)
        registered.append((request.type, request.name))
        return register(self, request)

    monkeypatch.setattr(engine._RecordingMonitor, "RegisterResource", failing)
    with pytest.raises(RuntimeError, match="no upgrade Plan was created"):
        evaluate("prod", bump)
    names = {name for _, name in registered}
    assert {"gpu-operator", "scheduling-kueue", "cpu-20-rke2"} <= names  # everything else went on
    assert [name for type_, name in registered if type_ == PLAN_TYPE] == []


class SnapshotHost(Host):
    def runs_rke2_with_etcd(self, version: str) -> Path:
        """An rke2 whose `etcd-snapshot save --name N` writes N-<node>-<time> as RKE2 does."""
        snapshots = self.file("/var/lib/rancher/rke2/server/db/snapshots")
        snapshots.mkdir(parents=True, exist_ok=True)
        rke2 = self.file("/usr/local/bin/rke2")
        rke2.parent.mkdir(parents=True, exist_ok=True)
        rke2.write_text(
            "#!/bin/sh\n"
            f'[ "$1" = --version ] && {{ echo "rke2 version {version} (0000000)"; exit 0; }}\n'
            f'echo "rke2 $*" >>"{self.fake}/calls.log"\n'
            f'touch "{snapshots}/$4-cpu-01-$(date +%s%N)"\n'
        )
        rke2.chmod(0o755)
        return snapshots


def test_each_attempt_saves_its_own_snapshot(tmp_path):
    host = SnapshotHost(tmp_path)
    snapshots = host.runs_rke2_with_etcd(OLD)
    (snapshots / f"pre-upgrade-{NEW.replace('+', '-')}-1700000000-cpu-01-1700000000").touch()  # an older attempt
    first = host.run({"RKE2_VERSION": NEW}, script="pre-upgrade.sh")
    assert first.returncode == 0, first.stderr
    assert "changed: saved etcd snapshot pre-upgrade-v1.36.3-rke2r1-" in first.stdout
    time.sleep(1.1)  # attempts are `up` runs apart; the name carries the second it was taken
    second = host.run({"RKE2_VERSION": NEW}, script="pre-upgrade.sh")  # a retried attempt
    assert second.returncode == 0, second.stderr
    saves = [c for c in host.calls() if c.startswith("rke2 etcd-snapshot save --name pre-upgrade-v1.36.3-rke2r1-")]
    assert len(saves) == 2 and saves[0] != saves[1]
    assert len(list(snapshots.iterdir())) == 3  # the older attempt's snapshot is kept, never reused


# --- 5. Completion and failure surfaces -----------------------------------------------------------------


def test_up_waits_for_each_plan_only_when_asked(bumped):
    assert all("annotations" not in r["inputs"]["metadata"] for r in plans(bumped).values())

    def wait(raw):
        bump(raw)
        raw["cluster"]["upgrade"] = {"waitTimeoutSeconds": 21600}

    waiting = evaluate("prod", wait)
    for name, resource in plans(waiting).items():
        assert resource["inputs"]["metadata"]["annotations"] == {
            "pulumi.com/waitFor": "condition=Complete",
            "pulumi.com/timeoutSeconds": "21600",
        }, name


class VersionHost(Host):
    def run_check(self, version: str) -> subprocess.CompletedProcess:
        return self.run({"RKE2_VERSION": version}, script="rke2-node-versions.sh")


@pytest.mark.parametrize("version", [NEW, OLD])
def test_the_node_version_check_refuses_while_a_node_runs_another_release(tmp_path, version):
    other = OLD if version == NEW else NEW
    host = VersionHost(tmp_path)
    nodes = {
        name: {"labels": {}, "annotations": {}, "taints": [], "unschedulable": False, "version": v}
        for name, v in (("cpu-01", version), ("gpu-03", other), ("cpu-30", version), ("gpu-11", other))
    }
    host.state.write_text(json.dumps({"nodes": nodes}))
    refused = host.run_check(version)
    assert refused.returncode != 0
    assert f"these nodes run another release: gpu-03 ({other}), gpu-11 ({other})" in refused.stderr
    for node in nodes.values():
        node["version"] = version
    host.state.write_text(json.dumps({"nodes": nodes}))
    passed = host.run_check(version)
    assert passed.returncode == 0, passed.stderr
    assert f"every node (4) runs RKE2 {version}" in passed.stdout


# --- 7. postCompleteDelay, a pinned upgrade image, rpm excludes ------------------------------------------


@pytest.mark.parametrize(
    "image",
    [
        "docker.io/rancher/rke2-upgrade:v1.36.3-rke2r1",
        "registry.example:5000/rancher/rke2-upgrade:latest",
        "docker.io/rancher/rke2-upgrade@sha256:" + "0" * 64,
    ],
)
def test_a_tagged_upgrade_image_is_refused(image):
    found = problems("prod", lambda raw: raw["cluster"].update({"upgrade": {"upgradeImage": image}}))
    assert any(p.startswith("cluster.upgrade.upgradeImage:") and "carries a tag or digest" in p for p in found), found


def test_a_mirror_with_a_port_is_an_untagged_repository():
    assert (
        problems(
            "prod",
            lambda raw: raw["cluster"].update(
                {"upgrade": {"upgradeImage": "registry.example:5000/rancher/rke2-upgrade"}}
            ),
        )
        == []
    )


def test_the_server_delay_comes_from_settings():
    def slow(raw):
        bump(raw)
        raw["cluster"]["upgrade"] = {"serverPostCompleteDelaySeconds": 600}

    assert plan_spec(evaluate("lab", slow), "server-plan")["postCompleteDelay"] == "600s"


def test_an_rpm_install_excludes_rke2_from_package_updates_and_a_tar_install_does_not(tmp_path):
    host = Host(tmp_path)
    host.register("lab-gpu")
    (host.fake / "ping-ok").touch()
    first = host.run({**lab_params("lab-gpu"), "INSTALL_METHOD": "rpm"})
    assert first.returncode == 0, first.stderr
    repo = configparser.ConfigParser()
    repo.read(host.file("/etc/yum.repos.d/rancher-rke2.repo"))
    assert repo.sections() == ["rancher-rke2-common-stable", "rancher-rke2-1.35-stable"]
    assert all(repo[s]["exclude"] == "rke2-*" for s in repo.sections())
    second = host.run({**lab_params("lab-gpu"), "INSTALL_METHOD": "rpm"})
    assert second.returncode == 0 and "changed:" not in second.stdout  # idempotent

    (tmp_path / "tar").mkdir()
    tar = Host(tmp_path / "tar")
    tar.register("lab-gpu")
    (tar.fake / "ping-ok").touch()
    assert tar.run(lab_params("lab-gpu")).returncode == 0
    assert not tar.file("/etc/yum.repos.d").exists()


def test_an_installed_rpm_node_gets_the_exclude_on_its_next_run(tmp_path):
    host = Host(tmp_path)
    host.runs_rke2_as("lab-gpu")
    host.register("lab-gpu")
    (host.fake / "ping-ok").touch()
    repos = host.file("/etc/yum.repos.d")
    repos.mkdir(parents=True)
    (repos / "rancher-rke2.repo").write_text(
        "[rancher-rke2-common-stable]\nname=Rancher RKE2 Common (stable)\nenabled=1\n"
        "[rancher-rke2-1.35-stable]\nname=Rancher RKE2 1.35 (stable)\nenabled=1\n"
    )
    (repos / "epel.repo").write_text("[epel]\nname=EPEL\nenabled=1\n")
    result = host.run({**lab_params("lab-gpu"), "INSTALL_METHOD": "rpm"})
    assert result.returncode == 0, result.stderr
    assert "changed: wrote " in result.stdout and "rancher-rke2.repo" in result.stdout
    assert (repos / "rancher-rke2.repo").read_text().count("exclude=rke2-*") == 2
    assert "exclude" not in (repos / "epel.repo").read_text()


# --- The controller and the Plans against upstream -------------------------------------------------------


def test_plans_select_only_managed_nodes_and_tolerate_their_taints(bumped):
    managed = {"key": "ml-platform.io/role", "operator": "Exists"}
    for name, resource in plans(bumped).items():
        spec = resource["inputs"]["spec"]
        assert managed in spec["nodeSelector"]["matchExpressions"], name
        assert spec["upgrade"]["image"] == "docker.io/rancher/rke2-upgrade"
        assert spec["serviceAccountName"] == "system-upgrade"
        assert "channel" not in spec  # pinned: no polling of a release channel
    server = plan_spec(bumped, "server-plan")
    assert server["cordon"] is True and "drain" not in server and server["concurrency"] == 1
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in server["tolerations"]


@pytest.mark.parametrize("name", ["server-plan", *AGENT_PLANS])
def test_plans_match_the_upstream_crd(name):
    def everything(raw):
        bump(raw)
        raw["cluster"]["upgrade"] = {
            "waitTimeoutSeconds": 0,  # a weekly window can stay closed for days: no `up` waits that long
            "gpu": {
                "window": {"days": ["sunday"], "startTime": "01:00", "endTime": "05:00"},
                "drain": {"gracePeriodSeconds": 60},
            },
        }

    plan = evaluate("prod", everything).named(f"upgrades-{name}")["inputs"]
    assert (plan["apiVersion"], plan["kind"], plan["metadata"]["name"], plan["metadata"]["namespace"]) == (
        "upgrade.cattle.io/v1",
        "Plan",
        name,
        "system-upgrade",
    )
    schema = spec_schema("system-upgrade-controller", SUC_RELEASE, "upgrade.cattle.io_plans.yaml", crd_version="v1")
    assert unknown_fields(plan["spec"], schema) == []
    assert crd_schema_errors(plan["spec"], schema) == []


def test_vendored_manifests_are_the_pinned_upstream_files():
    upstream = requires_upstream("manifests", "system-upgrade-controller", SUC_RELEASE)
    for file in ("system-upgrade-controller.yaml", "clusterrole.yaml", "clusterrolebinding.yaml"):
        assert (SUC_MANIFESTS / file).read_text() == (upstream / file).read_text()
    crd = requires_upstream("crds", "system-upgrade-controller", SUC_RELEASE, "upgrade.cattle.io_plans.yaml")
    assert PLAN_CRD_FILE.read_text() == crd.read_text()


def test_controller_runs_the_pinned_images_in_its_privileged_namespace(prod_plan):
    namespace = prod_plan.named("upgrades-namespace")["inputs"]["metadata"]
    assert namespace["name"] == "system-upgrade"
    assert namespace["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert "privileged" in namespace["annotations"]["ml-platform.io/pod-security-reason"]
    deployment = prod_plan.named("upgrades-deployment-system-upgrade-controller")["inputs"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"docker.io/rancher/system-upgrade-controller:{SUC_RELEASE}"  # not the manifest's stale tag
    config = prod_plan.named("upgrades-configmap-default-controller-env")["inputs"]["data"]
    assert config["SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE"] == "docker.io/rancher/kubectl:v1.30.3"
    # Upstream leaves the RBAC's namespace to kustomize: here every namespaced object and subject has it.
    for kind in ("role", "rolebinding", "clusterrolebinding"):
        for resource in prod_plan.resources:
            if resource["name"].startswith(f"upgrades-{kind}-"):
                inputs = resource["inputs"]
                if kind != "clusterrolebinding":
                    assert inputs["metadata"]["namespace"] == "system-upgrade"
                assert all(s["namespace"] == "system-upgrade" for s in inputs.get("subjects", []))
    # No Namespace from the manifest: platform_namespace owns it.
    assert not any(r["name"].startswith("upgrades-namespace-") for r in prod_plan.resources)


def test_a_mirrored_controller_image_rolls_the_controller_when_its_config_changes(prod_plan):
    def mirror(raw):
        bump(raw)
        raw["cluster"]["upgrade"] = {
            "controllerImage": "registry.example/rancher/system-upgrade-controller:v0.20.1",
            "kubectlImage": "registry.example/rancher/kubectl:v1.30.3",
            "upgradeImage": "registry.example/rancher/rke2-upgrade",
        }

    mirrored = evaluate("prod", mirror)
    pod = mirrored.named("upgrades-deployment-system-upgrade-controller")["inputs"]["spec"]["template"]
    assert pod["spec"]["containers"][0]["image"] == "registry.example/rancher/system-upgrade-controller:v0.20.1"
    assert plan_spec(mirrored, "cpu-agent-plan")["prepare"]["image"] == "registry.example/rancher/rke2-upgrade"
    old = prod_plan.named("upgrades-deployment-system-upgrade-controller")["inputs"]["spec"]["template"]
    # The controller reads its ConfigMap only at start: the digest annotation rolls it.
    assert pod["metadata"]["annotations"] != old["metadata"]["annotations"]


def test_upstream_manifest_parses_to_the_objects_the_component_creates():
    kinds = sorted(
        doc["kind"]
        for file in SUC_MANIFESTS.iterdir()
        for doc in yaml.safe_load_all(file.read_text())
        if doc and doc["kind"] != "Namespace"
    )
    assert kinds == [
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]


def test_scripts_are_the_static_files_the_steps_run():
    for script in ("pre-upgrade.sh", "rke2-node-versions.sh"):
        assert "set -euo pipefail" in script_text(script)


def test_the_review_names_the_plans_and_labels_as_the_component_does():
    # stacks.diff reads plans without importing the program: its names must stay the component's.
    assert (review.SERVER_PLAN, review.CONTROL_PLANE_LABEL, review.HOLD_LABEL) == (
        component.SERVER_PLAN,
        component.CONTROL_PLANE_LABEL,
        component.HOLD_LABEL,
    )
    assert [review.agent_plan_name(p) for p in review.POOLS] == [component.agent_plan_name(p) for p in component.POOLS]


# --- 8. The review ---------------------------------------------------------------------------------------


def danger_of(before, after) -> list[str]:
    return diff.compare(json.loads(before.to_json()), json.loads(after.to_json())).danger


def test_the_review_names_a_rolling_drain_per_pool_in_order_with_the_windows(lab_plan):
    def pools(raw):
        bump(raw)
        raw["cluster"]["upgrade"] = {
            "gpu": {"window": {"days": ["sunday"], "startTime": "22:00", "endTime": "04:00", "timeZone": "Asia/Tokyo"}},
            "storage": {"drain": {"timeoutSeconds": 1800, "force": True}},
            "serverPostCompleteDelaySeconds": 300,
        }

    (line,) = danger_of(lab_plan, evaluate("lab", pools))
    assert line.startswith(f"RKE2 upgrade {OLD} -> {NEW}: first the pre-upgrade step on the init server")
    assert "servers 1 nodes one at a time (cordoned, not drained, 300s apart)" in line
    assert (
        "a rolling drain of gpu pool 1 nodes 1 at a time (only sunday 22:00-04:00 Asia/Tokyo, drain timeout 900s); "
        "storage pool 3 nodes 1 at a time (any time, drain timeout 1800s, force)"
    ) in line
    assert line.index("servers 1 nodes") < line.index("gpu pool") < line.index("storage pool")
    assert "cpu pool" not in line  # lab has no plain CPU agent


def test_the_review_of_the_bookkeeping_and_of_a_bump_that_upgrades_nothing(prod_plan, bumped):
    def done(raw):
        bump(raw)
        raw["cluster"]["deployedRke2Version"] = NEW

    assert danger_of(bumped, evaluate("prod", done)) == [
        f"RKE2 upgrade to {NEW} declared done: its Plans are deleted; upgrades-node-versions checks on the init "
        f"server that every node reports {NEW}; the up fails, naming the nodes, when one does not"
    ]
    forgot = evaluate("prod", lambda raw: raw["cluster"].update({"rke2Version": NEW}))
    (line,) = danger_of(prod_plan, forgot)
    assert line.startswith(f"rke2Version {OLD} -> {NEW} without deployedRke2Version: no upgrade Plan is created")
    assert f"to upgrade, set cluster.deployedRke2Version: {OLD}" in line
