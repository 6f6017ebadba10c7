"""SchedulingStack: Kueue owns quota, Volcano only places gangs, every team gets a queue and a credential.

Checked on the plan the engine would receive: every Kueue object against the upstream CRDs, the
chart values against upstream values.yaml, where admitted workloads can land (computed from the
flavors, ClusterQueues and the nodes' labels and taints), what each team's credential can reach,
and what bad scheduling settings say.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import celpy  # requirements-dev.txt: cel-python, a real CEL implementation
import kubernetes_validate  # requirements-dev.txt: Kubernetes' own JSON schemas, offline
import pytest
import yaml

from components.cluster.config import GPU_TAINT, node_labels, node_taints
from components.scheduling.config import KUEUE_CHART_MANAGER_CONFIG, TEAM_LABEL
from settings import load
from settings.rules.scheduling import platform_namespaces
from settings.scheduling import gpu_flavor_name
from stacks import diff, engine
from stacks.namespaces import platform_created
from tests import podsecurity
from tests.conftest import ROOT, evaluate, problems, run_plan, stack_doc, tolerates
from tests.scheduling.admission import limit_ranged, resource_problems
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
    """The SchedulingStack's Kueue objects of `kind` (the acceptance checks' own gang queue is theirs, not a team's)."""
    return [
        r["inputs"]
        for r in plan.by_type(f"kubernetes:kueue.x-k8s.io/v1beta2:{kind}")
        if "AcceptanceChecks" not in (r["parent"] or "")
    ]


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
        if key == "metrics":  # the chart's, plus the per-ClusterQueue quota metrics the monitoring reads
            assert ours[key] == {**value, "enableClusterQueueResources": True}, key
        elif key != "integrations":
            assert ours[key] == value == KUEUE_CHART_MANAGER_CONFIG[key], key
    # prod installs every training operator: Kueue manages each installed kind, and nothing else.
    assert ours["integrations"]["frameworks"] == [
        "batch/job",
        "pod",
        "jobset.x-k8s.io/jobset",
        "trainer.kubeflow.org/trainjob",
        "ray.io/rayjob",
        "ray.io/raycluster",
    ]
    assert ours["fairSharing"]["preemptionStrategies"]
    assert ours["waitForPodsReady"] == {
        "timeout": "900s",
        "blockAdmission": False,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
    }
    assert ours["manageJobsWithoutQueueName"] is True
    assert ours["managedJobsNamespaceSelector"] == {"matchLabels": {"ml-platform.io/kueue-managed": "true"}}
    assert ours["resources"] == {"excludeResourcePrefixes": ["ephemeral-storage", "rdma/ib"]}


def test_wait_for_pods_ready_comes_from_settings():
    def mutate(raw):
        raw["scheduling"]["waitForPodsReady"] = {"timeoutSeconds": 300, "backoffLimitCount": 5}
        # The gang check must give up before Kueue would evict it (a settings rule): below the 300 s.
        raw.setdefault("acceptance", {}).setdefault("scheduling", {})["timeoutSeconds"] = 240

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
    # No Volcano Queue objects: only the scheduler's own permissive `default` queue (no capability). The one
    # Volcano object is the gang check's PodGroup.
    volcano = [r for r in prod_plan.resources if "scheduling.volcano.sh" in r["type"]]
    assert [r["type"].rsplit(":", 1)[1] for r in volcano] == ["PodGroup"]


def test_custom_resources_wait_for_the_charts_that_install_their_crds(prod_plan):
    kueue_urn = prod_plan.named("scheduling-kueue")["urn"]
    for r in prod_plan.resources:
        if r["type"].startswith("kubernetes:kueue.x-k8s.io/") and "AcceptanceChecks" not in (r["parent"] or ""):
            assert kueue_urn in r["dependencies"], r["name"]
    # The acceptance checks' own queue waits for their namespace, which waits for the whole platform.


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
    # Least privilege that works: RDMA teams baseline, the rest restricted, enforced, audited and warned.
    assert namespaces["research"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert namespaces["llm-train"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    for team, nss in prod_plan.outputs["teamNamespaces"].items():
        for ns in nss:
            labels = namespaces[ns]["metadata"]["labels"]
            assert labels[TEAM_LABEL] == team and labels["ml-platform.io/kueue-managed"] == "true"
            for mode in ("enforce", "audit", "warn"):
                assert labels[f"pod-security.kubernetes.io/{mode}"] in ("baseline", "restricted")


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_no_team_namespace_is_privileged(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    settings = load(stack_doc(stack))
    namespaces = team_namespace_objects(plan)
    for team in settings.scheduling.teams:
        for ns in team.namespace_names:
            level = namespaces[ns]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
            assert level == ("baseline" if team.rdma else "restricted"), (ns, level)


def test_privileged_is_no_longer_a_team_level():
    def privileged(raw):
        _teams(raw)[0]["podSecurity"] = "privileged"

    assert any(p.startswith("scheduling.teams[0].podSecurity") for p in problems("prod", privileged))


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
    accounts = [a["inputs"]["metadata"] for a in prod_plan.by_type("kubernetes:core/v1:ServiceAccount")]
    for team, own in teams.items():
        # The team's CI identity (its token is made by the team's `teams/` stack, tests/test_teams.py).
        account = next(a for a in accounts if a["name"] == f"{team}-ci")
        assert account["namespace"] == own[0]
        subject = {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
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
    # Groups, too, are bound only inside their own team's namespaces, under the groups prefix (no OIDC in prod:
    # `scheduling.groupsPrefix`), so an unprefixed group (a client certificate's O=) matches no team.
    groups = stack_doc("prod")["scheduling"]["teams"]
    for team in groups:
        for group in team["groups"]:
            assert not _bindings_of(prod_plan, {"kind": "Group", "name": group})
            bound = _bindings_of(prod_plan, {"kind": "Group", "name": f"oidc:{group}"})
            assert {b["metadata"]["namespace"] for b in bound} == set(teams[team["name"]])


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
        "scheduling.teams[1].namespaces[0]: namespace 'llm-eval' is also claimed by scheduling.teams[0].namespaces[1]",
    ),
    "platform namespace": (
        lambda raw: _teams(raw)[2].update({"namespaces": ["rook-ceph"]}),
        "scheduling.teams[2].namespaces[0]: namespace 'rook-ceph' is also claimed by storage.ceph.namespace",
    ),
    "undefined priority class": (
        lambda raw: _teams(raw)[2].update({"priorityClasses": ["urgent"]}),
        "scheduling.teams[2].priorityClasses: 'urgent' is not defined",
    ),
    "lending above nominal gpus": (
        lambda raw: _teams(raw)[0]["quotas"][H100].update({"lendingLimit": {"gpus": 65}}),
        f"scheduling.teams[0].quotas.{H100}.lendingLimit.gpus: 65 is above the nominal quota (64)",
    ),
    "lending above nominal memory": (
        lambda raw: _teams(raw)[0]["quotas"][H100].update({"lendingLimit": {"memory": "16Ti"}}),
        f"scheduling.teams[0].quotas.{H100}.lendingLimit.memory: 16Ti is above the nominal quota (15360Gi)",
    ),
    "trainer without jobset": (
        lambda raw: raw["scheduling"].update({"trainingOperators": {"trainer": True}}),
        "scheduling.trainingOperators.trainer: Kubeflow Trainer runs every TrainJob as a JobSet",
    ),
    "gpu models spelled differently": (
        lambda raw: next(n for n in raw["nodes"] if n["name"] == "gpu-02")["gpu"].update(
            {"model": "nvidia h100 80gb hbm3"}
        ),
        "nodes[36].gpu.model: 'nvidia h100 80gb hbm3' is the GPU model 'NVIDIA H100 80GB HBM3' of other nodes "
        "spelled differently",
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
    ("ray.io/v1", "RayJob"): (("kuberay", "v1.7.0", "ray.io_rayjobs.yaml"), "v1"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): (("jobset", "v0.12.0", "jobset.x-k8s.io_jobsets.yaml"), "v1alpha2"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): (
        ("kubeflow-trainer", "v2.3.0", "trainer.kubeflow.org_trainjobs.yaml"),
        "v1alpha1",
    ),
}
# The Kueue framework, the training operator that must be installed, and the resource (plural) per kind.
KINDS = {
    "Job": ("batch/job", None, "jobs"),
    "JobSet": ("jobset.x-k8s.io/jobset", "jobset", "jobsets"),
    "TrainJob": ("trainer.kubeflow.org/trainjob", "trainer", "trainjobs"),
    "RayJob": ("ray.io/rayjob", "kuberay", "rayjobs"),
}


def example_docs() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(WORKLOADS.glob("*.yaml")):
        docs += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def trainjob_pod_spec(doc: dict, plan: engine.Plan) -> dict:
    """The pod of a TrainJob's `node` Job as Trainer builds it: the ClusterTrainingRuntime's template,
    the TrainJob's image, command, env and resources, then its runtimePatches (merge by name)."""
    name = doc["spec"]["runtimeRef"]["name"]
    runtime = next(
        r["inputs"]["spec"]
        for r in plan.by_type(f"kubernetes:{TRAINER}:ClusterTrainingRuntime")
        if r["inputs"]["metadata"]["name"] == name
    )
    [node] = runtime["template"]["spec"]["replicatedJobs"]
    pod = yaml.safe_load(yaml.safe_dump(node["template"]["spec"]["template"]["spec"]))
    trainer = doc["spec"]["trainer"]
    container = pod["containers"][0]
    container.update({"image": trainer["image"], "command": trainer["command"], "env": trainer.get("env", [])})
    container["resources"] = trainer["resourcesPerNode"]
    for patch in doc["spec"].get("runtimePatches", []):
        for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            if job["name"] != node["name"]:
                continue
            extra = job["template"]["spec"]["template"]["spec"]
            for key, value in extra.items():
                if key == "containers":
                    for patched in value:
                        target = next(c for c in pod["containers"] if c["name"] == patched["name"])
                        target.update({k: v for k, v in patched.items() if k != "name"})
                else:
                    pod[key] = value
    return pod


TRAINER = "trainer.kubeflow.org/v1alpha1"


def pod_specs(doc: dict, plan: engine.Plan) -> list[dict]:
    """Every pod spec a workload object will create."""
    spec = doc["spec"]
    if doc["kind"] == "Job":
        return [spec["template"]["spec"]]
    if doc["kind"] == "JobSet":
        return [r["template"]["spec"]["template"]["spec"] for r in spec["replicatedJobs"]]
    if doc["kind"] == "TrainJob":
        return [trainjob_pod_spec(doc, plan)]
    if doc["kind"] == "RayJob":
        cluster = spec["rayClusterSpec"]
        submitter = [spec["submitterPodTemplate"]["spec"]] if "submitterPodTemplate" in spec else []
        return [
            cluster["headGroupSpec"]["template"]["spec"],
            *(g["template"]["spec"] for g in cluster["workerGroupSpecs"]),
        ] + submitter
    return []


def test_examples_cover_every_job_kind_teams_submit():
    kinds = {(name, doc["kind"]) for name, doc in example_docs()}
    assert {
        ("pytorch-ddp-job.yaml", "Job"),
        ("tf-multiworker-job.yaml", "Job"),
        ("trainjob.yaml", "TrainJob"),
        ("jobset.yaml", "JobSet"),
        ("rayjob.yaml", "RayJob"),
    } <= kinds


@pytest.mark.parametrize("name,doc", example_docs(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_example_validates_against_kubernetes_and_upstream_crd_schemas(name, doc, prod_plan):
    key = (doc["apiVersion"], doc["kind"])
    if key in CRDS:
        (parts, version) = CRDS[key]
        body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
        assert crd_schema_errors(body, crd_schema(*parts, crd_version=version)) == []
        for spec in pod_specs(doc, prod_plan):
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


WORKLOAD_DOCS = [d for d in example_docs() if d[1]["kind"] != "Service"]


@pytest.mark.parametrize("name,doc", WORKLOAD_DOCS, ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_example_fits_the_prod_teams_queues_and_gangs(name, doc, prod_plan):
    settings = load(stack_doc("prod"))
    team = next(t for t in settings.scheduling.teams if doc["metadata"]["namespace"] in t.namespace_names)
    specs = pod_specs(doc, prod_plan)
    assert specs
    # Gang: Volcano places every pod of a Job (min member = parallelism) and of a RayCluster (KubeRay's
    # batch scheduler); JobSets and TrainJobs are admitted whole by Kueue and guarded by waitForPodsReady.
    if doc["kind"] == "Job":
        assert all(spec["schedulerName"] == "volcano" for spec in specs)
        assert doc["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"] == str(
            doc["spec"]["parallelism"]
        )
    if doc["kind"] == "RayJob":
        assert doc["metadata"]["labels"]["ray.io/scheduler-name"] == "volcano"
    cq = next(q["spec"] for q in kueue(prod_plan, "ClusterQueue") if q["metadata"]["name"] == team.name)
    for spec in specs:
        for container in spec["containers"]:
            resources = container["resources"]
            gpus = int({**resources.get("requests", {}), **resources.get("limits", {})}.get("nvidia.com/gpu", 0))
            assigned = eligible_flavors(prod_plan, cq, {"cpu": 1, "nvidia.com/gpu": gpus}, spec.get("tolerations", []))
            assert assigned, (name, container["name"])
            if gpus:
                assert assigned == [H100]
                assert any(m["mountPath"] == "/dev/shm" for m in container["volumeMounts"])
            if "rdma/ib" in resources.get("limits", {}):
                assert team.rdma
            # No example needs IPC_LOCK: pinned memory comes from the hosts' memlock limit.
            assert "IPC_LOCK" not in str(container.get("securityContext", {}))


# ---------------------------------------------------------------------------------------------
# Admission: every policy the program installs, run on the examples and on what must be refused
# ---------------------------------------------------------------------------------------------


def policy_of(plan: engine.Plan, team: str) -> dict:
    return next(
        p["inputs"]["spec"]
        for p in plan.by_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
        if p["inputs"]["metadata"]["name"] == f"{team}-priority-classes"
    )


def policy_denials(policy: dict, obj: dict, resource: str) -> list[str]:
    """The policy's validations evaluated by a real CEL implementation (cel-python) on `obj`, as the
    API server evaluates them (`object`, `request.resource.resource`), when its rules match."""
    group = {"pods": "", "jobs": "batch"}.get(resource)
    rules = policy["matchConstraints"]["resourceRules"]
    if not any(resource in rule["resources"] and (group is None or group in rule["apiGroups"]) for rule in rules):
        return []
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(obj), "request": celpy.json_to_cel({"resource": {"resource": resource}})}
    return [
        v["message"]
        for v in policy["validations"]
        if not env.program(env.compile(v["expression"])).evaluate(activation)
    ]


@pytest.mark.parametrize("name,doc", WORKLOAD_DOCS, ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_example_is_admissible_under_every_policy_the_program_installs(name, doc, prod_plan):
    ns = doc["metadata"]["namespace"]
    namespace = team_namespace_objects(prod_plan)[ns]
    team = namespace["metadata"]["labels"][TEAM_LABEL]
    # The kind's operator is installed and Kueue manages it.
    framework, operator, resource = KINDS[doc["kind"]]
    config = yaml.safe_load(_release(prod_plan, "kueue")["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert framework in config["integrations"]["frameworks"]
    if operator:
        assert prod_plan.named(f"training-{operator}")
    # Its queue is a LocalQueue of its namespace.
    queues = {(q["metadata"]["namespace"], q["metadata"]["name"]) for q in kueue(prod_plan, "LocalQueue")}
    assert (ns, doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]) in queues
    # The team's priority policy (CEL) admits the object and each of its pods.
    policy = policy_of(prod_plan, team)
    assert policy_denials(policy, doc, resource) == []
    level = namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
    limit_range = next(
        r["inputs"]
        for r in prod_plan.by_type("kubernetes:core/v1:LimitRange")
        if r["inputs"]["metadata"]["namespace"] == ns
    )
    for spec in pod_specs(doc, prod_plan):
        pod = {"metadata": {"name": "p", "namespace": ns}, "spec": spec}
        assert policy_denials(policy, pod, "pods") == []
        assert podsecurity.violations(level, spec, {}) == [], (name, level)
        for container in spec["containers"]:
            assert resource_problems(limit_ranged(container, limit_range)) == [], (name, container["name"])


def test_priority_policy_refuses_what_a_team_may_not_ask_for(prod_plan):
    research = policy_of(prod_plan, "research")
    job = {
        "metadata": {"name": "j", "labels": {"kueue.x-k8s.io/priority-class": "research"}},
        "spec": {"template": {"spec": {"containers": []}}},
    }
    assert policy_denials(research, job, "jobs") == []
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "production"  # the llm and vision teams' class
    assert policy_denials(research, job, "jobs") == [
        "team research may use the priority classes research, preemptible only (label kueue.x-k8s.io/priority-class)"
    ]
    for klass in ("system-node-critical", "system-cluster-critical", "anything"):
        pod = {"metadata": {"name": "p"}, "spec": {"priorityClassName": klass, "containers": []}}
        assert len(policy_denials(research, pod, "pods")) == 1, klass
        template = {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"priorityClassName": klass}}}}
        assert len(policy_denials(research, template, "jobs")) == 1, klass
    # A team with every class (llm) is still refused the pod PriorityClass.
    llm = policy_of(prod_plan, "llm")
    pod = {"metadata": {"name": "p"}, "spec": {"priorityClassName": "system-node-critical", "containers": []}}
    assert len(policy_denials(llm, pod, "pods")) == 1
    # Every team has its policy, bound to its namespaces by the team label.
    bindings = {
        b["inputs"]["spec"]["policyName"]: b["inputs"]["spec"]
        for b in prod_plan.by_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
    }
    for team in prod_plan.outputs["teamNamespaces"]:
        binding = bindings[f"{team}-priority-classes"]
        assert binding["validationActions"] == ["Deny"]
        assert binding["matchResources"]["namespaceSelector"] == {"matchLabels": {TEAM_LABEL: team}}


def test_a_team_without_a_priority_list_may_use_every_defined_class_only():
    def no_list(raw):
        _teams(raw)[2].pop("priorityClasses")

    policy = policy_of(evaluate("prod", no_list), "research")
    job = {"metadata": {"name": "j", "labels": {"kueue.x-k8s.io/priority-class": "production"}}, "spec": {}}
    assert policy_denials(policy, job, "jobsets") == []
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "urgent"
    assert len(policy_denials(policy, job, "jobsets")) == 1


def test_pod_security_check_refuses_what_the_standards_refuse():
    ipc_lock = {"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}]}
    assert podsecurity.violations("baseline", ipc_lock, {}) == [
        "capabilities_baseline: container c: adds capabilities ['IPC_LOCK']"
    ]
    host = {"containers": [{"name": "c"}], "volumes": [{"name": "v", "hostPath": {"path": "/"}}]}
    assert "host_path: volume v: hostPath /" in podsecurity.violations("baseline", host, {})
    root = {"containers": [{"name": "c"}]}
    assert podsecurity.violations("baseline", root, {}) == []
    assert "run_as_non_root: container c: runAsNonRoot not true" in podsecurity.violations("restricted", root, {})


# ---------------------------------------------------------------------------------------------
# Kueue settings that a wrong edit would silently weaken
# ---------------------------------------------------------------------------------------------


def cluster_queues(plan: engine.Plan) -> dict[str, dict]:
    return {q["metadata"]["name"]: q["spec"] for q in kueue(plan, "ClusterQueue")}


def test_nominal_quota_is_reclaimed_from_borrowers_and_priority_rules_inside_a_queue(prod_plan):
    # reclaimWithinCohort Never (Kueue's default) would let a borrower keep a team's guaranteed GPUs.
    for name, spec in cluster_queues(prod_plan).items():
        assert spec["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}, name


def test_fair_sharing_weight_is_each_teams_own():
    def weights(raw):
        _teams(raw)[2]["fairSharingWeight"] = 5

    queues = cluster_queues(evaluate("prod", weights))
    assert {n: q["fairSharing"]["weight"] for n, q in queues.items()} == {"llm": "2", "vision": "1", "research": "5"}


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_each_cluster_queue_selects_exactly_its_teams_namespaces(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    namespaces = team_namespace_objects(plan)
    # Every namespace the program creates, platform ones included: a selector must pick the team's only.
    for name, spec in cluster_queues(plan).items():
        selector = spec["namespaceSelector"]
        assert selector.get("matchLabels"), f"{name}: an empty selector admits workloads of every namespace"
        selected = {
            ns for ns, obj in namespaces.items() if selector["matchLabels"].items() <= obj["metadata"]["labels"].items()
        }
        assert selected == set(plan.outputs["teamNamespaces"][name]), name


def test_every_gpu_flavor_selects_exactly_the_nodes_of_its_model():
    def two_models(raw):
        for node in raw["nodes"]:
            if node["name"] in ("gpu-14", "gpu-15"):
                node["gpu"]["model"] = "NVIDIA L40S"
        _teams(raw)[0]["quotas"][H100]["gpus"] = 48  # 13 H100 nodes left: 104 GPUs

    plan = evaluate("prod", two_models)
    settings = load(stack_doc("prod"))
    gpu_flavors = [f for f in kueue(plan, "ResourceFlavor") if f["metadata"]["name"] != "cpu"]
    assert {f["metadata"]["name"] for f in gpu_flavors} == {H100, "nvidia-l40s"}
    for flavor in gpu_flavors:
        labels = flavor["spec"]["nodeLabels"]
        assert "ml-platform.io/gpu-model" in labels, flavor["metadata"]["name"]
        raw = stack_doc("prod")
        two_models(raw)
        selected = {n.name for n in load(raw).nodes if labels.items() <= node_labels(n).items()}
        expected = {n.name for n in load(raw).gpu_nodes if gpu_flavor_name(n.gpu.model) == flavor["metadata"]["name"]}
        assert selected == expected and selected, flavor["metadata"]["name"]
    assert settings.gpu_nodes


# ---------------------------------------------------------------------------------------------
# Day 2: immutable fields, renames
# ---------------------------------------------------------------------------------------------


def test_a_local_queue_is_replaced_when_its_cluster_queue_changes(prod_plan):
    for q in prod_plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"):
        if "AcceptanceChecks" in (q["parent"] or ""):
            continue  # the gang check's queue: its ClusterQueue is its own and never renamed
        options = prod_plan.options[q["urn"]]
        # spec.clusterQueue is immutable (CRD CEL `self == oldSelf`): an update would be rejected.
        assert options["replaceOnChanges"] == ["spec.clusterQueue"], q["name"]
        assert options["deleteBeforeReplace"], "same name in the same namespace: the old one goes first"


def test_topology_aware_flavors_refuse_an_immutable_change_at_preview(topology_plan, prod_plan):
    for f in topology_plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"):
        options = topology_plan.options[f["urn"]]
        if "topologyName" in f["inputs"]["spec"]:
            assert options["protect"]
            assert options["replaceOnChanges"] == ["spec.nodeLabels", "spec.tolerations", "spec.topologyName"]
    # Removing the topology (the nodes lose theirs) is refused at preview, not rejected by Kueue mid-up.
    removed = {r["name"]: r for r in prod_plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")}
    result = diff.compare(json.loads(topology_plan.to_json()), json.loads(prod_plan.to_json()))
    text = diff.render_text(result)
    assert f'unable to replace resource "{removed[f"scheduling-resourceflavor-{H100}"]["urn"]}"' in text


def test_renaming_a_team_that_keeps_its_namespaces_keeps_its_namespaced_objects(prod_plan):
    def rename(raw):
        _teams(raw)[1].update({"name": "vision-cv", "namespaces": ["vision"]})
        for team in _teams(raw):
            team["quotas"] = dict(team["quotas"])

    renamed = evaluate("prod", rename)

    def namespaced(plan):
        return {r["name"] for r in plan.resources if r["name"].startswith("scheduling-ns-vision")}

    # namespace, LocalQueue, Role, RoleBinding, LimitRange, two ResourceQuotas, four NetworkPolicies, the API policy
    assert namespaced(prod_plan) == namespaced(renamed) and len(namespaced(prod_plan)) == 12
    ns = renamed.named("scheduling-ns-vision")["inputs"]["metadata"]
    assert ns["labels"][TEAM_LABEL] == "vision-cv"
    assert renamed.named("scheduling-ns-vision-localqueue")["inputs"]["spec"] == {"clusterQueue": "vision-cv"}
    # Objects deployed under their old, team-keyed names are adopted, not recreated.
    namespace_urn = prod_plan.named("scheduling-ns-vision")["urn"]
    assert prod_plan.options[namespace_urn]["aliases"] == ["scheduling-team-vision-ns-vision"]


# ---------------------------------------------------------------------------------------------
# Reserved namespaces: computed from what the program creates
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_every_namespace_the_program_creates_is_reserved(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    created = platform_created(plan.resources)
    # Every platform component's namespace, including those no setting names (the upgrade controller's).
    assert {"kueue-system", "volcano-system", "monitoring", "system-upgrade"} <= set(created)
    team_namespaces = {ns for nss in plan.outputs["teamNamespaces"].values() for ns in nss}
    assert not team_namespaces & set(created)


@pytest.mark.parametrize(
    "namespace,creator",
    [("system-upgrade", "upgrades-namespace"), ("kuberay-system", "training-kuberay"), ("monitoring", "monitoring")],
)
def test_a_team_given_a_namespace_the_program_creates_is_refused(namespace, creator, tmp_path):
    def grab(config):
        config["ml-platform:scheduling"]["teams"][1]["namespaces"] = [namespace]  # vision: no backup source

    proc, out = run_plan(tmp_path, grab)
    assert proc.returncode == 2 and not out.exists(), proc.stdout
    # Refused by the claims rule (reserved, or claimed by the setting that names it) or by the plan check.
    assert f"namespace {namespace!r}" in proc.stderr and "teams[1]" in proc.stderr, proc.stderr
    # Those a setting names are refused by the settings rules; the others by the plan check, naming the creator.
    named = creator in proc.stderr or "is reserved" in proc.stderr
    assert named or namespace in platform_namespaces(load(stack_doc("prod")))
