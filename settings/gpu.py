"""`ml-platform:gpu`: the GPU Operator's driver and time-slicing, and tier-1 local NVMe."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from settings.types import Model, Name, Version


class GpuDriver(Model):
    managed_by: Literal["operator", "host"] = "operator"
    """`operator`: the GPU Operator's driver container. `host`: drivers preinstalled on every GPU node."""
    version: Version = "595.91.07"
    """The NVIDIA driver version the operator's driver container runs."""


class TimeSlicing(Model):
    enabled: bool = False
    """Share each GPU between pods (no memory or fault isolation between them)."""
    replicas: int = Field(default=4, ge=2, le=64)
    """How many pods share one GPU when enabled."""


class Tier1Settings(Model):
    storage_class_name: Name = "tier1-nvme"
    """The tier-1 StorageClass (local NVMe)."""
    mount_root: str = Field(default="/mnt/local-nvme", pattern=r"^/[A-Za-z0-9._/-]+$")
    """Where the NVMe devices are mounted for the provisioner, `<mountRoot>/<device basename>`."""
    fs_type: Literal["xfs", "ext4"] = "xfs"
    """Filesystem for devices marked `format: true` (existing ones stay as they are)."""
    namespace: Name = "tier1-storage"
    """Namespace of the local static provisioner (privileged: it mounts host paths and cleans volumes)."""


class GpuSettings(Model):
    namespace: Name = "gpu-operator"
    """Namespace of the GPU Operator."""
    driver: GpuDriver
    """Where the NVIDIA driver comes from."""
    time_slicing: TimeSlicing
    """GPU time-slicing (shared GPUs)."""
    tier1: Tier1Settings
    """Tier 1: local NVMe scratch on the GPU nodes."""
