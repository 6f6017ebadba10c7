"""SchedulingStack: Kueue owns quota, Volcano only places gangs, every team gets a queue and a credential.

Checked on the plan the engine would receive: every Kueue object against the upstream CRDs, the
chart values against upstream values.yaml, where admitted workloads can land (computed from the
flavors, ClusterQueues and the nodes' labels and taints), what each team's credential can reach,
and what bad scheduling settings say.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import kubernetes_validate  # requirements-dev.txt: Kubernetes' own JSON schemas, offline
import pytest
import yaml

from components.cluster import GPU_TAINT, node_labels, node_taints
from components.scheduling_stack import (
    KUEUE_CHART_MANAGER_CONFIG,
    KUEUE_FRAMEWORKS,
    TEAM_LABEL,
    team_kubeconfig,
)
from settings import load
from stacks import engine
from tests.conftest import ROOT, evaluate, problems, run_plan, stack_doc, tolerates
from tests.upstream import crd_schema, crd_schema_errors, spec_schema, unknown_value_paths, upstream_values

KUEUE = ("kueue", "v0.19.2")
KIND_FILES = {
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "Topology": "kueue.x-k8s.io_topologies.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
}
H100 = "nvidia-h100-80gb-hbm3"


def kueue(plan: engine.Plan, kind: str) -> list[dict[str, Any]]:
    return [r["inputs"] for r in plan.by_type(f"kubernetes:kueue.x-k8s.io/v1beta2:{kind}")]


def with_topology(raw: dict) -> None:
    for i, node in enumerate(n for n in raw["nodes"] if n["role"] == "gpu"):
        node["topology"] = {"block": f"block-{i // 8}", "rack": f"rack-{i // 4}"}


@pytest.fixture(scope="module")
def topology_plan() -> engine.Plan:
    return evaluate("prod", with_topology)


# ---------------------------------------------------------------------------------------------
# Upstream schemas and values
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["prod", "lab", "topology"])
def test_every_kueue_object_validates_against_the_v1beta2_crds(stack, request, prod_plan, lab_plan):
    plan = {"prod": prod_plan, "lab": lab_plan}.get(stack) or request.getfixturevalue("topology_plan")
    checked = 0
    for kind, file in KIND_FILES.items():
        for obj in kueue(plan, kind):
            assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
            if kind == "WorkloadPriorityClass":
                top = {k: v for k, v in obj.items() if k != "metadata"}
                errors = crd_schema_errors(top, crd_schema(*KUEUE, file, crd_version="v1beta2"))
            else:
                errors = crd_schema_errors(obj["spec"], spec_schema(*KUEUE, file, crd_version="v1beta2"))
            assert errors == [], (kind, obj["metadata"]["name"], errors)
            checked += 1
    assert checked >= (5 if stack == "lab" else 12)
    assert bool(kueue(plan, "Topology")) == (stack == "topology")


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_cluster_queues_satisfy_the_crd_rules_jsonschema_cannot_check(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    flavors = {f["metadata"]["name"] for f in kueue(plan, "ResourceFlavor")}
    for cq in kueue(plan, "ClusterQueue"):
        spec = cq["spec"]
        for group in spec["resourceGroups"]:
            for flavor in group["flavors"]:
                # CEL: each flavor lists exactly the covered resources; flavors must exist.
                assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
                assert flavor["name"] in flavors
                if "cohortName" not in spec:
                    assert all("borrowingLimit" not in r for r in flavor["resources"])
        # borrowWithinCohort may not be combined with fair sharing (which the manager config enables).
        assert "borrowWithinCohort" not in spec["preemption"]


def test_local_queues_point_at_their_teams_cluster_queue(prod_plan):
    queues = {
        (q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"]
        for q in kueue(prod_plan, "LocalQueue")
    }
    expected = {(ns, "default"): team for team, nss in prod_plan.outputs["teamNamespaces"].items() for ns in nss}
    assert queues == expected
    assert expected[("llm-eval", "default")] == "llm"


def _release(plan: engine.Plan, name: str) -> dict[str, Any]:
    return plan.named(f"scheduling-{name}")["inputs"]


def test_helm_values_keys_exist_upstream(prod_plan):
    for chart, version, name in (("kueue", "0.19.2", "kueue"), ("volcano", "1.15.1", "volcano")):
        values = _release(prod_plan, name)["values"]
        assert unknown_value_paths(values, upstream_values(chart, version)) == [], chart
    assert _release(prod_plan, "kueue")["version"] == "0.19.2"
    assert _release(prod_plan, "kueue")["chart"] == "oci://registry.k8s.io/kueue/charts/kueue"


def test_kueue_manager_config_keeps_the_charts_settings_and_adds_the_platforms(prod_plan):
    chart_default = yaml.safe_load(upstream_values("kueue", "0.19.2")["managerConfig"]["controllerManagerConfigYaml"])
    ours = yaml.safe_load(_release(prod_plan, "kueue")["values"]["managerConfig"]["controllerManagerConfigYaml"])
    for key, value in chart_default.items():
        if key != "integrations":
            assert ours[key] == value == KUEUE_CHART_MANAGER_CONFIG[key], key
    assert ours["integrations"]["frameworks"] == KUEUE_FRAMEWORKS
    assert {
        "batch/job",
        "jobset.x-k8s.io/jobset",
        "kubeflow.org/pytorchjob",
        "ray.io/rayjob",
        "ray.io/raycluster",
        "pod",
    } <= set(KUEUE_FRAMEWORKS)
    assert ours["fairSharing"]["preemptionStrategies"]
    assert ours["waitForPodsReady"] == {
        "timeout": "900s",
        "blockAdmission": False,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
    }
    assert ours["manageJobsWithoutQueueName"] is True
    assert ours["managedJobsNamespaceSelector"] == {"matchLabels": {"ml-platform.io/kueue-managed": "true"}}
    assert ours["resources"] == {"excludeResourcePrefixes": ["rdma/ib"]}


def test_wait_for_pods_ready_comes_from_settings():
    def mutate(raw):
        raw["scheduling"]["waitForPodsReady"] = {"timeoutSeconds": 300, "backoffLimitCount": 5}

    plan = evaluate("lab", mutate)
    config = yaml.safe_load(_release(plan, "kueue")["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["waitForPodsReady"]["timeout"] == "300s"
    assert config["waitForPodsReady"]["requeuingStrategy"]["backoffLimitCount"] == 5


def test_volcano_never_evicts_and_has_no_queue_of_its_own(prod_plan):
    conf = yaml.safe_load(_release(prod_plan, "volcano")["values"]["custom"]["scheduler_config_override"])
    actions = [a.strip() for a in conf["actions"].split(",")]
    assert "allocate" in actions and not {"preempt", "reclaim"} & set(actions)
    plugins = {p["name"]: p for tier in conf["tiers"] for p in tier["plugins"]}
    assert "gang" in plugins and plugins["gang"]["enablePreemptable"] is False
    # No Volcano Queue objects: only the scheduler's own permissive `default` queue (no capability).
    assert not [r for r in prod_plan.resources if "scheduling.volcano.sh" in r["type"]]


def test_custom_resources_wait_for_the_charts_that_install_their_crds(prod_plan):
    kueue_urn = prod_plan.named("scheduling-kueue")["urn"]
    for r in prod_plan.resources:
        if r["type"].startswith("kubernetes:kueue.x-k8s.io/"):
            assert kueue_urn in r["dependencies"], r["name"]


# ---------------------------------------------------------------------------------------------
# Where admitted workloads land (Kueue's flavor assignment, computed from the plan)
# ---------------------------------------------------------------------------------------------


def eligible_flavors(plan: engine.Plan, cq: dict, requests: dict[str, int], tolerations: list[dict]) -> list[str]:
    """Kueue's rules for one pod set: a flavor needs its nodeTaints tolerated (by the pod or by the
    flavor's own tolerations) and quota (nominal, or borrowable in the cohort) for every resource requested."""
    flavors = {f["metadata"]["name"]: f["spec"] for f in kueue(plan, "ResourceFlavor")}
    cohort = [q["spec"] for q in kueue(plan, "ClusterQueue") if q["spec"].get("cohortName") == cq.get("cohortName")]
    result = []
    for group in cq["resourceGroups"]:
        for entry in group["flavors"]:
            spec = flavors[entry["name"]]
            all_tolerations = tolerations + spec.get("tolerations", [])
            taints = [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in spec.get("nodeTaints", [])]
            if not all(any(tolerates(t, taint) for t in all_tolerations) for taint in taints):
                continue
            if all(_available(cq, cohort, entry["name"], res) for res, qty in requests.items() if qty > 0):
                result.append(entry["name"])
    return result


def _nominal(cq: dict, flavor: str, resource: str) -> float:
    for group in cq["resourceGroups"]:
        for entry in group["flavors"]:
            if entry["name"] == flavor:
                return float(
                    next(r["nominalQuota"] for r in entry["resources"] if r["name"] == resource).rstrip("TiG") or 0
                )
    return 0.0


def _available(cq: dict, cohort: list[dict], flavor: str, resource: str) -> bool:
    pool = cohort if "cohortName" in cq else [cq]
    return any(_nominal(q, flavor, resource) > 0 for q in pool) and any(
        e["name"] == flavor for g in cq["resourceGroups"] for e in g["flavors"]
    )


def landing_nodes(plan_flavor: dict, stack: str) -> list[Any]:
    settings = load(stack_doc(stack))
    wanted = plan_flavor["spec"].get("nodeLabels", {})
    return [n for n in settings.nodes if wanted.items() <= node_labels(n).items()]


GPU_POD_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_admitted_gpu_workloads_land_only_on_gpu_nodes_and_tolerate_their_taint(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    flavors = {f["metadata"]["name"]: f for f in kueue(plan, "ResourceFlavor")}
    gpu_job = {"cpu": 8, "memory": 64, "nvidia.com/gpu": 8}
    for cq in kueue(plan, "ClusterQueue"):
        assigned = eligible_flavors(plan, cq["spec"], gpu_job, [GPU_POD_TOLERATION])
        assert assigned, f"team {cq['metadata']['name']} cannot run a GPU job"
        for name in assigned:
            flavor = flavors[name]
            nodes = landing_nodes(flavor, stack)
            assert nodes and all(n.role == "gpu" for n in nodes), (name, [n.name for n in nodes])
            for node in nodes:
                for taint in node_taints(node):
                    pod_tolerations = [GPU_POD_TOLERATION, *flavor["spec"].get("tolerations", [])]
                    assert any(tolerates(t, taint) for t in pod_tolerations)
        # A GPU job that forgot the toleration is never admitted onto any flavor (it waits, visibly).
        assert eligible_flavors(plan, cq["spec"], gpu_job, []) == []


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_a_cpu_only_job_never_gets_a_gpu_flavor(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    flavors = {f["metadata"]["name"]: f for f in kueue(plan, "ResourceFlavor")}
    for cq in kueue(plan, "ClusterQueue"):
        # Whatever the cpu flavor's load: every flavor the job could ever get is listed here.
        assigned = eligible_flavors(plan, cq["spec"], {"cpu": 4, "memory": 16}, [])
        assert assigned == ["cpu"], (cq["metadata"]["name"], assigned)
        assert all(n.role == "cpu" for n in landing_nodes(flavors["cpu"], stack))
    # The GPU taint really is on every GPU node the GPU flavors select.
    assert all(GPU_TAINT in node_taints(n) for n in load(stack_doc(stack)).gpu_nodes)


def test_cpu_flavor_comes_first_and_offers_no_gpus(prod_plan):
    for cq in kueue(prod_plan, "ClusterQueue"):
        names = [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]]
        assert names[0] == "cpu"
        assert _nominal(cq["spec"], "cpu", "nvidia.com/gpu") == 0


def test_gpu_flavor_selects_the_labels_the_bootstrap_sets(prod_plan):
    flavor = next(f for f in kueue(prod_plan, "ResourceFlavor") if f["metadata"]["name"] == H100)
    gpu01 = next(n for n in load(stack_doc("prod")).nodes if n.name == "gpu-01")
    assert flavor["spec"]["nodeLabels"].items() <= node_labels(gpu01).items()
    assert flavor["spec"]["nodeTaints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert "tolerations" not in flavor["spec"]  # would make Kueue ignore the taint (see module docstring)


def test_topology_becomes_node_labels_a_kueue_topology_and_a_topology_aware_flavor(topology_plan):
    [topology] = kueue(topology_plan, "Topology")
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == [
        "ml-platform.io/ib-block",
        "ml-platform.io/ib-rack",
        "kubernetes.io/hostname",
    ]
    flavor = next(f for f in kueue(topology_plan, "ResourceFlavor") if f["metadata"]["name"] == H100)
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
    raw = stack_doc("prod")
    with_topology(raw)
    gpu09 = next(n for n in load(raw).nodes if n.name == "gpu-09")
    assert node_labels(gpu09)["ml-platform.io/ib-block"] == "block-1"
    assert node_labels(gpu09)["ml-platform.io/ib-rack"] == "rack-2"
    patch = topology_plan.named("gpu-09-labels-taints")
    assert patch["inputs"]["metadata"]["labels"]["ml-platform.io/ib-block"] == "block-1"


def test_no_topology_without_node_topology(prod_plan):
    assert kueue(prod_plan, "Topology") == []
    assert all("topologyName" not in f["spec"] for f in kueue(prod_plan, "ResourceFlavor"))


# ---------------------------------------------------------------------------------------------
# Teams: namespaces, RBAC, credentials
# ---------------------------------------------------------------------------------------------


def team_namespace_objects(plan: engine.Plan) -> dict[str, dict]:
    return {ns["inputs"]["metadata"]["name"]: ns["inputs"] for ns in plan.by_type("kubernetes:core/v1:Namespace")}


def test_team_namespaces_carry_team_kueue_and_pod_security_labels(prod_plan):
    namespaces = team_namespace_objects(prod_plan)
    assert namespaces["research"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert namespaces["llm-train"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for team, nss in prod_plan.outputs["teamNamespaces"].items():
        for ns in nss:
            labels = namespaces[ns]["metadata"]["labels"]
            assert labels[TEAM_LABEL] == team and labels["ml-platform.io/kueue-managed"] == "true"


def _bindings_of(plan: engine.Plan, subject: dict) -> list[dict]:
    found = []
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for b in plan.by_type(f"kubernetes:rbac.authorization.k8s.io/v1:{kind}"):
            subjects = b["inputs"].get("subjects", [])
            if any(all(s.get(k) == v for k, v in subject.items()) for s in subjects):
                found.append({"kind": kind, **b["inputs"]})
    return found


def test_one_teams_credential_cannot_reach_another_teams_namespaces(prod_plan):
    teams = prod_plan.outputs["teamNamespaces"]
    roles = {
        (r["inputs"]["metadata"]["namespace"], r["inputs"]["metadata"]["name"]): r["inputs"]["rules"]
        for r in prod_plan.by_type("kubernetes:rbac.authorization.k8s.io/v1:Role")
    }
    secrets = [s["inputs"] for s in prod_plan.by_type("kubernetes:core/v1:Secret")]
    for team, own in teams.items():
        # The kubeconfig's token is the token of this ServiceAccount (the Secret the controller fills).
        token_secret = next(s for s in secrets if s["metadata"]["name"] == f"{team}-ci-token")
        assert token_secret["type"] == "kubernetes.io/service-account-token"
        account = token_secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
        subject = {"kind": "ServiceAccount", "name": account, "namespace": token_secret["metadata"]["namespace"]}
        bindings = _bindings_of(prod_plan, subject)
        assert {b["kind"] for b in bindings} == {"RoleBinding"}, "no cluster-wide binding for a team credential"
        reachable = {b["metadata"]["namespace"] for b in bindings}
        assert reachable == set(own), (team, reachable)
        for other, theirs in teams.items():
            if other != team:
                assert not reachable & set(theirs), (team, other)
        for b in bindings:
            assert b["roleRef"]["kind"] == "Role"  # namespace-scoped: grants nothing outside its namespace
            rules = roles[(b["metadata"]["namespace"], b["roleRef"]["name"])]
            granted = {res for rule in rules for res in rule["resources"]}
            # Nothing that could widen the grant or leave the namespace's limits.
            assert not granted & {
                "roles",
                "rolebindings",
                "resourcequotas",
                "limitranges",
                "namespaces",
                "serviceaccounts/token",
            }
            assert not {"escalate", "bind", "impersonate", "*"} & {v for rule in rules for v in rule["verbs"]}
    # Groups, too, are bound only inside their own team's namespaces.
    groups = stack_doc("prod")["scheduling"]["teams"]
    for team in groups:
        for group in team["groups"]:
            reachable = {b["metadata"]["namespace"] for b in _bindings_of(prod_plan, {"kind": "Group", "name": group})}
            assert reachable == set(teams[team["name"]])


def test_team_kubeconfig_output_is_secret_and_the_token_never_appears_in_the_plan(prod_plan):
    assert prod_plan.outputs["teamKubeconfigs"] == engine.SECRET
    for s in prod_plan.by_type("kubernetes:core/v1:Secret"):
        if s["inputs"]["metadata"]["name"].endswith("-ci-token"):
            assert "data" not in s["inputs"] and "stringData" not in s["inputs"]
            assert "data" in prod_plan.options[s["urn"]]["additionalSecretOutputs"]


def test_team_kubeconfig_holds_endpoint_ca_token_and_namespace():
    data = {"token": base64.b64encode(b"tok-123").decode(), "ca.crt": "Q0EK"}
    config = yaml.safe_load(team_kubeconfig("vision", "vision", "https://10.20.0.10:6443", data))
    assert config["clusters"][0]["cluster"] == {
        "server": "https://10.20.0.10:6443",
        "certificate-authority-data": "Q0EK",
    }
    assert config["users"][0]["user"] == {"token": "tok-123"}
    assert config["contexts"][0]["context"]["namespace"] == "vision"


def test_priority_classes_and_the_policy_that_limits_a_team_to_its_own(prod_plan):
    classes = {c["metadata"]["name"]: c["value"] for c in kueue(prod_plan, "WorkloadPriorityClass")}
    assert classes == {"production": 1000, "research": 100, "preemptible": 10}
    policy = next(
        p["inputs"]
        for p in prod_plan.by_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
        if p["inputs"]["metadata"]["name"] == "research-priority-classes"
    )
    expression = policy["spec"]["validations"][0]["expression"]
    assert "'research', 'preemptible'" in expression and "production" not in expression


def test_limit_range_gives_defaults_so_no_pod_escapes_kueue_accounting(prod_plan):
    ranges = [r["inputs"] for r in prod_plan.by_type("kubernetes:core/v1:LimitRange")]
    assert {r["metadata"]["namespace"] for r in ranges} == {"llm-train", "llm-eval", "vision", "research"}
    assert all(r["spec"]["limits"][0]["defaultRequest"]["cpu"] for r in ranges)
    quotas = [r["inputs"]["spec"]["hard"] for r in prod_plan.by_type("kubernetes:core/v1:ResourceQuota")]
    # Kueue is the only compute quota: the namespace quota counts objects only.
    assert quotas and all(not any(k.startswith(("requests.", "limits.", "cpu", "memory")) for k in q) for q in quotas)


# ---------------------------------------------------------------------------------------------
# Bad input: exit 2, the field named, nothing registered
# ---------------------------------------------------------------------------------------------


def _teams(raw: dict) -> list[dict]:
    return raw["scheduling"]["teams"]


BAD_INPUTS = {
    "gpu quota above schedulable": (
        lambda raw: _teams(raw)[2]["quotas"][H100].update({"gpus": 24}),
        f"scheduling.teams: nominal GPU quotas on flavor '{H100}' add up to 128 (llm 64, vision 40, research 24) "
        "but its nodes offer 120 schedulable GPUs",
    ),
    "flavor with no node": (
        lambda raw: _teams(raw)[1]["quotas"].update({"nvidia-a100": {"gpus": 1, "cpu": 1, "memory": "1Gi"}}),
        "scheduling.teams[1].quotas.nvidia-a100: no node provides flavor 'nvidia-a100'",
    ),
    "borrowing without cohort": (
        lambda raw: raw["scheduling"].update({"cohort": None}),
        f"scheduling.teams[0].quotas.{H100}.lendingLimit: only applies inside a cohort",
    ),
    "duplicate team": (
        lambda raw: _teams(raw)[1].update({"name": "llm", "namespaces": ["vision"]}),
        "scheduling.teams[1].name: team 'llm' is defined more than once",
    ),
    "duplicate namespace": (
        lambda raw: _teams(raw)[1].update({"namespaces": ["llm-eval"]}),
        "scheduling.teams[1].namespaces[0]: namespace 'llm-eval' belongs to more than one team",
    ),
    "platform namespace": (
        lambda raw: _teams(raw)[2].update({"namespaces": ["rook-ceph"]}),
        "scheduling.teams[2].namespaces[0]: namespace 'rook-ceph' is a platform namespace",
    ),
    "undefined priority class": (
        lambda raw: _teams(raw)[2].update({"priorityClasses": ["urgent"]}),
        "scheduling.teams[2].priorityClasses: 'urgent' is not defined",
    ),
    "rdma without privileged": (
        lambda raw: _teams(raw)[1].update({"podSecurity": "baseline"}),
        "scheduling.teams[1].podSecurity: team 'vision' runs RDMA pods, which need the IPC_LOCK capability",
    ),
    "gpus on the cpu flavor": (
        lambda raw: _teams(raw)[2]["quotas"]["cpu"].update({"gpus": 2}),
        "scheduling.teams[2].quotas.cpu.gpus: the cpu flavor has no GPUs",
    ),
    "topology on some GPU nodes only": (
        lambda raw: next(n for n in raw["nodes"] if n["name"] == "gpu-03").update(
            {"topology": {"block": "b0", "rack": "r0"}}
        ),
        "nodes[36].topology: GPU node 'gpu-02' has none but other GPU nodes do",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_scheduling_settings_name_the_field_and_the_fix(case):
    mutate, message = BAD_INPUTS[case]
    found = problems("prod", mutate)
    assert any(p.startswith(message) for p in found), found


def test_time_slicing_counts_toward_schedulable_gpus():
    # lab: 2 L40S x 4 replicas = 8; quotas adding up to 9 are refused, allowOvercommit lets them through
    # as long as no single team asks for more than the 8 that exist.
    def nine(raw):
        raw["scheduling"]["teams"][0]["quotas"]["nvidia-l40s"]["gpus"] = 5
        second = {**raw["scheduling"]["teams"][0], "name": "second", "namespaces": ["second"], "groups": []}
        raw["scheduling"]["teams"].append({**second, "quotas": {"nvidia-l40s": {**second["quotas"]["nvidia-l40s"]}}})
        raw["scheduling"]["teams"][1]["quotas"]["nvidia-l40s"]["gpus"] = 4

    assert any("add up to 9 (lab 5, second 4) but its nodes offer 8" in p for p in problems("lab", nine))

    def overcommit(raw):
        nine(raw)
        raw["scheduling"]["allowOvercommit"] = True

    assert problems("lab", overcommit) == []


@pytest.mark.parametrize("gpus", [9, 64])
def test_one_team_above_the_whole_inventory_is_refused_even_with_overcommit(gpus):
    def greedy(raw):
        raw["scheduling"]["allowOvercommit"] = True
        raw["scheduling"]["teams"][0]["quotas"]["nvidia-l40s"]["gpus"] = gpus

    assert any(
        p.startswith(
            f"scheduling.teams[0].quotas.nvidia-l40s.gpus: {gpus} GPUs on 'nvidia-l40s', but the inventory "
            "holds 8 schedulable there in all"
        )
        for p in problems("lab", greedy)
    )


def test_overquota_exits_2_and_registers_nothing(tmp_path: Path):
    def overquota(config):
        config["ml-platform:scheduling"]["teams"][0]["quotas"][H100]["gpus"] = 80

    proc, out = run_plan(tmp_path, overquota)
    assert proc.returncode == 2 and not out.exists()
    assert f"scheduling.teams: nominal GPU quotas on flavor '{H100}' add up to 136" in proc.stderr
    assert "scheduling.allowOvercommit: true" in proc.stderr


# ---------------------------------------------------------------------------------------------
# examples/workloads: valid objects that really run on this stack's prod settings
# ---------------------------------------------------------------------------------------------

WORKLOADS = ROOT / "examples" / "workloads"
K8S_VERSION = "1.35.0"  # the Kubernetes minor of cluster.rke2Version (v1.35.x+rke2r1)
CRDS = {
    ("kubeflow.org/v1", "PyTorchJob"): (("training-operator", "v1.9.4", "kubeflow.org_pytorchjobs.yaml"), "v1"),
    ("ray.io/v1", "RayJob"): (("kuberay", "v1.7.0", "ray.io_rayjobs.yaml"), "v1"),
}


def example_docs() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(WORKLOADS.glob("*.yaml")):
        docs += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def pod_specs(doc: dict) -> list[dict]:
    """Every pod spec a workload object will create."""
    spec = doc["spec"]
    if doc["kind"] == "Job":
        return [spec["template"]["spec"]]
    if doc["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in spec["pytorchReplicaSpecs"].values()]
    if doc["kind"] == "RayJob":
        cluster = spec["rayClusterSpec"]
        return [cluster["headGroupSpec"]["template"]["spec"]] + [
            g["template"]["spec"] for g in cluster["workerGroupSpecs"]
        ]
    return []


def test_examples_cover_the_four_workload_shapes():
    kinds = {(name, doc["kind"]) for name, doc in example_docs()}
    assert {
        ("pytorch-ddp-job.yaml", "Job"),
        ("pytorchjob.yaml", "PyTorchJob"),
        ("rayjob.yaml", "RayJob"),
        ("tf-multiworker-job.yaml", "Job"),
    } <= kinds


@pytest.mark.parametrize("name,doc", example_docs(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_example_validates_against_kubernetes_and_upstream_crd_schemas(name, doc):
    key = (doc["apiVersion"], doc["kind"])
    if key in CRDS:
        (parts, version) = CRDS[key]
        body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
        assert crd_schema_errors(body, crd_schema(*parts, crd_version=version)) == []
        for spec in pod_specs(doc):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": spec}
            kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kubernetes_schema_check_really_refuses_a_wrong_field():
    job = next(doc for name, doc in example_docs() if doc["kind"] == "Job")
    bad = yaml.safe_load(yaml.safe_dump(job))
    bad["spec"]["template"]["spec"]["schedulername"] = "volcano"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    "name,doc",
    [d for d in example_docs() if d[1]["kind"] != "Service"],
    ids=lambda v: v if isinstance(v, str) else v["kind"],
)
def test_example_fits_the_prod_teams_queues_and_gangs(name, doc, prod_plan):
    settings = load(stack_doc("prod"))
    labels = doc["metadata"]["labels"]
    team = next(t for t in settings.scheduling.teams if doc["metadata"]["namespace"] in t.namespace_names)
    # Two labels: the team's LocalQueue and a priority class the team may use.
    assert labels["kueue.x-k8s.io/queue-name"] == "default"
    assert labels["kueue.x-k8s.io/priority-class"] in team.priority_classes
    # One scheduler: Volcano places every pod.
    specs = pod_specs(doc)
    assert specs and all(spec["schedulerName"] == "volcano" for spec in specs if doc["kind"] != "RayJob")
    if doc["kind"] == "RayJob":
        assert labels["ray.io/scheduler-name"] == "volcano"
    if doc["kind"] == "Job":
        assert doc["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"] == str(
            doc["spec"]["parallelism"]
        )
    if doc["kind"] == "PyTorchJob":
        replicas = sum(r["replicas"] for r in doc["spec"]["pytorchReplicaSpecs"].values())
        assert doc["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == replicas
    cq = next(q["spec"] for q in kueue(prod_plan, "ClusterQueue") if q["metadata"]["name"] == team.name)
    for spec in specs:
        for container in spec["containers"]:
            limits = container["resources"]["limits"]
            gpus = int(limits.get("nvidia.com/gpu", 0))
            tolerations = spec.get("tolerations", [])
            requests = {"cpu": 1, "nvidia.com/gpu": gpus}
            assigned = eligible_flavors(prod_plan, cq, requests, tolerations)
            assert assigned, (name, container["name"])
            if gpus:
                assert assigned == [H100]
                assert any(m["mountPath"] == "/dev/shm" for m in container["volumeMounts"])
            if "rdma/ib" in limits:
                assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"]
                assert team.rdma and team.pod_security == "privileged"
            else:
                assert "IPC_LOCK" not in str(container.get("securityContext", {}))
