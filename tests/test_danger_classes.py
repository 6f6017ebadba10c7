"""The review's Danger section names every destructive or disruptive change by class, in plain words, with
what is lost or restarts and the runbook section; two or more cases per class. Reads are part of the plan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from stacks import diff, engine, review
from stacks.plan import REFUSED
from tests.conftest import ROOT, evaluate, node_index


@pytest.fixture(scope="module")
def prod_base() -> dict:
    return json.loads(evaluate("prod").to_json())


def danger_of(base: dict, mutate, stack: str = "prod") -> list[str]:
    return diff.compare(base, json.loads(evaluate(stack, mutate).to_json())).danger


def one(lines: list[str], *fragments: str) -> str:
    found = [line for line in lines if all(f in line for f in fragments)]
    assert len(found) == 1, (fragments, lines)
    return found[0]


# ---------------------------------------------------------------------------------------------
# Storage devices
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("node", ["cpu-04", "cpu-06"])
def test_an_osd_device_added_names_the_rebalance(prod_base, node):
    def mutate(raw):
        raw["nodes"][node_index(raw, node)]["osdDevices"].append({"device": "/dev/disk/by-id/wwn-0x5002538f42ffa1ff"})

    line = one(danger_of(prod_base, mutate), f"{node}-ceph-disks", "new OSD device")
    assert "/dev/disk/by-id/wwn-0x5002538f42ffa1ff" in line and "backfill" in line


@pytest.mark.parametrize("index", [0, 2])
def test_an_osd_device_taken_off_the_list_names_what_rook_does_and_the_runbook(prod_base, index):
    def mutate(raw):
        raw["nodes"][node_index(raw, "cpu-05")]["osdDevices"].pop(index)

    line = one(danger_of(prod_base, mutate), "cpu-05-ceph-disks", "taken off the OSD list")
    assert "Rook never removes an OSD by itself" in line and "docs/runbook.md §3" in line


@pytest.mark.parametrize("index", [0, 1])
def test_a_device_newly_marked_wipe_is_named_as_a_wipe(prod_base, index):
    def mutate(raw):
        raw["nodes"][node_index(raw, "cpu-04")]["osdDevices"][index]["wipe"] = True

    line = one(danger_of(prod_base, mutate), "cpu-04-ceph-disks", "WIPED")
    assert f"wwn-0x5002538f4204a10{index + 1}" in line


# ---------------------------------------------------------------------------------------------
# Networks, tokens, renames, versions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [("clusterCidr", "10.44.0.0/16"), ("serviceCidr", "10.45.0.0/16")])
def test_a_cidr_change_is_named_a_cluster_rebuild(prod_base, field, value):
    line = one(danger_of(prod_base, lambda raw: raw["network"].update({field: value})), f"network.{field} changes")
    # the servers' config holds the ranges
    assert f"-> {value} on 3 nodes" in line and "cluster rebuild" in line and "docs/runbook.md §8" in line


def _plan_with_token(tmp_path: Path, ciphertext: str) -> dict:
    doc = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    doc["config"]["ml-platform:rke2Token"] = {"secure": ciphertext}
    path = tmp_path / f"Pulumi.prod.{ciphertext}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return json.loads(engine.evaluate_stack("prod", path).to_json())


@pytest.mark.parametrize(("old", "new"), [("v1:aaaa", "v1:bbbb"), ("v1:bbbb", "v1:cccc")])
def test_a_join_token_rotation_names_every_server_restart(tmp_path, old, new):
    result = diff.compare(_plan_with_token(tmp_path, old), _plan_with_token(tmp_path, new))
    line = one(result.danger, "RKE2 join token rotated")
    assert "3 server(s) (cpu-01, cpu-02, cpu-03)" in line and "rke2 token rotate" in line
    assert "docs/runbook.md §5" in line and new not in line


@pytest.mark.parametrize(("old", "new"), [("gpu-07", "gpu-107"), ("cpu-20", "cpu-120")])
def test_a_rename_is_shown_as_the_rename_it_is(prod_base, old, new):
    def mutate(raw):
        node = raw["nodes"][node_index(raw, old)]
        node["name"], node["renamedFrom"] = new, old

    danger = danger_of(prod_base, mutate)
    line = one(danger, f"node {old} renamed to {new}")
    assert "docs/runbook.md §15" in line
    # not an uninstall of the old name's RKE2: the host runs under the new name
    assert not [d for d in danger if f"[host {old}]" in d and "uninstall RKE2" in d], danger


@pytest.mark.parametrize(
    ("higher", "lower"), [("v1.35.8+rke2r1", "v1.35.7+rke2r1"), ("v1.35.7+rke2r2", "v1.35.7+rke2r1")]
)
def test_a_downgrade_is_named_a_downgrade(higher, lower):
    def at(version):
        return lambda raw: raw["cluster"].update({"rke2Version": version, "deployedRke2Version": None})

    base = json.loads(evaluate("prod", at(higher)).to_json())
    line = one(danger_of(base, at(lower)), "RKE2 DOWNGRADE")
    assert f"{higher} -> {lower}" in line and "docs/runbook.md §17" in line and "upgrade " not in line.lower()[:20]


# ---------------------------------------------------------------------------------------------
# Teams, stateful releases, Ceph
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("team", "namespaces"), [("research", ["research"]), ("llm", ["llm-eval", "llm-train"])])
def test_removing_a_team_names_what_goes_and_what_stays(prod_base, team, namespaces):
    def mutate(raw):
        raw["scheduling"]["teams"] = [t for t in raw["scheduling"]["teams"] if t["name"] != team]
        for source in raw["storage"]["minio"]["backup"]["sources"]:
            source["namespace"] = "vision"
        # vision's storage quota must hold the backed-up claims it now has.
        next(t for t in raw["scheduling"]["teams"] if t["name"] == "vision")["storage"]["tier2-shared"] = "300Ti"

    danger = danger_of(prod_base, mutate)
    line = one(danger, f"team {team} removed")
    assert "queued jobs are never admitted" in line and f"Its namespaces {', '.join(namespaces)} are kept" in line
    assert not [d for d in danger if "namespace" in d and "would be deleted" in d], "retained: not deleted"


def test_a_namespace_that_is_really_deleted_is_named(prod_base):
    head = json.loads(evaluate("prod").to_json())
    base = json.loads(json.dumps(head))
    for resource in base["resources"]:
        if resource["name"] == "scheduling-ns-vision":
            resource["options"]["retainOnDelete"] = False  # a namespace the program would really delete
    head["resources"] = [r for r in head["resources"] if r["name"] != "scheduling-ns-vision"]
    line = one(diff.compare(base, head).danger, "namespace vision would be deleted")
    assert "PersistentVolumeClaims" in line


@pytest.mark.parametrize(
    ("mutate", "release", "what"),
    [
        (
            lambda raw: raw["monitoring"].update({"namespace": "zabbix"}),
            "monitoring-zabbix",
            "Zabbix and its PostgreSQL",
        ),
        (lambda raw: raw["scheduling"].update({"kueueNamespace": "queues"}), "scheduling-kueue", "Kueue"),
    ],
)
def test_a_replaced_stateful_release_names_what_is_lost(prod_base, mutate, release, what):
    line = one(danger_of(prod_base, mutate), f"{release}: Helm release of {what}")
    assert "would be replaced" in line


@pytest.mark.parametrize("provider", ["pod", "host"])
def test_a_ceph_network_provider_change_is_named(provider):
    other = "host" if provider == "pod" else "pod"

    def at(value):
        return lambda raw: raw["storage"]["ceph"].update({"network": {"provider": value}})

    base = json.loads(evaluate("prod", at(provider)).to_json())
    line = one(danger_of(base, at(other)), "Ceph's network provider changes")
    assert "lose quorum" in line


@pytest.mark.parametrize("name", ["datasets", "fs2"])
def test_a_cephfs_rename_is_named_a_new_empty_filesystem(prod_base, name):
    line = one(
        danger_of(prod_base, lambda raw: raw["storage"]["ceph"].update({"filesystemName": name})),
        "CephFS filesystem",
    )
    assert f"(new: {name})" in line and "EMPTY" in line


def test_every_danger_class_has_a_title_and_is_listed_once():
    titles = [kind.title for kind in diff.DANGER]
    assert len(titles) == len(set(titles)) >= 12


# ---------------------------------------------------------------------------------------------
# Refusals: the review's verdict is the planner's and `pulumi preview`'s
# ---------------------------------------------------------------------------------------------


def test_a_changed_init_server_fails_the_review_with_3_as_the_planner_does(tmp_path):
    head = review.Side("head", tmp_path / "head")
    shutil.copytree(ROOT, head.tree, ignore=shutil.ignore_patterns("venv", ".git", ".cache", "__pycache__", "*.json"))
    config = head.tree / "Pulumi.prod.yaml"
    config.write_text(config.read_text().replace("initServer: cpu-01", "initServer: cpu-02", 1))
    base = review.Side("base", ROOT)
    out = tmp_path / "out"
    out.mkdir()
    result = review.review_stack("prod", base, head, out)
    assert result.refused and not result.ok and "REFUSED" in result.summary
    assert review.exit_status([result]) == REFUSED
    assert "cluster-init-server" in result.diff and "docs/runbook.md §3" in result.diff


def test_review_exit_status_orders_refusal_before_failure():
    ok = review.StackReview("lab", True, "", "")
    broken = review.StackReview("prod", False, "", "")
    refused = review.StackReview("prod", False, "", "", refused=True)
    assert review.exit_status([ok]) == 0
    assert review.exit_status([ok, broken]) == 1
    assert review.exit_status([broken, refused]) == REFUSED


# ---------------------------------------------------------------------------------------------
# Reads
# ---------------------------------------------------------------------------------------------


def test_reads_are_in_the_plan_and_the_review(prod_base):
    reads = prod_base["reads"]
    assert [(r["type"], r["id"]) for r in reads] == [
        ("kubernetes:core/v1:Secret", "monitoring/zabbix-api-token"),
        ("kubernetes:core/v1:Secret", "monitoring/zabbix-kueue-reader-token"),
    ]
    assert reads[0]["dependencies"], "the read waits for the Secret the program creates"
    empty = {"project": "ml-platform", "stack": "prod", "resources": [], "outputs": {}}
    text = diff.render_text(diff.compare(empty, prod_base))
    assert "+ read monitoring-api-token-read [kubernetes:core/v1:Secret] id monitoring/zabbix-api-token" in text
    moved = json.loads(evaluate("prod", lambda raw: raw["monitoring"].update({"namespace": "zabbix"})).to_json())
    changed = diff.compare(prod_base, moved).reads
    assert changed == [
        "~ read monitoring-api-token-read [kubernetes:core/v1:Secret] id zabbix/zabbix-api-token",
        "~ read monitoring-kueue-reader-token-read [kubernetes:core/v1:Secret] id zabbix/zabbix-kueue-reader-token",
    ]
