"""`ml-platform:gpu`: the GPU Operator's driver and time-slicing, and tier-1 local NVMe."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from settings.types import Model, Name, Version


class GpuDriver(Model):
    # `operator`: the GPU Operator's driver container. `host`: drivers installed on the hosts.
    managed_by: Literal["operator", "host"] = "operator"
    version: Version = "595.91.07"


class TimeSlicing(Model):
    enabled: bool = False
    replicas: int = Field(default=4, ge=2, le=64)


class Tier1Settings(Model):
    storage_class_name: Name = "tier1-nvme"
    mount_root: str = Field(default="/mnt/local-nvme", pattern=r"^/[A-Za-z0-9._/-]+$")
    fs_type: Literal["xfs", "ext4"] = "xfs"
    # Namespace of the local static provisioner (privileged: it mounts host paths and cleans volumes).
    namespace: Name = "tier1-storage"


class GpuSettings(Model):
    namespace: Name = "gpu-operator"
    driver: GpuDriver = GpuDriver()
    time_slicing: TimeSlicing = TimeSlicing()
    tier1: Tier1Settings = Tier1Settings()
