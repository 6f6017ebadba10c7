"""The backup pipeline out of team reach: every object in `ml-backup`, the team's snapshot bound there the way
Velero's data mover does, the launcher's RBAC named right by right, and no team principal (its people, its CI,
every ServiceAccount a pod of its namespaces can run as, every group they belong to) reaching any object of it,
computed from the plan's RBAC with Kubernetes' matching rules. The binding step runs for real: busybox sh and
wget against an HTTP server answering what the API server answers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jsonschema
import pytest
import yaml

from components.minio.backup_launcher import BIND_SCRIPT, HANDLE_PLACEHOLDER, proxy_paths
from components.scheduling.config import TEAM_ROLE
from settings import BackupSource
from settings.backup_layout import BACKUP_NAMESPACE
from tests.conftest import requires_upstream

SOURCES = {"datasets": "llm-train", "checkpoints": "research"}
TEAM_NAMESPACES = {"llm-train", "llm-eval", "research", "vision"}  # prod's teamNamespaces output, checked below
SNAPSHOTS = "snapshot.storage.k8s.io"


def run_spec(plan, source: str) -> dict[str, dict]:
    data = plan.named(f"backup-{source}-run")["inputs"]["data"]
    return {key: json.loads(text) for key, text in data.items()}


def crd_schema(kind: str) -> dict:
    path = requires_upstream("crds", "external-snapshotter", "v8.6.0", f"{SNAPSHOTS}_{kind}.yaml")
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


# --- the launcher -----------------------------------------------------------------------------------


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_the_launcher_snapshots_binds_then_starts_the_backup_job(prod_plan, source):
    team, name = SOURCES[source], f"backup-{source}"
    cron = prod_plan.named(name)["inputs"]
    assert cron["metadata"] == {
        "name": source,
        "namespace": BACKUP_NAMESPACE,
        "labels": {"app.kubernetes.io/name": "cephfs-backup", "ml-platform.io/source": source},
    }
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{name}-launcher"
    steps = {c["name"]: c for c in pod["initContainers"] + pod["containers"]}
    assert list(steps) == [
        "delete-job",
        "delete-bound-snapshot",
        "delete-content",
        "delete-snapshot",
        "snapshot",
        "wait-snapshot",
        "api-proxy",
        "bind",
        "create-bound",
        "wait-bound",
        "start-backup",
    ]
    args = {step: c.get("args") for step, c in steps.items()}
    assert args["delete-job"][:3] == ["delete", "job", name] and "--cascade=foreground" in args["delete-job"]
    assert args["delete-content"][:3] == ["delete", "volumesnapshotcontent", f"ml-backup-{source}"]
    assert "--namespace" not in args["delete-content"] + args["create-bound"]  # cluster-scoped / namespaced files
    for step in ("delete-snapshot", "snapshot", "wait-snapshot"):
        assert args[step][-2:] == ["--namespace", team], step  # only the snapshot lives in the team's namespace
    for step in ("delete-job", "delete-bound-snapshot", "wait-bound", "start-backup"):
        assert args[step][-2:] == ["--namespace", BACKUP_NAMESPACE], step
    # The proxy: a native sidecar on loopback, GET only, the two paths the binding step reads.
    proxy = steps["api-proxy"]
    assert proxy["restartPolicy"] == "Always" and "--address=127.0.0.1" in proxy["args"]
    assert "--reject-methods=^(POST|PUT|PATCH|DELETE)$" in proxy["args"]
    accept = next(a for a in proxy["args"] if a.startswith("--accept-paths="))
    assert accept.removeprefix("--accept-paths=").split(",") == proxy_paths(
        BackupSource.model_validate(
            {"name": source, "namespace": team, "claimName": "c", "size": "1Gi", "storageClass": "tier2-shared"}
        )
    )
    assert steps["bind"]["command"][:2] == ["sh", "-c"] and steps["bind"]["command"][2] == BIND_SCRIPT.read_text()
    env = {e["name"]: e["value"] for e in steps["bind"]["env"]}
    assert env["SOURCE_NAMESPACE"] == team and env["SNAPSHOT"] == name
    assert env["CSI_DRIVER"] == "rook-ceph.cephfs.csi.ceph.com"
    # Every kubectl step of the pod reads the run spec of this source only.
    assert {"name": "run-spec", "configMap": {"name": f"{name}-run"}} in pod["volumes"]


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_the_run_spec_matches_the_upstream_crds_and_binds_the_team_snapshot_into_ml_backup(prod_plan, source):
    team, name = SOURCES[source], f"backup-{source}"
    spec = run_spec(prod_plan, source)
    assert sorted(spec) == ["bound-snapshot.json", "content.json", "job.json", "snapshot.json"]
    snapshot_schema, content_schema = crd_schema("volumesnapshots"), crd_schema("volumesnapshotcontents")
    taken, bound, content = spec["snapshot.json"], spec["bound-snapshot.json"], spec["content.json"]
    for doc, schema in ((taken, snapshot_schema), (bound, snapshot_schema), (content, content_schema)):
        jsonschema.validate(doc, schema)
    claim = {"datasets": "shared-datasets", "checkpoints": "shared-checkpoints"}[source]
    assert taken["metadata"]["namespace"] == team and taken["spec"]["source"] == {"persistentVolumeClaimName": claim}
    # Pre-provisioned and pre-bound both ways (the Kubernetes docs' "pre-provisioned snapshot"): the snapshot in
    # ml-backup names the content, the content names that snapshot; Retain keeps the Ceph snapshot the team's.
    assert bound["metadata"] == {**taken["metadata"], "namespace": BACKUP_NAMESPACE}
    assert bound["spec"]["source"] == {"volumeSnapshotContentName": content["metadata"]["name"]}
    assert content["spec"]["volumeSnapshotRef"] == {"name": name, "namespace": BACKUP_NAMESPACE}
    assert content["spec"]["deletionPolicy"] == "Retain"
    assert content["spec"]["source"] == {"snapshotHandle": HANDLE_PLACEHOLDER}
    assert "namespace" not in content["metadata"]
    # The backup Job in ml-backup mounts a read-only clone of the bound snapshot, never the team's claim.
    job = spec["job.json"]
    assert job["metadata"]["namespace"] == BACKUP_NAMESPACE
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    clone = volumes["data"]["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert clone["dataSource"] == {"apiGroup": SNAPSHOTS, "kind": "VolumeSnapshot", "name": name}
    assert clone["accessModes"] == ["ReadOnlyMany"] and clone["storageClassName"] == "tier2-shared-snapshot-ro"
    assert not any("persistentVolumeClaim" in v for v in volumes.values())


def test_the_launcher_rbac_names_each_right(prod_plan):
    def rules(resource: str) -> list[dict]:
        return prod_plan.named(resource)["inputs"]["rules"]

    for source, team in SOURCES.items():
        name, content = f"backup-{source}", f"ml-backup-{source}"

        def named(group, kind, obj):
            return [
                {"apiGroups": [group], "resources": [kind], "verbs": ["create"]},
                {
                    "apiGroups": [group],
                    "resources": [kind],
                    "resourceNames": [obj],
                    "verbs": ["get", "list", "watch", "delete"],
                },
            ]

        team_role = prod_plan.named(f"{name}-launcher-role")["inputs"]
        assert team_role["metadata"] == {"name": f"{name}-launcher", "namespace": team}
        assert team_role["rules"] == named(SNAPSHOTS, "volumesnapshots", name)
        assert rules(f"{name}-launcher-platform-role") == named("batch", "jobs", name) + named(
            SNAPSHOTS, "volumesnapshots", name
        )
        assert rules(f"{name}-launcher-cluster-role") == [
            {"apiGroups": [SNAPSHOTS], "resources": ["volumesnapshotcontents"], "verbs": ["create", "get"]},
            {
                "apiGroups": [SNAPSHOTS],
                "resources": ["volumesnapshotcontents"],
                "resourceNames": [content],
                "verbs": ["list", "watch", "delete"],
            },
        ]
        for suffix in ("launcher", "launcher-platform", "launcher-cluster"):
            binding = prod_plan.named(f"{name}-{suffix}-binding")["inputs"]
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": f"{name}-launcher", "namespace": BACKUP_NAMESPACE}
            ]


# --- what a team can reach ----------------------------------------------------------------------------

RBAC = "kubernetes:rbac.authorization.k8s.io/v1:"


def team_principals(plan) -> set[tuple[str, str]]:
    """(kind, name) of every identity a team acts as: the subjects of its RoleBindings, every ServiceAccount in
    its namespaces (a pod it creates may run as any of them), and the groups all of them belong to."""
    principals = {("Group", "system:authenticated"), ("Group", "system:serviceaccounts")}
    for ns in TEAM_NAMESPACES:
        principals |= {("ServiceAccount", f"{ns}/default"), ("Group", f"system:serviceaccounts:{ns}")}
    for r in plan.by_type("kubernetes:core/v1:ServiceAccount"):
        meta = r["inputs"]["metadata"]
        if meta["namespace"] in TEAM_NAMESPACES:
            principals.add(("ServiceAccount", f"{meta['namespace']}/{meta['name']}"))
    for r in plan.by_type(RBAC + "RoleBinding"):
        if r["inputs"]["metadata"]["namespace"] in TEAM_NAMESPACES and r["inputs"]["roleRef"]["name"] == TEAM_ROLE:
            principals |= {subject_key(s, r["inputs"]["metadata"]["namespace"]) for s in r["inputs"]["subjects"]}
    return principals


def subject_key(subject: dict, binding_ns: str) -> tuple[str, str]:
    if subject["kind"] == "ServiceAccount":
        return ("ServiceAccount", f"{subject.get('namespace', binding_ns)}/{subject['name']}")
    return (subject["kind"], subject["name"])


def granted(plan, principals) -> list[tuple[str, dict]]:
    """(scope, rule) of every rule bound to any of `principals`: a RoleBinding's namespace, or '*' cluster-wide."""
    roles = {
        ("Role", r["inputs"]["metadata"]["namespace"], r["inputs"]["metadata"]["name"]): r
        for r in plan.by_type(RBAC + "Role")
    }
    roles |= {("ClusterRole", "", r["inputs"]["metadata"]["name"]): r for r in plan.by_type(RBAC + "ClusterRole")}
    found = []
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for b in plan.by_type(RBAC + kind):
            ns = b["inputs"]["metadata"].get("namespace", "")
            if not {subject_key(s, ns) for s in b["inputs"].get("subjects") or []} & principals:
                continue
            ref = b["inputs"]["roleRef"]
            role = roles.get((ref["kind"], ns if ref["kind"] == "Role" else "", ref["name"]))
            assert role is not None or ref["kind"] == "ClusterRole", f"{b['name']} names a missing Role"
            rules = role["inputs"]["rules"] if role else [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
            found += [(ns or "*", rule) for rule in rules]  # a ClusterRole not in the plan counts as everything
    return found


def allows(rule: dict, group: str, resource: str, name: str, verb: str) -> bool:
    """Kubernetes RBAC matching (rbac/v1 PolicyRule): groups, resources, names and verbs, `*` wildcards."""
    return (
        any(g in ("*", group) for g in rule.get("apiGroups", []))
        and any(r in ("*", resource) for r in rule.get("resources", []))
        and (not rule.get("resourceNames") or name in rule["resourceNames"])
        and any(v in ("*", verb) for v in rule.get("verbs", []))
    )


VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


def pipeline_objects(plan) -> list[tuple[str, str, str, str]]:
    """(namespace or '' , api group, resource, name) of every object of the pipeline, planned or made at run time."""
    plural = {
        "ConfigMap": ("", "configmaps"),
        "Secret": ("", "secrets"),
        "ServiceAccount": ("", "serviceaccounts"),
        "CronJob": ("batch", "cronjobs"),
        "Job": ("batch", "jobs"),
        "Role": ("rbac.authorization.k8s.io", "roles"),
        "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
        "ClusterRole": ("rbac.authorization.k8s.io", "clusterroles"),
        "ClusterRoleBinding": ("rbac.authorization.k8s.io", "clusterrolebindings"),
        "VolumeSnapshot": (SNAPSHOTS, "volumesnapshots"),
        "VolumeSnapshotContent": (SNAPSHOTS, "volumesnapshotcontents"),
    }
    from settings.backup_layout import FIXED, owned

    objects = [o for source, ns in SOURCES.items() for o in owned(source, ns)] + list(FIXED)
    found = [(o.scope, *plural[o.kind], o.name) for o in objects]
    # What runs in ml-backup: the launcher's and the backup's pods and the clones' claims.
    found += [(BACKUP_NAMESPACE, "", kind, "any") for kind in ("pods", "pods/exec", "persistentvolumeclaims")]
    return found


def test_no_team_principal_reaches_any_object_of_the_pipeline(prod_plan):
    assert {ns for spaces in prod_plan.outputs["teamNamespaces"].values() for ns in spaces} == TEAM_NAMESPACES
    principals = team_principals(prod_plan)
    # The team's people (its groups, or its CI account), found from its RoleBindings.
    team_bindings = [r for r in prod_plan.by_type(RBAC + "RoleBinding") if r["inputs"]["roleRef"]["name"] == TEAM_ROLE]
    assert {r["inputs"]["metadata"]["namespace"] for r in team_bindings} == TEAM_NAMESPACES
    for r in team_bindings:
        assert (
            r["inputs"]["subjects"]
            and {subject_key(s, r["inputs"]["metadata"]["namespace"]) for s in r["inputs"]["subjects"]} <= principals
        )
    rules = granted(prod_plan, principals)
    assert any(scope in TEAM_NAMESPACES for scope, _ in rules), "the team's own Role must be found"
    reached = [
        (obj, verb)
        for obj in pipeline_objects(prod_plan)
        for scope, rule in rules
        for verb in VERBS
        if (scope == "*" or scope == obj[0]) and allows(rule, obj[1], obj[2], obj[3], verb)
    ]
    assert reached == []
    assert len(pipeline_objects(prod_plan)) > 30


def test_the_check_sees_what_a_team_used_to_reach(prod_plan):
    # The same computation finds the old way in: a Secret, the CronJob and the status record in the team's namespace.
    principals = team_principals(prod_plan)
    rules = granted(prod_plan, principals)
    for resource, group in (("secrets", ""), ("cronjobs", "batch"), ("configmaps", "")):
        assert any(
            scope == "llm-train" and allows(rule, group, resource, "backup-datasets-rclone", "get")
            for scope, rule in rules
        ), resource


def test_only_the_backup_identity_can_write_the_record_monitoring_reads(prod_plan):
    from components.monitoring.config import BACKUP_NAMESPACE as MONITORED

    assert MONITORED == BACKUP_NAMESPACE
    for source in SOURCES:
        writers = set()
        everyone = {
            subject_key(s, b["inputs"]["metadata"].get("namespace", ""))
            for kind in ("RoleBinding", "ClusterRoleBinding")
            for b in prod_plan.by_type(RBAC + kind)
            for s in b["inputs"].get("subjects") or []
        }
        for principal in everyone:
            for scope, rule in granted(prod_plan, {principal}):
                if scope in ("*", BACKUP_NAMESPACE) and any(
                    allows(rule, "", "configmaps", f"backup-status-{source}", verb)
                    for verb in ("update", "patch", "create", "delete")
                ):
                    writers.add(principal)
        assert writers == {("ServiceAccount", f"{BACKUP_NAMESPACE}/backup-{source}")}, writers


# --- the binding step, run -------------------------------------------------------------------------------

HANDLE = "0001-0009-rook-ceph-0000000000000001-7b2d3c4e-1f2a-4b5c-8d9e-0a1b2c3d4e5f"


def team_objects(*, ready: bool = True, driver: str = "rook-ceph.cephfs.csi.ceph.com", handle: str = HANDLE):
    """The team's VolumeSnapshot and its bound content as the API server returns them (managedFields included)."""
    snapshot = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": "backup-datasets",
            "namespace": "llm-train",
            "managedFields": [{"fieldsV1": {"f:status": {"f:boundVolumeSnapshotContentName": {}, "f:readyToUse": {}}}}],
        },
        "spec": {"source": {"persistentVolumeClaimName": "shared-datasets"}, "volumeSnapshotClassName": "tier2-shared"},
        "status": {
            "boundVolumeSnapshotContentName": "snapcontent-2f1e0d9c-8b7a-4c6d-9e5f-1a2b3c4d5e6f",
            "readyToUse": ready,
            "restoreSize": "0",
        },
    }
    content = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {
            "name": "snapcontent-2f1e0d9c-8b7a-4c6d-9e5f-1a2b3c4d5e6f",
            "managedFields": [{"fieldsV1": {"f:status": {"f:snapshotHandle": {}}, "f:spec": {"f:driver": {}}}}],
        },
        "spec": {
            "deletionPolicy": "Delete",
            "driver": driver,
            "source": {"volumeHandle": "0001-0009-rook-ceph-0000000000000001-aaaa"},
            "volumeSnapshotClassName": "tier2-shared",
            "volumeSnapshotRef": {"name": "backup-datasets", "namespace": "llm-train", "uid": "u-1"},
        },
        "status": {"readyToUse": True, "snapshotHandle": handle, "restoreSize": 0},
    }
    return snapshot, content


class FakeApi:
    """Answers GETs of the two objects under the snapshot API, as the proxy would forward them; records paths."""

    def __init__(self, objects, pretty: bool) -> None:
        self.paths: list[str] = []
        api = self
        by_path = {
            f"/apis/{SNAPSHOTS}/v1/namespaces/llm-train/volumesnapshots/backup-datasets": objects[0],
            f"/apis/{SNAPSHOTS}/v1/volumesnapshotcontents/{objects[1]['metadata']['name']}": objects[1],
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                path, _, query = self.path.partition("?")
                api.paths.append(path)
                assert query == "pretty=false"
                if path not in by_path:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = json.dumps(
                    by_path[path], indent=4 if pretty else None, separators=None if pretty else (",", ":")
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def busybox() -> str:
    found = shutil.which("busybox")
    if not found:
        pytest.fail("busybox is missing (the rclone image's shell and wget): apt-get install busybox")
    return found


@pytest.fixture
def bind(tmp_path, prod_plan) -> Iterator:
    template = tmp_path / "content.json"
    template.write_text(prod_plan.named("backup-datasets-run")["inputs"]["data"]["content.json"])
    servers = []

    def run(objects, *, pretty: bool = False, tries: str = "2") -> tuple[subprocess.CompletedProcess, FakeApi]:
        api = FakeApi(objects, pretty)
        servers.append(api.server)
        tools = tmp_path / "bin"
        tools.mkdir(exist_ok=True)
        for tool in ("wget", "sed", "grep", "wc", "dirname", "sleep", "printf"):  # the image's busybox applets
            link = tools / tool
            if not link.exists():
                link.symlink_to(busybox())
        env = {
            "PATH": str(tools),
            "API": api.url,
            "SOURCE_NAMESPACE": "llm-train",
            "SNAPSHOT": "backup-datasets",
            "CSI_DRIVER": "rook-ceph.cephfs.csi.ceph.com",
            "TEMPLATE": str(template),
            "OUT": str(tmp_path / "out" / "content.json"),
            "TRIES": tries,
        }
        (tmp_path / "out").mkdir(exist_ok=True)
        proc = subprocess.run(
            [busybox(), "sh", "-c", BIND_SCRIPT.read_text(), "bind-snapshot"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return proc, api

    yield run
    for server in servers:
        server.shutdown()


@pytest.mark.parametrize("pretty", [False, True], ids=["compact", "pretty"])
def test_the_binding_step_writes_the_content_with_the_team_snapshots_handle(bind, tmp_path, pretty):
    proc, api = bind(team_objects(), pretty=pretty)
    assert proc.returncode == 0, proc.stderr
    content = json.loads((tmp_path / "out" / "content.json").read_text())
    jsonschema.validate(content, crd_schema("volumesnapshotcontents"))
    assert content["spec"]["source"] == {"snapshotHandle": HANDLE}
    assert content["spec"]["volumeSnapshotRef"] == {"name": "backup-datasets", "namespace": BACKUP_NAMESPACE}
    # What it read is exactly what the launcher's proxy forwards (Go's RE2 syntax here is Python's too).
    source = BackupSource.model_validate(
        {"name": "datasets", "namespace": "llm-train", "claimName": "c", "size": "1Gi", "storageClass": "tier2-shared"}
    )
    assert len(api.paths) == 2
    for path in api.paths:
        assert any(re.search(pattern, path) for pattern in proxy_paths(source)), path
    for pattern in proxy_paths(source):  # ... and nothing else: another team's snapshot is not forwarded
        assert not re.search(pattern, f"/apis/{SNAPSHOTS}/v1/namespaces/research/volumesnapshots/backup-datasets")
        assert not re.search(pattern, "/api/v1/namespaces/ml-backup/secrets/backup-datasets-rclone")


@pytest.mark.parametrize(
    ("objects", "message"),
    [
        (team_objects(ready=False), "llm-train/backup-datasets is not ready to use"),
        (team_objects(driver="rook-ceph.rbd.csi.ceph.com"), "belongs to the driver rook-ceph.rbd.csi.ceph.com"),
        (team_objects(handle='x","deletionPolicy":"Delete'), "odd snapshot handle"),
        (team_objects(handle="a/b"), "odd snapshot handle"),
    ],
    ids=["not-ready", "other-driver", "json-injection", "sed-injection"],
)
def test_the_binding_step_refuses_what_it_must_not_bind(bind, tmp_path, objects, message):
    proc, _ = bind(objects)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "content.json").exists()


def test_the_binding_step_fails_when_it_cannot_read(bind, tmp_path):
    snapshot, content = team_objects()
    content["metadata"]["name"] = "snapcontent-other"  # the proxy/RBAC answers 404/403 for the bound one
    proc, _ = bind((snapshot, content))
    assert proc.returncode != 0 and "cannot read volumesnapshotcontents/snapcontent-2f1e0d9c" in proc.stderr


def test_the_binding_script_is_posix_and_shellcheck_clean():
    from tests.hosts.test_scripts import _shellcheck

    result = subprocess.run([_shellcheck(), "-s", "sh", str(BIND_SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert BIND_SCRIPT.read_text().startswith("#!/bin/sh\n")
