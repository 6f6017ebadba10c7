"""`ml-platform:nodes` (the cluster's machines) and `ml-platform:nas` (the MinIO hosts outside it)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from settings.types import DevicePath, HostKey, IPv4, LabelKey, LabelValue, Model, Name


class GpuSpec(Model):
    model: str = Field(min_length=1)
    """The GPU model, e.g. `H100-SXM5-80GB` (node label)."""
    count: int = Field(ge=1, le=16)
    """GPUs in the node (node label, stack output `gpuTotal`)."""


class InfinibandSpec(Model):
    interface: Name
    """The node's IPoIB interface, e.g. `ibp12s0`."""
    address: IPv4
    """The interface's static IPoIB address; unique over all nodes."""
    prefix_length: int = Field(default=24, ge=8, le=30)
    """Prefix length of `address`."""


class NvmeDevice(Model):
    device: DevicePath
    """A tier-1 NVMe device, mounted at `gpu.tier1.mountRoot/<basename>` (basenames unique per node); a
    `/dev/disk/by-id/...` path, required with `format: true` (kernel names can change across reboots)."""
    format: bool = False
    """Formatting is destructive: only devices marked here are ever formatted, and a device that already holds a
    filesystem is left alone unless `force` is also true."""
    force: bool = False
    """With `format`: also format a device that holds a filesystem or partition table (never one that is mounted, nor
    one this program formatted before)."""


class OsdDevice(Model):
    device: DevicePath
    """A Ceph OSD device; a `/dev/disk/by-id/...` path, required with `wipe: true` (kernel names can change across
    reboots)."""
    wipe: bool = False
    """Wiping is destructive: only devices marked here are ever wiped for Ceph, and never one that already is a Ceph
    OSD or is in use (docs/ceph-tier.md)."""


# Node labels of the InfiniBand topology (`topology`); Kueue's Topology lists them as its levels.
TOPOLOGY_LABELS = {"block": "ml-platform.io/ib-block", "rack": "ml-platform.io/ib-rack"}


class Topology(Model):
    """Where a GPU node sits in the InfiniBand fabric: nodes in one block share a spine group, nodes in
    one rack a leaf switch."""

    block: LabelValue
    """IB block (spine group) of the node; node label `ml-platform.io/ib-block`"""
    rack: LabelValue
    """IB rack (leaf switch) of the node; node label `ml-platform.io/ib-rack`"""


class NodeSettings(Model):
    name: Name
    """Node and host name; unique."""
    address: IPv4
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


class NasDrive(Model):
    device: DevicePath
    """The drive, by a stable path (/dev/disk/by-id/...)."""
    # Formatting is destructive: the same rule as tier-1 NVMe.
    format: bool = False
    """Format it as XFS for MinIO if it is blank."""
    force: bool = False
    """With format: also wipe a drive that holds data."""


class NasHost(Model):
    name: Name
    """The NAS host's name; unique over nodes and NAS hosts."""
    address: IPv4
    """The NAS host's IPv4 address (SSH); unique over nodes and NAS hosts."""
    host_key: Optional[HostKey] = None
    """The host's pinned SSH host key (required unless `ssh.allowUnpinnedHostKeys`)."""
    drives: list[NasDrive] = Field(min_length=1)
    """The MinIO data drives in MinIO order (drive i mounts at `storage.minio.mountRoot`/drive<i>); .the same count on
    every NAS host."""


class NasSettings(Model):
    hosts: list[NasHost] = []
    """The NAS hosts that run MinIO outside the cluster."""
