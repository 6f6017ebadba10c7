"""GpuPool: NVIDIA GPU Operator, time-slicing and tier-1 local NVMe volumes on the GPU nodes.

Cluster half:
- The GPU Operator (upstream chart, pinned) configured for RKE2's embedded containerd. Its container
  toolkit reads RKE2's generated `config.toml`, talks to RKE2's socket, and writes its runtime as a
  drop-in into the directory RKE2's generated config imports (containerd 2, config v3). It never
  writes `config.toml.tmpl`: a template the toolkit writes replaces RKE2's own template and breaks the
  node's containerd settings (NVIDIA/gpu-operator#992, #623). Applying the runtime restarts containerd,
  which restarts RKE2 on that node (docs.rke2.io, GPU Operators).
- The driver comes from the operator's driver container or from the host (`gpu.driver.managedBy`).
- DCGM exporter on (monitoring scrapes it); no ServiceMonitor (no Prometheus operator here).
- Optional time-slicing: the chart creates the device plugin's ConfigMap and the ClusterPolicy points
  the device plugin at it.
- Operands run only on GPU nodes: ClusterPolicy has no node selector for them; the operator schedules
  them on nodes where NFD found an NVIDIA PCI device (vendor 10de), which only GPU nodes have. NFD is
  the chart's own (worker only on nodes labelled `ml-platform.io/role=gpu`) unless `deploy_nfd` is
  off because another NFD labels the nodes (the platform uses the Network Operator's: one NFD per
  cluster). Every DaemonSet configured here (operands, NFD worker, provisioner) tolerates the GPU taint.
- Tier 1: sig-storage local-static-provisioner on the GPU nodes turns every filesystem mounted under
  `gpu.tier1.mountRoot` into a local PersistentVolume of the tier-1 StorageClass (created here, not
  by the chart): late binding, reclaim Delete; on release the provisioner deletes the volume's files
  before it offers the volume again.

Host half: `<node>-nvme` on each GPU node that lists NVMe devices (after its prepare step) formats
only devices marked `format: true` (one already holding a filesystem only with `force: true`) and
mounts every listed device at `<mountRoot>/<device basename>` (fstab by UUID, nofail).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.cluster.config import GPU_TAINT, ROLE_LABEL
from components.common import Wiring
from components.helm import release
from settings import GpuSettings, NodeSettings, NvmeDevice, Tier1Settings

# RKE2's embedded containerd (docs.rke2.io: CLI tools; advanced: configuring containerd).
RKE2_CONTAINERD_SOCKET = "/run/k3s/containerd/containerd.sock"
RKE2_CONTAINERD_CONFIG = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"
# The drop-in directory RKE2's generated containerd 2 config imports (k3s-io/k3s#13680). RKE2 also adds
# the nvidia runtimes itself when it finds the toolkit's binaries at start, so the runtime survives
# RKE2 rewriting config.toml either way.
RKE2_CONTAINERD_DROP_IN = "/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.d/99-nvidia.toml"
DCGM_METRICS_CONFIG = "dcgm-exporter-metrics"
DCGM_METRICS = Path(__file__).parent / "dcgm-metrics.csv"
RUNTIME_CLASS = "nvidia"
# GPUs only through the device plugin. Toolkit v1.20.0 (the chart's pin): the runtime takes a container's devices from
# CDI annotations, then volume mounts, then NVIDIA_VISIBLE_DEVICES, the last only for a privileged container or when
# `accept-nvidia-visible-devices-envvar-when-unprivileged` is true (internal/config/image/cuda_image.go
# `VisibleDevices`), and that option defaults to true (api/config/v1/config.go; the installer's flag reads this
# variable, cmd/nvidia-ctk-installer/toolkit/toolkit.go). CUDA images set NVIDIA_VISIBLE_DEVICES=all, so without
# this any pod with an NVIDIA runtime class gets every GPU of its node. The device plugin does not need the variable:
# with `cdi.enabled` GPU Operator v26.7.0 sets its DEVICE_LIST_STRATEGY to `cdi-annotations,cdi-cri`
# (controllers/object_controls.go `transformDevicePluginCtrForCDI`, which overrides any `devicePlugin.env` entry).
TOOLKIT_TENANCY_ENV = [{"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"}]
DEVICE_PLUGIN_CONFIG = "device-plugin-config"
DEVICE_PLUGIN_CONFIG_KEY = "time-slicing"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
# Why each namespace is `privileged` (components/namespaces.py).
OPERATOR_NAMESPACE_REASON = (
    "GPU Operator operands: the driver container loads kernel modules, the container toolkit rewrites the "
    "node's containerd config, the device plugin, DCGM and the validator use host paths and devices"
)
TIER1_NAMESPACE_REASON = (
    "local-static-provisioner: mounts the tier-1 mount root from the host and deletes released volumes' files"
)


def taint_toleration(taint: str) -> dict[str, str]:
    """The toleration of `key=value:Effect` (any value of the key, as upstream's defaults do)."""
    key, effect = taint.split(":", 1)
    return {"key": key.split("=", 1)[0], "operator": "Exists", "effect": effect}


GPU_TOLERATION = taint_toleration(GPU_TAINT)
GPU_NODE_SELECTOR = {ROLE_LABEL: "gpu"}


@dataclass(frozen=True)
class GpuPoolArgs:
    gpu: GpuSettings
    gpu_nodes: list[NodeSettings]
    wiring: Wiring
    # Deploy the chart's own Node Feature Discovery. False when another NFD in the cluster (e.g. the
    # Network Operator's) already labels the nodes' PCI devices: two NFD masters fight over labels.
    deploy_nfd: bool = True


class GpuPool(pulumi.ComponentResource):
    """GPU Operator, optional time-slicing and tier-1 local NVMe volumes on the GPU nodes."""

    gpu_nodes: list[str]
    """Names of the GPU nodes."""
    gpu_total: int
    """Physical GPUs over all GPU nodes (`nodes[].gpu.count`)."""
    gpu_schedulable: int
    """`nvidia.com/gpu` the scheduler sees: the physical count times the time-slicing replicas."""
    storage_classes: dict[str, str]
    """Storage classes this component provides, by tier key (`tier1`)."""
    operator: k8s.helm.v3.Release
    provisioner: k8s.helm.v3.Release
    tier1_storage_class: k8s.storage.v1.StorageClass
    nvme: dict[str, pulumi.Resource]
    """The tier-1 NVMe step of each GPU node that lists devices."""

    def __init__(self, name: str, args: GpuPoolArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__("mlplatform:gpu:GpuPool", name, None, opts)
        wiring = args.wiring
        gpu, tier1 = args.gpu, args.gpu.tier1
        self.gpu_nodes = [n.name for n in args.gpu_nodes]
        self.gpu_total, self.gpu_schedulable = gpu_counts(args.gpu_nodes, gpu)
        self.storage_classes = {"tier1": tier1.storage_class_name}

        self.nvme = {
            node.name: wiring.host_steps.script(
                f"{node.name}-nvme", node.name, "nvme-tier1.sh", nvme_params(node, tier1), parent=self
            )
            for node in args.gpu_nodes
            if node.nvme and wiring.host_steps.holds(node.name)
        }
        if not wiring.scope.platform:  # a layered cluster or node-group stack: the host half only
            self.register_outputs({})
            return

        k8s_opts = wiring.in_cluster.options(parent=self)
        # One Namespace when both settings name the same one.
        namespaces: dict[str, k8s.core.v1.Namespace] = {}
        for role, namespace, reason in (
            ("operator", gpu.namespace, OPERATOR_NAMESPACE_REASON),
            ("tier1", tier1.namespace, TIER1_NAMESPACE_REASON),
        ):
            if namespace not in namespaces:
                namespaces[namespace] = wiring.in_cluster.namespace(
                    f"{name}-{role}-namespace", namespace, "privileged", reason, parent=self
                )

        self.operator = release(
            f"{name}-operator",
            wiring.charts.gpu_operator,
            release_name="gpu-operator",
            namespace=gpu.namespace,
            values=gpu_operator_values(gpu, deploy_nfd=args.deploy_nfd),
            provider=wiring.in_cluster.provider,
            parent=self,
            depends_on=[*wiring.in_cluster.ready, namespaces[gpu.namespace]],
        )
        self.provisioner = release(
            f"{name}-tier1-provisioner",
            wiring.charts.local_static_provisioner,
            release_name="local-static-provisioner",
            namespace=tier1.namespace,
            values=provisioner_values(tier1),
            provider=wiring.in_cluster.provider,
            parent=self,
            depends_on=[*wiring.in_cluster.ready, namespaces[tier1.namespace]],
        )
        # What runs on the GPU nodes' behalf cluster-wide: what checks of those nodes wait for.
        self.ready: list[pulumi.Resource] = [self.operator, self.provisioner]
        self.tier1_storage_class = k8s.storage.v1.StorageClass(
            f"{name}-tier1-storage-class",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=tier1.storage_class_name, labels={"ml-platform.io/tier": "1"}),
            provisioner=NO_PROVISIONER,
            volume_binding_mode="WaitForFirstConsumer",
            reclaim_policy="Delete",
            opts=k8s_opts,
        )
        self.register_outputs(
            {
                "gpuNodes": self.gpu_nodes,
                "gpuTotal": self.gpu_total,
                "gpuSchedulable": self.gpu_schedulable,
                "storageClasses": self.storage_classes,
            }
        )


def gpu_counts(gpu_nodes: Sequence[NodeSettings], gpu: GpuSettings) -> tuple[int, int]:
    """(physical GPUs, schedulable `nvidia.com/gpu`): time-slicing advertises each GPU `replicas` times."""
    total = sum(n.gpu.count for n in gpu_nodes if n.gpu is not None)
    replicas = gpu.time_slicing.replicas if gpu.time_slicing.enabled else 1
    return total, total * replicas


def gpu_operator_values(gpu: GpuSettings, deploy_nfd: bool = True) -> dict[str, Any]:
    """Values of the gpu-operator chart; every key exists in its values.yaml at the pinned version
    (`node-feature-discovery.worker.nodeSelector`: in the vendored NFD subchart's values.yaml)."""
    driver: dict[str, Any] = {"enabled": gpu.driver.managed_by == "operator"}
    if gpu.driver.managed_by == "operator":
        driver["version"] = gpu.driver.version
    values: dict[str, Any] = {
        # Containers get GPUs through CDI (containerd 2): no default-runtime switch on the node.
        "cdi": {"enabled": True},
        # The RuntimeClass the operator creates and the toolkit registers in containerd
        # (the operator sets CONTAINERD_RUNTIME_CLASS from this; a toolkit env entry would be overridden).
        "operator": {"runtimeClass": RUNTIME_CLASS},
        # ClusterPolicy `daemonsets`: applies to every operand DaemonSet (driver, toolkit, device plugin,
        # GFD, DCGM exporter, MIG manager, validator).
        "daemonsets": {"tolerations": [GPU_TOLERATION]},
        "driver": driver,
        "toolkit": {
            "enabled": True,
            "env": [
                {"name": "CONTAINERD_CONFIG", "value": RKE2_CONTAINERD_CONFIG},
                {"name": "CONTAINERD_SOCKET", "value": RKE2_CONTAINERD_SOCKET},
                {"name": "RUNTIME_DROP_IN_CONFIG", "value": RKE2_CONTAINERD_DROP_IN},
                # Read the config from RKE2's file only. The default (`command,file`) first runs
                # `containerd config dump` with whatever containerd is first on the host's PATH, which
                # on an RKE2 node is not RKE2's (or none), and would build the drop-in from that.
                {"name": "RUNTIME_CONFIG_SOURCE", "value": f"file={RKE2_CONTAINERD_CONFIG}"},
                *TOOLKIT_TENANCY_ENV,
            ],
        },
        # Host network: Zabbix scrapes each GPU node's exporter at <node address>:9400 (the
        # exporter's ClusterIP Service would answer from a random node).
        # The counters file adds the ECC and NVLink error counters the monitoring's GPU template
        # alerts on (the exporter's defaults leave them out).
        "dcgmExporter": {
            "enabled": True,
            "hostNetwork": True,
            "serviceMonitor": {"enabled": False},
            "config": {"name": DCGM_METRICS_CONFIG, "create": True, "data": DCGM_METRICS.read_text()},
        },
        "nfd": {"enabled": deploy_nfd},
    }
    if deploy_nfd:
        values["node-feature-discovery"] = {
            "worker": {"nodeSelector": dict(GPU_NODE_SELECTOR), "tolerations": [GPU_TOLERATION]},
        }
    if gpu.time_slicing.enabled:
        values["devicePlugin"] = {
            "config": {
                "create": True,
                "name": DEVICE_PLUGIN_CONFIG,
                "default": DEVICE_PLUGIN_CONFIG_KEY,
                "data": {DEVICE_PLUGIN_CONFIG_KEY: time_slicing_config(gpu.time_slicing.replicas)},
            }
        }
    return values


def time_slicing_config(replicas: int) -> str:
    """The NVIDIA device plugin's config file: every GPU advertised `replicas` times as `nvidia.com/gpu`."""
    config = {
        "version": "v1",
        "flags": {"migStrategy": "none"},
        "sharing": {
            "timeSlicing": {
                "renameByDefault": False,
                "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}],
            }
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


def provisioner_values(tier1: Tier1Settings) -> dict[str, Any]:
    """Values of the local-static-provisioner chart; every key exists in its values.yaml at the pinned version."""
    return {
        # One class: every mount point under mountRoot becomes a PV of the tier-1 class. No `storageClass`
        # key, so the chart creates no StorageClass (this component owns it).
        "classes": [
            {
                "name": tier1.storage_class_name,
                "hostDir": tier1.mount_root,
                "volumeMode": "Filesystem",
                "accessMode": "ReadWriteOnce",
                "namePattern": "*",
            }
        ],
        "nodeSelector": dict(GPU_NODE_SELECTOR),
        "tolerations": [GPU_TOLERATION],
        # PVs are owned by their Node: a GPU node removed from the cluster takes its local PVs with it.
        "setPVOwnerRef": True,
        # The chart's commented example (values.yaml `resources`); requests only.
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
    }


def nvme_params(node: NodeSettings, tier1: Tier1Settings) -> dict[str, str]:
    """Parameters of `nvme-tier1.sh` for one node: what each listed device may have done to it."""

    def action(device: NvmeDevice) -> str:
        if not device.format:
            return "keep"
        return "format-force" if device.force else "format"

    return {
        "MOUNT_ROOT": tier1.mount_root,
        "FS_TYPE": tier1.fs_type,
        "NVME_DEVICES": " ".join(f"{d.device}={action(d)}" for d in node.nvme),
    }
