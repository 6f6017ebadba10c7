"""A team's capacity backstop and what Kueue admits are one number.

Kueue charges a workload by its pod templates; the pods then run with the requests and limits the API
server gives them; the namespace quota counts both requests and limits at the team's Kueue ceiling. The
LimitRange and the team's resources policy make the three agree: checked here container shape by
container shape, on every example workload, with the two orders of defaulting emulated from their sources
(tests/scheduling/admission.py) and the policy's CEL run by cel-python.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from components.scheduling.tenancy import POD_SPEC_PATHS, TRAINER_RESOURCES
from tests.scheduling.admission import (
    amount,
    kueue_charged,
    limit_ranged,
    resource_problems,
    stored_item,
    unavailable,
)
from tests.scheduling.test_stack import WORKLOAD_DOCS, _release, kueue, pod_specs
from tests.scheduling.test_tenancy import CRD_KINDS, _set_path, denials, policy
from tests.upstream import crd_schema

GROUPS = {
    "pods": "",
    "jobs": "batch",
    "cronjobs": "batch",
    "jobsets": "jobset.x-k8s.io",
    "rayjobs": "ray.io",
    "rayclusters": "ray.io",
    "trainjobs": "trainer.kubeflow.org",
}
CI = "system:serviceaccount:research:research-ci"

# Container shapes a team may write, and whether its resources policy admits them.
SHAPES: dict[str, tuple[dict[str, Any], bool]] = {
    "limits only": ({"limits": {"cpu": "96", "memory": "960Gi", "nvidia.com/gpu": 8}}, True),
    "an integer limit": ({"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"cpu": 4, "memory": "16Gi"}}, True),
    "the same amount written otherwise": (
        {"requests": {"cpu": "1000m"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        False,
    ),
    "requests written as limits": (
        {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"cpu": "4", "memory": "16Gi"}},
        True,
    ),
    "one request, equal": ({"requests": {"memory": "8Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}, True),
    "GPU and ephemeral requests": (
        {
            "requests": {"nvidia.com/gpu": 1, "ephemeral-storage": "50Gi"},
            "limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 1},
        },
        True,
    ),
    "requests only": ({"requests": {"cpu": "16", "memory": "200Gi"}}, False),
    "nothing": ({}, False),
    "request below its limit": ({"requests": {"cpu": "1"}, "limits": {"cpu": "4", "memory": "8Gi"}}, False),
    "no memory limit": ({"limits": {"cpu": "4"}}, False),
}
# What this platform's LimitRange was before: requests defaulted, memory limited by `default`/`max`.
OLD_LIMIT_RANGE = {
    "spec": {
        "limits": [
            {
                "type": "Container",
                "defaultRequest": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "1Gi"},
                "default": {"memory": "37Ti", "ephemeral-storage": "1Ti"},
                "max": {"memory": "37Ti", "ephemeral-storage": "1Ti"},
            }
        ]
    }
}


def _job(resources: dict[str, Any], field: str = "containers") -> dict[str, Any]:
    container = {"name": "c", "image": "i", **({"resources": resources} if resources else {})}
    return {"metadata": {"name": "j"}, "spec": {"template": {"spec": {field: [container]}}}}


def limit_ranges(plan) -> dict[str, dict[str, Any]]:
    return {r["inputs"]["metadata"]["namespace"]: r["inputs"] for r in plan.by_type("kubernetes:core/v1:LimitRange")}


def kueue_resources(plan) -> tuple[list[str], list[str]]:
    """The resources the teams' ClusterQueues cover, and the prefixes Kueue's configuration excludes."""
    covered = sorted(
        {r for q in kueue(plan, "ClusterQueue") for g in q["spec"]["resourceGroups"] for r in g["coveredResources"]}
    )
    config = yaml.safe_load(_release(plan, "kueue")["values"]["managerConfig"]["controllerManagerConfigYaml"])
    return covered, config.get("resources", {}).get("excludeResourcePrefixes", [])


def test_the_limit_range_defaults_no_cpu_or_memory_not_even_by_derivation(prod_plan):
    teams = prod_plan.outputs["teamNamespaces"]
    assert set(limit_ranges(prod_plan)) == {ns for names in teams.values() for ns in names}
    for ns, lr in limit_ranges(prod_plan).items():
        (item,) = lr["spec"]["limits"]
        stored = stored_item(item)
        for key in ("default", "defaultRequest", "max", "min", "maxLimitRequestRatio"):
            assert not {"cpu", "memory"} & set(stored.get(key, {})), (ns, key)
        assert stored["defaultRequest"] == {"ephemeral-storage": "1Gi"}
        assert stored["default"] == stored["max"] == {"ephemeral-storage": "1Ti"}  # prod's per-namespace budget
    # The derivation is real: the old LimitRange's `max` alone gave every container a memory request.
    assert stored_item({"max": {"memory": "1Ti"}})["defaultRequest"] == {"memory": "1Ti"}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_resources_policy_admits_exactly_the_declared_shapes(shape, prod_plan):
    resources, admitted = SHAPES[shape]
    spec = policy(prod_plan, "research-workload-resources")
    for field in ("containers", "initContainers"):
        found = denials(spec, _job(resources, field), "jobs", "batch", user=CI)
        assert (found == []) == admitted, (field, found)
        if not admitted:
            assert found == [
                "jobs of team research, at spec.template.spec: every container and init container must set "
                "resources.limits.cpu and .memory, and any request of them equal to the limit (or none: it defaults "
                "to the limit); pod-level resources, if set, likewise"
            ]


def test_what_the_policy_admits_kueue_charges_as_the_pod_requests_and_uses(prod_plan):
    spec = policy(prod_plan, "research-workload-resources")
    admitted = [r for r, ok in SHAPES.values() if ok]
    assert all(denials(spec, _job(r), "jobs", "batch", user=CI) == [] for r in admitted)
    for ns, lr in limit_ranges(prod_plan).items():
        for resources in admitted:
            container = {"name": "c", "resources": resources}
            charged, pod = kueue_charged(container, lr), limit_ranged(container, lr)
            assert resource_problems(pod) == []
            for r in ("cpu", "memory"):
                assert amount(charged["requests"][r]) == amount(pod["requests"][r]) == amount(pod["limits"][r]), ns
    # Where Kueue and the pod disagree, the emulation shows it: under the old LimitRange a limits-only
    # container is charged its default request while its pod requests its limits (kubernetes-sigs/kueue#15020).
    container = {"name": "c", "resources": SHAPES["limits only"][0]}
    charged, pod = kueue_charged(container, OLD_LIMIT_RANGE), limit_ranged(container, OLD_LIMIT_RANGE)
    assert (charged["requests"]["cpu"], pod["requests"]["cpu"]) == ("1", "96")
    assert (charged["requests"]["memory"], pod["requests"]["memory"]) == ("2Gi", "960Gi")


@pytest.mark.parametrize("name,doc", WORKLOAD_DOCS, ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_every_example_is_admitted_and_charged_as_its_pods_run(name, doc, prod_plan):
    ns = doc["metadata"]["namespace"]
    team = next(t for t, names in prod_plan.outputs["teamNamespaces"].items() if ns in names)
    plural = {"Job": "jobs", "JobSet": "jobsets", "RayJob": "rayjobs", "TrainJob": "trainjobs"}[doc["kind"]]
    assert denials(policy(prod_plan, f"{team}-workload-resources"), doc, plural, GROUPS[plural], user=CI) == []
    lr = limit_ranges(prod_plan)[ns]
    covered, excluded = kueue_resources(prod_plan)
    for spec in pod_specs(doc, prod_plan):
        workload: dict[str, float] = {}
        for container in spec.get("initContainers", []) + spec["containers"]:
            charged, pod = kueue_charged(container, lr), limit_ranged(container, lr)
            assert resource_problems(pod) == [], container["name"]
            for r in ("cpu", "memory"):
                assert amount(charged["requests"][r]) == amount(pod["requests"][r]) == amount(pod["limits"][r])
            for r, value in charged["requests"].items():
                workload[r] = workload.get(r, 0) + amount(value)
        # Kueue can admit it: every resource it requests is covered or excluded.
        assert unavailable(workload, covered, excluded) == [], name
        # Without the exclusion of ephemeral storage, no workload could be admitted (the LimitRange gives
        # every container an ephemeral-storage request).
        assert unavailable(workload, covered, [p for p in excluded if p != "ephemeral-storage"]) == [
            "ephemeral-storage"
        ]


def test_every_pod_spec_path_of_every_kind_is_checked(prod_plan):
    spec = policy(prod_plan, "research-workload-resources")
    good = {"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
    bad = {"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    checked = 0
    for kind, paths in POD_SPEC_PATHS.items():
        for path in paths:
            for field in ("containers", "initContainers"):
                for container, refused in ((good, 0), (bad, 1)):
                    obj = {"metadata": {"name": "w"}, **_set_path(path, {"containers": [good], field: [container]})}
                    if kind == "rayjobs":
                        obj["spec"]["submissionMode"] = "HTTPMode"
                    assert len(denials(spec, obj, kind, GROUPS[kind], user=CI)) == refused, (kind, path, field)
                    checked += 1
    assert checked == 4 * sum(len(p) for p in POD_SPEC_PATHS.values()) == 36


def _paths_to_containers(schema: dict[str, Any], path: tuple[str, ...] = ()) -> list[str]:
    """Every pod spec in a CRD schema whose containers can carry resources, `[]` for each list on the way."""
    found = []
    properties = schema.get("properties") or {}
    containers = properties.get("containers", {}).get("items", {}).get("properties", {})
    if "resources" in containers:
        found.append(".".join(path))
    for key, sub in properties.items():
        if sub.get("type") == "array" and "items" in sub:
            found += _paths_to_containers(sub["items"], (*path, f"{key}[]"))
        else:
            found += _paths_to_containers(sub, (*path, key))
    return found


@pytest.mark.parametrize("resource", sorted(CRD_KINDS))
def test_pod_spec_paths_cover_every_container_list_the_crds_declare(resource):
    parts, version = CRD_KINDS[resource]
    schema = crd_schema(*parts, crd_version=version)
    assert sorted(_paths_to_containers(schema)) == sorted(POD_SPEC_PATHS.get(resource, [])), resource
    if resource == "trainjobs":
        # Its pods are the runtime's containers; the TrainJob gives the trainer's resources here.
        node = schema
        for part in TRAINER_RESOURCES.split("."):
            node = node["properties"][part]
        assert {"limits", "requests"} <= set(node["properties"])


def test_trainjobs_and_rayjobs_declare_what_their_operators_would_otherwise_choose(prod_plan):
    spec = policy(prod_plan, "research-workload-resources")

    def trainjob(resources: dict[str, Any] | None) -> dict[str, Any]:
        trainer = {"image": "i"} | ({"resourcesPerNode": resources} if resources is not None else {})
        return {"metadata": {"name": "t"}, "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer}}

    for resources, admitted in SHAPES.values():
        found = denials(spec, trainjob(resources), "trainjobs", GROUPS["trainjobs"], user=CI)
        assert (found == []) == admitted, resources
    assert len(denials(spec, trainjob(None), "trainjobs", GROUPS["trainjobs"], user=CI)) == 1
    cluster = {
        "headGroupSpec": {
            "template": {
                "spec": {"containers": [{"name": "h", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}
            }
        }
    }
    template = {"spec": {"containers": [{"name": "s", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}
    for extra, admitted in (
        ({}, False),  # K8sJobMode by default, KubeRay's submitter: requests below limits
        ({"submissionMode": "K8sJobMode"}, False),
        ({"submitterPodTemplate": template}, True),
        ({"submissionMode": "K8sJobMode", "submitterPodTemplate": template}, True),
        ({"submissionMode": "SidecarMode", "submitterPodTemplate": template}, False),
        ({"submissionMode": "HTTPMode"}, True),
        ({"submissionMode": "InteractiveMode"}, True),
    ):
        job = {"metadata": {"name": "r"}, "spec": {"entrypoint": "x", "rayClusterSpec": cluster, **extra}}
        assert (denials(spec, job, "rayjobs", "ray.io", user=CI) == []) == admitted, extra


def test_only_the_teams_own_identities_are_held_to_it(prod_plan):
    spec = policy(prod_plan, "research-workload-resources")
    bare = _job({})
    assert len(denials(spec, bare, "jobs", "batch", user=CI)) == 1
    assert len(denials(spec, bare, "jobs", "batch", user="jane", groups=("oidc:ml-researchers",))) == 1
    # The job controller making pods from a checked template, another team's identity: not this policy's.
    pod = {"metadata": {"name": "p"}, "spec": _job({})["spec"]["template"]["spec"]}
    assert denials(spec, pod, "pods", user="system:serviceaccount:kube-system:job-controller") == []
    assert denials(spec, bare, "jobs", "batch", user="system:serviceaccount:vision:vision-ci") == []
    # A team may label a pod an operator made (KubeRay's submitter: requests below limits).
    assert len(denials(spec, pod, "pods", user=CI)) == 1
    assert denials(spec, pod, "pods", operation="UPDATE", user=CI) == []


def test_pod_level_resources_request_what_they_limit(prod_plan):
    spec = policy(prod_plan, "research-workload-resources")
    declared = {"limits": {"cpu": "2", "memory": "8Gi"}}
    for pod_level, admitted in (
        ({"limits": {"cpu": "8", "memory": "32Gi"}}, True),
        ({"requests": {"cpu": "8"}, "limits": {"cpu": "8", "memory": "32Gi"}}, True),
        ({"requests": {"cpu": "2"}, "limits": {"cpu": "8"}}, False),  # Kueue charges 2, the quota's limits 8
        ({"requests": {"memory": "32Gi"}}, False),  # a request without its limit
        ({"requests": {"nvidia.com/gpu": 1}}, True),
    ):
        job = _job(declared)
        job["spec"]["template"]["spec"]["resources"] = pod_level
        assert (denials(spec, job, "jobs", "batch", user=CI) == []) == admitted, pod_level
