"""`ml-platform:gpu`: the GPU Operator's driver and time-slicing, and tier-1 local NVMe."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from settings.types import Model, Name, Version


class GpuDriver(Model):
    managed_by: Literal["operator", "host"] = Field(
        default="operator",
        description="`operator`: the GPU Operator's driver container. `host`: drivers preinstalled on every GPU node.",
    )
    version: Version = Field(
        default="595.91.07", description="The NVIDIA driver version the operator's driver container runs."
    )


class TimeSlicing(Model):
    enabled: bool = Field(
        default=False, description="Share each GPU between pods (no memory or fault isolation between them)."
    )
    replicas: int = Field(default=4, ge=2, le=64, description="How many pods share one GPU when enabled.")


class Tier1Settings(Model):
    storage_class_name: Name = Field(default="tier1-nvme", description="The tier-1 StorageClass (local NVMe).")
    mount_root: str = Field(
        default="/mnt/local-nvme",
        pattern=r"^/[A-Za-z0-9._/-]+$",
        description="Where the NVMe devices are mounted for the provisioner, `<mountRoot>/<device basename>`.",
    )
    fs_type: Literal["xfs", "ext4"] = Field(
        default="xfs", description="Filesystem for devices marked `format: true` (existing ones stay as they are)."
    )
    namespace: Name = Field(
        default="tier1-storage",
        description="Namespace of the local static provisioner (privileged: it mounts host paths and cleans volumes).",
    )


class GpuSettings(Model):
    namespace: Name = Field(default="gpu-operator", description="Namespace of the GPU Operator.")
    driver: GpuDriver = Field(default=GpuDriver(), description="Where the NVIDIA driver comes from.")
    time_slicing: TimeSlicing = Field(default=TimeSlicing(), description="GPU time-slicing (shared GPUs).")
    tier1: Tier1Settings = Field(default=Tier1Settings(), description="Tier 1: local NVMe scratch on the GPU nodes.")
