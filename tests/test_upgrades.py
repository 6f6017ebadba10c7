"""ClusterUpgrades: the system-upgrade-controller from its vendored manifest, the pre-upgrade etcd snapshot
and the two RKE2 Plans (servers one at a time, then agents drained, N at a time)."""

from __future__ import annotations

import json

import pytest
import yaml

from components.cluster import GPU_TAINT
from components.upgrades import PLAN_CRD_FILE, SUC_MANIFESTS, SUC_RELEASE
from stacks import diff
from tests.conftest import evaluate, problems, stack_doc, tolerates
from tests.test_cluster import params_of
from tests.upstream import crd_schema_errors, requires_upstream, spec_schema, unknown_fields

NEW = "v1.36.3+rke2r1"
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJVdMEhNn1ffJTT2Ri5HRXMYLjXJFR4t7ysnoaV/FnZ+"


def bump(raw: dict) -> None:
    raw["cluster"]["deployedRke2Version"] = raw["cluster"]["rke2Version"]
    raw["cluster"]["rke2Version"] = NEW
    raw["cluster"]["upgrade"] = {"agentConcurrency": 3}


@pytest.fixture(scope="module")
def bumped():
    return evaluate("prod", bump)


def plan_spec(plan, name: str) -> dict:
    return plan.named(f"upgrades-{name}")["inputs"]["spec"]


def test_a_version_bump_changes_the_plans_and_the_snapshot_and_no_host_step(prod_plan, bumped):
    result = diff.compare(json.loads(prod_plan.to_json()), json.loads(bumped.to_json()))
    actions = {entry.name: entry.action for entry in result.entries}
    assert actions == {
        "upgrades-pre-upgrade-snapshot": "replace",  # re-runs: checks the release, then a new snapshot
        "upgrades-server-plan": "update",
        "upgrades-agent-plan": "update",
    }
    assert params_of(bumped.named("upgrades-pre-upgrade-snapshot")["inputs"]["create"]) == {"RKE2_VERSION": NEW}

    server, agent = plan_spec(bumped, "server-plan"), plan_spec(bumped, "agent-plan")
    assert server["version"] == agent["version"] == NEW
    assert server["concurrency"] == 1 and server["cordon"] is True and "drain" not in server
    assert agent["concurrency"] == 3
    # Drained through evictions (PodDisruptionBudgets hold), DaemonSets stay, bare pods stop the drain.
    assert agent["drain"] == {"deleteEmptydirData": True, "ignoreDaemonSets": True, "force": False, "timeout": "900s"}
    assert agent["prepare"]["args"] == ["prepare", "server-plan"]

    text = diff.render_text(result)
    assert (
        f"RKE2 upgrade v1.35.7+rke2r1 -> {NEW} by the system-upgrade-controller: etcd snapshot pre-upgrade-{NEW}, "
        "then 3 servers one at a time (cordoned), then 47 agents 3 at a time (drained, PodDisruptionBudgets "
        "honoured)" in text
    )
    assert "RKE2 service restarted" not in text


def test_a_node_added_mid_upgrade_installs_the_release_the_cluster_runs(bumped):
    def add_node(raw):
        bump(raw)
        raw["nodes"].append({"name": "cpu-99", "address": "10.20.1.99", "role": "cpu", "hostKey": HOST_KEY})

    added = evaluate("prod", add_node)
    assert params_of(added.named("cpu-99-rke2")["inputs"]["create"])["RKE2_VERSION"] == "v1.35.7+rke2r1"


def test_after_the_rollout_fresh_hosts_install_the_new_release_and_nothing_restarts(bumped):
    def done(raw):
        bump(raw)
        raw["cluster"]["deployedRke2Version"] = NEW

    result = diff.compare(json.loads(bumped.to_json()), json.loads(evaluate("prod", done).to_json()))
    nodes = {f"{n['name']}-rke2" for n in stack_doc("prod")["nodes"]}
    assert {e.name for e in result.entries} == nodes and result.counts() == {"update": 50}
    for entry in result.entries:
        (change,) = entry.changes
        old, new = params_of(change.old), params_of(change.new)
        assert {k for k in old if old[k] != new[k]} == {"RKE2_VERSION"} and new["RKE2_VERSION"] == NEW
    assert result.danger == []  # rke2-install.sh installs nothing on an installed node and restarts nothing


def test_the_server_plan_waits_for_the_snapshot_on_the_init_server(prod_plan):
    snapshot = prod_plan.named("upgrades-pre-upgrade-snapshot")
    assert snapshot["urn"] in prod_plan.named("upgrades-server-plan")["dependencies"]
    assert prod_plan.named("cpu-01-rke2")["urn"] in snapshot["dependencies"]
    assert prod_plan.revealed[snapshot["urn"]]["connection"]["host"] == "10.20.1.11"  # cpu-01, the init server


def test_plans_select_servers_and_agents_and_tolerate_their_taints(prod_plan):
    server, agent = plan_spec(prod_plan, "server-plan"), plan_spec(prod_plan, "agent-plan")
    managed = {"key": "ml-platform.io/role", "operator": "Exists"}
    assert server["nodeSelector"]["matchExpressions"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "In", "values": ["true"]},
        managed,
    ]
    assert agent["nodeSelector"]["matchExpressions"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
        managed,
    ]
    assert any(tolerates(t, GPU_TAINT) for t in agent["tolerations"])  # GPU nodes are upgraded too
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in server["tolerations"]
    for spec in (server, agent):
        assert spec["upgrade"]["image"] == "docker.io/rancher/rke2-upgrade"
        assert spec["serviceAccountName"] == "system-upgrade"
        assert "channel" not in spec  # pinned: no polling of a release channel


@pytest.mark.parametrize("name", ["server-plan", "agent-plan"])
def test_plans_match_the_upstream_crd(prod_plan, name):
    plan = prod_plan.named(f"upgrades-{name}")["inputs"]
    assert (plan["apiVersion"], plan["kind"], plan["metadata"]) == (
        "upgrade.cattle.io/v1",
        "Plan",
        {"name": name, "namespace": "system-upgrade"},
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
        raw["cluster"]["upgrade"] = {
            "controllerImage": "registry.example/rancher/system-upgrade-controller:v0.20.1",
            "kubectlImage": "registry.example/rancher/kubectl:v1.30.3",
            "upgradeImage": "registry.example/rancher/rke2-upgrade",
        }

    mirrored = evaluate("prod", mirror)
    pod = mirrored.named("upgrades-deployment-system-upgrade-controller")["inputs"]["spec"]["template"]
    assert pod["spec"]["containers"][0]["image"] == "registry.example/rancher/system-upgrade-controller:v0.20.1"
    assert plan_spec(mirrored, "agent-plan")["prepare"]["image"] == "registry.example/rancher/rke2-upgrade"
    old = prod_plan.named("upgrades-deployment-system-upgrade-controller")["inputs"]["spec"]["template"]
    # The controller reads its ConfigMap only at start: the digest annotation rolls it.
    assert pod["metadata"]["annotations"] != old["metadata"]["annotations"]


@pytest.mark.parametrize("value", [0, 101, "two"])
def test_agent_concurrency_is_validated(value):
    found = problems("prod", lambda raw: raw["cluster"].update({"upgrade": {"agentConcurrency": value}}))
    assert any(p.startswith("cluster.upgrade.agentConcurrency:") for p in found), found


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
