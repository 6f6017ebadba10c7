"""The review's Danger made from what settings fields declare (stacks/diff/declared.py), the etcd quorum of a
control-plane change, a changed cluster identity, and the CRDs a removed release deletes. Each case is one the
resource-level Danger classes left silent or showed as an update."""

from __future__ import annotations

import copy
import json

import pytest

from stacks import diff, rollouts
from stacks.plan import REFUSED
from tests.conftest import evaluate, node_index, requires_upstream, stack_doc


def plan(stack: str, mutate=None) -> dict:
    """A plan holding only the settings document: what the settings-declared Danger reads."""
    raw = copy.deepcopy(stack_doc(stack))
    if mutate is not None:
        mutate(raw)
    return {"project": "ml-platform", "stack": stack, "resources": [], "outputs": {}, "settings": raw}


def declared_lines(old: dict, new: dict) -> list[str]:
    return [line for line in diff.compare(old, new).danger if line.startswith("settings ")]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        # retention and expiry cuts delete history
        (lambda raw: raw["cluster"]["etcdSnapshots"].update(retention=7), "cluster.etcdSnapshots.retention: 28 -> 7"),
        (
            lambda raw: raw["storage"]["minio"].update(noncurrentRetentionDays=7),
            "storage.minio.noncurrentRetentionDays: 30 -> 7: lowering it destroys",
        ),
        # storage and network counts or ranges
        (lambda raw: raw["storage"]["ceph"].update(monCount=3), "storage.ceph.monCount: 5 -> 3: lowering it destroys"),
        (
            lambda raw: raw["network"].update(serviceCidr="10.44.0.0/16"),
            'network.serviceCidr: "10.43.0.0/16" -> "10.44.0.0/16": cannot change on a running cluster',
        ),
        # an operator turned off, a bucket renamed, a filesystem renamed
        (
            lambda raw: raw["scheduling"]["trainingOperators"].update(trainer=False),
            "scheduling.trainingOperators.trainer: true -> false: lowering it destroys",
        ),
        (
            lambda raw: raw["storage"]["minio"].update(etcdSnapshotBucket="etcd-2"),
            "storage.minio.etcdSnapshotBucket",
        ),
        (lambda raw: raw["storage"]["ceph"].update(filesystemName="fs2"), "the data it holds is LOST"),
    ],
)
def test_a_declared_destructive_change_is_named_with_field_values_and_effect(mutate, expected):
    base = plan("prod")
    assert any(expected in line for line in declared_lines(base, plan("prod", mutate))), declared_lines(
        base, plan("prod", mutate)
    )


@pytest.mark.parametrize(
    "mutate",
    [
        lambda raw: raw["cluster"]["etcdSnapshots"].update(retention=40),  # raised: nothing is lost
        lambda raw: raw["monitoring"]["thresholds"].update(gpuTemperatureCelsius=80),  # one macro, re-rendered
    ],
)
def test_changes_that_destroy_nothing_are_not_danger(mutate):
    assert declared_lines(plan("prod"), plan("prod", mutate)) == []


def test_control_plane_membership_names_the_etcd_quorum_before_and_after():
    def grow(raw):
        for name in ("lab-cpu-1", "lab-cpu-2"):
            raw["nodes"][node_index(raw, name)]["controlPlane"] = True

    lines = diff.compare(plan("lab"), plan("lab", grow)).danger
    quorum = [line for line in lines if line.startswith("control-plane membership")]
    assert quorum and "joining: lab-cpu-1, lab-cpu-2" in quorum[0]
    assert "1 etcd member(s), quorum 1, survives 0 server loss(es) -> 3 etcd member(s), quorum 2" in quorum[0]

    def shrink(raw):
        raw["nodes"][node_index(raw, "cpu-03")]["controlPlane"] = False

    lines = diff.compare(plan("prod"), plan("prod", shrink)).danger
    assert any("leaving: cpu-03" in line and "-> 2 etcd member(s), quorum 2, survives 0" in line for line in lines)


def test_writing_a_default_out_changes_nothing():
    def written(raw):
        raw["ssh"]["perDialTimeoutSeconds"] = 15
        raw["cluster"]["etcdSnapshots"]["s3"] = True

    assert "perDialTimeoutSeconds" not in stack_doc("lab")["ssh"]
    assert diff.compare(plan("lab"), plan("lab", written)).danger == []


@pytest.fixture(scope="module")
def lab_base() -> dict:
    return json.loads(evaluate("lab").to_json())


def test_a_changed_cluster_identity_replaces_every_bound_object_and_is_refused(lab_base):
    renamed = json.loads(evaluate("lab", lambda raw: raw["cluster"].update(name="ml-lab-2")).to_json())
    result = diff.compare(lab_base, renamed)
    provider = next(e for e in result.entries if e.type == "pulumi:providers:kubernetes")
    assert provider.action == "replace" and provider.replace_because == ["inputs.clusterIdentifier"]
    bound = [r for r in lab_base["resources"] if (r.get("provider") or "").startswith(provider.urn)]
    replaced = {e.urn for e in result.entries if e.action == "replace"}
    assert bound and {r["urn"] for r in bound} <= replaced
    assert any(
        "the cluster's identity changes" in line and f"all {len(bound)} Kubernetes" in line for line in result.danger
    )
    # protected releases and flavors among them: the preview fails, as `pulumi preview` would (exit status 3)
    assert result.errors and any("network-cni" in error for error in result.errors)
    assert REFUSED == 3


def test_turning_off_an_operator_whose_crds_are_templates_names_the_kinds_it_deletes(lab_base):
    requires_upstream("charts-src")
    moved = json.loads(
        evaluate("lab", lambda raw: raw.setdefault("scheduling", {}).update(kueueNamespace="queues")).to_json()
    )
    report = rollouts.compare(lab_base, moved)
    lines = [line for line in report.uninstalls if line.startswith("scheduling-kueue")]
    assert lines, report.problems
    for kind in ("ClusterQueue.kueue.x-k8s.io", "LocalQueue.kueue.x-k8s.io", "Workload.kueue.x-k8s.io"):
        assert kind in lines[0]
    assert "(the program's: cpu, nvidia-l40s)" in lines[0]  # ResourceFlavors of the lab inventory
    assert lines[0] in report.danger
