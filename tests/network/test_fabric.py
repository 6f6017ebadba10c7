"""NetworkFabric: one CNI fitting RKE2, InfiniBand on GPU nodes only, the Network Operator's RDMA resources.

Helm values and custom resources are taken from the plan (what the engine would receive) and checked
key by key against the real upstream values.yaml / values.schema.json / CRD schemas at the pinned
versions (`make reference`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from components.cluster.config import API_PORT, GPU_TAINT, ROLE_LABEL, rke2_config
from settings import load
from stacks.engine import Plan
from tests.conftest import evaluate, node_index, problems, requires_upstream, stack_doc
from tests.upstream import (
    crd_schema_errors,
    spec_schema,
    unknown_fields,
    unknown_value_paths,
    upstream_values,
    values_schema_errors,
)

RELEASE = "kubernetes:helm.sh/v3:Release"
COMMAND = "command:remote:Command"
GPU_TAINT_KEY = GPU_TAINT.split("=", 1)[0]


# ---------------------------------------------------------------------------------------------
# Plans: prod (Cilium, KPR on, IPoIB on), lab (IPoIB off), prod with Calico, prod with OFED and KPR off
# ---------------------------------------------------------------------------------------------


def _calico(raw: dict) -> None:
    raw["network"]["cni"] = "calico"


def _ofed_without_kpr(raw: dict) -> None:
    raw["network"]["infiniband"]["hostStack"] = "ofed"
    raw["network"]["kubeProxyReplacement"] = False


@pytest.fixture(scope="module")
def calico_plan() -> Plan:
    return evaluate("prod", _calico)


@pytest.fixture(scope="module")
def ofed_plan() -> Plan:
    return evaluate("prod", _ofed_without_kpr)


def inputs(plan: Plan, name: str) -> dict[str, Any]:
    return plan.named(name)["inputs"]


def urn(plan: Plan, name: str) -> str:
    return plan.named(name)["urn"]


def releases(plan: Plan) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in plan.by_type(RELEASE)}


# ---------------------------------------------------------------------------------------------
# The CNI
# ---------------------------------------------------------------------------------------------


def test_prod_deploys_exactly_one_cni_cilium_pinned(prod_plan):
    cni = [r for r in prod_plan.by_type(RELEASE) if r["inputs"]["chart"] in ("cilium", "tigera-operator")]
    assert [r["name"] for r in cni] == ["network-cni"]
    values = cni[0]["inputs"]
    charts = stack_doc("prod")["charts"]["cilium"]
    assert (values["chart"], values["version"], values["name"], values["namespace"]) == (
        "cilium",
        charts["version"],
        "cilium",
        "kube-system",
    )
    assert values["repositoryOpts"] == {"repo": charts["repository"]}


def test_cilium_values_exist_upstream_and_match_the_schema(prod_plan, ofed_plan):
    version = inputs(prod_plan, "network-cni")["version"]
    upstream = upstream_values("cilium", version)
    schema = json.loads(requires_upstream("charts", "cilium", version, "values.schema.json").read_text())
    for plan in (prod_plan, ofed_plan):  # KPR on and off
        values = inputs(plan, "network-cni")["values"]
        assert unknown_value_paths(values, upstream) == []
        assert values_schema_errors(values, schema) == []


def test_cilium_fits_rke2_with_kube_proxy_replacement(prod_plan):
    doc = stack_doc("prod")
    values = inputs(prod_plan, "network-cni")["values"]
    assert values["ipam"] == {
        "mode": "cluster-pool",
        "operator": {"clusterPoolIPv4PodCIDRList": [doc["network"]["clusterCidr"]], "clusterPoolIPv4MaskSize": 24},
    }
    assert values["kubeProxyReplacement"] is True
    assert (values["k8sServiceHost"], values["k8sServicePort"]) == (doc["cluster"]["apiEndpoint"], API_PORT)
    # Every agent on every node, whatever its taints (GPU, storage, not-ready).
    assert values["tolerations"] == [{"operator": "Exists"}]
    assert values["envoy"]["tolerations"] == [{"operator": "Exists"}]
    # Multus (IPoIB network on in prod) keeps its CNI configuration.
    assert values["cni"] == {"exclusive": False}
    # RKE2 servers start without kube-proxy: the same setting drives both.
    settings = load(doc)
    assert rke2_config(settings.servers[0], True, settings.cluster, settings.network)["disable-kube-proxy"] is True


def test_without_kube_proxy_replacement_rke2_keeps_kube_proxy(ofed_plan):
    values = inputs(ofed_plan, "network-cni")["values"]
    assert values["kubeProxyReplacement"] is False
    assert "k8sServiceHost" not in values and "k8sServicePort" not in values
    raw = stack_doc("prod")
    _ofed_without_kpr(raw)
    settings = load(raw)
    assert rke2_config(settings.servers[0], True, settings.cluster, settings.network)["disable-kube-proxy"] is False


def test_calico_swaps_the_chart(prod_plan, calico_plan):
    cni = inputs(calico_plan, "network-cni")
    charts = stack_doc("prod")["charts"]["tigeraOperator"]
    assert (cni["chart"], cni["version"], cni["name"], cni["namespace"]) == (
        "tigera-operator",
        charts["version"],
        "tigera-operator",
        "tigera-operator",
    )
    assert not [r for r in calico_plan.by_type(RELEASE) if r["inputs"]["chart"] == "cilium"]
    # The same resource: a switch on a running cluster is a replacement, which `protect` refuses.
    assert urn(calico_plan, "network-cni") == urn(prod_plan, "network-cni")
    assert prod_plan.options[urn(prod_plan, "network-cni")]["protect"] is True
    assert calico_plan.options[urn(calico_plan, "network-cni")]["protect"] is True


def test_calico_installation_matches_the_cluster_cidr_and_exists_upstream(calico_plan):
    cni = inputs(calico_plan, "network-cni")
    values = cni["values"]
    upstream = upstream_values("tigera-operator", cni["version"])
    # The chart renders `installation` minus `enabled` as the Installation spec: check those keys
    # against the Installation CRD shipped with this chart version, the rest against values.yaml.
    top = {k: v for k, v in values.items() if k != "installation"}
    assert unknown_value_paths(top, upstream) == []
    installation = {k: v for k, v in values["installation"].items() if k != "enabled"}
    schema = spec_schema("calico", cni["version"], "operator.tigera.io_installations.yaml", crd_version="v1")
    assert unknown_fields(installation, schema) == []
    assert crd_schema_errors(installation, schema) == []
    assert values["installation"]["enabled"] is True
    pools = installation["calicoNetwork"]["ipPools"]
    assert [p["cidr"] for p in pools] == [stack_doc("prod")["network"]["clusterCidr"]]
    assert values["kubernetesServiceEndpoint"] == {"host": stack_doc("prod")["cluster"]["apiEndpoint"], "port": "6443"}


def test_unknown_cni_is_a_settings_error_naming_the_field():
    found = problems(mutate=lambda raw: raw["network"].update(cni="flannel"))
    assert len(found) == 1, found
    assert found[0].startswith("network.cni: 'flannel' is not allowed; use 'cilium' or 'calico'")
    assert "switching the CNI of a running cluster is unsupported" in found[0]


def waits_for(plan: Plan, name: str) -> set[str]:
    """URNs `name` waits for, directly or through what it waits for."""
    by_urn = plan.by_urn()
    seen: set[str] = set()
    todo = list(plan.named(name)["dependencies"])
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo += by_urn[current]["dependencies"] if current in by_urn else []
    return seen


def test_in_cluster_components_wait_for_the_cni(prod_plan):
    cni = urn(prod_plan, "network-cni")
    assert urn(prod_plan, "cluster-kubeconfig") in prod_plan.named("network-cni")["dependencies"]
    others = set(releases(prod_plan)) - {"network-cni"}
    assert others, "no other Helm releases to check"
    assert {name for name in others if cni not in waits_for(prod_plan, name)} == set()


# ---------------------------------------------------------------------------------------------
# InfiniBand, host half
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_infiniband_host_steps_run_on_exactly_the_gpu_nodes(stack, prod_plan, lab_plan):
    plan = {"prod": prod_plan, "lab": lab_plan}[stack]
    nodes = stack_doc(stack)["nodes"]
    steps = {r["name"]: r for r in plan.by_type(COMMAND) if r["name"].endswith("-infiniband")}
    assert set(steps) == {f"{n['name']}-infiniband" for n in nodes if n["role"] == "gpu"}
    for node in (n for n in nodes if n["role"] == "gpu"):
        step = steps[f"{node['name']}-infiniband"]
        # On the node itself, after its preparation.
        assert plan.revealed[step["urn"]]["connection"]["host"] == node["address"]
        assert urn(plan, f"{node['name']}-prepare") in step["dependencies"]
        create = step["inputs"]["create"]
        ib = node["infiniband"]
        assert f"IB_INTERFACE={ib['interface']} " in create
        assert f"IB_ADDRESS={ib['address']} " in create
        assert f"IB_PREFIX={ib.get('prefixLength', 24)} " in create
        assert "infiniband-host.sh" in create


def test_infiniband_host_parameters_follow_settings(prod_plan, ofed_plan):
    doc = stack_doc("prod")["network"]["infiniband"]
    create = inputs(prod_plan, "gpu-01-infiniband")["create"]
    assert f"IB_MTU={doc['mtu']} " in create and f"IB_MODE={doc['mode']} " in create
    assert "HOST_STACK=inbox " in create and "OS_FAMILY=debian " in create
    assert "HOST_STACK=ofed " in inputs(ofed_plan, "gpu-01-infiniband")["create"]
    # Re-running with the same settings changes nothing: the NetworkManager UUID is fixed per node.
    assert inputs(evaluate("prod"), "gpu-01-infiniband") == inputs(prod_plan, "gpu-01-infiniband")
    assert inputs(prod_plan, "gpu-01-infiniband")["create"] != inputs(prod_plan, "gpu-02-infiniband")["create"]


def test_infiniband_script_reports_port_state_without_failing():
    script = (
        Path(__file__).resolve().parents[2] / "components" / "network" / "scripts" / "infiniband-host.sh"
    ).read_text()
    report = script.split("# Report:", 1)[1]
    assert "/sys/class/infiniband/*/ports/*/state" in report
    assert "fail " not in report and "exit 1" not in report


# ---------------------------------------------------------------------------------------------
# InfiniBand, cluster half
# ---------------------------------------------------------------------------------------------


def test_network_operator_values_exist_upstream(prod_plan):
    operator = inputs(prod_plan, "network-network-operator")
    assert (operator["chart"], operator["version"]) == (
        "network-operator",
        stack_doc("prod")["charts"]["networkOperator"]["version"],
    )
    values = operator["values"]
    assert unknown_value_paths(values, upstream_values("network-operator", operator["version"])) == []
    # NFD workers run on GPU nodes: they tolerate the GPU taint.
    worker = values["node-feature-discovery"]["worker"]
    assert {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in worker["tolerations"]
    # This is the cluster's only NFD: its upstream PCI config labels NVIDIA GPUs (class 0302) for the GPU
    # Operator, so it is left as upstream ships it.
    assert "config" not in worker
    upstream = upstream_values("network-operator", operator["version"])
    assert "0302" in upstream["node-feature-discovery"]["worker"]["config"]["sources"]["pci"]["deviceClassWhitelist"]
    assert values["nfd"] == {"enabled": True, "deployNodeFeatureRules": True}


def test_network_operator_waits_for_the_cni(prod_plan):
    assert urn(prod_plan, "network-cni") in prod_plan.named("network-network-operator")["dependencies"]


@pytest.mark.parametrize("plan_name", ["prod_plan", "ofed_plan", "lab_plan"])
def test_nic_cluster_policy_fields_exist_upstream(plan_name, request):
    plan = request.getfixturevalue(plan_name)
    version = "v" + inputs(plan, "network-network-operator")["version"]
    policy = inputs(plan, "network-nic-cluster-policy")
    assert (policy["apiVersion"], policy["kind"], policy["metadata"]) == (
        "mellanox.com/v1alpha1",
        "NicClusterPolicy",
        {"name": "nic-cluster-policy"},
    )
    schema = spec_schema("network-operator", version, "mellanox.com_nicclusterpolicies.yaml", crd_version="v1alpha1")
    assert unknown_fields(policy["spec"], schema) == []
    assert crd_schema_errors(policy["spec"], schema) == []


def test_rdma_device_plugin_is_restricted_to_gpu_nodes(prod_plan):
    spec = inputs(prod_plan, "network-nic-cluster-policy")["spec"]
    assert spec["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": ["gpu"]}]}]
        }
    }
    assert spec["tolerations"] == [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    config = json.loads(spec["rdmaSharedDevicePlugin"]["config"])
    gpu_interfaces = {n["infiniband"]["interface"] for n in stack_doc("prod")["nodes"] if n["role"] == "gpu"}
    assert config == {
        "configList": [
            {
                "resourcePrefix": "rdma",
                "resourceName": "ib",
                "rdmaHcaMax": 63,
                "selectors": {"ifNames": sorted(gpu_interfaces)},
            }
        ]
    }
    # The images come with the operator release they belong to.
    assert (
        spec["rdmaSharedDevicePlugin"]["version"]
        == "network-operator-v" + inputs(prod_plan, "network-network-operator")["version"]
    )


def test_rdma_resource_name_splits_into_prefix_and_name():
    def mutate(raw):
        raw["network"]["infiniband"]["rdmaResourceName"] = "example.com/hca"

    spec = inputs(evaluate("lab", mutate), "network-nic-cluster-policy")["spec"]
    entry = json.loads(spec["rdmaSharedDevicePlugin"]["config"])["configList"][0]
    assert (entry["resourcePrefix"], entry["resourceName"]) == ("example.com", "hca")
    found = problems(mutate=lambda raw: raw["network"]["infiniband"].update(rdmaResourceName="ib"))
    assert len(found) == 1 and found[0].startswith("network.infiniband.rdmaResourceName: 'ib' is not")


def test_ofed_enables_the_driver_container(prod_plan, ofed_plan):
    assert "ofedDriver" not in inputs(prod_plan, "network-nic-cluster-policy")["spec"]
    driver = inputs(ofed_plan, "network-nic-cluster-policy")["spec"]["ofedDriver"]
    assert (driver["image"], driver["repository"], driver["version"]) == (
        "doca-driver",
        "nvcr.io/nvidia/mellanox",
        stack_doc("prod")["network"]["infiniband"]["docaDriverVersion"],
    )
    assert driver["upgradePolicy"]["maxParallelUpgrades"] == 1


def test_custom_resources_wait_for_the_operator_release(prod_plan):
    operator = urn(prod_plan, "network-network-operator")
    policy = urn(prod_plan, "network-nic-cluster-policy")
    pool = urn(prod_plan, "network-ipoib-pool")
    assert operator in prod_plan.named("network-nic-cluster-policy")["dependencies"]
    assert {operator, policy} <= set(prod_plan.named("network-ipoib-pool")["dependencies"])
    assert {operator, policy, pool} <= set(prod_plan.named("network-ipoib-network")["dependencies"])


def test_ipoib_network_fields_exist_upstream_and_follow_settings(prod_plan):
    version = "v" + inputs(prod_plan, "network-network-operator")["version"]
    network = inputs(prod_plan, "network-ipoib-network")
    schema = spec_schema("network-operator", version, "mellanox.com_ipoibnetworks.yaml", crd_version="v1alpha1")
    assert unknown_fields(network["spec"], schema) == []
    assert crd_schema_errors(network["spec"], schema) == []
    ipoib = stack_doc("prod")["network"]["infiniband"]["ipoibNetwork"]
    gpu_interfaces = {n["infiniband"]["interface"] for n in stack_doc("prod")["nodes"] if n["role"] == "gpu"}
    assert network["metadata"] == {"name": ipoib["name"]}
    assert network["spec"]["networkNamespace"] == ipoib["namespace"]
    assert {network["spec"]["master"]} == gpu_interfaces
    assert json.loads(network["spec"]["ipam"]) == {"type": "nv-ipam", "poolName": ipoib["name"]}
    # Multus, the IPoIB CNI and nv-ipam run (on GPU nodes) for it.
    spec = inputs(prod_plan, "network-nic-cluster-policy")["spec"]
    assert set(spec["secondaryNetwork"]) == {"multus", "cniPlugins", "ipoib"}
    assert spec["nvIpam"]["enableWebhook"] is False


def test_ipoib_pool_follows_settings(prod_plan):
    pool = inputs(prod_plan, "network-ipoib-pool")
    ipoib = stack_doc("prod")["network"]["infiniband"]["ipoibNetwork"]
    assert (pool["apiVersion"], pool["kind"]) == ("nv-ipam.nvidia.com/v1alpha1", "IPPool")
    assert pool["metadata"] == {"name": ipoib["name"], "namespace": "nvidia-network-operator"}
    assert pool["spec"] == {
        "subnet": ipoib["range"],
        "perNodeBlockSize": ipoib["perNodeBlockSize"],
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": ["gpu"]}]}]
        },
    }


def test_ipoib_pool_fields_exist_upstream(prod_plan):
    # nv-ipam's CRD is not in the chart; upstream keeps it under the nv-ipam build the operator deploys.
    schema = spec_schema(
        "nvidia-k8s-ipam", "network-operator-v26.4.1", "nv-ipam.nvidia.com_ippools.yaml", crd_version="v1alpha1"
    )
    spec = inputs(prod_plan, "network-ipoib-pool")["spec"]
    assert unknown_fields(spec, schema) == []
    assert crd_schema_errors(spec, schema) == []


def test_without_ipoib_network_no_multus_and_empty_output(lab_plan):
    assert stack_doc("lab")["network"]["infiniband"]["ipoibNetwork"]["enabled"] is False
    names = {r["name"] for r in lab_plan.resources}
    assert not {"network-ipoib-pool", "network-ipoib-network"} & names
    spec = inputs(lab_plan, "network-nic-cluster-policy")["spec"]
    assert "secondaryNetwork" not in spec and "nvIpam" not in spec
    assert inputs(lab_plan, "network-cni")["values"]["cni"] == {"exclusive": True}
    assert lab_plan.outputs["ibNetworkName"] == ""


def test_without_gpu_nodes_no_infiniband_at_all():
    def mutate(raw):
        raw["nodes"] = [n for n in raw["nodes"] if n["role"] != "gpu"]
        raw["scheduling"]["teams"] = []  # the lab team's GPU flavor would name a model no node has

    plan = evaluate("lab", mutate)
    names = {r["name"] for r in plan.resources}
    assert not [n for n in names if n.endswith("-infiniband")]
    assert not {"network-network-operator", "network-nic-cluster-policy"} & names
    assert plan.outputs["rdmaResourceName"] == ""
    assert plan.outputs["cni"] == "cilium"


# ---------------------------------------------------------------------------------------------
# Outputs and settings rules
# ---------------------------------------------------------------------------------------------


def test_outputs(prod_plan, lab_plan, calico_plan):
    assert (prod_plan.outputs["cni"], prod_plan.outputs["rdmaResourceName"], prod_plan.outputs["ibNetworkName"]) == (
        "cilium",
        "rdma/ib",
        "default/ib-net",
    )
    assert (lab_plan.outputs["cni"], lab_plan.outputs["rdmaResourceName"], lab_plan.outputs["ibNetworkName"]) == (
        "cilium",
        "rdma/ib",
        "",
    )
    assert calico_plan.outputs["cni"] == "calico"


def test_datagram_mode_caps_the_mtu():
    found = problems(mutate=lambda raw: raw["network"]["infiniband"].update(mtu=65520))
    assert len(found) == 1 and found[0].startswith("network.infiniband.mtu: 65520 is above 4092")

    def connected_fdr(raw):  # connected mode exists only before Enhanced IPoIB (EDR HCAs and later)
        raw["network"]["infiniband"].update(mtu=65520, mode="connected")
        raw["acceptance"]["nccl"].update(ibGeneration="FDR", ibFloorFraction=0.5)
        raw["monitoring"]["thresholds"]["ibMinRateGbps"] = 50  # below a 4X FDR port's 56 Gb/s

    assert problems(mutate=connected_fdr) == []


def test_cluster_cidr_must_hold_a_pod_range_per_node():
    found = problems(mutate=lambda raw: raw["network"].update(clusterCidr="10.42.0.0/20"))
    assert found == [
        "network.clusterCidr: 10.42.0.0/20 holds 16 per-node /24 pod ranges but there are 50 nodes; "
        "choose a larger range (e.g. a /18)"
    ]


def test_ipoib_pool_must_fit_every_gpu_node():
    found = problems(mutate=lambda raw: raw["network"]["infiniband"]["ipoibNetwork"].update(range="10.31.0.0/24"))
    assert len(found) == 1 and found[0].startswith(
        "network.infiniband.ipoibNetwork.perNodeBlockSize: 15 GPU nodes x 256 addresses do not fit in 10.31.0.0/24"
    )


def test_ipoib_network_needs_one_interface_name():
    def mutate(raw):
        raw["nodes"][node_index(raw, "gpu-03")]["infiniband"]["interface"] = "ib1"

    found = problems(mutate=mutate)
    index = node_index(stack_doc("prod"), "gpu-03")
    assert len(found) == 1 and found[0].startswith(f"nodes[{index}].infiniband.interface: 'ib1' differs")

    def without_network(raw):
        mutate(raw)
        raw["network"]["infiniband"]["ipoibNetwork"]["enabled"] = False

    assert problems(mutate=without_network) == []


def test_the_upstream_checks_catch_a_misspelt_key():
    # The checks above pass only because the keys are right: a typo is reported with its path.
    cilium = upstream_values("cilium", stack_doc("prod")["charts"]["cilium"]["version"])
    assert unknown_value_paths({"ipam": {"mdoe": "cluster-pool"}, "tolerations": [{"opertor": "Exists"}]}, cilium) == [
        "ipam.mdoe",
        "tolerations[0].opertor",
    ]
    schema = spec_schema("network-operator", "v26.4.1", "mellanox.com_nicclusterpolicies.yaml", crd_version="v1alpha1")
    typo = {"rdmaSharedDevicePlugin": {"image": "x", "resourceName": "ib"}, "tolerations": [{"key": "a"}]}
    assert unknown_fields(typo, schema) == ["rdmaSharedDevicePlugin.resourceName"]
    assert crd_schema_errors({"rdmaSharedDevicePlugin": {"version": "x"}}, schema) == [
        "rdmaSharedDevicePlugin: 'image' is a required property"
    ]
