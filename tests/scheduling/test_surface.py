"""The tenant surface: every field a team may write is classified (from the pinned schemas), and what the
classification refuses is refused by the rendered admission policies, judged by cel-python with every policy bound
to the namespace, for a team's own identities and for ServiceAccounts operators create in its namespaces.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any, Optional

import celpy
import kubernetes_validate
import pytest

from components.scheduling import surface
from components.scheduling.config import TEAM_RULES
from settings import load
from stacks import engine
from tests.conftest import requires_upstream, stack_doc
from tests.upstream import crd_schema

VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
VAPB = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"


# ---------------------------------------------------------------------------------------------
# The schemas: Kubernetes' own at the cluster's minor, the operators' CRDs at their pins
# ---------------------------------------------------------------------------------------------


def k8s_minor() -> str:
    """The Kubernetes version of the pinned RKE2 release (`v1.35.7+rke2r1` -> `1.35.0`)."""
    version = load(stack_doc("prod")).cluster.rke2_version
    major, minor = re.match(r"v(\d+)\.(\d+)\.", version).groups()
    return f"{major}.{minor}.0"


@cache
def k8s_definitions() -> dict[str, Any]:
    folder = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{k8s_minor()}-local-strict"
    if not folder.is_dir():
        pytest.fail(f"kubernetes-validate has no schemas for {k8s_minor()}: bump kubernetes-validate")
    return json.loads((folder / "_definitions.json").read_text())["$defs"]


def k8s_fields(definition: str) -> set[str]:
    return set(k8s_definitions()[f"io.k8s.api.{definition}"]["properties"])


K8S_TABLES = {
    "core.v1.PodSpec": surface.POD_SPEC,
    "core.v1.Container": surface.CONTAINER,
    "core.v1.EphemeralContainer": surface.EPHEMERAL_CONTAINER,
    "core.v1.Volume": surface.VOLUME,
    "batch.v1.JobSpec": surface.JOB_SPEC,
    "batch.v1.CronJobSpec": surface.CRON_JOB_SPEC,
    "core.v1.ServiceSpec": surface.SERVICE_SPEC,
}


@pytest.mark.parametrize("definition", sorted(K8S_TABLES))
def test_every_kubernetes_field_a_team_writes_is_classified(definition):
    table = K8S_TABLES[definition]
    fields = k8s_fields(definition)
    assert sorted(fields - set(table)) == [], f"unclassified fields of {definition}: classify them in surface.py"
    assert sorted(set(table) - fields) == [], f"classified fields {definition} no longer has"
    assert all(v.rule in surface.RULES for v in table.values())


CRDS = {
    "jobsets": (("jobset", "v0.12.0", "jobset.x-k8s.io_jobsets.yaml"), "v1alpha2"),
    "rayjobs": (("kuberay", "v1.7.0", "ray.io_rayjobs.yaml"), "v1"),
    "rayclusters": (("kuberay", "v1.7.0", "ray.io_rayclusters.yaml"), "v1"),
    "trainjobs": (("kubeflow-trainer", "v2.3.0", "trainer.kubeflow.org_trainjobs.yaml"), "v1alpha1"),
}


def crd(kind: str) -> dict[str, Any]:
    parts, version = CRDS[kind]
    return crd_schema(*parts, crd_version=version)


def _walk(schema: dict[str, Any], found, path: tuple[str, ...] = ()) -> list[str]:
    """Every path (with `[]` for list items) at which `found(schema)` holds, not looking inside a match."""
    if found(schema):
        return [".".join(path)]
    hits = []
    for key, sub in (schema.get("properties") or {}).items():
        if sub.get("type") == "array" and "items" in sub:
            hits += _walk(sub["items"], found, (*path, f"{key}[]"))
        else:
            hits += _walk(sub, found, (*path, key))
    return hits


def _has(*keys: str):
    return lambda s: set(keys) <= set(s.get("properties") or {})


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    for part in path.split("."):
        schema = schema["properties"][part.removesuffix("[]")]
        if part.endswith("[]"):
            schema = schema["items"]
    return schema


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_crd_field_and_pod_template_a_team_writes_is_classified(kind):
    schema = crd(kind)
    spec = set(schema["properties"]["spec"]["properties"])
    assert spec == set(surface.CRD_SPEC[kind]), f"{kind}: unclassified {spec - set(surface.CRD_SPEC[kind])}"
    # Every pod spec the CRD holds is one the policies judge, and every field in it is classified.
    specs = _walk(schema, _has("containers"))
    assert sorted(specs) == sorted(surface.POD_SPECS[kind]), kind
    for path in specs:
        fields = set(_at(schema, path)["properties"])
        classified = {*surface.POD_SPEC, *surface.NEWER_POD_SPEC}
        assert fields <= classified, (kind, path, fields - classified)
        if not fields >= set(k8s_fields("core.v1.PodSpec")) - {"hostnameOverride", "workloadRef"}:
            assert sorted(fields) == sorted(surface.PARTIAL_POD_SPECS.get(path, [])), (kind, path)
        for containers in ("containers", "initContainers", "ephemeralContainers"):
            if containers in fields:
                own = set(_at(schema, f"{path}.{containers}[]")["properties"])
                assert own <= set(surface.EPHEMERAL_CONTAINER), (kind, path, own - set(surface.EPHEMERAL_CONTAINER))
    # Every environment list, inside a pod spec or in a container the operator builds, is judged.
    envs = {e.removesuffix("[]") for e in _walk(schema, _has("name", "value", "valueFrom"))}
    assert envs, kind
    covered = [*surface.POD_SPECS[kind], *surface.INJECTED_CONTAINERS.get(kind, [])]
    for env in envs:
        inside = any(env.startswith(p + ".") and env.count(".") - p.count(".") == 2 for p in covered) or any(
            env == p + ".env" for p in surface.INJECTED_CONTAINERS.get(kind, [])
        )
        assert inside or env in surface.EXTRA_ENV.get(kind, []), (kind, env)


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_a_refused_field_the_crd_defaults_may_keep_its_default(kind):
    """The API server writes CRD defaults in before admission: a refused field with one would refuse every object."""
    spec = crd(kind)["properties"]["spec"]["properties"]
    defaults = {
        f: spec[f]["default"]
        for f in surface.refused_fields(surface.CRD_SPEC[kind])
        if f in spec and "default" in spec[f]
    }
    assert defaults == surface.DEFAULTED.get(kind, {}), kind


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_metadata_a_crd_holds_is_judged(kind):
    """Labels and annotations anywhere in the kind (pod templates, Job and Service templates, claim templates)."""
    found = _walk(crd(kind), _has("annotations", "labels"))
    assert sorted(found) == sorted(p for p in surface.METADATA_PATHS[kind] if p != "metadata"), kind


def test_ray_fields_kuberay_turns_into_objects_are_classified():
    spec = _at(crd("rayclusters"), "spec")
    assert set(_at(spec, "headGroupSpec")["properties"]) == set(surface.RAY_HEAD_GROUP)
    assert set(_at(spec, "autoscalerOptions")["properties"]) == set(surface.RAY_AUTOSCALER)
    assert set(_at(crd("rayjobs"), "spec.rayClusterSpec")["properties"]) == set(surface.CRD_SPEC["rayclusters"])


TEAM_OPERATOR_CHARTS = {
    "kueue": "0.19.2",
    "volcano": "1.15.1",
    "jobset": "0.12.0",
    "kubeflow-trainer": "2.3.0",
    "kuberay-operator": "1.7.0",
}


def test_every_operator_that_may_grant_rights_in_a_team_namespace_is_listed():
    """An operator can create Roles in a team namespace only if its chart's RBAC lets it create rolebindings."""
    granting = set()
    for chart, version in TEAM_OPERATOR_CHARTS.items():
        root = requires_upstream("charts-src", chart, version)
        text = "\n".join(p.read_text(errors="ignore") for p in root.rglob("*") if p.suffix in (".yaml", ".tpl"))
        if re.search(r"-\s*rolebindings\b", text):
            granting.add(chart.removesuffix("-operator"))
    assert granting == set(surface.OPERATOR_GRANTS)


def _team_can(group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in TEAM_RULES)


def test_every_right_an_operator_grants_is_classified():
    """A grant is either one the team already holds through its own Role, or a subresource classified here."""
    for operator, grants in surface.OPERATOR_GRANTS.items():
        for group, resource, verb in grants:
            if "/" in resource:
                assert resource in surface.POD_SUBRESOURCES, (operator, resource)
            else:
                assert _team_can(group, resource, verb), (operator, group, resource, verb)


def test_controller_keys_are_in_their_controllers_domains():
    for key in surface.CONTROLLER_KEYS:
        assert surface.controller_domain(key) is not None, key
    assert surface.controller_domain("nvidia.cdi.k8s.io/container.x") == "cdi.k8s.io"
    # Kubernetes' own domain: its recommended labels are allowed by name, any other key there is judged.
    assert surface.controller_domain("app.kubernetes.io/name") == "kubernetes.io"
    assert surface.CONTROLLER_KEYS["app.kubernetes.io/name"].verdict == "allowed"
    assert surface.controller_domain("example.com/team-label") is None  # a team's own domain


# ---------------------------------------------------------------------------------------------
# Judging: every policy bound to the namespace, evaluated by cel-python
# ---------------------------------------------------------------------------------------------

_ENV = celpy.Environment()


@cache
def _program(expression: str):
    return _ENV.program(_ENV.compile(expression))


def _namespace_labels(plan: engine.Plan, ns: str) -> dict[str, str]:
    md = next(
        n["inputs"]["metadata"]
        for n in plan.by_type("kubernetes:core/v1:Namespace")
        if n["inputs"]["metadata"]["name"] == ns
    )
    return md.get("labels", {})


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    expressions = selector.get("matchExpressions", [])
    assert all(e["operator"] == "Exists" for e in expressions), "the judge knows Exists only"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()) and all(
        e["key"] in labels for e in expressions
    )


def judge(
    plan: engine.Plan,
    obj: Optional[dict[str, Any]],
    resource: str,
    group: str = "",
    ns: str = "llm-train",
    user: str = "system:serviceaccount:llm-train:llm-ci",
    groups: tuple[str, ...] = (),
    operation: str = "CREATE",
    old: Optional[dict[str, Any]] = None,
    sub: str = "",
) -> list[str]:
    """(policy: message) of every validation that refuses the request, over every policy bound to `ns`."""
    labels = _namespace_labels(plan, ns)
    bound = {
        b["inputs"]["spec"]["policyName"]
        for b in plan.by_type(VAPB)
        if _selects(b["inputs"]["spec"]["matchResources"].get("namespaceSelector", {}), labels)
    }
    full = f"{resource}/{sub}" if sub else resource
    request = {
        "operation": operation,
        "resource": {"resource": resource, "group": group},
        "subResource": sub,
        "userInfo": {"username": user, "groups": list(groups)},
        "namespace": ns,
    }
    activation = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(obj or {})}
    if old is not None:
        activation["oldObject"] = celpy.json_to_cel(old)
    refusals = []
    for policy in plan.by_type(VAP):
        name, spec = policy["inputs"]["metadata"]["name"], policy["inputs"]["spec"]
        if name not in bound or not any(
            group in r["apiGroups"] and full in r["resources"] and operation in r["operations"]
            for r in spec["matchConstraints"]["resourceRules"]
        ):
            continue
        if not all(_program(c["expression"]).evaluate(activation) for c in spec.get("matchConditions", [])):
            continue
        refusals += [
            f"{name}: {v['message']}" for v in spec["validations"] if not _program(v["expression"]).evaluate(activation)
        ]
    return refusals


def test_the_tenant_matrix_in_docs_is_generated_from_the_classification():
    from components.scheduling.matrix import replace_matrix

    page = (Path(__file__).resolve().parents[2] / "docs" / "teams.md").read_text()
    assert replace_matrix(page) == page, "docs/teams.md's tenant matrix is stale: regenerate it with replace_matrix"
