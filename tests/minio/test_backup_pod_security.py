"""With `cluster.cisProfile: true` (RKE2 enforces Pod Security `restricted` on every namespace without a
label), every backup pod spec of the plan is admissible under its namespace's level.

The checks are the Pod Security Standards' controls as tests/podsecurity.py writes them out, applied to
the pod template the Job controller creates pods from: every container, init containers included. No API
server runs here, so this is the policy written out, not the admission plugin itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.minio.backup_specs import BACKUP_NAMESPACE
from stacks import engine
from tests import podsecurity
from tests.conftest import evaluate


def cis(raw: dict) -> None:
    raw["cluster"]["cisProfile"] = True


@pytest.fixture(scope="module")
def cis_plan() -> engine.Plan:
    return evaluate("prod", cis)


def namespace_levels(plan: engine.Plan) -> dict[str, str]:
    return {
        r["inputs"]["metadata"]["name"]: r["inputs"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for r in plan.by_type("kubernetes:core/v1:Namespace")
    }


def backup_pods(plan: engine.Plan) -> list[tuple[str, str, dict[str, Any]]]:
    """Every backup pod template: the launcher CronJobs' and the Jobs they create (run ConfigMaps)."""
    pods = []
    for r in plan.by_type("kubernetes:batch/v1:CronJob"):
        template = r["inputs"]["spec"]["jobTemplate"]["spec"]["template"]
        if template["metadata"]["labels"].get("app.kubernetes.io/name") == "cephfs-backup":
            pods.append((r["name"], r["inputs"]["metadata"]["namespace"], template["spec"]))
    for r in plan.by_type("kubernetes:core/v1:ConfigMap"):
        if "job.json" in (r["inputs"].get("data") or {}):
            job = json.loads(r["inputs"]["data"]["job.json"])
            pods.append(
                (job["metadata"]["name"] + "-job", job["metadata"]["namespace"], job["spec"]["template"]["spec"])
            )
    return pods


def test_every_backup_pod_is_admissible_under_its_namespaces_level(cis_plan):
    levels = namespace_levels(cis_plan)
    pods = backup_pods(cis_plan)
    assert sorted(name for name, _, _ in pods) == [
        "backup-checkpoints",
        "backup-checkpoints-job",
        "backup-datasets",
        "backup-datasets-job",
    ]
    # Every backup pod runs in the platform namespace, whatever the team's level (llm-train is baseline: RDMA).
    assert {namespace: levels[namespace] for _, namespace, _ in pods} == {BACKUP_NAMESPACE: "restricted"}
    for name, namespace, pod in pods:
        assert podsecurity.violations(levels[namespace], pod, {}) == [], name
        # ... and under restricted, whatever the team's level: the backup needs no privilege at all.
        assert podsecurity.violations("restricted", pod, {}) == [], name


def test_the_status_namespace_is_created_restricted_and_every_backup_object_waits_for_its_namespace(cis_plan):
    namespaces = {r["inputs"]["metadata"]["name"]: r for r in cis_plan.by_type("kubernetes:core/v1:Namespace")}
    metadata = namespaces[BACKUP_NAMESPACE]["inputs"]["metadata"]
    assert metadata["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert len(metadata["annotations"]["ml-platform.io/pod-security-reason"]) > 40
    # A first `up` does not fail on a namespace that does not exist yet: the pipeline waits for ml-backup,
    # the launcher's Role in a team namespace for that namespace (created by the teams' component).
    backup_objects = [
        r
        for r in cis_plan.resources
        if r["type"].startswith("kubernetes:")
        and r["type"] != "kubernetes:core/v1:Namespace"
        and r["name"].startswith("backup-")
    ]
    assert len(backup_objects) > 10
    assert {(r["inputs"].get("metadata") or {}).get("namespace") for r in backup_objects} == {
        BACKUP_NAMESPACE,
        "llm-train",
        "research",
        None,  # the StorageClass of the clones and the launcher's ClusterRoles
    }
    for r in backup_objects:
        namespace = (r["inputs"].get("metadata") or {}).get("namespace")
        if namespace:
            assert namespaces[namespace]["urn"] in r["dependencies"], (r["name"], namespace)


@pytest.mark.parametrize(
    ("change", "level", "problem"),
    [
        (lambda pod: pod["securityContext"].update(runAsNonRoot=False, runAsUser=0), "restricted", "runAsNonRoot"),
        (
            lambda pod: pod["initContainers"][0]["securityContext"].update(capabilities={"add": ["DAC_OVERRIDE"]}),
            "restricted",
            "capabilities: must drop ALL",
        ),
        (lambda pod: pod["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "baseline", "hostPath"),
        (
            lambda pod: pod["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
            "restricted",
            "allowPrivilegeEscalation",
        ),
    ],
    ids=["root", "dac-override", "host-path", "privilege-escalation"],
)
def test_the_check_rejects_what_the_policy_rejects(cis_plan, change, level, problem):
    import copy

    (pod,) = [pod for name, _, pod in backup_pods(cis_plan) if name == "backup-datasets-job"]
    pod = copy.deepcopy(pod)
    change(pod)
    assert any(problem in v for v in podsecurity.violations(level, pod, {})), podsecurity.violations(level, pod, {})


def test_the_snapshot_the_launcher_creates_matches_the_upstream_crd(cis_plan):
    import jsonschema
    import yaml

    from tests.conftest import requires_upstream

    crd = yaml.safe_load(
        requires_upstream(
            "crds", "external-snapshotter", "v8.6.0", "snapshot.storage.k8s.io_volumesnapshots.yaml"
        ).read_text()
    )
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = version["schema"]["openAPIV3Schema"]
    for r in cis_plan.by_type("kubernetes:core/v1:ConfigMap"):
        if "snapshot.json" not in (r["inputs"].get("data") or {}):
            continue
        snapshot = json.loads(r["inputs"]["data"]["snapshot.json"])
        assert (
            snapshot["apiVersion"] == f"{crd['spec']['group']}/v1" and snapshot["kind"] == crd["spec"]["names"]["kind"]
        )
        jsonschema.validate(snapshot, schema)
        # exactly one source (the CRD's x-kubernetes-validations say so in CEL, which jsonschema skips)
        assert list(snapshot["spec"]["source"]) == ["persistentVolumeClaimName"]
