"""`ml-platform:nodes` (the cluster's machines) and `ml-platform:nas` (the MinIO hosts outside it)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, ClassVar, Literal, Optional

from pydantic import Field, model_validator

from settings.declare import Claim, destroys_on_decrease, none, replaces, rerender, restarts
from settings.types import DevicePath, HostKey, IPv4, LabelKey, LabelValue, Model, Name


class GpuSpec(Model):
    model: str = Field(min_length=1)
    """The GPU model as `nvidia-smi --query-gpu=name` prints it, e.g. `NVIDIA H100 80GB HBM3` (node label; the GPU
    node check compares it, and settings/hardware.py gives its NVLink rate for the NVLink check's floor)."""
    count: int = Field(ge=1, le=16)
    """GPUs in the node (node label, stack output `gpuTotal`)."""

    CHANGES: ClassVar = {
        "model": replaces("the GPU model's node label and Kueue ResourceFlavor (quotas name flavors by model)"),
        "count": rerender("the node's gpu-count label and the schedulable capacity the quotas are checked against"),
    }


class InfinibandSpec(Model):
    interface: Name
    """The node's IPoIB interface, e.g. `ibp12s0`."""
    address: Annotated[IPv4, Claim("ipv4", network="infiniband")]
    """The interface's static IPoIB address; unique over all nodes."""
    prefix_length: int = Field(default=24, ge=8, le=30)
    """Prefix length of `address`."""

    def extra_claims(self) -> list[tuple[Claim, str, str]]:
        """The IB subnet the host addresses live in: no other network may overlap it."""
        subnet = ipaddress.IPv4Interface(f"{self.address}/{self.prefix_length}").network
        return [(Claim("cidr", network="infiniband"), str(subnet), "prefixLength")]

    CHANGES: ClassVar = {
        "interface": restarts("the node's IPoIB interface (RDMA and IPoIB traffic drops)", "the node"),
        "address": restarts("the node's IPoIB interface (RDMA and IPoIB traffic drops)", "the node"),
        "prefix_length": restarts("the node's IPoIB interface configuration", "the node"),
    }


class NvmeDevice(Model):
    device: Annotated[DevicePath, Claim("device", scope="host")]
    """A tier-1 NVMe device, mounted at `gpu.tier1.mountRoot/<basename>` (basenames unique per node); a
    `/dev/disk/by-id/...` path, required with `format: true` (kernel names can change across reboots)."""
    format: bool = False
    """Formatting is destructive: only devices marked here are ever formatted, and a device that already holds a
    filesystem is left alone unless `force` is also true."""
    force: bool = False
    """With `format`: also format a device that holds a filesystem or partition table (never one that is mounted, nor
    one this program formatted before)."""

    CHANGES: ClassVar = {
        "device": replaces("the tier-1 volume on the device (its local PersistentVolumes)", data_lost=True),
        "format": replaces("the device's filesystem: formatted when blank (with force: always)", True),
        "force": replaces("the device's filesystem, even one holding data, when format is true", data_lost=True),
    }


class OsdDevice(Model):
    device: Annotated[DevicePath, Claim("device", scope="host")]
    """A Ceph OSD device; a `/dev/disk/by-id/...` path, required with `wipe: true` (kernel names can change across
    reboots)."""
    wipe: bool = False
    """Wiping is destructive: only devices marked here are ever wiped for Ceph, and never one that already is a Ceph
    OSD or is in use (docs/ceph-tier.md)."""

    CHANGES: ClassVar = {
        "device": replaces("the Ceph OSD on the device (take it out first: docs/runbook.md, section 3)", True, "hosts"),
        "wipe": replaces(
            "every byte on the device (wiped for Ceph unless it already is an OSD or in use)", True, "hosts"
        ),
    }


# The group of a node that names none (the `single` layout's default: one group).
DEFAULT_GROUP = "nodes"

# Node labels of the InfiniBand topology (`topology`); Kueue's Topology lists them as its levels.
TOPOLOGY_LABELS = {"block": "ml-platform.io/ib-block", "rack": "ml-platform.io/ib-rack"}


class Topology(Model):
    """Where a GPU node sits in the InfiniBand fabric: nodes in one block share a spine group, nodes in
    one rack a leaf switch."""

    block: LabelValue
    """IB block (spine group) of the node; node label `ml-platform.io/ib-block`"""
    rack: LabelValue
    """IB rack (leaf switch) of the node; node label `ml-platform.io/ib-rack`"""

    CHANGES: ClassVar = {
        "block": rerender("the node's ib-block label and the Kueue Topology"),
        "rack": rerender("the node's ib-rack label and the Kueue Topology"),
    }


class NodeSettings(Model):
    name: Annotated[Name, Claim("hostname")]
    """Node and host name; unique."""
    address: Annotated[IPv4, Claim("ipv4", network="ethernet")]
    """Ethernet IPv4 address (SSH, RKE2 `node-ip`); unique."""
    role: Literal["gpu", "cpu"]
    """`gpu` (tainted `nvidia.com/gpu`) or `cpu`."""
    control_plane: bool = False
    """An RKE2 server; exactly 1, 3 or 5 CPU nodes are servers."""
    host_key: Optional[HostKey] = None
    """The host's pinned SSH host key, `ssh-ed25519 AAAA...` (required unless `ssh.allowUnpinnedHostKeys`)."""
    gpu: Optional[GpuSpec] = None
    """The node's GPUs; required on GPU nodes."""
    infiniband: Optional[InfinibandSpec] = None
    """The node's IPoIB interface; required on GPU nodes, forbidden on CPU nodes."""
    nvme: list[NvmeDevice] = []
    """Tier-1 NVMe devices; GPU nodes only."""
    osd_devices: list[OsdDevice] = []
    """Ceph OSD devices; CPU nodes only. A node with any is a storage host."""
    labels: dict[LabelKey, LabelValue] = {}
    """Extra node labels, reconciled like the role labels."""
    renamed_from: Optional[Name] = None
    """The name this agent had until this change, on the same host (address). Without it the RKE2 step refuses a host
    whose RKE2 runs under another node name (docs/runbook.md, section 15)."""
    topology: Optional[Topology] = None
    """InfiniBand block and rack; become node labels and a Kueue Topology"""
    group: Optional[Name] = None
    """The node group (about 64 nodes, aligned to racks) that holds the node's aggregates: its Zabbix host set and
    acceptance driver, and in the `layered` layout its stack (`<env>-nodes-<group>`). Unset: the group `nodes`
    (required with `layout: layered`: a node never changes group implicitly)."""

    CHANGES: ClassVar = {
        "name": replaces(
            "the node: a new name joins a new node and drains and deletes the old one (use renamedFrom for the same "
            "machine); its tier-1 local volumes go with it",
            data_lost=True,
            by="hosts",
        ),
        "address": restarts("every host step of the node (re-run over SSH) and RKE2 (node-ip)", "the node", by="hosts"),
        "role": restarts("the node's role labels and GPU taint: pods that no longer fit are evicted", "the node"),
        "control_plane": replaces(
            "the node's RKE2 install (server <-> agent: uninstalled and joined again); etcd membership changes",
            True,
            by="membership",
        ),
        "host_key": none("how the program reaches the host"),
        "gpu": rerender("the node's GPU labels and the flavors' capacity"),
        "infiniband": restarts("the node's IPoIB interface configuration", "the node"),
        "nvme": destroys_on_decrease("a device taken off the list: its tier-1 local volumes are removed"),
        "osd_devices": destroys_on_decrease(
            "a device taken off the list leaves Ceph's inventory (its OSD must be taken out first); the last one "
            "makes the node no storage host",
            by="hosts",
        ),
        "labels": rerender("the node's labels"),
        "renamed_from": none("read by the RKE2 step of a renamed node"),
        "topology": rerender("the node's topology labels and the Kueue Topology"),
        "group": rerender(
            "which group's Zabbix host set and acceptance driver hold the node; with `layout: layered` its resources "
            "move to another stack (`python -m stacks.orchestrate migrate`, docs/cluster.md)"
        ),
    }

    @model_validator(mode="after")
    def _topology_becomes_labels(self) -> NodeSettings:
        # The topology reaches the node through `labels`, which the bootstrap applies (RKE2 at
        # registration, the membership step afterwards), so no other code needs to know about it.
        if self.topology is not None:
            topology = {label: getattr(self.topology, key) for key, label in TOPOLOGY_LABELS.items()}
            clash = [k for k, v in topology.items() if self.labels.get(k, v) != v]
            if clash:
                raise ValueError(f"labels.{clash[0]}: differs from topology; set the topology only in `topology`")
            object.__setattr__(self, "labels", {**self.labels, **topology})
        return self

    @property
    def storage_host(self) -> bool:
        return bool(self.osd_devices)

    @property
    def group_name(self) -> str:
        """The node's group: `group`, or `nodes` when unset."""
        return self.group or DEFAULT_GROUP


class NasDrive(Model):
    device: Annotated[DevicePath, Claim("device", scope="host")]
    """The drive, by a stable path (/dev/disk/by-id/...)."""
    # Formatting is destructive: the same rule as tier-1 NVMe.
    format: bool = False
    """Format it as XFS for MinIO if it is blank."""
    force: bool = False
    """With format: also wipe a drive that holds data."""

    CHANGES: ClassVar = {
        "device": replaces(
            "a MinIO data drive: the pool's drive at this position (its erasure shards are lost)", True, "minio"
        ),
        "format": replaces("the drive's filesystem: formatted as XFS when blank", data_lost=True),
        "force": replaces("the drive's filesystem, even one holding data, when format is true", data_lost=True),
    }


class NasHost(Model):
    name: Annotated[Name, Claim("hostname")]
    """The NAS host's name; unique over nodes and NAS hosts."""
    address: Annotated[IPv4, Claim("ipv4", network="ethernet")]
    """The NAS host's IPv4 address (SSH); unique over nodes and NAS hosts."""
    host_key: Optional[HostKey] = None
    """The host's pinned SSH host key (required unless `ssh.allowUnpinnedHostKeys`)."""
    drives: list[NasDrive] = Field(min_length=1)
    """The MinIO data drives in MinIO order (drive i mounts at `storage.minio.mountRoot`/drive<i>); .the same count on
    every NAS host."""

    CHANGES: ClassVar = {
        "name": replaces("the NAS host's MinIO service and agent (a new host to MinIO's pool)", data_lost=True),
        "address": restarts("MinIO on every NAS host (MINIO_VOLUMES names the hosts by address)", "NAS hosts"),
        "host_key": none("how the program reaches the host"),
        "drives": destroys_on_decrease(
            "a drive leaving MinIO's pool: MinIO does not start with another drive set than it was created with",
            by="minio",
        ),
    }


class NasSettings(Model):
    hosts: list[NasHost] = []
    """The NAS hosts that run MinIO outside the cluster."""

    CHANGES: ClassVar = {
        "hosts": destroys_on_decrease(
            "a NAS host leaving MinIO's pool takes its drives' erasure shards with it; tier 3 (backups, etcd "
            "snapshots) may not start again",
            by="minio",
        ),
    }
