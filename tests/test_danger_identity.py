"""Machines and disks followed by identity, not by name or position: settings refuse a partition, a logical volume or
a filesystem's name where a whole disk is wiped or formatted, a disk listed with its own partition, a SATA disk in the
NVMe list and one host key on two hosts; the review names a rename without renamedFrom, an address or disk given to
another name, and what a re-addressed server or storage host leaves behind (etcd member, Ceph MON and OSDs)."""

from __future__ import annotations

import copy

import pytest

from stacks import diff
from tests.conftest import node_index, problems, stack_doc


def node(raw: dict, name: str) -> dict:
    return raw["nodes"][node_index(raw, name)]


def gpu_with_nvme(raw: dict) -> dict:
    return next(n for n in raw["nodes"] if n.get("nvme"))


def osd(raw: dict, index: int, device: str, wipe: bool = False) -> None:
    node(raw, "cpu-05")["osdDevices"][index].update(device=device, wipe=wipe)


@pytest.mark.parametrize(
    ("mutate", "path", "fix"),
    [
        (lambda raw: osd(raw, 0, "/dev/disk/by-id/wwn-0x5002538f4205a101-part1", True), "osdDevices[0]", "whole disk"),
        (lambda raw: osd(raw, 0, "/dev/mapper/vg0-osd", True), "osdDevices[0]", "device-mapper"),
        (lambda raw: osd(raw, 0, "/dev/ceph/data", True), "osdDevices[0]", "LVM logical volume"),
        (lambda raw: osd(raw, 0, "/dev/disk/by-label/ceph"), "osdDevices[0]", "filesystem's or partition's name"),
        (lambda raw: osd(raw, 0, "/dev/disk/by-partuuid/3f1c9d6e-01"), "osdDevices[0]", "partition's name"),
        (lambda raw: osd(raw, 1, "/dev/disk/by-id/wwn-0x5002538f4205a101-part2"), "osdDevices[1]", "listed too"),
        (
            lambda raw: gpu_with_nvme(raw)["nvme"][0].update(device="/dev/disk/by-id/scsi-35000c500a1b2c3d4"),
            "nvme[0]",
            "not an NVMe drive",
        ),
    ],
)
def test_device_lists_name_whole_disks_by_identity(mutate, path, fix):
    found = problems("prod", mutate)
    assert any(f"{path}.device" in p and fix in p and "by-id" in p for p in found), found


def test_a_partition_or_volume_not_marked_destructive_is_accepted():
    # Rook takes partitions and logical volumes as OSDs as they are; only a wipe or format is a decision about the disk
    assert problems("prod", lambda raw: osd(raw, 0, "/dev/ceph/data")) == []


@pytest.mark.parametrize(("a", "b"), [("cpu-20", "cpu-21"), ("gpu-01", "cpu-10")])
def test_one_host_key_on_two_hosts_is_refused(a, b):
    def mutate(raw):
        node(raw, b)["hostKey"] = node(raw, a)["hostKey"]

    found = problems("prod", mutate)
    assert any(p.endswith("(ssh-keyscan -t ed25519 ADDRESS)") and "the same key as" in p for p in found), found


def plan(mutate=None) -> dict:
    raw = copy.deepcopy(stack_doc("prod"))
    if mutate is not None:
        mutate(raw)
    return {"project": "ml-platform", "stack": "prod", "resources": [], "outputs": {}, "settings": raw}


def danger(mutate) -> list[str]:
    return diff.compare(plan(), plan(mutate)).danger


@pytest.mark.parametrize(("old", "new"), [("cpu-20", "cpu-120"), ("gpu-03", "gpu-103"), ("cpu-06", "cpu-106")])
def test_a_rename_without_renamed_from_is_named_by_the_machine_it_keeps(old, new):
    def mutate(raw):
        node(raw, old)["name"] = new

    line = next(line for line in danger(mutate) if line.startswith(f"node {old} left and {new} came"))
    assert "without renamedFrom" in line and f"renamedFrom: {old}" in line and "address" in line


def test_a_rename_with_renamed_from_is_not_named_as_a_machine_reused():
    def mutate(raw):
        node(raw, "cpu-20").update(name="cpu-120", renamedFrom="cpu-20")

    assert not [line for line in danger(mutate) if "without renamedFrom" in line]


def test_a_new_node_on_a_removed_nodes_disks_is_named():
    def mutate(raw):
        gone = raw["nodes"].pop(node_index(raw, "cpu-06"))
        raw["nodes"].append(
            {**gone, "name": "cpu-99", "address": "10.20.1.99", "hostKey": node(raw, "cpu-07")["hostKey"]}
        )
        raw["nodes"][-1]["hostKey"] = gone["hostKey"].rsplit(" ", 1)[0] + " AAAAC3NzaC1lZDI1NTE5AAAAIOtherKeyOtherKey"

    line = next(line for line in danger(mutate) if line.startswith("node cpu-06 left and cpu-99 came"))
    assert "disk /dev/disk/by-id/" in line


def test_an_address_given_to_another_nodes_name_is_named():
    def mutate(raw):
        node(raw, "cpu-22")["address"], node(raw, "cpu-23")["address"] = (
            node(raw, "cpu-23")["address"],
            node(raw, "cpu-22")["address"],
        )

    lines = [line for line in danger(mutate) if "which was" in line]
    assert len(lines) == 2 and any(line.startswith("node cpu-22 now has address") for line in lines), lines


def test_a_server_readdressed_names_its_etcd_member_left_behind():
    def mutate(raw):
        node(raw, "cpu-03")["address"] = "10.20.0.97"

    line = next(line for line in danger(mutate) if line.startswith("node cpu-03 re-addressed"))
    assert "etcd member stays registered at https://" in line and ":2380" in line


def test_a_storage_host_readdressed_names_its_mon_and_osds():
    def mutate(raw):
        node(raw, "cpu-04")["address"] = "10.20.0.96"

    line = next(line for line in danger(mutate) if line.startswith("node cpu-04 re-addressed"))
    assert "monmap" in line and "OSD(s)" in line and "noout" in line


def test_a_plain_agent_readdressed_names_nothing_left_behind():
    def mutate(raw):
        node(raw, "cpu-30")["address"] = "10.20.0.95"

    assert not [line for line in danger(mutate) if "re-addressed" in line]


@pytest.mark.parametrize("name", ["cpu-01", "cpu-20", "gpu-01"])
def test_minio_endpoint_on_a_cluster_node_is_refused(name):
    def mutate(raw):
        raw["storage"]["minio"]["endpoint"] = node(raw, name)["address"]

    found = [p for p in problems("prod", mutate) if p.startswith("storage.minio.endpoint")]
    assert found and f"node {name}'s address" in found[0] and "NAS" in found[0], problems("prod", mutate)


def test_the_api_endpoint_on_a_nas_host_is_refused():
    def mutate(raw):
        raw["cluster"]["apiEndpoint"] = raw["nas"]["hosts"][0]["address"]

    found = [p for p in problems("prod", mutate) if p.startswith("cluster.apiEndpoint")]
    assert any("NAS host" in p for p in found), problems("prod", mutate)
