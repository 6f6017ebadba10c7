"""CephTier (tier 2): Rook values and the CephCluster spec against upstream, placement, availability,
the CSI node plugins on GPU nodes, storage classes, outputs, and the OSD-device host step."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from components.ceph.tier import BLOCK_POOL, DATA_POOL, STORAGE_LABEL, fault_tolerance
from components.cluster.config import GPU_TAINT, node_labels, node_taints
from components.hosts.remote import script_text
from settings import load
from tests.conftest import evaluate, node_index, problems, requires_upstream, stack_doc, tolerates
from tests.upstream import crd_schema_errors, helm_merge, spec_schema, unknown_value_paths, upstream_values

OPERATOR, CLUSTER, DRIVERS = "ceph-operator", "ceph-cluster", "ceph-csi-drivers"


def values(plan, release: str) -> dict[str, Any]:
    return plan.named(release)["inputs"]["values"]


def settings(stack: str = "prod"):
    return load(stack_doc(stack))


# ---------------------------------------------------------------------------------------------
# Upstream checks: Helm values keys, and the custom resources against their CRD schemas
# ---------------------------------------------------------------------------------------------


def schema_errors(kind: str, version: str, spec: dict[str, Any]) -> list[str]:
    """`spec` against the schema of `kind` in Rook's CRD bundle at `version`, unknown fields included."""
    schema = spec_schema("rook", version, "crds.yaml", kind=kind, crd_version="v1")
    return [f"{kind} spec.{error}" for error in crd_schema_errors(spec, schema)]


def rendered(plan, version: str) -> dict[str, Any]:
    """The rook-ceph-cluster values Helm sees: the pinned chart's defaults with ours merged over them."""
    return helm_merge(upstream_values("rook-ceph-cluster", version), values(plan, CLUSTER))


def cephcluster_spec(merged: dict[str, Any]) -> dict[str, Any]:
    """The CephCluster spec the chart renders (templates/cephcluster.yaml): monitoring, the image from
    cephImage, then cephClusterSpec verbatim."""
    image = merged["cephImage"]
    return {
        "monitoring": {"enabled": merged["monitoring"]["enabled"]},
        "cephVersion": {
            "image": f"{image['repository']}:{image['tag']}",
            "allowUnsupported": image["allowUnsupported"],
        },
        **merged["cephClusterSpec"],
    }


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_operator_values_exist_in_the_pinned_chart(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    version = settings(stack).charts.rook_ceph.version
    assert unknown_value_paths(values(plan, OPERATOR), upstream_values("rook-ceph", version)) == []


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_cluster_values_exist_in_the_pinned_chart(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    version = settings(stack).charts.rook_ceph_cluster.version
    # cephClusterSpec and the pool/filesystem specs go verbatim into custom resources: checked
    # against the CRDs below. Everything else must be a key of the chart's values.
    skip = frozenset({"cephClusterSpec", "cephBlockPools[].spec", "cephFileSystems[].spec"})
    assert unknown_value_paths(values(plan, CLUSTER), upstream_values("rook-ceph-cluster", version), skip=skip) == []


def test_the_key_check_catches_a_misspelled_key(prod_plan):
    version = settings().charts.rook_ceph.version
    wrong = copy.deepcopy(values(prod_plan, OPERATOR))
    wrong["csi"]["installCsiOperators"] = wrong["csi"].pop("installCsiOperator")
    assert unknown_value_paths(wrong, upstream_values("rook-ceph", version)) == ["csi.installCsiOperators"]


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_cephcluster_spec_validates_against_the_crd(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    version = settings(stack).charts.rook_ceph_cluster.version
    assert schema_errors("CephCluster", version, cephcluster_spec(rendered(plan, version))) == []


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_pool_and_filesystem_specs_validate_against_their_crds(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    version = settings(stack).charts.rook_ceph_cluster.version
    found = [
        e for p in values(plan, CLUSTER)["cephBlockPools"] for e in schema_errors("CephBlockPool", version, p["spec"])
    ]
    found += [
        e for f in values(plan, CLUSTER)["cephFileSystems"] for e in schema_errors("CephFilesystem", version, f["spec"])
    ]
    assert found == []


def test_the_schema_check_catches_unknown_fields_and_wrong_types(prod_plan):
    version = settings().charts.rook_ceph_cluster.version
    spec = cephcluster_spec(rendered(prod_plan, version))
    spec["storage"]["useAllNode"] = spec["storage"].pop("useAllNodes")
    spec["mon"]["count"] = "five"
    errors = schema_errors("CephCluster", version, spec)
    assert any("spec.storage" in e and "useAllNode" in e for e in errors), errors
    assert any(e.startswith("CephCluster spec.mon.count:") for e in errors), errors


def test_the_default_object_store_and_sample_pools_are_gone(prod_plan):
    merged = rendered(prod_plan, settings().charts.rook_ceph_cluster.version)
    assert merged["cephObjectStores"] == []
    assert [p["name"] for p in merged["cephBlockPools"]] == [BLOCK_POOL]
    assert [f["name"] for f in merged["cephFileSystems"]] == ["tier2fs"]
    assert merged["toolbox"]["enabled"] is True


# ---------------------------------------------------------------------------------------------
# Placement and availability
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_osds_only_on_the_storage_hosts_listed_devices(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    s = settings(stack)
    storage = values(plan, CLUSTER)["cephClusterSpec"]["storage"]
    assert storage["useAllNodes"] is False and storage["useAllDevices"] is False
    assert "deviceFilter" not in storage and "devicePathFilter" not in storage
    placed = {n["name"]: [d["name"] for d in n["devices"]] for n in storage["nodes"]}
    assert placed == {n.name: [d.device for d in n.osd_devices] for n in s.storage_hosts}
    gpu = {n.name for n in s.gpu_nodes}
    assert gpu and not gpu & set(placed)
    assert all(n.role == "cpu" for n in s.nodes if n.name in placed)


def test_ceph_daemons_are_pinned_to_nodes_only_storage_hosts_carry(prod_plan):
    s = settings()
    spec = values(prod_plan, CLUSTER)["cephClusterSpec"]
    required = spec["placement"]["all"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = required["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": STORAGE_LABEL, "operator": "In", "values": ["true"]}]
    # The label ClusterBootstrap sets: on every storage host, on no GPU node.
    labelled = {n.name for n in s.nodes if node_labels(n).get(STORAGE_LABEL) == "true"}
    assert labelled == {n.name for n in s.storage_hosts}
    # Every Ceph daemon tolerates the storage hosts' taint, and no other, so none can land on a GPU node.
    storage_taint = {"key": STORAGE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    assert spec["placement"]["all"]["tolerations"] == [storage_taint]
    assert "nvidia.com/gpu" not in json.dumps(spec["placement"])
    (fs,) = values(prod_plan, CLUSTER)["cephFileSystems"]
    mds = fs["spec"]["metadataServer"]["placement"]
    assert mds["nodeAffinity"] == spec["placement"]["all"]["nodeAffinity"]
    assert mds["tolerations"] == [storage_taint]


@pytest.mark.parametrize(("stack", "mons"), [("prod", 5), ("lab", 3)])
def test_mons_and_mgrs_on_distinct_hosts(stack, mons, request):
    spec = values(request.getfixturevalue(f"{stack}_plan"), CLUSTER)["cephClusterSpec"]
    assert spec["mon"] == {"count": mons, "allowMultiplePerNode": False}
    assert spec["mgr"] == {"count": 2, "allowMultiplePerNode": False}


def test_mon_count_follows_settings():
    plan = evaluate("prod", lambda raw: raw["storage"]["ceph"].update({"monCount": 3}))
    assert values(plan, CLUSTER)["cephClusterSpec"]["mon"]["count"] == 3


def test_every_pool_keeps_three_copies_on_three_hosts_and_needs_two(prod_plan):
    cluster = values(prod_plan, CLUSTER)
    (block,) = cluster["cephBlockPools"]
    (fs,) = cluster["cephFileSystems"]
    pools = [block["spec"], fs["spec"]["metadataPool"], *fs["spec"]["dataPools"]]
    for pool in pools:
        assert pool["failureDomain"] == "host"
        assert pool["replicated"] == {"size": 3, "requireSafeReplicaSize": True}
        assert pool["parameters"] == {"min_size": "2"}
    assert [p["name"] for p in fs["spec"]["dataPools"]] == [DATA_POOL]
    assert fs["spec"]["preserveFilesystemOnDelete"] is True


# ---------------------------------------------------------------------------------------------
# CSI node plugins on GPU nodes
# ---------------------------------------------------------------------------------------------


def test_tolerates_follows_kubernetes_rules():
    assert tolerates({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, GPU_TAINT)
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Equal", "value": "false"}, GPU_TAINT)
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, GPU_TAINT)


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_csi_node_plugins_tolerate_every_taint_of_the_gpu_nodes(stack, request):
    # Rook v1.20: the node plugins' placement lives in the ceph-csi-drivers chart, per driver (the chart
    # writes each driver's own nodePlugin.tolerations, default [], into its Driver resource).
    plan = request.getfixturevalue(f"{stack}_plan")
    drivers = values(plan, DRIVERS)
    for node in settings(stack).gpu_nodes:
        for taint in node_taints(node):
            for kind in ("rbd", "cephfs"):
                tolerations = drivers["drivers"][kind]["nodePlugin"]["tolerations"]
                assert any(tolerates(t, taint) for t in tolerations), (kind, node.name, taint)
            defaults = drivers["operatorConfig"]["driverSpecDefaults"]["nodePlugin"]["tolerations"]
            assert any(tolerates(t, taint) for t in defaults)
    # The controller plugins (provisioners) stay on CPU nodes.
    assert "controllerPlugin" not in drivers["operatorConfig"]["driverSpecDefaults"]
    assert all("controllerPlugin" not in driver for driver in drivers["drivers"].values())


def test_rbd_snapshots_are_not_silently_disabled(prod_plan):
    # The chart's default for RBD is `none` (no csi-snapshotter): VolumeSnapshots would never complete.
    upstream = upstream_values("ceph-csi-drivers", "1.0.4")
    assert upstream["drivers"]["rbd"]["snapshotPolicy"] == "none"
    drivers = values(prod_plan, DRIVERS)["drivers"]
    assert drivers["rbd"]["snapshotPolicy"] == drivers["cephfs"]["snapshotPolicy"] == "volumeSnapshot"
    cluster = values(prod_plan, CLUSTER)
    assert cluster["cephBlockPoolsVolumeSnapshotClass"]["enabled"] is True
    assert cluster["cephFileSystemVolumeSnapshotClass"]["enabled"] is True


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_csi_drivers_values_exist_upstream_and_follow_rooks_recommendation(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    ours = values(plan, DRIVERS)
    assert unknown_value_paths(ours, upstream_values("ceph-csi-drivers", "1.0.4")) == []
    recommended = yaml.safe_load(
        requires_upstream("charts", "rook-ceph", "v1.20.6", "ceph-csi-drivers-values.yaml").read_text()
    )
    namespace = settings(stack).storage.ceph.namespace
    for kind, driver in recommended["drivers"].items():
        assert ours["drivers"][kind]["enabled"] == driver["enabled"]
        # Rook's storage classes name <operator namespace>.<kind>.csi.ceph.com as provisioner. A disabled
        # driver's name is read by no template (tests/test_render.py), so it is not set.
        if driver["enabled"]:
            assert ours["drivers"][kind]["name"] == driver["name"].replace("rook-ceph", namespace, 1)
    defaults = recommended["operatorConfig"]["driverSpecDefaults"]
    assert ours["operatorConfig"]["namespace"] == namespace
    assert ours["operatorConfig"]["driverSpecDefaults"]["imageSet"] == defaults["imageSet"]
    # The Driver schema accepts what the chart renders from our per-driver values.
    schema = spec_schema("ceph-csi-operator", "v1.0.4", "csi.ceph.io_drivers.yaml", crd_version="v1")
    rbd = ours["drivers"]["rbd"]
    spec = {"snapshotPolicy": rbd["snapshotPolicy"], "nodePlugin": rbd["nodePlugin"]}
    assert crd_schema_errors(spec, schema) == []


def test_rook_v1_20_moved_csi_placement_out_of_the_operator_chart():
    # Why the drivers chart is a release of its own: in v1.20 the operator chart has no CSI placement.
    v120 = upstream_values("rook-ceph", "v1.20.6")["csi"]
    v119 = upstream_values("rook-ceph", "v1.19.10")["csi"]
    assert [k for k in v120 if "oleration" in k or "ffinity" in k] == []
    assert "pluginTolerations" in v119 and "pluginNodeAffinity" in v119


# ---------------------------------------------------------------------------------------------
# Storage classes, outputs
# ---------------------------------------------------------------------------------------------


def test_storage_classes_come_from_settings():
    def rename(raw):
        raw["storage"]["ceph"].update(
            {"blockStorageClass": "datasets-rwo", "sharedStorageClass": "datasets-rwx", "filesystemName": "shared"}
        )
        for source in raw["storage"]["minio"]["backup"]["sources"]:  # backups name the shared class too
            source["storageClass"] = "datasets-rwx"
        names = {"tier2-block": "datasets-rwo", "tier2-shared": "datasets-rwx"}
        for team in raw["scheduling"]["teams"]:  # and the teams' storage quotas
            team["storage"] = {names.get(k, k): v for k, v in team.get("storage", {}).items()}

    plan = evaluate("prod", rename)
    cluster = values(plan, CLUSTER)
    (block,) = cluster["cephBlockPools"]
    (fs,) = cluster["cephFileSystems"]
    assert block["name"] == BLOCK_POOL  # the pool keeps its name: renaming a class must not orphan data
    assert block["storageClass"]["name"] == "datasets-rwo"
    assert fs["name"] == "shared" and fs["storageClass"]["name"] == "datasets-rwx"
    assert plan.outputs["storageClasses"]["tier2Block"] == "datasets-rwo"
    assert plan.outputs["storageClasses"]["tier2Shared"] == "datasets-rwx"


def test_block_and_shared_classes(prod_plan):
    cluster = values(prod_plan, CLUSTER)
    block = cluster["cephBlockPools"][0]["storageClass"]
    shared = cluster["cephFileSystems"][0]["storageClass"]
    for sc in (block, shared):
        assert sc["enabled"] is True and sc["allowVolumeExpansion"] is True
        assert sc["reclaimPolicy"] == "Retain"
    assert (block["name"], block["isDefault"]) == ("tier2-block", True)
    assert (shared["name"], shared["isDefault"], shared["pool"]) == ("tier2-shared", False, DATA_POOL)
    # The chart names the provisioner after operatorNamespace, which must be where Rook's CSI runs.
    assert cluster["operatorNamespace"] == prod_plan.named(OPERATOR)["inputs"]["namespace"] == "rook-ceph"
    assert block["parameters"]["csi.storage.k8s.io/node-stage-secret-namespace"] == "rook-ceph"


def test_outputs(prod_plan, lab_plan):
    assert prod_plan.outputs["cephNamespace"] == "rook-ceph"
    assert {k: v for k, v in prod_plan.outputs["storageClasses"].items() if k.startswith("tier2")} == {
        "tier2Block": "tier2-block",
        "tier2Shared": "tier2-shared",
    }
    assert prod_plan.outputs["cephFaultTolerance"] == fault_tolerance(12, 5)
    assert lab_plan.outputs["cephFaultTolerance"] == fault_tolerance(3, 3)


def test_fault_tolerance_statement():
    prod = fault_tolerance(12, 5)
    assert "One storage host down: no data loss and I/O continues" in prod
    assert "Two storage hosts down at once: no data loss" in prod
    assert "below min_size 2" in prod and "MON quorum survives the loss of 2 MON hosts" in prod
    lab = fault_tolerance(3, 3)
    assert "nowhere to re-create the third copy" in lab
    assert "pauses until one of the hosts is back" in lab
    assert "survives the loss of 1 MON host" in lab and "two lost hosts always take quorum" in lab
    assert "if both lost hosts run MONs" in fault_tolerance(4, 3)


def test_without_storage_hosts_there_is_no_ceph():
    def no_osds(raw):
        for node in raw["nodes"]:
            node.pop("osdDevices", None)

    plan = evaluate("lab", no_osds)
    assert not [r for r in plan.resources if r["name"].startswith("ceph-") or r["name"].endswith("-ceph-disks")]
    assert plan.outputs["cephNamespace"] == ""
    assert "tier2Block" not in plan.outputs["storageClasses"]


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------


def only(found: list[str], path: str) -> str:
    matching = [p for p in found if p.startswith(path + ":")]
    assert len(matching) == 1, found
    return matching[0]


def test_too_few_storage_hosts_is_an_error_naming_the_field():
    def two_hosts(raw):
        for node in raw["nodes"]:
            if node["name"] not in ("lab-cpu-1", "lab-cpu-2"):
                node.pop("osdDevices", None)

    found = problems("lab", two_hosts)
    assert "2 Ceph storage host(s)" in only(found, "nodes")
    assert "only 2 storage hosts" in only(found, "storage.ceph.monCount")


@pytest.mark.parametrize("count", [4, 1])
def test_even_or_too_small_mon_count_is_an_error(count):
    found = problems("prod", lambda raw: raw["storage"]["ceph"].update({"monCount": count}))
    assert "odd count of at least 3" in only(found, "storage.ceph.monCount")


def test_more_mons_than_storage_hosts_is_an_error():
    found = problems("lab", lambda raw: raw["storage"]["ceph"].update({"monCount": 5}))
    assert "5 MONs but only 3 storage hosts" in only(found, "storage.ceph.monCount")


def test_osd_devices_on_a_gpu_node_are_an_error():
    def mutate(raw):
        raw["nodes"][node_index(raw, "lab-gpu")]["osdDevices"] = [{"device": "/dev/nvme2n1"}]

    found = problems("lab", mutate)
    index = node_index(stack_doc("lab"), "lab-gpu")
    assert "Ceph OSDs run on CPU nodes only" in only(found, f"nodes[{index}].osdDevices")


def test_storage_class_names_must_differ():
    found = problems("prod", lambda raw: raw["storage"]["ceph"].update({"sharedStorageClass": "tier2-block"}))
    assert "is also claimed by storage.ceph.blockStorageClass" in only(found, "storage.ceph.sharedStorageClass")
    found = problems("prod", lambda raw: raw["storage"]["ceph"].update({"blockStorageClass": "tier1-nvme"}))
    assert "gpu.tier1.storageClassName" in " ".join(f for f in found if "tier1-nvme" in f and "storageClass" in f)


def test_ceph_image_needs_a_tag():
    found = problems("prod", lambda raw: raw["storage"]["ceph"].update({"cephImage": "quay.io/ceph/ceph"}))
    assert "is not pinned: give a version tag" in only(found, "storage.ceph.cephImage")
    ok = problems("prod", lambda raw: raw["storage"]["ceph"].update({"cephImage": "registry:5000/ceph/ceph:v20.2.4"}))
    assert ok == []


def test_rook_charts_must_be_one_v1_20_release():
    def older(raw):
        raw["charts"]["rookCeph"]["version"] = "v1.19.10"

    found = problems("prod", older)
    assert "ceph-csi-drivers" in only(found, "charts.rookCeph.version")
    assert "same Rook release" in only(found, "charts.rookCephCluster.version")
    assert settings().charts.rook_ceph.version == settings().charts.rook_ceph_cluster.version == "v1.20.6"


# ---------------------------------------------------------------------------------------------
# Host half: one step per storage host, then the script against stubbed disk tools
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_one_disk_step_per_storage_host_after_its_preparation(stack, request):
    plan = request.getfixturevalue(f"{stack}_plan")
    s = settings(stack)
    steps = {r["name"]: r for r in plan.by_type("command:remote:Command") if r["name"].endswith("-ceph-disks")}
    assert set(steps) == {f"{n.name}-ceph-disks" for n in s.storage_hosts}
    urns = {r["name"]: r["urn"] for r in plan.resources}
    for node in s.storage_hosts:
        step = steps[f"{node.name}-ceph-disks"]
        assert urns[f"{node.name}-prepare"] in step["dependencies"]
        create = plan.revealed[step["urn"]]["create"]
        assert f"NODE_NAME={node.name} " in create
        devices = " ".join(d.device for d in node.osd_devices)
        wipe = " ".join(d.device for d in node.osd_devices if d.wipe)
        assert f"DEVICES='{devices}'" in create or f"DEVICES={devices} " in create
        assert (f"WIPE='{wipe}'" in create or f"WIPE={wipe} " in create) if wipe else "WIPE='' " in create
    cluster = plan.named(CLUSTER)
    assert {urns[name] for name in steps} | {urns[OPERATOR]} <= set(cluster["dependencies"])


def test_prod_wipes_nothing_and_lab_wipes_its_marked_disks(prod_plan, lab_plan):
    prod = [
        plan_create(prod_plan, r) for r in prod_plan.by_type("command:remote:Command") if "-ceph-disks" in r["name"]
    ]
    assert prod and all("WIPE='' " in c for c in prod)
    wiped = stack_doc("lab")["nodes"][node_index(stack_doc("lab"), "lab-cpu-1")]["osdDevices"][0]["device"]
    assert f"WIPE={wiped} " in plan_create(lab_plan, lab_plan.named("lab-cpu-1-ceph-disks"))


def plan_create(plan, resource) -> str:
    return plan.revealed[resource["urn"]]["create"]


# A multi-call stub for lsblk, blkid, pvs, wipefs, sgdisk, dd and udevadm over a JSON device table,
# logging every call. Device paths live under the test's tmp directory: nothing real is touched.
FAKE_TOOLS = r"""
import json, os, sys
tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
state_path = os.environ["FAKE_DISKS"]
state = json.load(open(state_path))
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join([tool, *args]) + "\n")

def find(path):
    for disk in state.values():
        if path == disk["name"] or path in disk.get("aliases", []):
            return disk, disk
        for part in disk.get("children", []):
            if path == part["name"]:
                return disk, part
    return None, None

def save():
    json.dump(state, open(state_path, "w"))

if tool == "lsblk":
    cols, path = args[-2].split(","), args[-1]  # every call: lsblk -<flags>o COLUMNS DEVICE
    disk, entry = find(path)
    if entry is None:
        sys.stderr.write(f"lsblk: {path}: not a block device\n"); sys.exit(32)
    rows = [entry] + ([] if args[0].startswith("-d") or entry is not disk else disk.get("children", []))
    key = {"NAME": "name", "TYPE": "type", "FSTYPE": "fstype", "MOUNTPOINT": "mount"}
    for row in rows:
        print(" ".join(row.get(key[c], "") or "" for c in cols))
elif tool == "blkid":
    field = args[args.index("-s") + 1]
    _, entry = find(args[-1])
    if field == "TYPE" and (entry or {}).get("ambivalent"):
        sys.exit(8)  # several superblocks: blkid names none
    value = (entry or {}).get({"TYPE": "fstype", "PTTYPE": "pttype"}[field], "")
    if not value:
        sys.exit(2)
    print(value)
elif tool == "pvs":
    _, entry = find(args[-1])
    print("  " + (entry or {}).get("vg", ""))
elif tool == "wipefs" and "-a" not in args:  # listing only
    _, entry = find(args[-1])
    print("\n".join(entry.get("ambivalent") or [t for t in (entry["fstype"], entry.get("pttype")) if t]))
elif tool == "wipefs":
    disk, entry = find(args[-1])
    entry["fstype"], entry["ambivalent"] = "", []
    if entry is disk:
        disk["pttype"], disk["children"] = "", []
    save()
elif tool == "sgdisk":
    disk, _ = find(args[-1])
    disk["pttype"], disk["children"] = "", []
    save()
"""

TOOLS = ("lsblk", "blkid", "pvs", "wipefs", "sgdisk", "dd", "udevadm")


class FakeHost:
    def __init__(self, tmp_path: Path, disks: dict[str, dict[str, Any]]):
        self.dev = tmp_path / "dev"
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        program = self.bin / "fake-disk-tool"
        program.write_text(f"#!{sys.executable}\n{FAKE_TOOLS}")
        program.chmod(0o755)
        for tool in TOOLS:
            (self.bin / tool).symlink_to(program)
        self.state = tmp_path / "disks.json"
        self.log = tmp_path / "calls.log"
        self.log.write_text("")
        table = {}
        for name, disk in disks.items():
            entry = {"name": self.path(name), "type": "disk", "fstype": "", "pttype": "", "mount": "", **disk}
            entry["children"] = [{"type": "part", "fstype": "", "mount": "", **c} for c in disk.get("children", [])]
            for child in entry["children"]:
                child["name"] = self.path(child["name"])
            table[name] = entry
        self.state.write_text(json.dumps(table))

    def path(self, name: str) -> str:
        return f"{self.dev}/{name}"

    def run(self, devices: list[str], wipe: list[str], without: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        for tool in without:
            (self.bin / tool).unlink()
        env = {
            # The stubs first. The devices are paths under tmp_path, so nothing real is ever touched.
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "FAKE_DISKS": str(self.state),
            "FAKE_LOG": str(self.log),
            "NODE_NAME": "cpu-04",
            "DEVICES": " ".join(self.path(d) for d in devices),
            "WIPE": " ".join(self.path(d) for d in wipe),
        }
        script = "ceph-osd-devices.sh"
        return subprocess.run(["bash", "-c", script_text(script), script], env=env, capture_output=True, text=True)

    def calls(self, tool: Optional[str] = None) -> list[str]:
        lines = self.log.read_text().splitlines()
        return [line for line in lines if tool is None or line.split()[0] == tool]

    def destructive_calls(self) -> list[str]:
        return [c for c in self.calls() if c.split()[0] in ("sgdisk", "dd") or c.startswith("wipefs -a")]

    def disk(self, name: str) -> dict[str, Any]:
        return json.loads(self.state.read_text())[name]


def test_a_device_with_a_filesystem_is_reported_and_left_alone_without_wipe(tmp_path):
    host = FakeHost(tmp_path, {"sdb": {"fstype": "ext4"}, "sdc": {}})
    result = host.run(["sdb", "sdc"], wipe=[])
    assert result.returncode == 0, result.stderr
    assert f"warning: {host.path('sdb')} holds ext4; Rook skips such devices" in result.stdout
    assert f"{host.path('sdc')}: clean" in result.stdout
    assert "changed:" not in result.stdout
    assert host.destructive_calls() == []
    assert host.disk("sdb")["fstype"] == "ext4"


def test_partitions_are_reported(tmp_path):
    host = FakeHost(tmp_path, {"sdb": {"pttype": "gpt", "children": [{"name": "sdb1", "fstype": "xfs"}]}})
    result = host.run(["sdb"], wipe=[])
    assert result.returncode == 0, result.stderr
    assert "holds 1 partition(s) (gpt)" in result.stdout
    assert host.destructive_calls() == []


def test_wipe_true_wipes_then_a_second_run_changes_nothing(tmp_path):
    host = FakeHost(tmp_path, {"sdb": {"pttype": "gpt", "children": [{"name": "sdb1", "fstype": "ext4"}]}})
    first = host.run(["sdb"], wipe=["sdb"])
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("changed:") == 1
    assert f"changed: wiped {host.path('sdb')} (held 1 partition(s) (gpt)) for a Ceph OSD" in first.stdout
    sdb, sdb1 = host.path("sdb"), host.path("sdb1")
    assert host.destructive_calls() == [
        f"wipefs -a {sdb1}",
        f"wipefs -a {sdb}",
        f"sgdisk --zap-all {sdb}",
        f"dd if=/dev/zero of={sdb} bs=1M count=100 oflag=direct,dsync status=none",
    ]
    assert host.disk("sdb")["children"] == [] and host.disk("sdb")["pttype"] == ""

    second = host.run(["sdb"], wipe=["sdb"])
    assert second.returncode == 0, second.stderr
    assert "changed:" not in second.stdout and f"{sdb}: clean" in second.stdout
    assert len(host.destructive_calls()) == 4  # none added by the second run


def test_several_old_signatures_are_all_reported(tmp_path):
    host = FakeHost(tmp_path, {"sdb": {"ambivalent": ["xfs", "ext4"]}})
    result = host.run(["sdb"], wipe=[])
    assert result.returncode == 0, result.stderr
    assert f"warning: {host.path('sdb')} holds xfs ext4;" in result.stdout
    assert host.destructive_calls() == []


def test_wipe_without_sgdisk_still_clears_the_signatures(tmp_path):
    host = FakeHost(tmp_path, {"sdb": {"fstype": "xfs"}})
    result = host.run(["sdb"], wipe=["sdb"], without=("sgdisk",))
    assert result.returncode == 0, result.stderr
    assert [c.split()[0] for c in host.destructive_calls()] == ["wipefs", "dd"]
    assert host.disk("sdb")["fstype"] == ""


@pytest.mark.parametrize(
    "disk",
    [
        pytest.param({"fstype": "ceph_bluestore"}, id="raw-bluestore"),
        pytest.param(
            {"fstype": "LVM2_member", "vg": "ceph-6f1c", "children": [{"name": "ceph--6f1c-osd", "type": "lvm"}]},
            id="lvm-osd",
        ),
        pytest.param({"pttype": "gpt", "children": [{"name": "sdb1", "fstype": "ceph_bluestore"}]}, id="partition"),
        pytest.param({"ambivalent": ["xfs", "ceph_bluestore"]}, id="next-to-an-old-filesystem"),
    ],
)
def test_a_ceph_osd_is_never_wiped_even_with_wipe_true(tmp_path, disk):
    host = FakeHost(tmp_path, {"sdb": disk})
    for _ in range(2):
        result = host.run(["sdb"], wipe=["sdb"])
        assert result.returncode == 0, result.stderr
        assert f"{host.path('sdb')}: Ceph OSD (" in result.stdout and "left alone" in result.stdout
        assert "changed:" not in result.stdout
    assert host.destructive_calls() == []


def test_an_lvm_disk_is_treated_as_an_osd_when_pvs_cannot_tell(tmp_path):
    host = FakeHost(tmp_path, {"sdb": {"fstype": "LVM2_member", "vg": "data"}})
    result = host.run(["sdb"], wipe=["sdb"], without=("pvs",))
    assert result.returncode == 0, result.stderr
    assert "assuming it is" in result.stdout
    assert host.destructive_calls() == []


def test_a_foreign_inactive_lvm_disk_is_wiped_when_asked(tmp_path):
    host = FakeHost(tmp_path, {"sdb": {"fstype": "LVM2_member", "vg": "old-data"}})
    result = host.run(["sdb"], wipe=["sdb"])
    assert result.returncode == 0, result.stderr
    assert "changed: wiped" in result.stdout and "(held LVM2_member)" in result.stdout


@pytest.mark.parametrize(
    ("disk", "why"),
    [
        pytest.param({"fstype": "xfs", "mount": "/srv/data"}, "is mounted at /srv/data", id="mounted"),
        pytest.param(
            {"pttype": "gpt", "children": [{"name": "sdb1", "fstype": "ext4", "mount": "/var/lib/x"}]},
            "is mounted at /var/lib/x",
            id="mounted-partition",
        ),
        pytest.param(
            {"fstype": "LVM2_member", "vg": "vg0", "children": [{"name": "vg0-root", "type": "lvm"}]},
            "(lvm) is active on it",
            id="active-lvm",
        ),
    ],
)
def test_a_device_in_use_is_refused_not_wiped(tmp_path, disk, why):
    host = FakeHost(tmp_path, {"sdb": disk})
    result = host.run(["sdb"], wipe=["sdb"])
    assert result.returncode != 0
    assert f"refusing to wipe {host.path('sdb')}" in result.stderr and why in result.stderr
    assert host.destructive_calls() == []


def test_only_the_devices_marked_wipe_are_wiped(tmp_path):
    host = FakeHost(tmp_path, {"sdb": {"fstype": "ext4"}, "sdc": {"fstype": "ext4"}})
    result = host.run(["sdb", "sdc"], wipe=["sdc"])
    assert result.returncode == 0, result.stderr
    calls = host.destructive_calls()
    assert calls and all(host.path("sdc") in c and host.path("sdb") not in c for c in calls)
    assert host.disk("sdb")["fstype"] == "ext4" and host.disk("sdc")["fstype"] == ""


def test_a_missing_device_is_an_error_after_the_others_are_done(tmp_path):
    host = FakeHost(tmp_path, {"sdb": {"fstype": "ext4"}})
    result = host.run(["sdz", "sdb"], wipe=["sdz", "sdb"])
    assert result.returncode != 0
    assert f"error: cpu-04: {host.path('sdz')} is not a block device on this host; fix nodes[].osdDevices" in (
        result.stderr
    )
    assert f"changed: wiped {host.path('sdb')}" in result.stdout  # the good device was still handled


def test_by_id_paths_are_resolved_through_lsblk(tmp_path):
    host = FakeHost(tmp_path, {"sdb": {"fstype": "ext4"}})
    table = json.loads(host.state.read_text())
    table["sdb"]["aliases"] = [host.path("disk/by-id/wwn-0x5002538f4204a101")]
    host.state.write_text(json.dumps(table))
    result = host.run(["disk/by-id/wwn-0x5002538f4204a101"], wipe=["disk/by-id/wwn-0x5002538f4204a101"])
    assert result.returncode == 0, result.stderr
    assert "changed: wiped" in result.stdout and host.disk("sdb")["fstype"] == ""
