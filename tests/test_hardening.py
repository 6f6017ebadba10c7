"""In-cluster hardening: Pod Security on every platform namespace, tier 2 protected against
accidental deletion, the nv-ipam CRD before its IPPool, the toolkit's config source, stable device
names, the Kubernetes version table, and Ceph off the overlay."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest

from components.gpu.pool import RKE2_CONTAINERD_CONFIG
from components.namespaces import RKE2_CIS_EXEMPT
from components.network.fabric import IPPOOL_CRD_FILE
from settings import load, settings_warnings
from stacks import engine
from tests.conftest import ROOT, evaluate, node_index, problems, requires_upstream, stack_doc

RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
LEVELS = {"privileged", "baseline", "restricted"}


def cis(raw: dict) -> None:
    raw["cluster"]["cisProfile"] = True


@pytest.fixture(scope="module")
def cis_plan() -> engine.Plan:
    return evaluate("prod", cis)


@pytest.fixture(scope="module")
def cis_calico_plan() -> engine.Plan:
    def mutate(raw):
        cis(raw)
        raw["network"]["cni"] = "calico"

    return evaluate("prod", mutate)


def used_namespaces(plan: engine.Plan) -> dict[str, list[dict[str, Any]]]:
    """Every namespace the plan puts something in (releases, namespaced objects) -> those resources."""
    used: dict[str, list[dict[str, Any]]] = {}
    for r in plan.resources:
        if r["type"] == RELEASE:
            namespace = r["inputs"]["namespace"]
        elif r["type"].startswith("kubernetes:") and r["type"] != NAMESPACE:
            namespace = (r["inputs"].get("metadata") or {}).get("namespace")
        else:
            continue
        if namespace:
            used.setdefault(namespace, []).append(r)
    return used


# ---------------------------------------------------------------------------------------------
# 1. Pod Security
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("plan_name", ["cis_plan", "cis_calico_plan", "lab_plan"])
def test_every_namespace_the_plan_uses_has_an_explicit_level_and_is_waited_for(plan_name, request):
    plan = request.getfixturevalue(plan_name)
    created = {r["inputs"]["metadata"]["name"]: r for r in plan.by_type(NAMESPACE)}
    used = used_namespaces(plan)
    assert {"rook-ceph", "nvidia-network-operator", "gpu-operator", "tier1-storage"} <= set(used)
    for namespace, resources in used.items():
        if namespace == "kube-system":
            continue  # RKE2's own; the CIS profile exempts it
        if namespace == "kube-public":
            continue  # Kubernetes' own; holds the public contract ConfigMap and its Role, never a pod
        if namespace in team_namespaces(plan):
            continue  # the teams' own (test_pods_in_team_namespaces_meet_baseline)
        assert namespace in created, f"{namespace} is used but not created with a Pod Security level"
        ns = created[namespace]["inputs"]["metadata"]
        level = ns["labels"]["pod-security.kubernetes.io/enforce"]
        assert level in LEVELS
        assert ns["labels"]["pod-security.kubernetes.io/warn"] == level
        assert len(ns["annotations"]["ml-platform.io/pod-security-reason"]) > 40  # says why
        for r in resources:
            if r["type"] == RELEASE:
                assert created[namespace]["urn"] in r["dependencies"], (r["name"], namespace)


def team_namespaces(plan: engine.Plan) -> set[str]:
    """Namespaces the teams own (their Pod Security level is the teams' to set); the backup CronJobs
    of sources in other namespaces run in namespaces the program creates (tests/minio/test_backup_pod_security.py)."""
    settings = load(stack_doc(plan.stack))
    return {ns for team in settings.scheduling.teams for ns in team.namespace_names}


def test_the_namespaces_that_run_node_agents_are_privileged(cis_plan):
    levels = {
        r["inputs"]["metadata"]["name"]: r["inputs"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for r in cis_plan.by_type(NAMESPACE)
    }
    for namespace in ("rook-ceph", "nvidia-network-operator", "gpu-operator", "tier1-storage"):
        assert levels[namespace] == "privileged"
        assert namespace not in RKE2_CIS_EXEMPT  # so without the label RKE2 would enforce restricted


def test_namespaces_are_kept_when_dropped_from_the_program(prod_plan):
    for r in prod_plan.by_type(NAMESPACE):
        assert prod_plan.options[r["urn"]]["retainOnDelete"] is True


def test_prod_with_the_cis_profile_evaluates_and_plans_the_same_resources(prod_plan, cis_plan):
    assert sorted(r["urn"] for r in cis_plan.resources) == sorted(r["urn"] for r in prod_plan.resources)


# ---------------------------------------------------------------------------------------------
# 2. Tier 2 cannot be deleted by accident
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ceph-operator", "ceph-csi-drivers", "ceph-cluster"])
def test_rook_releases_are_protected_and_replaced_on_a_name_or_namespace_change(prod_plan, name):
    options = prod_plan.options[prod_plan.named(name)["urn"]]
    assert options["protect"] is True
    assert set(options["replaceOnChanges"]) == {"name", "namespace"}


def deployed(raw: dict) -> None:
    raw["storage"]["ceph"]["deployed"] = True


def test_removing_every_storage_host_of_a_deployed_tier_2_is_refused_with_the_runbook_step():
    def without_tier2(raw):
        for node in raw["nodes"]:
            node.pop("osdDevices", None)
        raw["storage"]["minio"]["backup"]["sources"] = []  # they back up tier-2 volumes

    def deployed_without_tier2(raw):
        without_tier2(raw)
        deployed(raw)

    found = problems("prod", deployed_without_tier2)
    assert len(found) == 1 and found[0].startswith("nodes: no node has osdDevices")
    assert "Retire tier 2" in found[0] and "storage.ceph.deployed: false" in found[0]
    # Not deployed (a new environment, or retired by the runbook): no tier 2 is allowed.
    assert problems("prod", without_tier2) == []
    # Deployed and keeping its hosts: fine.
    assert problems("prod", deployed) == []


def test_the_runbook_has_the_retire_step():
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    section = runbook[runbook.index("## 12. Retire tier 2") :]
    for step in ("pulumi state unprotect", "storage.ceph.deployed", "kubectl"):
        assert step in section


# ---------------------------------------------------------------------------------------------
# 3. The nv-ipam IPPool waits for its CRD
# ---------------------------------------------------------------------------------------------


def test_the_ippool_crd_is_applied_before_the_pool(prod_plan):
    crd = prod_plan.named("network-ippool-crd")
    assert crd["type"] == "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
    assert crd["inputs"]["metadata"]["name"] == "ippools.nv-ipam.nvidia.com"
    assert {v["name"] for v in crd["inputs"]["spec"]["versions"]} == {"v1alpha1"}
    assert crd["urn"] in prod_plan.named("network-ipoib-pool")["dependencies"]
    assert prod_plan.options[crd["urn"]]["retainOnDelete"] is True


def test_the_vendored_crd_is_the_pinned_upstream_file():
    upstream = requires_upstream(
        "crds", "nvidia-k8s-ipam", "network-operator-v26.4.1", "nv-ipam.nvidia.com_ippools.yaml"
    )
    assert hashlib.sha256(IPPOOL_CRD_FILE.read_bytes()).digest() == hashlib.sha256(upstream.read_bytes()).digest()
    assert f"network-operator-v{load(stack_doc('prod')).charts.network_operator.version}" in str(IPPOOL_CRD_FILE)


def test_without_the_ipoib_network_there_is_no_crd(lab_plan):
    with pytest.raises(KeyError):
        lab_plan.named("network-ippool-crd")


# ---------------------------------------------------------------------------------------------
# 4. The container toolkit reads RKE2's containerd config only
# ---------------------------------------------------------------------------------------------


def test_toolkit_reads_rke2s_containerd_config_file_only(prod_plan):
    env = {e["name"]: e["value"] for e in prod_plan.named("gpu-operator")["inputs"]["values"]["toolkit"]["env"]}
    assert env["RUNTIME_CONFIG_SOURCE"] == f"file={RKE2_CONTAINERD_CONFIG}"
    assert env["CONTAINERD_CONFIG"] == RKE2_CONTAINERD_CONFIG


# ---------------------------------------------------------------------------------------------
# 5. Stable device names
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "entry", "action"),
    [
        ("nvme", {"device": "/dev/nvme1n1", "format": True}, "format: true"),
        ("osdDevices", {"device": "/dev/sdc", "wipe": True}, "wipe: true"),
    ],
)
def test_kernel_names_are_refused_on_devices_that_get_destroyed(field, entry, action):
    node = "gpu-03" if field == "nvme" else "cpu-05"

    def mutate(raw):
        raw["nodes"][node_index(raw, node)][field] = [entry]

    found = problems("prod", mutate)
    assert len(found) == 1
    i = node_index(stack_doc("prod"), node)
    assert found[0].startswith(f"nodes[{i}].{field}[0].device: '{entry['device']}' is a kernel name")
    assert action in found[0] and "/dev/disk/by-id" in found[0] and "reboot" in found[0]


def test_kernel_names_on_devices_kept_as_they_are_are_a_warning(caplog):
    def mutate(raw):
        raw["nodes"][node_index(raw, "gpu-03")]["nvme"] = [{"device": "/dev/nvme3n1"}]
        raw["nodes"][node_index(raw, "cpu-05")]["osdDevices"] = [{"device": "/dev/sdc"}]

    assert problems("prod", mutate) == []
    raw = stack_doc("prod")
    mutate(raw)
    warnings = settings_warnings(load(raw))
    assert any("'/dev/nvme3n1' is a kernel name" in w for w in warnings)
    assert any("'/dev/sdc' is a kernel name" in w for w in warnings)
    # `pulumi up` and the offline plan print them.
    with caplog.at_level(logging.WARNING):
        evaluate("prod", mutate)
    assert any("'/dev/sdc' is a kernel name" in m for m in caplog.messages)


def test_prod_and_lab_use_stable_names_for_every_destroyable_device():
    for stack in ("prod", "lab"):
        s = load(stack_doc(stack))
        for node in s.nodes:
            for device in [d.device for d in node.nvme if d.format] + [d.device for d in node.osd_devices if d.wipe]:
                assert device.startswith("/dev/disk/by-id/"), (stack, node.name, device)
        assert [n for n in s.nodes if n.nvme and any(d.format for d in n.nvme)]


# ---------------------------------------------------------------------------------------------
# 6. Versions that fit together
# ---------------------------------------------------------------------------------------------


def test_an_rke2_release_outside_the_charts_kubernetes_range_is_refused():
    def newer(raw):
        raw["cluster"]["rke2Version"] = "v1.37.1+rke2r1"

    found = problems("prod", newer)
    assert any(p.startswith("cluster.rke2Version:") and "charts.rookCeph.version" in p for p in found)
    assert any("charts.cilium.version" in p for p in found)
    older = problems("prod", lambda raw: raw["cluster"].update({"rke2Version": "v1.30.14+rke2r1"}))
    assert any("Kubernetes 1.31-1.36" in p for p in older)
    assert problems("prod", lambda raw: raw["cluster"].update({"rke2Version": "v1.36.3+rke2r1"})) == []


def test_the_gpu_operator_range_is_checked_and_only_where_gpus_are_deployed():
    def calico_at(version):
        def mutate(raw):
            raw["cluster"]["rke2Version"] = version
            raw["network"]["cni"] = "calico"

        return mutate

    found = problems("prod", calico_at("v1.32.9+rke2r1"))
    assert [p for p in found if "charts.gpuOperator.version" in p and "Kubernetes 1.33-1.37" in p], found
    assert not [p for p in found if "charts.cilium" in p]  # Calico deploys no Cilium chart

    def without_gpus(raw):
        calico_at("v1.32.9+rke2r1")(raw)
        raw["nodes"] = [n for n in raw["nodes"] if not n.get("gpu")]

    assert not [p for p in problems("prod", without_gpus) if "gpuOperator" in p]


def test_an_unverified_range_warns_instead_of_refusing():
    raw = stack_doc("prod")
    raw["cluster"]["rke2Version"] = "v1.36.3+rke2r1"
    settings = load(raw)  # not refused
    [warning] = [w for w in settings_warnings(settings) if "charts.networkOperator.version" in w]
    assert "Kubernetes 1.31-1.35" in warning and "not verified" in warning
    raw["cluster"]["rke2Version"] = "v1.35.7+rke2r1"
    assert not [w for w in settings_warnings(load(raw)) if "networkOperator" in w]


def test_an_unsupported_combination_exits_2_from_the_plan(tmp_path, capsys):
    import yaml

    from stacks.plan import main

    doc = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    doc["config"]["ml-platform:cluster"]["rke2Version"] = "v1.37.1+rke2r1"
    config = tmp_path / "Pulumi.prod.yaml"
    config.write_text(yaml.safe_dump(doc))
    assert main(["prod", "--config", str(config)]) == 2
    assert "cluster.rke2Version" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# 7. Ceph traffic off the overlay
# ---------------------------------------------------------------------------------------------


def test_prod_puts_ceph_on_the_host_network_and_the_default_stays_on_the_pod_network(prod_plan, lab_plan):
    spec = prod_plan.named("ceph-cluster")["inputs"]["values"]["cephClusterSpec"]
    assert spec["network"] == {"provider": "host"}
    assert lab_plan.named("ceph-cluster")["inputs"]["values"]["cephClusterSpec"]["network"] == {"provider": ""}


def test_an_unknown_network_provider_is_refused():
    found = problems("prod", lambda raw: raw["storage"]["ceph"]["network"].update({"provider": "multus"}))
    assert found and found[0].startswith("storage.ceph.network.provider:")
