"""Scale benchmark: generated inventories, shape at 50 and 1000 nodes, the bring-up model."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from benchmarks import makespan
from benchmarks.inventory import inventory, prod_config, stack_file
from benchmarks.run import measure, node_classes, recommended_parallel, report, sdk_floor, steps_per_node
from settings import load
from stacks.engine import evaluate_stack
from tests.conftest import ROOT

# Host steps that connect at create: the copy of the host scripts, prepare, RKE2 (the certificate watch
# inside), and the hardware steps of the role (storage: Ceph disks; GPU: InfiniBand, NVMe).
ROLE_STEPS = {"server": "3", "CPU agent": "3", "storage host": "4", "GPU node": "5"}


@pytest.mark.parametrize("nodes", [8, 50, 200, 1000])
@pytest.mark.parametrize("pinned", [True, False])
def test_generated_inventories_pass_settings_validation(nodes, pinned):
    raw = inventory(nodes, pinned=pinned)
    settings = load(raw)
    assert len(settings.nodes) == nodes
    assert len(settings.servers) == (3 if nodes < 500 else 5)
    assert settings.ssh.allow_unpinned_host_keys is not pinned
    assert all((n.host_key is not None) is pinned for n in [*settings.nodes, *settings.nas.hosts])
    # The pod network has a /24 for every node, with room to grow.
    pod = ipaddress.IPv4Network(settings.network.cluster_cidr)
    assert 2 ** (24 - pod.prefixlen) >= 1.25 * nodes
    # Storage hosts name their OSD disks by id; GPU nodes have unique IB addresses outside the pod pool.
    assert all(d.device.startswith("/dev/disk/by-id/wwn-0x") for n in settings.storage_hosts for d in n.osd_devices)
    ib = [n.infiniband.address for n in settings.gpu_nodes]
    assert len(set(ib)) == len(ib) == len(settings.gpu_nodes) > 0


def _shape(stack: str, config: Path) -> tuple[dict, dict[str, str], int]:
    plan = evaluate_stack(stack, config)
    doc = {"resources": plan.resources}
    return doc, steps_per_node(doc, node_classes(_raw(config))), makespan.longest_host_chain(doc)


def _raw(config: Path) -> dict:
    doc = yaml.safe_load(config.read_text())["config"]
    return {key.split(":", 1)[1]: value for key, value in doc.items()}


def test_50_nodes_benchmark_and_prod_at_its_graph_limit(tmp_path):
    """The CI case of `make bench`: the measured preview, the shape and the model, as in the docs."""
    prod = measure("prod", prod_config(), tmp_path)
    fifty = measure("50", inventory(50), tmp_path)
    for result in (prod, fifty):
        assert result.steps_per_node == ROLE_STEPS
        assert result.chain <= 5  # prepare -> init -> CA hash -> any other node's RKE2 step (-> host steps after it)
        # No node funnels through the init server: it sees its own steps and a few cluster-wide ones.
        assert result.busiest_host()[1] <= 7
        assert result.peak_mib > 50 and result.wall_seconds > 0
    # At the recommended --parallel, prod and 50 nodes come within 1% of the graph's own limit (an API
    # call may wait a few seconds behind the host steps for a slot); at 128 they reach it.
    for result in (prod, fifty):
        assert result.graph_limit <= result.schedules[recommended_parallel(result.nodes)].makespan
        assert result.schedules[recommended_parallel(result.nodes)].makespan <= result.graph_limit * 1.01
        assert result.schedules[128].makespan == result.graph_limit
    # A bare host step costs the SDK less than one of the program's resources: the floor is a floor.
    assert 0 < sdk_floor(prod.resources) < prod.cpu_seconds
    text = report([prod, fifty])
    assert f"| 50 | 50 | {fifty.resources} | {fifty.host_steps} |" in text and "**" in text


def test_1000_nodes_shape_and_bring_up_within_an_hour(tmp_path):
    config = tmp_path / "Pulumi.bench.yaml"
    config.write_text(stack_file(inventory(1000)))
    doc, per_node, chain = _shape("bench", config)
    assert per_node == ROLE_STEPS
    assert chain <= 5  # five servers join one at a time on their hosts; neither they nor the agents lengthen it
    res, deps = makespan.graph(doc)
    recommended = makespan.simulate(res, deps, recommended_parallel(1000)).makespan
    assert recommended <= 60 * 60
    assert makespan.simulate(res, deps, 64).makespan > recommended  # the queue, not the graph, sets the time


def test_durations_by_kind_of_step(prod_plan):
    kinds = {r["name"]: makespan.step_kind(r) for r in prod_plan.resources}
    assert kinds["cpu-01-rke2"] == "rke2-install.sh init"
    assert kinds["cpu-02-rke2"] == "rke2-install.sh server"
    assert kinds["gpu-01-rke2"] == "rke2-install.sh agent"
    assert kinds["gpu-01-membership"] == "no work"  # nothing runs at create: only its delete drains
    assert kinds["cpu-04-ceph-disks"] == "ceph-osd-devices.sh"
    assert kinds["cluster-kubeconfig"] == "read-kubeconfig.sh"
    job = next(r["name"] for r in prod_plan.resources if r["type"] == "kubernetes:batch/v1:Job")
    assert kinds[job] == "acceptance check"  # awaited until the check finished, not one API call
    assert kinds["nas-01-minio"] == "minio-nas.sh"
    assert kinds["upgrades-node-versions"] == "rke2-node-versions.sh"  # the snapshot step exists only mid-upgrade
    cni = [
        r
        for r in prod_plan.resources
        if r["type"].startswith("kubernetes:helm.sh/") and r["inputs"]["chart"] == "cilium"
    ]
    assert [makespan.step_kind(r) for r in cni] == ["CNI release"]
    assert "other host script" not in kinds.values()  # every host step of the program has its own figure


def test_queue_is_first_come_first_served():
    def step(name, deps=(), script="prepare-host.sh"):
        create = f"bash -c '...' {script}"
        return {
            "urn": name,
            "type": makespan.COMMAND,
            "name": name,
            "dependencies": list(deps),
            "inputs": {"create": create},
        }

    plan = {"resources": [step("a"), step("b"), step("c", ["a"], "read-ca-hash.sh"), step("d")]}
    res, deps = makespan.graph(plan)
    # Two workers: a and b run (120 s), c became ready after d was queued, so d runs before c.
    schedule = makespan.simulate(res, deps, 2, {"a": "h1", "b": "h1", "c": "h2", "d": "h1"})
    assert schedule.makespan == 120 + 120
    assert schedule.peak_by_target == {"h1": 2, "h2": 1} and schedule.peak_ssh == 2
    assert makespan.simulate(res, deps, 0).makespan == 120 + 5


def test_a_joining_server_lasts_one_join_per_server_before_it():
    def server(join_after):
        config = "server: https://10.0.0.1:9345\n"
        env = f"RKE2_TYPE=server RKE2_CONFIG='{config}'" + (f" JOIN_AFTER='{join_after}'" if join_after else "")
        return {"type": makespan.COMMAND, "inputs": {"create": f"{env} bash -c '...' rke2-install.sh"}}

    assert makespan.step_seconds(server("")) == 240
    assert makespan.step_seconds(server("10.0.0.2:6443 10.0.0.3:6443")) == 3 * 240
    assert not makespan.opens_ssh({"type": makespan.COMMAND, "inputs": {"delete": "x"}})


def test_docs_table_comes_from_make_bench():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert text.startswith("# Scale benchmarks\n\nGenerated by `make bench`")
    for nodes in (50, 200, 1000):
        assert f"| {nodes} | {nodes} |" in text
    assert "bench:" in (ROOT / "Makefile").read_text()
