"""Backup source names are checked against the layout every source's pipeline really uses (settings/backup_layout.py):
two sources, or a source and the pipeline, must not own the same object or bucket key, and every name must fit
its kind. The plan creates exactly the objects that layout names; object locking must cover the version retention."""

from __future__ import annotations

import json

import pytest

from settings.backup_layout import BACKUP_NAMESPACE, CLUSTER, FIXED, layout_problems, owned
from tests.conftest import problems

SOURCES = "storage.minio.backup.sources"


def with_sources(*names: str, namespace: str = "research"):
    def mutate(raw):
        template = raw["storage"]["minio"]["backup"]["sources"][1]
        raw["storage"]["minio"]["backup"]["sources"] += [
            # each its own claim: one claim backed up by two sources is refused on its own
            {**template, "name": name, "namespace": namespace, "claimName": f"{name}-data"}
            for name in names
        ]

    return mutate


def source_problems(*names: str) -> list[str]:
    return [p for p in problems(mutate=with_sources(*names)) if p.startswith(SOURCES)]


def test_a_source_named_status_would_own_every_run_record():
    (line,) = source_problems("status")
    assert line.startswith(f"{SOURCES}[2].name: 'status' would own the bucket prefix 'status/'")
    # every source's run record is under it, its own included
    for source in ("checkpoints", "datasets", "status"):
        assert f"status/{source}.json" in line
    assert "'status/' is reserved for the run records" in line and line.endswith("choose another name")


@pytest.mark.parametrize(
    ("names", "index", "fragment"),
    [
        # backup-datasets-launcher: the backup account of one, the launcher account of the other
        (
            ("datasets-launcher",),
            2,
            "ServiceAccount 'backup-datasets-launcher' in namespace ml-backup, which source 'datasets'",
        ),
        # backup-status-x-run: the status ConfigMap of `x-run` and the run spec of `status-x`
        (("x-run", "status-x"), 3, "ConfigMap 'backup-status-x-run' in namespace ml-backup, which source 'x-run'"),
        # backup-status-a-launcher: the status Role of `a-launcher` and the launcher Role of `status-a`
        (("a-launcher", "status-a"), 3, "Role 'backup-status-a-launcher' in namespace ml-backup"),
    ],
    ids=["launcher-account", "status-vs-run-spec", "status-role-vs-launcher-role"],
)
def test_names_whose_objects_collide_are_refused(names, index, fragment):
    found = source_problems(*names)
    assert any(line.startswith(f"{SOURCES}[{index}].name: ") and fragment in line for line in found), found


@pytest.mark.parametrize(
    ("length", "kind", "limit"),
    [(53, "CronJob", 52), (57, "Job", 63)],
    ids=["cronjob-suffix", "job-name-label"],
)
def test_names_too_long_for_their_kind_are_refused(length, kind, limit):
    name = "n" * length
    found = source_problems(name)
    lines = [line for line in found if f"makes the {kind} " in line]
    assert lines and all(f"Kubernetes accepts at most {limit}" in line for line in lines), found


@pytest.mark.parametrize("names", [("ca",), ("statuses", "status2"), ("launcher", "run", "n" * 52)])
def test_names_that_only_look_reserved_are_accepted(names):
    assert source_problems(*names) == []


def test_the_rule_follows_the_layout_not_a_word_list():
    # Every pair of sources the layout makes collide is found, whatever the words: derived, not listed.
    found = layout_problems([("a", "t"), ("b", "t"), ("a-launcher", "t")])
    assert [i for i, _ in found] == [2]
    assert layout_problems([(name, "t") for name in ("x", "y", "z")]) == []
    assert [i for i, _ in layout_problems([("status", "t")])] == [0]


def test_the_plan_creates_exactly_the_objects_the_layout_names(prod_plan):
    kinds = {
        "kubernetes:core/v1:ConfigMap": "ConfigMap",
        "kubernetes:core/v1:Secret": "Secret",
        "kubernetes:core/v1:ServiceAccount": "ServiceAccount",
        "kubernetes:batch/v1:CronJob": "CronJob",
        "kubernetes:rbac.authorization.k8s.io/v1:Role": "Role",
        "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding": "RoleBinding",
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole": "ClusterRole",
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding": "ClusterRoleBinding",
    }
    created = set()
    for r in prod_plan.resources:
        meta = r["inputs"].get("metadata") or {}
        if r["type"] in kinds and (r["name"].startswith("backup-") and r["type"] != "kubernetes:core/v1:Namespace"):
            created.add((meta.get("namespace", CLUSTER), kinds[r["type"]], meta["name"]))
    # ... and at run time, from the run spec: the snapshots, the content and the Job.
    for r in prod_plan.by_type("kubernetes:core/v1:ConfigMap"):
        for key, text in (r["inputs"].get("data") or {}).items():
            if key.endswith(".json") and r["inputs"]["metadata"]["namespace"] == BACKUP_NAMESPACE:
                doc = json.loads(text)
                created.add((doc["metadata"].get("namespace", CLUSTER), doc["kind"], doc["metadata"]["name"]))
    expected = {(o.scope, o.kind, o.name) for o in FIXED}
    for source, namespace in (("datasets", "llm-train"), ("checkpoints", "research")):
        expected |= {(o.scope, o.kind, o.name) for o in owned(source, namespace)}
    assert created == expected


@pytest.mark.parametrize(
    ("lock", "retention", "ok"),
    [(7, 30, False), (29, 30, False), (30, 30, True), (90, 30, True), (None, 30, True), (10, 5, True)],
)
def test_object_locking_must_cover_the_version_retention(lock, retention, ok):
    def mutate(raw):
        raw["storage"]["minio"].update(objectLockDays=lock, noncurrentRetentionDays=retention)

    found = [p for p in problems(mutate=mutate) if p.startswith("storage.minio.objectLockDays")]
    if ok:
        assert found == []
    else:
        (line,) = found
        assert f"{lock} is less than noncurrentRetentionDays ({retention})" in line
        assert f"set objectLockDays to at least {retention}" in line


def test_prod_locks_both_buckets_for_at_least_the_retention(prod_plan):
    buckets = {
        r["name"]: r["inputs"] for r in prod_plan.by_type("pulumi-python:dynamic:Resource") if "-bucket-" in r["name"]
    }
    assert len(buckets) == 2
    for inputs in buckets.values():
        assert inputs["versioning"] is True and inputs["lockDays"] >= inputs["noncurrentDays"] > 0
