"""GpuPool: GPU Operator on RKE2, time-slicing, tier-1 NVMe (host script and provisioner), outputs."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.cluster.config import GPU_TAINT, ROLE_LABEL, node_labels
from components.gpu.pool import DCGM_METRICS, gpu_operator_values
from components.hosts.remote import script_text
from settings import load
from tests.conftest import evaluate, node_index, problems, stack_doc, tolerates
from tests.disk_stubs import DISK_STUBS, install
from tests.upstream import helm_merge, spec_schema, unknown_fields, unknown_value_paths, upstream_values

GPU_OPERATOR_VERSION = "v26.7.0"
PROVISIONER_VERSION = "2.9.0"

# Keys of the vendored node-feature-discovery subchart that the parent chart's values.yaml does not
# repeat. The reference files hold no separate copy of the subchart's values (it is inside
# charts-src/gpu-operator); each key here was read in NVIDIA/gpu-operator
# deployments/gpu-operator/charts/node-feature-discovery/values.yaml (`worker.nodeSelector: {}`).
NFD_SUBCHART_KEYS = {"node-feature-discovery.worker.nodeSelector"}

# Values the chart turns into the ClusterPolicy spec (templates/clusterpolicy.yaml), checked against
# the CRD too. `devicePlugin.config.create`/`.data` are chart-only: the chart renders the ConfigMap.
CLUSTER_POLICY_SECTIONS = {"cdi", "operator", "daemonsets", "driver", "toolkit", "devicePlugin", "dcgmExporter"}
CHART_ONLY = {
    "devicePlugin.config.create",
    "devicePlugin.config.data",
    "dcgmExporter.config.create",  # templates/dcgm_exporter_config.yaml: the chart makes the ConfigMap
    "dcgmExporter.config.data",
}


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _component(plan, name: str) -> list[dict[str, Any]]:
    urn = next(r["urn"] for r in plan.resources if r["type"] == "mlplatform:gpu:GpuPool")
    return [r for r in plan.resources if r["parent"] == urn and r["name"] == name]


def _values(plan, release: str) -> dict[str, Any]:
    (resource,) = _component(plan, release)
    return resource["inputs"]["values"]


def _params(command: str) -> dict[str, str]:
    """The VAR=value parameters in front of `bash -c` in a host step's command."""
    prefix = command.split(" bash -c ", 1)[0]
    return dict(token.split("=", 1) for token in shlex.split(prefix) if "=" in token)


def _toleration_lists(values: Any, path: str = "") -> dict[str, list]:
    """Every `tolerations` list anywhere in the values, by path."""
    found: dict[str, list] = {}
    if isinstance(values, dict):
        for key, value in values.items():
            sub = f"{path}.{key}" if path else key
            if key == "tolerations":
                found[sub] = value
            else:
                found.update(_toleration_lists(value, sub))
    elif isinstance(values, list):
        for item in values:
            found.update(_toleration_lists(item, f"{path}[]"))
    return found


def _set_gpu(raw: dict, **changes: Any) -> None:
    raw.setdefault("gpu", {})
    for key, value in changes.items():
        raw["gpu"][key] = value


# ---------------------------------------------------------------------------------------------
# GPU Operator
# ---------------------------------------------------------------------------------------------


# Read by templates/dcgm_exporter_config.yaml and clusterpolicy.yaml of v26.7.0, commented out in its values.yaml.
COMMENTED_UPSTREAM = frozenset({"dcgmExporter.config"})


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_gpu_operator_values_exist_upstream(stack, prod_plan, lab_plan):
    upstream = upstream_values("gpu-operator", GPU_OPERATOR_VERSION)
    plan = prod_plan if stack == "prod" else lab_plan
    unknown = [k for k in unknown_value_paths(_values(plan, "gpu-operator"), upstream, skip=COMMENTED_UPSTREAM)
               if k not in NFD_SUBCHART_KEYS]  # fmt: skip
    assert unknown == [], f"gpu-operator values not in upstream values.yaml {GPU_OPERATOR_VERSION}: {unknown}"


def test_gpu_operator_values_for_host_driver_exist_upstream():
    upstream = upstream_values("gpu-operator", GPU_OPERATOR_VERSION)
    plan = evaluate("prod", lambda raw: raw["gpu"]["driver"].update(managedBy="host"))
    unknown = [k for k in unknown_value_paths(_values(plan, "gpu-operator"), upstream, skip=COMMENTED_UPSTREAM)
               if k not in NFD_SUBCHART_KEYS]  # fmt: skip
    assert unknown == []


def test_own_nfd_values_exist_upstream():
    # GpuPool on its own (deploy_nfd=True) deploys the chart's NFD, worker restricted to GPU nodes.
    upstream = upstream_values("gpu-operator", GPU_OPERATOR_VERSION)
    values = gpu_operator_values(load(stack_doc("prod")).gpu, deploy_nfd=True)
    assert values["nfd"] == {"enabled": True}
    unknown = [k for k in unknown_value_paths(values, upstream, skip=COMMENTED_UPSTREAM) if k not in NFD_SUBCHART_KEYS]
    assert unknown == []


def test_nfd_subchart_exception_is_only_what_the_parent_lacks():
    # The exception list must not hide a key the parent values.yaml does carry (it would then be checked).
    upstream = upstream_values("gpu-operator", GPU_OPERATOR_VERSION)
    for path in NFD_SUBCHART_KEYS:
        node = upstream
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        assert leaf not in node, f"{path} is in the parent values.yaml now; drop it from NFD_SUBCHART_KEYS"


@pytest.mark.parametrize("stack", ["prod", "lab"])
def test_cluster_policy_fields_exist_in_crd(stack, prod_plan, lab_plan):
    spec = spec_schema("gpu-operator", GPU_OPERATOR_VERSION, "nvidia.com_clusterpolicies.yaml", crd_version="v1")
    values = _values(prod_plan if stack == "prod" else lab_plan, "gpu-operator")
    sections = {k: v for k, v in values.items() if k in CLUSTER_POLICY_SECTIONS}
    assert {"daemonsets", "toolkit", "driver", "dcgmExporter", "operator"} <= set(sections)
    unknown = [
        m for key, value in sections.items() for m in unknown_fields(value, spec["properties"][key], key, CHART_ONLY)
    ]
    assert unknown == [], f"ClusterPolicy fields not in the CRD at {GPU_OPERATOR_VERSION}: {unknown}"


def test_toolkit_uses_rke2_containerd(prod_plan):
    values = _values(prod_plan, "gpu-operator")
    env = {e["name"]: e["value"] for e in values["toolkit"]["env"]}
    assert env["CONTAINERD_SOCKET"] == "/run/k3s/containerd/containerd.sock"
    # The config RKE2 generates, not its template: a toolkit-written template replaces RKE2's own.
    assert env["CONTAINERD_CONFIG"] == "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"
    assert env["RUNTIME_DROP_IN_CONFIG"].startswith("/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.d/")
    assert not any(v.endswith(".tmpl") for v in env.values())
    # The operator sets CONTAINERD_RUNTIME_CLASS from operator.runtimeClass (a toolkit env entry is overridden).
    assert values["operator"]["runtimeClass"] == "nvidia"
    assert "CONTAINERD_RUNTIME_CLASS" not in env
    assert values["toolkit"]["enabled"] is True


def test_the_gpu_pool_page_warns_that_the_operator_restarts_rke2():
    readme = " ".join((Path(__file__).resolve().parents[2] / "docs/gpu-pool.md").read_text().split())
    assert "it restarts containerd, and that restarts RKE2 on that node" in readme


def test_driver_from_operator_or_host(prod_plan):
    operator = _values(prod_plan, "gpu-operator")["driver"]
    assert operator == {"enabled": True, "version": stack_doc("prod")["gpu"]["driver"]["version"]}
    host = _values(evaluate("prod", lambda raw: raw["gpu"]["driver"].update(managedBy="host")), "gpu-operator")
    assert host["driver"] == {"enabled": False}


def test_dcgm_exporter_on_without_service_monitor(prod_plan):
    # Host network: Zabbix scrapes each GPU node's exporter at <node address>:9400 (docs/monitoring.md).
    # The counters file adds the error counters the GPU template alerts on.
    assert _values(prod_plan, "gpu-operator")["dcgmExporter"] == {
        "enabled": True,
        "hostNetwork": True,
        "serviceMonitor": {"enabled": False},
        "config": {"name": "dcgm-exporter-metrics", "create": True, "data": DCGM_METRICS.read_text()},
    }


def test_operator_waits_for_the_cluster_and_its_privileged_namespace(prod_plan):
    (operator,) = _component(prod_plan, "gpu-operator")
    (namespace,) = _component(prod_plan, "gpu-operator-namespace")
    assert operator["inputs"]["namespace"] == namespace["inputs"]["metadata"]["name"] == "gpu-operator"
    assert operator["inputs"]["version"] == GPU_OPERATOR_VERSION
    assert namespace["urn"] in operator["dependencies"]
    assert any(d.endswith("::cluster-kubeconfig") for d in operator["dependencies"])
    assert namespace["inputs"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_one_namespace_when_operator_and_provisioner_share_it():
    plan = evaluate("prod", lambda raw: raw["gpu"]["tier1"].update(namespace="gpu-operator"))
    namespaces = [r for r in plan.by_type("kubernetes:core/v1:Namespace") if "GpuPool" in (r["parent"] or "")]
    assert [n["inputs"]["metadata"]["name"] for n in namespaces] == ["gpu-operator"]


# ---------------------------------------------------------------------------------------------
# Every GPU-node DaemonSet tolerates the GPU taint and runs only on GPU nodes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("release", ["gpu-operator", "gpu-tier1-provisioner", "own-nfd"])
def test_every_toleration_list_tolerates_the_gpu_taint(release, prod_plan):
    if release == "own-nfd":
        values = gpu_operator_values(load(stack_doc("prod")).gpu, deploy_nfd=True)
    else:
        values = _values(prod_plan, release)
    lists = _toleration_lists(values)
    expected = {
        "gpu-operator": {"daemonsets.tolerations"},
        "gpu-tier1-provisioner": {"tolerations"},
        "own-nfd": {"daemonsets.tolerations", "node-feature-discovery.worker.tolerations"},
    }[release]
    assert set(lists) == expected
    for path, tolerations in lists.items():
        assert any(tolerates(t, GPU_TAINT) for t in tolerations), f"{release}: {path} does not tolerate {GPU_TAINT}"


def test_one_nfd_in_the_cluster_and_it_labels_gpus_on_gpu_nodes(prod_plan):
    # The GPU Operator's operands go where NFD saw an NVIDIA display controller (pci-10de). The platform
    # runs one NFD, the Network Operator's: it must be on, run on (tolerate) GPU nodes, and label GPUs.
    assert _values(prod_plan, "gpu-operator")["nfd"] == {"enabled": False}
    (network_operator,) = [
        r
        for r in prod_plan.by_type("kubernetes:helm.sh/v3:Release")
        if r["inputs"]["chart"].endswith("network-operator")
    ]
    version = network_operator["inputs"]["version"]
    merged = helm_merge(upstream_values("network-operator", version), network_operator["inputs"]["values"])

    def effective(*path: str) -> Any:
        """What Helm renders at `path`: our values merged over the chart's defaults."""
        node = merged
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        return node

    assert effective("nfd", "enabled") is True
    tolerations = effective("node-feature-discovery", "worker", "tolerations")
    assert any(tolerates(t, GPU_TAINT) for t in tolerations)
    assert effective("node-feature-discovery", "worker", "nodeSelector") in (None, {}, {ROLE_LABEL: "gpu"})
    pci = effective("node-feature-discovery", "worker", "config", "sources", "pci")
    assert any(c.startswith("03") for c in pci["deviceClassWhitelist"])  # display controllers: the GPUs
    assert "vendor" in pci["deviceLabelFields"]


def test_toleration_matching_is_not_trivially_true():
    # The helper the test above relies on must reject tolerations for other taints.
    assert not tolerates({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}, GPU_TAINT)
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Equal", "value": "false"}, GPU_TAINT)
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, GPU_TAINT)
    assert tolerates({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}, GPU_TAINT)


def test_node_agents_select_the_gpu_role_label(prod_plan):
    raw = stack_doc("prod")
    gpu_node = load(raw).gpu_nodes[0]
    selector = {ROLE_LABEL: node_labels(gpu_node)[ROLE_LABEL]}
    assert selector == {ROLE_LABEL: "gpu"}
    own_nfd = gpu_operator_values(load(raw).gpu, deploy_nfd=True)
    assert own_nfd["node-feature-discovery"]["worker"]["nodeSelector"] == selector
    assert _values(prod_plan, "gpu-tier1-provisioner")["nodeSelector"] == selector


# ---------------------------------------------------------------------------------------------
# Time-slicing and outputs
# ---------------------------------------------------------------------------------------------


def test_time_slicing_configures_the_device_plugin(lab_plan, prod_plan):
    config = _values(lab_plan, "gpu-operator")["devicePlugin"]["config"]
    assert config["create"] is True
    assert config["default"] in config["data"]
    plugin = yaml.safe_load(config["data"][config["default"]])
    (resource,) = plugin["sharing"]["timeSlicing"]["resources"]
    assert resource == {"name": "nvidia.com/gpu", "replicas": stack_doc("lab")["gpu"]["timeSlicing"]["replicas"]}
    assert "devicePlugin" not in _values(prod_plan, "gpu-operator")  # prod: time-slicing off


def test_prod_outputs(prod_plan):
    out = prod_plan.outputs
    assert out["gpuNodes"] == [f"gpu-{i:02d}" for i in range(1, 16)]
    assert out["gpuTotal"] == 120  # 15 nodes x 8 GPUs
    assert out["gpuSchedulable"] == 120  # time-slicing off
    assert out["storageClasses"]["tier1"] == "tier1-nvme"


def test_lab_outputs_count_time_sliced_gpus(lab_plan):
    assert lab_plan.outputs["gpuNodes"] == ["lab-gpu"]
    assert lab_plan.outputs["gpuTotal"] == 2
    assert lab_plan.outputs["gpuSchedulable"] == 2 * 4


def test_time_slicing_in_prod_multiplies_schedulable_gpus():
    plan = evaluate("prod", lambda raw: raw["gpu"]["timeSlicing"].update(enabled=True, replicas=3))
    assert (plan.outputs["gpuTotal"], plan.outputs["gpuSchedulable"]) == (120, 360)


# ---------------------------------------------------------------------------------------------
# Tier 1: StorageClass and provisioner
# ---------------------------------------------------------------------------------------------


def test_tier1_storage_class_binds_late_and_deletes(prod_plan):
    classes = prod_plan.by_type("kubernetes:storage.k8s.io/v1:StorageClass")
    (tier1,) = [c for c in classes if c["inputs"]["metadata"]["name"] == "tier1-nvme"]
    assert tier1["inputs"]["volumeBindingMode"] == "WaitForFirstConsumer"
    assert tier1["inputs"]["reclaimPolicy"] == "Delete"
    assert tier1["inputs"]["provisioner"] == "kubernetes.io/no-provisioner"


def test_provisioner_serves_the_class_without_creating_a_second_one(prod_plan):
    values = _values(prod_plan, "gpu-tier1-provisioner")
    (cls,) = values["classes"]
    tier1 = stack_doc("prod")["gpu"]["tier1"]
    assert cls["name"] == tier1["storageClassName"]
    assert cls["hostDir"] == tier1["mountRoot"]
    assert cls["volumeMode"] == "Filesystem"  # released volumes: the provisioner deletes their files
    assert "storageClass" not in cls  # the chart would create a duplicate StorageClass


def test_provisioner_values_exist_upstream(prod_plan):
    upstream = upstream_values("local-static-provisioner", PROVISIONER_VERSION)
    unknown = unknown_value_paths(_values(prod_plan, "gpu-tier1-provisioner"), upstream)
    assert unknown == [], f"provisioner values not in upstream values.yaml {PROVISIONER_VERSION}: {unknown}"
    (release,) = _component(prod_plan, "gpu-tier1-provisioner")
    assert release["inputs"]["version"] == PROVISIONER_VERSION


def test_key_check_rejects_unknown_keys():
    # The walker behind the upstream checks must report what upstream lacks.
    upstream = {"a": {"b": 1}, "free": {}, "items": [{"x": 1}]}
    assert unknown_value_paths({"a": {"c": 1}, "free": {"any": 1}, "items": [{"y": 2}]}, upstream) == [
        "a.c",
        "items[0].y",
    ]


# ---------------------------------------------------------------------------------------------
# Tier 1: host steps in the plan
# ---------------------------------------------------------------------------------------------


def test_one_nvme_step_per_gpu_node_after_its_prepare_step(prod_plan):
    settings = load(stack_doc("prod"))
    steps = {r["name"]: r for r in prod_plan.by_type("command:remote:Command") if r["name"].endswith("-nvme")}
    assert set(steps) == {f"{n.name}-nvme" for n in settings.gpu_nodes if n.nvme}
    assert len(steps) == 15
    by_urn = prod_plan.by_urn()
    for node in settings.gpu_nodes:
        step = steps[f"{node.name}-nvme"]
        assert "GpuPool" in step["parent"]
        deps = {by_urn[d]["name"] for d in step["dependencies"]}
        assert f"{node.name}-prepare" in deps
        assert prod_plan.revealed[step["urn"]]["connection"]["host"] == node.address


def test_nvme_step_formats_only_marked_devices():
    def mutate(raw):
        node = raw["nodes"][node_index(raw, "gpu-01")]
        node["nvme"] = [
            {"device": "/dev/disk/by-id/nvme-eui.0025388a00", "format": True},
            {"device": "/dev/nvme2n1"},
            {"device": "/dev/disk/by-id/nvme-eui.0025388a01", "format": True, "force": True},
        ]
        del raw["nodes"][node_index(raw, "gpu-02")]["nvme"]

    plan = evaluate("prod", mutate)
    params = _params(plan.named("gpu-01-nvme")["inputs"]["create"])
    assert params["NVME_DEVICES"].split() == [
        "/dev/disk/by-id/nvme-eui.0025388a00=format",
        "/dev/nvme2n1=keep",
        "/dev/disk/by-id/nvme-eui.0025388a01=format-force",
    ]
    assert params["MOUNT_ROOT"] == "/mnt/local-nvme"
    assert params["FS_TYPE"] == "xfs"
    with pytest.raises(KeyError):
        plan.named("gpu-02-nvme")  # no devices listed: no step
    assert not [
        r for r in plan.by_type("command:remote:Command") if r["name"].startswith("cpu-") and "nvme" in r["name"]
    ]


def test_prod_formats_exactly_the_devices_it_marks(prod_plan):
    settings = load(stack_doc("prod"))
    for node in settings.gpu_nodes:
        entries = _params(prod_plan.named(f"{node.name}-nvme")["inputs"]["create"])["NVME_DEVICES"].split()
        assert entries == [f"{d.device}={'format' if d.format else 'keep'}" for d in node.nvme]


def test_nvme_on_a_cpu_node_is_a_settings_error():
    found = problems(
        "prod", lambda raw: raw["nodes"][node_index(raw, "cpu-10")].update(nvme=[{"device": "/dev/nvme1n1"}])
    )
    assert any(
        p.startswith(f"nodes[{node_index(stack_doc('prod'), 'cpu-10')}].nvme:") and "CPU node" in p for p in found
    )


def test_nvme_devices_with_the_same_mount_name_are_a_settings_error():
    def mutate(raw):
        raw["nodes"][node_index(raw, "gpu-01")]["nvme"] = [
            {"device": "/dev/disk/by-id/scratch", "format": True},
            {"device": "/dev/disk/by-path/scratch", "format": True},
        ]

    found = problems("prod", mutate)
    assert len([p for p in found if "gpu.tier1.mountRoot/scratch" in p]) == 2


# ---------------------------------------------------------------------------------------------
# Tier 1: the host script against stubbed commands
# ---------------------------------------------------------------------------------------------

STUBS = {
    **DISK_STUBS,
    "mkfs.ext4": """
dev=${!#}; name=$(basename "$dev"); echo "mkfs.ext4 $*" >>"$STUB_STATE/log"
printf 'TYPE=ext4\\nUUID=uuid-%s\\nLABEL=%s\\n' "$name" "$3" >"$STUB_STATE/$name.sig"
""",
    "systemctl": """
echo "systemctl $*" >>"$STUB_STATE/log"
""",
}


class Host:
    """A fake GPU node: stubbed disk tools on PATH, devices as state files, fstab under a temp root."""

    def __init__(self, tmp: Path) -> None:
        self.state = tmp / "state"
        self.root = tmp / "root"
        bin_dir = tmp / "bin"
        for d in (self.state, self.root / "etc", bin_dir):
            d.mkdir(parents=True)
        (self.state / "log").touch()
        install(bin_dir, STUBS)
        self.path = f"{bin_dir}:/usr/bin:/bin"
        self.program = tmp / "nvme-tier1.sh"
        self.program.write_text(script_text("nvme-tier1.sh"))

    def disk(self, name: str, signature: str = "", mounted_at: str = "") -> str:
        (self.state / f"{name}.disk").touch()
        if signature:
            (self.state / f"{name}.sig").write_text(signature)
        if mounted_at:
            (self.state / f"{name}.mounts").write_text(mounted_at + "\n")
        return f"/dev/{name}"

    def run(self, devices: str, fs_type: str = "xfs") -> subprocess.CompletedProcess:
        env = {
            "PATH": self.path,
            "STUB_STATE": str(self.state),
            "HOST_ROOT": str(self.root),
            "MOUNT_ROOT": "/mnt/local-nvme",
            "FS_TYPE": fs_type,
            "NVME_DEVICES": devices,
            "HOME": os.environ.get("HOME", "/tmp"),
        }
        return subprocess.run(["bash", str(self.program)], env=env, capture_output=True, text=True, timeout=60)

    def actions(self) -> list[str]:
        """The commands that changed a disk or a mount (the stubs do not log their probes)."""
        return (self.state / "log").read_text().splitlines()

    def fstab(self) -> list[str]:
        path = self.root / "etc" / "fstab"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def host(tmp_path) -> Host:
    return Host(tmp_path)


def test_marked_blank_device_is_formatted_and_mounted(host):
    dev = host.disk("nvme1n1")
    result = host.run(f"{dev}=format")
    assert result.returncode == 0, result.stderr
    assert host.actions() == [
        f"mkfs.xfs -q -L ml-tier1 {dev}",
        f"mount -t xfs -o noatime {dev} /mnt/local-nvme/nvme1n1",
        "systemctl daemon-reload",
    ]
    assert host.fstab() == [
        "UUID=uuid-nvme1n1 /mnt/local-nvme/nvme1n1 xfs defaults,nofail,noatime,x-systemd.device-timeout=30s 0 0"
    ]
    assert (host.root / "mnt/local-nvme/nvme1n1").is_dir()
    assert "changed: formatted /dev/nvme1n1" in result.stdout


def test_ext4_when_settings_say_so(host):
    dev = host.disk("nvme1n1")
    assert host.run(f"{dev}=format", fs_type="ext4").returncode == 0
    assert host.actions()[0] == f"mkfs.ext4 -q -L ml-tier1 {dev}"
    assert " ext4 " in host.fstab()[0]


def test_device_with_a_filesystem_is_not_formatted_without_force(host):
    dev = host.disk("nvme1n1", "TYPE=ext4\nUUID=data-1\nLABEL=old-data\n")
    result = host.run(f"{dev}=format")
    assert result.returncode != 0  # the step fails so that `pulumi up` shows it
    assert "already holds ext4; not formatted (set force: true" in result.stderr
    assert host.actions() == []  # no wipefs, no mkfs, no mount
    assert host.fstab() == []
    assert (host.state / "nvme1n1.sig").read_text().startswith("TYPE=ext4")


def test_device_with_a_partition_table_is_not_formatted_without_force(host):
    dev = host.disk("nvme1n1", "PTTYPE=gpt\nPTUUID=abc\n")
    result = host.run(f"{dev}=format")
    assert result.returncode != 0
    assert "a gpt partition table" in result.stderr
    assert host.actions() == []


def test_forced_device_with_a_filesystem_is_wiped_and_formatted(host):
    dev = host.disk("nvme1n1", "TYPE=ext4\nUUID=data-1\nLABEL=old-data\n")
    result = host.run(f"{dev}=format-force")
    assert result.returncode == 0, result.stderr
    assert host.actions()[:2] == [f"wipefs -a -- {dev}", f"mkfs.xfs -q -L ml-tier1 {dev}"]


def test_forced_device_that_is_mounted_elsewhere_is_never_formatted(host):
    dev = host.disk("nvme1n1", "TYPE=ext4\nUUID=data-1\n", mounted_at="/var/lib/data")
    result = host.run(f"{dev}=format-force")
    assert result.returncode != 0
    assert "in use, mounted at /var/lib/data" in result.stderr
    assert host.actions() == []


def test_unmarked_device_is_never_formatted(host):
    blank = host.disk("nvme1n1")
    result = host.run(f"{blank}=keep")
    assert result.returncode != 0
    assert "not marked format: true" in result.stderr
    assert host.actions() == []
    assert host.fstab() == []


def test_unmarked_device_with_a_filesystem_is_mounted_as_is(host):
    dev = host.disk("nvme2n1", "TYPE=ext4\nUUID=operator-made\nLABEL=scratch\n")
    result = host.run(f"{dev}=keep")
    assert result.returncode == 0, result.stderr
    assert not [a for a in host.actions() if a.startswith(("mkfs", "wipefs"))]
    assert f"mount -t ext4 -o noatime {dev} /mnt/local-nvme/nvme2n1" in host.actions()
    assert host.fstab()[0].startswith("UUID=operator-made /mnt/local-nvme/nvme2n1 ext4 ")


def test_other_devices_are_still_handled_when_one_is_refused(host):
    refused = host.disk("nvme1n1", "TYPE=ext4\nUUID=data-1\n")
    fresh = host.disk("nvme2n1")
    result = host.run(f"{refused}=format {fresh}=format")
    assert result.returncode != 0
    assert [a for a in host.actions() if a.startswith("mkfs")] == [f"mkfs.xfs -q -L ml-tier1 {fresh}"]
    assert "1 tier-1 device(s) not set up" in result.stderr


def test_missing_device_is_reported(host):
    result = host.run("/dev/nvme9n1=format")
    assert result.returncode != 0
    assert "not a block device on this host" in result.stderr
    assert host.actions() == []


def test_second_run_changes_nothing(host):
    blank = host.disk("nvme1n1")
    own_fs = host.disk("nvme2n1", "TYPE=xfs\nUUID=mine\nLABEL=scratch\n")
    foreign_fs = host.disk("nvme3n1", "TYPE=ext4\nUUID=old\n")
    devices = f"{blank}=format {own_fs}=keep {foreign_fs}=format-force"
    first = host.run(devices)
    assert first.returncode == 0, first.stderr
    fstab, actions = host.fstab(), host.actions()
    assert len(fstab) == 3
    second = host.run(devices)
    assert second.returncode == 0, second.stderr
    assert "changed:" not in second.stdout
    assert host.actions() == actions  # no new wipefs, mkfs, mount or daemon-reload
    assert host.fstab() == fstab


def test_existing_fstab_lines_are_kept_and_a_stale_entry_replaced(host):
    (host.root / "etc" / "fstab").write_text(
        "UUID=root / ext4 defaults 0 1\nUUID=gone /mnt/local-nvme/nvme1n1 xfs defaults 0 0\n"
    )
    dev = host.disk("nvme1n1")
    assert host.run(f"{dev}=format").returncode == 0
    assert host.fstab() == [
        "UUID=root / ext4 defaults 0 1",
        "UUID=uuid-nvme1n1 /mnt/local-nvme/nvme1n1 xfs defaults,nofail,noatime,x-systemd.device-timeout=30s 0 0",
    ]
