"""The day-2 procedures of docs/runbook.md (sections 9-13), walked through on the plan and on stub
hosts: what a replace touches, in which order, and what each host script then does."""

from __future__ import annotations

import re

from tests.cluster.test_bootstrap import params_of
from tests.cluster.test_node_scripts import FakeCluster, blank_node
from tests.cluster.test_rke2_install import Host
from tests.conftest import ROOT

RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
COMMAND = "command:remote:Command"


def replaced_along_with(plan, step: str) -> set[str]:
    """The steps the engine replaces (deleting them first) when `step` is replaced: those whose
    replace-on-change input (`triggers`) depends on it."""
    urn = plan.named(step)["urn"]
    return {
        r["name"]
        for r in plan.by_type(COMMAND)
        if urn in plan.options[r["urn"]]["propertyDependencies"].get("triggers", [])
    }


def test_the_runbook_has_the_day2_procedures():
    for heading in (
        "Rebuilding a server (the init server included)",
        "Renaming a node",
        "Upgrading RKE2",
        "Restoring etcd from a local snapshot",
        "Rotating the cluster certificates",
    ):
        assert re.search(rf"^## \d+\. {re.escape(heading)}$", RUNBOOK, re.M), heading
    assert '--cluster-reset-restore-path="$SNAPSHOT"' in RUNBOOK and "rke2 certificate rotate" in RUNBOOK


def test_rebuilding_the_init_server_drains_uninstalls_joins_and_relabels(prod_plan, tmp_path):
    # Section 14: `pulumi up --replace <cpu-01-rke2 URN>`; the init server's CA hash is read again.
    assert replaced_along_with(prod_plan, "cpu-01-rke2") == {"cpu-01-membership", "cluster-ca-hash"}
    membership = prod_plan.named("cpu-01-membership")["inputs"]
    rke2 = prod_plan.named("cpu-01-rke2")["inputs"]

    # 1. The membership delete (first: it stands on the RKE2 step) drains and deletes the Node.
    cluster = FakeCluster(tmp_path, {"cpu-01": blank_node()})
    removed = cluster.run("node-remove.sh", **params_of(membership["delete"]))
    assert removed.returncode == 0, removed.stderr
    assert cluster.node("cpu-01") is None

    # 2. The RKE2 delete: snapshots copied aside, then RKE2's uninstall.
    (tmp_path / "host").mkdir()
    host = Host(tmp_path / "host")
    host.runs_rke2_as("cpu-01")
    snapshots = host.file("/var/lib/rancher/rke2/server/db/snapshots")
    snapshots.mkdir(parents=True)
    (snapshots / "etcd-snapshot-cpu-01-1763900000").write_text("etcd")
    uninstalled = host.run(params_of(rke2["delete"]), script="rke2-uninstall.sh")
    assert uninstalled.returncode == 0, uninstalled.stderr
    assert not host.file("/var/lib/rancher/rke2").exists()
    assert list(host.file("/var/backups/rke2-etcd-snapshots").glob("cpu-01-*/etcd-snapshot-cpu-01-1763900000"))

    # 3. The RKE2 create: the other servers answer at the VIP; no etcd data here: it joins.
    (host.fake / "ping-ok").touch()
    host.register("cpu-01")
    installed = host.run(params_of(rke2["create"]))
    assert installed.returncode == 0, installed.stderr
    assert host.config()["server"] == "https://10.20.0.10:9345"

    # 4. The membership create runs nothing; the Node patch follows the RKE2 step's id, so it changes
    # with the replacement and labels the re-registered Node again (tests/cluster/test_bootstrap.py).
    assert "create" not in membership
    patch = prod_plan.named("cpu-01-labels-taints")
    rke2_urn = prod_plan.named("cpu-01-rke2")["urn"]
    assert prod_plan.options[patch["urn"]]["propertyDependencies"]["metadata"] == [rke2_urn]


def test_replacing_an_agents_rke2_step_replaces_only_its_membership(prod_plan):
    assert replaced_along_with(prod_plan, "gpu-07-rke2") == {"gpu-07-membership"}


def test_rereading_the_kubeconfig_replaces_nothing_else(prod_plan):
    # Section 13: `pulumi up --replace <cluster-kubeconfig URN>` after a certificate rotation.
    read = prod_plan.named("cluster-kubeconfig")
    assert "delete" not in read["inputs"]  # nothing runs on the host when it is replaced
    assert replaced_along_with(prod_plan, "cluster-kubeconfig") == set()
    provider = prod_plan.by_type("pulumi:providers:kubernetes")[0]
    # The provider takes the new kubeconfig as an update: its identity is the cluster's name.
    assert provider["inputs"]["clusterIdentifier"] == "ml-prod"
    assert prod_plan.options[provider["urn"]]["propertyDependencies"]["kubeconfig"] == [read["urn"]]
