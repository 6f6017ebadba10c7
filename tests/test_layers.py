"""`layout: layered`: the environment as a cluster stack, a stack per node group and a platform stack, each built
by the same program from the stack's name (stacks/layers.py), previewed in run order (stacks/layered_plan.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.inventory import host_key, inventory, stack_file
from settings import SettingsError, load
from stacks import layers
from stacks.engine import PROJECT, StackOutputs, evaluate_stack, load_stack_config, run
from stacks.layered_plan import ORGANIZATION, evaluate_layered, node_config
from stacks.layers import strip_stack
from tests.conftest import ROOT

# 100 generated nodes: 3 servers, 67 CPU agents in 3 racks, 30 GPU nodes in 8 racks: two node groups.
NODES = 100
# What only the layered layout creates: the credential with which node-group stacks patch their Nodes.
LAYERED_ONLY = {
    f"{PROJECT}::mlplatform:cluster:ClusterBootstrap${kind}::{name}"
    for kind, name in (
        ("kubernetes:core/v1:ServiceAccount", "cluster-node-labeller"),
        ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "cluster-node-labeller"),
        ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding", "cluster-node-labeller"),
        ("kubernetes:core/v1:Secret", "cluster-node-labeller-token"),
    )
}
# Known values for the cluster stack's outputs, to see where each one ends up.
CLUSTER = {
    "apiEndpoint": "https://10.20.0.10:6443",
    "caHash": "ab" * 32,
    "agentToken": "AGENT-TOKEN-VALUE",
    "nodeKubeconfig": "NODE-PATCH-KUBECONFIG",
    "kubeconfig": "ADMIN-KUBECONFIG",
    "rke2Token": "SERVER-TOKEN-VALUE",
}


def _write(tmp_path: Path, layout: str, raw: dict | None = None) -> Path:
    path = tmp_path / f"Pulumi.fleet-{layout}.yaml"
    path.write_text(stack_file(raw or inventory(NODES, layout=layout)))
    return path


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("layers")
    return evaluate_layered("fleet", _write(tmp, "layered")), evaluate_stack("fleet", _write(tmp, "single"))


def _custom(resources) -> dict[str, dict]:
    return {strip_stack(r["urn"]): r for r in resources if not r["type"].startswith(("mlplatform:", "pulumi:"))}


def test_stacks_run_in_layers_with_a_stack_per_node_group(plans):
    layered, _ = plans
    assert list(layered) == ["fleet-cluster", "fleet-nodes-group-01", "fleet-nodes-group-02", "fleet-platform"]
    settings = load(inventory(NODES, layout="layered"))
    for name in ("fleet-nodes-group-01", "fleet-nodes-group-02"):
        group = name.removeprefix("fleet-nodes-")
        held = {r["name"].removesuffix("-prepare") for r in layered[name].resources if r["name"].endswith("-prepare")}
        assert held == {n.name for n in settings.node_groups[group] if not n.control_plane}
        assert sorted(layered[name].outputs) == [layers.DIGEST_OUTPUT, "environment", "group", "nodes"]
        assert (layered[name].outputs["environment"], layered[name].outputs["group"]) == ("fleet", group)
    # The servers' steps are the cluster stack's; the platform stack runs none on a node.
    cluster = {r["name"] for r in layered["fleet-cluster"].resources}
    assert {f"{n.name}-rke2" for n in settings.servers} <= cluster
    assert not any(r["name"].endswith(("-prepare", "-rke2")) for r in layered["fleet-platform"].resources)


def test_the_union_of_the_layered_stacks_is_the_single_layout(plans):
    """The same logical resources with the same inputs, each in exactly one stack; only the node-patching
    credential is the layered layout's own."""
    layered, single = plans
    union: dict[str, dict] = {}
    for plan in layered.values():
        for urn, resource in _custom(plan.resources).items():
            assert urn not in union, f"{urn} is in two stacks"
            union[urn] = resource
    expected = _custom(single.resources)
    assert set(union) - set(expected) == LAYERED_ONLY
    assert set(expected) - set(union) == set()
    differ = sorted(u for u in expected if expected[u]["inputs"] != union[u]["inputs"])
    assert differ == []
    # The platform stack exports the contract other teams read, under the same names.
    assert sorted(layered["fleet-platform"].outputs) == sorted(single.outputs)


def test_no_stack_depends_on_a_later_layer_or_another_group(plans):
    layered, _ = plans
    for name, plan in layered.items():
        own = {r["urn"] for r in plan.resources + plan.reads}
        for resource in plan.resources:
            # The platform's StackReference is its one way in from the cluster stack (which ran first).
            foreign = [d for d in resource.get("dependencies", []) if d not in own and "StackReference" not in d]
            assert foreign == [], f"{name}: {resource['name']} waits for another stack's {foreign}"


def test_node_group_stacks_never_see_an_admin_credential(tmp_path):
    """A node group gets the CA hash, the agent token and a kubeconfig that may only get and patch Nodes in its
    config (a StackReference would keep all of the cluster stack's outputs in its state); the server token and
    the admin kubeconfig reach only the platform stack (its provider and its outputs)."""
    config, secret_keys = load_stack_config("fleet", _write(tmp_path, "layered"))
    refs = {
        f"{ORGANIZATION}/{PROJECT}/fleet-cluster": StackOutputs(
            CLUSTER, frozenset({"agentToken", "nodeKubeconfig", "kubeconfig", "rke2Token"})
        )
    }
    consumed = {k: CLUSTER[k] for k in layers.NODE_INPUTS}
    group = run("fleet-nodes-group-01", *node_config(config, secret_keys, consumed))
    platform = run("fleet-platform", config, secret_keys, stack_references=refs)
    group_text = json.dumps([group.revealed, group.revealed_outputs, group.reads])
    assert CLUSTER["nodeKubeconfig"] in group_text and CLUSTER["agentToken"] in group_text
    assert CLUSTER["kubeconfig"] not in group_text and CLUSTER["rke2Token"] not in group_text
    assert not any("StackReference" in r["urn"] for r in group.resources + group.reads)
    # Its agents' join token is the secure form: the cluster's CA hash and the agent token.
    stdin = json.dumps(group.revealed)
    assert f"K10{CLUSTER['caHash']}::node:{CLUSTER['agentToken']}" in stdin
    assert CLUSTER["kubeconfig"] in json.dumps(platform.revealed)
    assert platform.revealed_outputs["rke2Token"] == CLUSTER["rke2Token"]
    # The digest of what the group consumed, as the orchestrator computes it from the cluster stack.
    assert group.outputs[layers.DIGEST_OUTPUT] == layers.digest_of(consumed)


def test_the_node_patching_credential_may_only_get_and_patch_nodes(plans):
    layered, _ = plans
    role = next(r for r in layered["fleet-cluster"].resources if r["type"].endswith("ClusterRole"))
    assert role["inputs"]["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]


def test_a_node_group_stack_without_the_cluster_values_says_what_sets_them(tmp_path):
    config, secret_keys = load_stack_config("fleet", _write(tmp_path, "layered"))
    with pytest.raises(SettingsError, match=r"cluster-stack:caHash, cluster-stack:agentToken, .*stacks.orchestrate up"):
        run("fleet-nodes-group-01", config, secret_keys)


def test_a_stack_name_outside_the_layout_is_refused():
    settings = load(inventory(NODES, layout="layered"))
    assert layers.scope_of("fleet-nodes-group-02", settings)[0] == "fleet"
    for wrong in ("fleet", "fleet-nodes-group-09", "fleet-nodes-", "fleet-platforms"):
        with pytest.raises(SettingsError, match="stacks.orchestrate"):
            layers.scope_of(wrong, settings)
    single = load(inventory(NODES))
    assert layers.scope_of("fleet-cluster", single) == ("fleet-cluster", layers.Scope())
    # An environment whose own name holds `-nodes-`: its group is what follows the last one.
    assert layers.scope_of("eu-nodes-a-nodes-group-01", settings) == ("eu-nodes-a", layers.Scope("nodes", "group-01"))


@pytest.mark.parametrize("group", ["cluster", "gpu-cluster", "platform", "row-platform", "nodes-a", "a-nodes-b"])
def test_a_group_name_that_reads_as_another_stack_is_refused(group):
    """`<env>-nodes-gpu-cluster` would read as the cluster stack of an environment `<env>-nodes-gpu`."""
    raw = inventory(NODES, layout="layered")
    raw["nodes"][10]["group"] = group
    assert f"nodes[10].group: {group!r}" in _problems(raw)


def _problems(raw: dict) -> str:
    with pytest.raises(SettingsError) as exc:
        load(raw)
    return "\n".join(exc.value.problems)


def test_node_groups_are_declared_sized_and_aligned_to_racks():
    raw = inventory(NODES, layout="layered")
    del raw["nodes"][5]["group"]
    assert f"nodes[5].group: node {raw['nodes'][5]['name']!r} names no group" in _problems(raw)

    raw = inventory(NODES)
    for node in raw["nodes"]:
        node.pop("group")
    assert load(raw).node_groups.keys() == {"nodes"}  # single layout: one group, named `nodes`
    raw = inventory(200)
    for node in raw["nodes"]:
        node.pop("group")
    assert "group 'nodes' has 200 nodes, more than 128" in _problems(raw)

    raw = inventory(NODES)
    gpu = [n for n in raw["nodes"] if n["role"] == "gpu"]
    for node in gpu:
        node["topology"] = {"block": "b1", "rack": node["labels"]["ml-platform.io/rack"]}
    gpu[0]["group"] = "elsewhere"
    assert f"rack {gpu[0]['topology']['rack']!r} is split over groups" in _problems(raw)


def _changed(before: dict, after: dict) -> dict[str, list[str]]:
    """Stack -> the resources a change creates, updates, replaces or deletes there (`stacks.diff`)."""
    from stacks import diff

    changed = {}
    for name in sorted(set(before) | set(after)):
        old = json.loads(before[name].to_json()) if name in before else {"resources": []}
        new = json.loads(after[name].to_json()) if name in after else {"resources": []}
        entries = diff.compare(old, new).entries
        if entries:
            changed[name] = sorted(f"{e.action} {e.name}" for e in entries)
    return changed


def test_a_node_added_changes_its_own_group_and_its_groups_aggregates(plans, tmp_path):
    """One CPU node, one storage host and one GPU node, each added alone: the node's group stack gains the node's
    own steps; in the platform stack only its group's aggregates change (the group's Zabbix host set and its claim,
    for a GPU node the group's acceptance drivers), and a GPU node's own NCCL pair check is created. Two fleet-wide
    objects still list storage hosts by name: the Ceph cluster (Rook's CephCluster names each storage node and its
    devices) and the team placement policy (it refuses pods that select a server or storage host by hostname). The
    cluster stack and the other groups do not change."""
    layered, _ = plans
    raw = inventory(NODES, layout="layered")
    agents = [n for n in raw["nodes"] if not n.get("controlPlane")]
    cpu = next(n for n in agents if n["role"] == "cpu" and not n.get("osdDevices"))
    storage = next(n for n in agents if n.get("osdDevices"))
    gpu = next(n for n in agents if n["role"] == "gpu")
    added = {
        "cpu": {**cpu, "name": "cpu-new", "address": "10.20.3.40"},
        "storage": {
            **storage,
            "name": "stor-new",
            "address": "10.20.3.41",
            "osdDevices": [{"device": "/dev/disk/by-id/wwn-0x5000c500ffff0001", "wipe": False}],
        },
        "gpu": {
            **gpu,
            "name": "gpu-new",
            "address": "10.20.9.40",
            "infiniband": {**gpu["infiniband"], "address": "10.30.0.200"},
            "nvme": [{"device": "/dev/disk/by-id/nvme-NEW-0001", "format": True}],
        },
    }
    by_name = {"storage": {"update ceph-cluster", "update scheduling-team-placement-policy"}}
    for kind, node in added.items():
        node["hostKey"] = host_key(node["name"])
        (tmp_path / kind).mkdir()
        after = evaluate_layered("fleet", _write(tmp_path / kind, "layered", {**raw, "nodes": [*raw["nodes"], node]}))
        changed = _changed(layered, after)
        group = node["group"]
        assert set(changed) <= {f"fleet-nodes-{group}", "fleet-platform"}, f"{kind}: {sorted(changed)}"
        own = changed[f"fleet-nodes-{group}"]
        assert all(entry.startswith("create ") and node["name"] in entry for entry in own), own
        others = [
            e
            for e in changed.get("fleet-platform", [])
            if not e.endswith(f"-{group}") and not e.endswith(f"-{group}-claim") and node["name"] not in e
        ]
        assert set(others) == by_name.get(kind, set()), f"{kind}: {others}"
        mine = [e for e in changed.get("fleet-platform", []) if node["name"] in e]
        assert all(e.startswith("create acceptance-nccl-ib-") for e in mine), mine


def test_the_review_of_a_switch_to_layered_shows_only_what_really_changes(tmp_path):
    """`stacks.review` compares a layered environment as one plan (each URN under the environment's name): the
    switch from single to layered creates the Node-patching credential and changes nothing else; the stacks'
    own plans stay beside it for the CI's per-stack previews."""
    import shutil

    from stacks import review
    from stacks.orchestration import ci

    sides = {}
    for label, layout in (("base", "single"), ("head", "layered")):
        tree = tmp_path / label
        shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns("venv", ".git", ".cache", "__pycache__", "*.json"))
        (tree / "Pulumi.fleet.yaml").write_text(stack_file(inventory(30, layout=layout)))
        sides[label] = review.Side(label, tree)
    out = tmp_path / "out"
    out.mkdir()
    result = review.review_stack("fleet", sides["base"], sides["head"], out)
    assert result.ok, result.note
    assert "layout: layered, compared as one (fleet-cluster" in result.note
    created = sorted(line.split()[2] for line in result.diff.splitlines() if line.startswith("+ create "))
    assert created == [
        "cluster-node-labeller",
        "cluster-node-labeller",
        "cluster-node-labeller",
        "cluster-node-labeller-token",
    ]
    assert result.summary.startswith("4 to create, 0 to update, 0 to replace, 0 to delete-before-replace, 0 to delete")
    # The CI reads each stack's plan from the folder the review keeps.
    assert {e["stack"] for e in ci.changed(out, ["fleet"])} >= {"fleet-cluster", "fleet-platform"}
