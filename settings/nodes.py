"""`ml-platform:nodes` (the cluster's machines) and `ml-platform:nas` (the MinIO hosts outside it)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from settings.types import DevicePath, HostKey, IPv4, LabelKey, LabelValue, Model, Name


class GpuSpec(Model):
    model: str = Field(min_length=1)
    count: int = Field(ge=1, le=16)


class InfinibandSpec(Model):
    interface: Name
    address: IPv4
    prefix_length: int = Field(default=24, ge=8, le=30)


class NvmeDevice(Model):
    device: DevicePath
    # Formatting is destructive: only devices marked here are ever formatted, and a device that
    # already holds a filesystem is left alone unless `force` is also true.
    format: bool = False
    force: bool = False


class OsdDevice(Model):
    device: DevicePath
    # Wiping is destructive: only devices marked here are ever wiped for Ceph.
    wipe: bool = False


class NodeSettings(Model):
    name: Name
    address: IPv4
    role: Literal["gpu", "cpu"]
    control_plane: bool = False
    host_key: Optional[HostKey] = None
    gpu: Optional[GpuSpec] = None
    infiniband: Optional[InfinibandSpec] = None
    nvme: list[NvmeDevice] = []
    osd_devices: list[OsdDevice] = []
    labels: dict[LabelKey, LabelValue] = {}

    @property
    def storage_host(self) -> bool:
        return bool(self.osd_devices)


class NasHost(Model):
    name: Name
    address: IPv4
    host_key: Optional[HostKey] = None
    drives: list[DevicePath] = Field(min_length=1)


class NasSettings(Model):
    hosts: list[NasHost] = []
