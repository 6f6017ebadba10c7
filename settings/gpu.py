"""`ml-platform:gpu`: the GPU Operator's driver and time-slicing, and tier-1 local NVMe."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from settings.declare import Claim, none, replaces, restarts
from settings.types import Model, Name, StorageClassName, Version

# The GPU Operator and the tier-1 provisioner may share one namespace: GpuPool then creates it once.
GpuNamespace = Annotated[Name, Claim("namespace", scope="shared:gpu")]


class GpuDriver(Model):
    managed_by: Literal["operator", "host"] = "operator"
    """`operator`: the GPU Operator's driver container. `host`: drivers preinstalled on every GPU node."""
    version: Version = "595.91.07"
    """The NVIDIA driver version the operator's driver container runs."""

    CHANGES: ClassVar = {
        "managed_by": restarts("the NVIDIA driver (operator <-> host); GPU pods are evicted first", "GPU nodes"),
        "version": restarts("the NVIDIA driver container; GPU pods on each node are evicted first", "GPU nodes"),
    }


class TimeSlicing(Model):
    enabled: bool = False
    """Share each GPU between pods (no memory or fault isolation between them)."""
    replicas: int = Field(default=4, ge=2, le=64)
    """How many pods share one GPU when enabled."""

    CHANGES: ClassVar = {
        "enabled": restarts("the device plugin; the schedulable GPUs change", "GPU nodes"),
        "replicas": restarts("the device plugin; the schedulable GPUs change", "GPU nodes"),
    }


class Tier1Settings(Model):
    storage_class_name: StorageClassName = "tier1-nvme"
    """The tier-1 StorageClass (local NVMe)."""
    mount_root: str = Field(default="/mnt/local-nvme", pattern=r"^/[A-Za-z0-9._/-]+$")
    """Where the NVMe devices are mounted for the provisioner, `<mountRoot>/<device basename>`."""
    fs_type: Literal["xfs", "ext4"] = "xfs"
    """Filesystem for devices marked `format: true` (existing ones stay as they are)."""
    namespace: GpuNamespace = "tier1-storage"
    """Namespace of the local static provisioner (privileged: it mounts host paths and cleans volumes)."""

    CHANGES: ClassVar = {
        "storage_class_name": replaces(
            "the tier-1 StorageClass (existing volumes keep the old class name)", by="releases"
        ),
        "mount_root": restarts("the local provisioner; volumes under the old root are lost to it", "GPU nodes"),
        "fs_type": none("used only when a device marked format: true is formatted; existing filesystems stay"),
        "namespace": replaces("the local static provisioner in another namespace"),
    }


class GpuSettings(Model):
    namespace: GpuNamespace = "gpu-operator"
    """Namespace of the GPU Operator."""
    driver: GpuDriver
    """Where the NVIDIA driver comes from."""
    time_slicing: TimeSlicing
    """GPU time-slicing (shared GPUs)."""
    tier1: Tier1Settings
    """Tier 1: local NVMe scratch on the GPU nodes."""

    CHANGES: ClassVar = {
        "namespace": replaces("the GPU Operator release in another namespace (uninstall, install)", by="releases"),
    }
