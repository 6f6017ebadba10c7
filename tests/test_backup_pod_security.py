"""With `cluster.cisProfile: true` (RKE2 enforces Pod Security `restricted` on every namespace without a
label), every backup pod spec of the plan is admissible under its namespace's level.

The checks are the Pod Security Standards' controls (kubernetes.io/docs/concepts/security/pod-security-standards,
"Baseline" and "Restricted" tables, version latest), applied to the pod template the Job controller
creates pods from: every container, init containers included. No API server runs here, so this is
the policy written out, not the admission plugin itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.minio_backup import BACKUP_NAMESPACE
from stacks import engine
from tests.conftest import evaluate

BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE"}
BASELINE_CAPS |= {"SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim"}
RESTRICTED_VOLUMES |= {"projected", "secret"}


def violations(pod: dict[str, Any], level: str) -> list[str]:
    """What the Pod Security admission would reject the pod for at `level` (empty: admitted)."""
    found: list[str] = []
    if level == "privileged":
        return found
    containers = pod.get("initContainers", []) + pod.get("containers", [])
    pod_ctx = pod.get("securityContext", {})
    # baseline
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            found.append(key)
    for volume in pod.get("volumes", []):
        if "hostPath" in volume:
            found.append(f"hostPath volume {volume['name']}")
    for c in containers:
        ctx = c.get("securityContext", {})
        if ctx.get("privileged"):
            found.append(f"{c['name']}: privileged")
        if set(ctx.get("capabilities", {}).get("add", [])) - BASELINE_CAPS:
            found.append(f"{c['name']}: capabilities beyond baseline")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            found.append(f"{c['name']}: hostPort")
        if ctx.get("procMount", "Default") != "Default":
            found.append(f"{c['name']}: procMount")
    for ctx in [pod_ctx] + [c.get("securityContext", {}) for c in containers]:
        if ctx.get("seccompProfile", {}).get("type") == "Unconfined":
            found.append("seccomp Unconfined")
    if level == "baseline":
        return found
    # restricted
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if kinds - RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']}: {sorted(kinds)} not allowed")
    for c in containers:
        ctx = c.get("securityContext", {})
        name = c["name"]
        if ctx.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation must be false")
        if not ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot must be true")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = ctx.get("seccompProfile", pod_ctx.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost")
        caps = ctx.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            found.append(f"{name}: capabilities must drop ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: only NET_BIND_SERVICE may be added")
    return found


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
    assert {namespace: levels[namespace] for _, namespace, _ in pods} == {
        "llm-train": "baseline",  # an RDMA team
        "research": "restricted",
    }
    for name, namespace, pod in pods:
        assert violations(pod, levels[namespace]) == [], name
        # ... and under restricted, whatever the team's level: the backup needs no privilege at all.
        assert violations(pod, "restricted") == [], name


def test_the_status_namespace_is_created_restricted_and_every_backup_object_waits_for_its_namespace(cis_plan):
    namespaces = {r["inputs"]["metadata"]["name"]: r for r in cis_plan.by_type("kubernetes:core/v1:Namespace")}
    metadata = namespaces[BACKUP_NAMESPACE]["inputs"]["metadata"]
    assert metadata["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert len(metadata["annotations"]["ml-platform.io/pod-security-reason"]) > 40
    # A first `up` does not fail on a namespace that does not exist yet: the ConfigMaps and Roles wait
    # for ml-backup, the source's objects for its team namespace (created by the teams' component).
    backup_objects = [
        r
        for r in cis_plan.resources
        if r["type"].startswith("kubernetes:")
        and r["type"] != "kubernetes:core/v1:Namespace"
        and r["name"].startswith("backup-")
    ]
    assert len(backup_objects) > 10
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
            "capabilities must drop ALL",
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
    assert any(problem in v for v in violations(pod, level)), violations(pod, level)


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
