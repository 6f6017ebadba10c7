"""TrainingOperators: JobSet, Kubeflow Trainer and KubeRay, each optional, pinned, checked upstream.

Present in the plan exactly when enabled (`scheduling.trainingOperators`), with Kueue managing exactly
the kinds installed; chart values checked against the upstream charts' values.yaml; the Trainer
runtime against the upstream CRD and the chart's own runtime file.
"""

from __future__ import annotations

import re

import pytest
import yaml

from stacks import engine
from tests.conftest import evaluate, problems, requires_upstream
from tests.upstream import crd_schema_errors, spec_schema, unknown_value_paths, upstream_values

OPERATORS = {
    # name in settings: (release resource, chart reference, version, repository key, namespace, upstream chart dir)
    "jobset": ("training-jobset", "oci://registry.k8s.io/jobset/charts/jobset", "0.12.0", "jobset", "jobset-system"),
    "trainer": (
        "training-trainer",
        "oci://ghcr.io/kubeflow/charts/kubeflow-trainer",
        "2.3.0",
        "kubeflow-trainer",
        "kubeflow-system",
    ),
    "kuberay": ("training-kuberay", "kuberay-operator", "1.7.0", "kuberay-operator", "kuberay-system"),
}
FRAMEWORKS = {
    "jobset": ["jobset.x-k8s.io/jobset"],
    "trainer": ["trainer.kubeflow.org/trainjob"],
    "kuberay": ["ray.io/rayjob", "ray.io/raycluster"],
}


def frameworks(plan: engine.Plan) -> list[str]:
    values = plan.named("scheduling-kueue")["inputs"]["values"]
    return yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])["integrations"]["frameworks"]


def training(plan: engine.Plan) -> list[str]:
    return sorted(r["name"] for r in plan.resources if r["name"].startswith("training"))


def namespaces(plan: engine.Plan) -> dict[str, str]:
    return {
        r["inputs"]["metadata"]["name"]: r["inputs"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for r in plan.by_type("kubernetes:core/v1:Namespace")
    }


def test_prod_installs_every_operator_pinned_and_kueue_manages_their_kinds(prod_plan):
    for name, (resource, chart, version, _, namespace) in OPERATORS.items():
        release = prod_plan.named(resource)["inputs"]
        assert (release["chart"], release["version"], release["namespace"]) == (chart, version, namespace), name
        assert namespaces(prod_plan)[namespace] in ("baseline", "restricted")
    assert prod_plan.named("training-kuberay")["inputs"]["repositoryOpts"]["repo"] == (
        "https://ray-project.github.io/kuberay-helm"
    )
    assert frameworks(prod_plan) == ["batch/job", "pod", *[f for fs in FRAMEWORKS.values() for f in fs]]
    # The Trainer chart's JobSet subchart is off: one JobSet controller, ours, installed first.
    trainer = prod_plan.named("training-trainer")
    assert trainer["inputs"]["values"]["jobset"] == {"install": False}
    assert prod_plan.named("training-jobset")["urn"] in trainer["dependencies"]


def test_lab_installs_none_and_kueue_manages_only_the_built_in_kinds(lab_plan):
    assert training(lab_plan) == ["training"]  # the empty component only
    assert frameworks(lab_plan) == ["batch/job", "pod"]
    assert not [r for r in lab_plan.resources if "trainer.kubeflow.org" in r["type"]]


@pytest.mark.parametrize("enabled", [["kuberay"], ["jobset"], ["jobset", "trainer"]])
def test_each_operator_and_its_kueue_integration_come_only_when_enabled(enabled):
    plan = evaluate("lab", lambda raw: raw["scheduling"].update({"trainingOperators": dict.fromkeys(enabled, True)}))
    assert frameworks(plan) == ["batch/job", "pod", *[f for op in OPERATORS if op in enabled for f in FRAMEWORKS[op]]]
    for op, (resource, *_rest, namespace) in OPERATORS.items():
        present = [r for r in plan.resources if r["name"] == resource]
        assert bool(present) == (op in enabled), op
        assert (namespace in namespaces(plan)) == (op in enabled), op


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_values_keys_exist_in_the_upstream_chart(op, prod_plan):
    resource, _, version, chart, _ = OPERATORS[op]
    values = prod_plan.named(resource)["inputs"].get("values", {})
    # kuberay-operator's values.yaml has `resources.requests` commented out; the chart passes `resources`
    # to the container whole (tests/test_render_checks.py renders it and checks every container's requests).
    skip = {"resources.requests"} if op == "kuberay" else set()
    assert unknown_value_paths(values, upstream_values(chart, version), skip=skip) == []


def test_kuberay_places_ray_clusters_with_volcano(prod_plan):
    upstream = upstream_values("kuberay-operator", "1.7.0")
    assert upstream["batchScheduler"]["name"] == ""  # the chart's default: no gang
    assert prod_plan.named("training-kuberay")["inputs"]["values"]["batchScheduler"] == {"name": "volcano"}


def test_the_torch_runtime_validates_and_is_the_charts_own(prod_plan):
    runtime = prod_plan.named("training-trainer-runtime-torch-distributed")
    assert runtime["inputs"]["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert prod_plan.named("training-trainer")["urn"] in runtime["dependencies"]
    spec = runtime["inputs"]["spec"]
    schema = spec_schema(
        "kubeflow-trainer", "v2.3.0", "trainer.kubeflow.org_clustertrainingruntimes.yaml", crd_version="v1alpha1"
    )
    assert crd_schema_errors(spec, schema) == []
    # The chart ships the same runtime as a template: its spec without Helm's label lines is ours.
    path = requires_upstream("charts-src", "kubeflow-trainer", "2.3.0", "files", "runtimes", "torch-distributed.yaml")
    text = "\n".join(line for line in path.read_text().splitlines() if "{{" not in line)
    upstream = yaml.safe_load(text)["spec"]
    # Our default image names its registry (docker.io, the default one), for air-gapped mirrors.
    ours = yaml.safe_load(yaml.safe_dump(spec).replace("docker.io/pytorch/", "pytorch/"))
    assert upstream == ours


def test_trainer_without_jobset_is_refused():
    found = problems("lab", lambda raw: raw["scheduling"].update({"trainingOperators": {"trainer": True}}))
    assert any(
        p.startswith("scheduling.trainingOperators.trainer: Kubeflow Trainer runs every TrainJob") for p in found
    )


def test_no_kubeflow_v1_kind_is_managed_without_its_operator(prod_plan):
    # PyTorchJob (training-operator v1) ships no Helm chart and is not installed: Kueue must not wait for it.
    assert not [f for f in frameworks(prod_plan) if re.match(r"kubeflow\.org/", f)]
