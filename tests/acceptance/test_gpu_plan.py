"""What the plan gives the GPU checks: the NVLink check on every GPU node through one driver per node group, floors
from the hardware table, the ports' rate from the settings, and Job and rendezvous names unique for any node names."""

from __future__ import annotations

import json

import pytest

from components.acceptance.drivers import dns_name
from settings import load
from tests.acceptance.test_component import driver_env, jobs, worker_of
from tests.conftest import evaluate, stack_doc


def worker_env(job: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in worker_of(job)["containers"][0]["env"]}


def test_nvlink_runs_on_every_gpu_node_of_each_group_with_its_models_floor(prod_plan):
    settings = load(stack_doc("prod"))
    multi = [n for n in settings.nodes if n.gpu and n.gpu.count >= 2]
    [job] = [j for n, j in jobs(prod_plan).items() if n.startswith("acceptance-nccl-nvlink")]
    env = driver_env(job)
    each = json.loads(env["EACH"])
    assert [t["node"] for t in each] == [n.name for n in multi]  # every node, not only the first
    # H100 SXM: NVLink 4 at 900 GB/s both ways, 450 per direction, x 0.7.
    assert {t["env"]["FLOOR_GBS"] for t in each} == {"315.0"}
    assert {t["env"]["NPROC"] for t in each} == {"8"} and {t["gpus"] for t in each} == {8}
    # Each node's time counts from when the driver admits its worker; the Job leaves room for busy nodes.
    assert env["NODE_TIMEOUT"] == str(settings.acceptance.nccl.timeout_seconds)
    assert job["inputs"]["spec"]["activeDeadlineSeconds"] == 2 * settings.acceptance.nccl.timeout_seconds


def test_groups_get_one_nvlink_driver_each_and_an_unknown_model_gets_no_floor():
    def grouped(raw):
        for node in raw["nodes"]:
            if node.get("gpu"):
                node["group"] = "rack-a" if node["name"] < "gpu-08" else "rack-b"

    plan = evaluate("prod", grouped)
    found = {n: j for n, j in jobs(plan).items() if n.startswith("acceptance-nccl-nvlink")}
    assert set(found) == {"acceptance-nccl-nvlink-rack-a", "acceptance-nccl-nvlink-rack-b"}
    gpu = {n: j for n, j in jobs(plan).items() if n.startswith("acceptance-gpu-")}
    assert set(gpu) == {"acceptance-gpu-rack-a", "acceptance-gpu-rack-b"}
    assert [t["node"] for t in json.loads(driver_env(gpu["acceptance-gpu-rack-a"])["EACH"])] == [
        f"gpu-0{i}" for i in range(1, 8)
    ]
    assert plan.outputs["acceptance"]["gpu-rack-b"]["perNode"] == "true"  # the report names each node's result
    nodes = [t["node"] for j in found.values() for t in json.loads(driver_env(j)["EACH"])]
    assert len(nodes) == len(set(nodes)) == 15

    def unknown(raw):
        next(n for n in raw["nodes"] if n["name"] == "gpu-15")["gpu"]["model"] = "NVIDIA GeForce RTX 4090"
        raw["scheduling"]["allowOvercommit"] = True  # the quotas were sized for 15 H100 nodes

    [job] = [j for n, j in jobs(evaluate("prod", unknown)).items() if n.startswith("acceptance-nccl-nvlink")]
    floors = {t["node"]: t["env"]["FLOOR_GBS"] for t in json.loads(driver_env(job)["EACH"])}
    # No row in the hardware table: no floor, so that node's check can only be unverified (nccl.sh), never passed.
    assert floors.pop("gpu-15") == "" and set(floors.values()) == {"315.0"}


def test_pairs_run_ring_and_compare_the_hcas_rate_with_the_settings(prod_plan):
    pair = next(j for n, j in jobs(prod_plan).items() if n.startswith("acceptance-nccl-ib-"))
    env = worker_env(pair)
    assert env["IB_RATE_GBPS"] == "400" and env["IB_PORTS"] == "1"  # 4X NDR, one port
    hdr = evaluate("prod", lambda raw: raw.update(acceptance={"nccl": {"ibGeneration": "HDR", "ibPorts": 2}}))
    pair = next(j for n, j in jobs(hdr).items() if n.startswith("acceptance-nccl-ib-"))
    assert worker_env(pair)["IB_RATE_GBPS"] == "200" and worker_env(pair)["IB_PORTS"] == "2"
    assert worker_env(pair)["FLOOR_GBS"] == "40.0"  # 2 x 200 Gb/s = 50 GB/s, x 0.8


@pytest.mark.parametrize("length", [44, 52, 63])
def test_job_and_rendezvous_names_stay_unique_for_long_node_names_with_a_shared_prefix(length):
    prefix = "gpu-rack-a-row-7-chassis-"

    def long_names(raw):
        for node in raw["nodes"]:
            if node.get("gpu"):
                number = node["name"].removeprefix("gpu-")
                node["name"] = (prefix + "x" * 63)[: length - len(number) - 1] + "-" + number

    plan = evaluate("prod", long_names)
    pairs = [j for n, j in jobs(plan).items() if "nccl-ib" in n]
    names = [j["inputs"]["metadata"]["name"] for j in pairs]
    rendezvous = [driver_env(j)["RENDEZVOUS"] for j in pairs]
    assert len(set(names)) == len(names) == 8 and len(set(rendezvous)) == 8
    assert all(len(n) <= 63 for n in names) and all(len(r) <= 61 for r in rendezvous)
    # The GPU node checks: no Job per node at all, one driver for the group, which names each node.
    [group] = [j for n, j in jobs(plan).items() if n.startswith("acceptance-gpu-")]
    assert len({t["node"] for t in json.loads(driver_env(group)["EACH"])}) == 15


def test_dns_name_cuts_with_a_digest_only_when_it_must():
    assert dns_name("acceptance-nccl-ib-gpu-01-gpu-02", 61) == "acceptance-nccl-ib-gpu-01-gpu-02"
    a, b = dns_name("x" * 70 + "a", 61), dns_name("x" * 70 + "b", 61)
    assert a != b and len(a) == len(b) == 61
