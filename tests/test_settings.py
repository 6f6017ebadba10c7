"""Settings validation: one test per rule; each message names the path and the fix."""

from __future__ import annotations

import copy

import pytest

from settings import SettingsError, load
from tests.conftest import node_index, problems, stack_doc


def only(found: list[str], path_prefix: str) -> str:
    matching = [p for p in found if p.startswith(path_prefix)]
    assert len(matching) == 1, f"expected one problem at {path_prefix}, got {found}"
    return matching[0]


def test_reference_environments_are_valid():
    assert problems("prod") == []
    assert problems("lab") == []


def test_unknown_top_level_key_suggests_the_nearest():
    found = problems(mutate=lambda raw: raw.update({"netwrok": {}}))
    message = only(found, "ml-platform:netwrok")
    assert "unknown key" in message and "did you mean 'network'" in message


def test_unknown_nested_key_names_path_and_suggestion():
    def mutate(raw):
        raw["nodes"][37]["infiniband"]["adress"] = "10.30.0.99"

    message = only(problems(mutate=mutate), "nodes[37].infiniband.adress")
    assert "did you mean 'address'" in message
    assert "valid keys here: address, interface, prefixLength" in message


def test_types_are_checked():
    def mutate(raw):
        raw["nodes"][40]["gpu"]["count"] = "eight"
        raw["ssh"]["port"] = "22"

    found = problems(mutate=mutate)
    assert "valid integer" in only(found, "nodes[40].gpu.count")
    assert "'22'" in only(found, "ssh.port")


def test_node_names_must_be_unique():
    def mutate(raw):
        raw["nodes"][5]["name"] = raw["nodes"][4]["name"]

    found = problems(mutate=mutate)
    message = only(found, "nodes[5].name")
    assert "names must be unique" in message and "also claimed by nodes[4].name" in message
    assert not [p for p in found if p.startswith("nodes[4].name")]


def test_addresses_must_be_unique_across_nodes_and_nas():
    def mutate(raw):
        raw["nas"]["hosts"][0]["address"] = raw["nodes"][30]["address"]

    found = problems(mutate=mutate)
    message = only(found, "nas.hosts[0].address")
    assert "addresses must be unique" in message and "also claimed by nodes[30].address" in message


def test_ipv4_addresses_are_checked():
    def mutate(raw):
        raw["nodes"][37]["infiniband"]["address"] = "192.168.100.300"

    message = only(problems(mutate=mutate), "nodes[37].infiniband.address")
    assert message.startswith("nodes[37].infiniband.address: '192.168.100.300' is not an IPv4 address")


def test_control_plane_count_must_be_odd():
    def two_servers(raw):
        raw["nodes"][node_index(raw, "cpu-03")]["controlPlane"] = False

    message = only(problems(mutate=two_servers), "nodes:")
    assert "2 control-plane servers" in message and "1, 3 or 5" in message

    def four_servers(raw):
        raw["nodes"][node_index(raw, "cpu-20")]["controlPlane"] = True

    assert "4 control-plane servers" in only(problems(mutate=four_servers), "nodes:")


def test_removing_a_server_must_leave_an_odd_number():
    def remove_server(raw):
        del raw["nodes"][node_index(raw, "cpu-02")]

    assert "2 control-plane servers" in only(problems(mutate=remove_server), "nodes:")


def test_control_plane_servers_are_cpu_nodes():
    def mutate(raw):
        raw["nodes"][node_index(raw, "cpu-03")]["controlPlane"] = False
        raw["nodes"][node_index(raw, "gpu-01")]["controlPlane"] = True

    i = node_index(stack_doc("prod"), "gpu-01")
    assert "must be CPU nodes" in only(problems(mutate=mutate), f"nodes[{i}].controlPlane")


def test_init_server_must_be_a_server():
    found = problems(mutate=lambda raw: raw["cluster"].update({"initServer": "cpu-10"}))
    assert "is not a control-plane node" in only(found, "cluster.initServer")


def test_gpu_nodes_need_infiniband():
    def mutate(raw):
        del raw["nodes"][node_index(raw, "gpu-03")]["infiniband"]

    i = node_index(stack_doc("prod"), "gpu-03")
    message = only(problems(mutate=mutate), f"nodes[{i}].infiniband")
    assert "GPU node 'gpu-03' has no InfiniBand settings" in message


def test_cpu_nodes_have_no_infiniband():
    def mutate(raw):
        raw["nodes"][10]["infiniband"] = {"interface": "ib0", "address": "10.30.0.200"}

    assert "InfiniBand is configured on GPU nodes only" in only(problems(mutate=mutate), "nodes[10].infiniband")


def test_infiniband_addresses_are_unique():
    def mutate(raw):
        raw["nodes"][36]["infiniband"]["address"] = raw["nodes"][35]["infiniband"]["address"]

    found = problems(mutate=mutate)
    assert "also claimed by nodes[35].infiniband.address" in only(found, "nodes[36].infiniband.address")


def test_device_paths_are_absolute_dev_paths():
    def mutate(raw):
        raw["nodes"][40]["nvme"][0]["device"] = "nvme1n1"
        raw["nodes"][5]["osdDevices"][0]["device"] = "/dev/../etc/passwd"
        raw["nas"]["hosts"][1]["drives"][2]["device"] = "/mnt/sdd"

    found = problems(mutate=mutate)
    assert "not a device path" in only(found, "nodes[40].nvme[0].device")
    assert "not a device path" in only(found, "nodes[5].osdDevices[0].device")
    assert "not a device path" in only(found, "nas.hosts[1].drives[2].device")


def test_versions_are_pinned():
    def mutate(raw):
        raw["charts"]["gpuOperator"]["version"] = "latest"
        raw["charts"]["kueue"]["version"] = ""
        raw["cluster"]["rke2Version"] = "stable"

    found = problems(mutate=mutate)
    assert "not a pinned version" in only(found, "charts.gpuOperator.version")
    assert "not a pinned version" in only(found, "charts.kueue.version")
    assert "not a pinned version" in only(found, "cluster.rke2Version")


def test_ports_in_range():
    found = problems(mutate=lambda raw: raw["ssh"].update({"port": 70000}))
    assert "less than or equal to 65535" in only(found, "ssh.port")


def test_unknown_cni_names_the_field():
    found = problems(mutate=lambda raw: raw["network"].update({"cni": "flannel"}))
    message = only(found, "network.cni")
    assert "'flannel' is not allowed; use 'cilium' or 'calico'" in message


def test_pod_and_service_cidrs_must_not_overlap_or_hold_hosts():
    def mutate(raw):
        raw["network"]["serviceCidr"] = "10.42.128.0/17"
        raw["network"]["clusterCidr"] = "10.0.0.0/8"

    found = problems(mutate=mutate)
    assert any(p.startswith("network.serviceCidr") and "overlaps" in p for p in found)
    assert any("(ethernet) lies inside 10.0.0.0/8, the pod range of network.clusterCidr" in p for p in found)


def test_prod_nodes_must_pin_host_keys():
    def mutate(raw):
        del raw["nodes"][node_index(raw, "gpu-07")]["hostKey"]

    i = node_index(stack_doc("prod"), "gpu-07")
    message = only(problems(mutate=mutate), f"nodes[{i}].hostKey")
    assert "'gpu-07' has no pinned host key" in message and "allowUnpinnedHostKeys" in message


def test_unpinned_host_keys_allowed_only_when_explicit():
    def mutate(raw):
        del raw["nodes"][0]["hostKey"]
        raw["ssh"]["allowUnpinnedHostKeys"] = True

    assert problems(mutate=mutate) == []


def test_hardware_on_the_wrong_role_is_refused():
    def mutate(raw):
        raw["nodes"][20]["nvme"] = [{"device": "/dev/disk/by-id/nvme-eui.0025388a01", "format": True}]
        raw["nodes"][40]["osdDevices"] = [{"device": "/dev/sdb"}]

    found = problems(mutate=mutate)
    assert "tier-1 NVMe volumes live on GPU nodes only" in only(found, "nodes[20].nvme")
    assert "Ceph OSDs run on CPU nodes only" in only(found, "nodes[40].osdDevices")


def test_ceph_needs_three_storage_hosts_and_an_odd_mon_count():
    def few_hosts(raw):
        for node in raw["nodes"]:
            if node["name"] not in ("cpu-04", "cpu-05"):
                node.pop("osdDevices", None)

    found = problems(mutate=few_hosts)
    assert "2 Ceph storage host(s)" in only(found, "nodes:")
    assert "only 2 storage hosts" in only(found, "storage.ceph.monCount")

    found = problems(mutate=lambda raw: raw["storage"]["ceph"].update({"monCount": 4}))
    assert "odd count of at least 3" in only(found, "storage.ceph.monCount")


def test_all_problems_are_reported_at_once():
    def mutate(raw):
        raw["nodes"][1]["address"] = "10.20.1.300"
        raw["nodes"][2]["role"] = "tpu"
        raw["charts"]["volcano"]["version"] = "latest"
        raw["clutser"] = {}

    found = problems(mutate=mutate)
    assert {p.split(":")[0] for p in found} >= {
        "nodes[1].address",
        "nodes[2].role",
        "charts.volcano.version",
        "ml-platform",
    }
    assert {p.split(":")[0] for p in found} >= {
        "nodes[1].address",
        "nodes[2].role",
        "charts.volcano.version",
        "ml-platform",
    }


def printed(mutate) -> list[str]:
    """The problems as `load` prints them (list items named, sorted, notes last)."""
    raw = copy.deepcopy(stack_doc("prod"))
    mutate(raw)
    with pytest.raises(SettingsError) as exc:
        load(raw)
    return [line.strip() for line in str(exc.value).splitlines()[1:]]


def test_item_names_follow_positions_and_problems_come_sorted_all_at_once():
    def mutate(raw):
        raw["nodes"][node_index(raw, "gpu-15")]["adress"] = "10.20.2.25"
        raw["nodes"][node_index(raw, "gpu-02")].pop("infiniband")
        raw["nodes"][node_index(raw, "cpu-09")]["address"] = raw["nodes"][0]["address"]
        raw["cluster"]["rke2version"] = "v1"

    paths = [p.split(": ", 1)[0] for p in printed(mutate)]
    assert paths == [
        "cluster.rke2version",
        "nodes[8] (cpu-09).address",
        "nodes[36] (gpu-02).infiniband",
        "nodes[49] (gpu-15).adress",
    ]


WAITING = (
    "(checked once the problems above are fixed, as they need what those problems name: the control-plane count "
    "and cluster.initServer; the pod and IPoIB ranges against the node count; the Ceph storage host count; the "
    "backup sources against tiers 2 and 3; one spelling per GPU model; the teams' GPU quotas against the GPU "
    "nodes; what each team's quota can admit; the teams' storage classes, egress, backup claims and nodes; each "
    "host its own SSH host key; upgrade concurrency against each pool; alert thresholds against what they watch; "
    "one InfiniBand block per rack)"
)


def test_type_errors_unknown_keys_and_cross_field_rules_in_one_run():
    def mutate(raw):
        raw["nodes"][3]["address"] = "not-an-ip"
        raw["nodes"][3]["adress"] = "10.20.1.99"
        raw["nodes"][node_index(raw, "gpu-15")]["gpu"]["count"] = "8"
        raw["nodes"][node_index(raw, "cpu-09")]["address"] = raw["nodes"][0]["address"]
        raw["nodes"][node_index(raw, "gpu-02")].pop("infiniband")

    assert printed(mutate) == [
        "nodes[3] (cpu-04).address: 'not-an-ip' is not an IPv4 address; write four numbers 0-255, e.g. '10.20.1.7'",
        "nodes[3] (cpu-04).adress: unknown key (did you mean 'address'?); valid keys here: address, controlPlane, "
        "gpu, group, hostKey, infiniband, labels, name, nvme, osdDevices, renamedFrom, role, topology",
        # positions after the set-aside nodes[3] are the config's, not the shortened list's
        "nodes[8] (cpu-09).address: ipv4 '10.20.1.11' is also claimed by nodes[0].address; addresses must be unique",
        "nodes[36] (gpu-02).infiniband: GPU node 'gpu-02' has no InfiniBand settings; add interface and address",
        "nodes[49] (gpu-15).gpu.count: input should be a valid integer, got str '8'; write a whole number, "
        "without quotes",
        WAITING,
    ]


def test_items_of_other_lists_are_named_too():
    def mutate(raw):
        raw["scheduling"]["teams"][1]["rdma"] = "yes"
        raw["nas"]["hosts"][2]["drives"][0]["format"] = "true"

    lines = printed(mutate)
    team, nas = raw_names("scheduling", "teams")[1], raw_names("nas", "hosts")[2]
    assert [line.split(": ", 1)[0] for line in lines[:-1]] == [
        f"nas.hosts[2] ({nas}).drives[0].format",
        f"scheduling.teams[1] ({team}).rdma",
    ]


def raw_names(*keys: str) -> list[str]:
    return [item["name"] for item in _at(stack_doc("prod"), keys)]


def test_a_type_error_on_the_init_server_does_not_make_it_disappear():
    # cpu-01 is cluster.initServer and one of three servers: judged without its entry, the rules would
    # say "2 control-plane servers" and "cpu-01 is not a control-plane node". They wait instead.
    def mutate(raw):
        init = node_index(raw, raw["cluster"]["initServer"])
        raw["nodes"][init]["controlPlane"] = "yes"
        raw["nodes"][init]["address"] = 10

    lines = printed(mutate)
    assert lines == [
        "nodes[0] (cpu-01).address: input should be a valid string, got int 10; put it in quotes",
        "nodes[0] (cpu-01).controlPlane: input should be a valid boolean, got str 'yes'; write true or false, "
        "without quotes",
        WAITING,
    ]


@pytest.mark.parametrize(
    "area", ["cluster", "ssh", "nodes", "nas", "network", "gpu", "storage", "scheduling", "monitoring", "charts"]
)
def test_an_area_of_the_wrong_type_is_reported_alone(area):
    # Every rule that reads the area waits (a rule reading it undeclared would fail here, not judge
    # defaults in its place); the rules that do not read it still run.
    def mutate(raw):
        raw["nodes"][node_index(raw, "gpu-02")].pop("infiniband")
        raw[area] = 42

    *found, note = printed(mutate)
    assert note.startswith("(checked once the problems above are fixed")
    [wrong_type] = [line for line in found if line.startswith(f"{area}: ")]
    assert wrong_type.startswith(f"{area}: input should be a valid") and "got int 42" in wrong_type
    no_ib = "nodes[36] (gpu-02).infiniband: GPU node 'gpu-02' has no InfiniBand settings; add interface and address"
    assert [line for line in found if line != wrong_type] == ([] if area == "nodes" else [no_ib])


def test_every_item_with_a_type_error_is_the_only_problem():
    # No false positive from a rule judging the lists without the item: every item of prod in turn.
    prod = stack_doc("prod")
    lists = {"nodes": ("nodes",), "nas.hosts": ("nas", "hosts"), "scheduling.teams": ("scheduling", "teams")}
    for path, keys in lists.items():
        for i in range(len(_at(prod, keys))):
            raw = copy.deepcopy(prod)
            _at(raw, keys)[i]["name"] = 7
            with pytest.raises(SettingsError) as exc:
                load(raw)
            assert exc.value.problems == [
                f"{path}[{i}].name: input should be a valid string, got int 7; put it in quotes"
            ]


def _at(raw: dict, keys: tuple) -> list:
    for key in keys:
        raw = raw[key]
    return raw
