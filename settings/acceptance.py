"""`ml-platform:acceptance`: the checks every `pulumi up` ends with, and the drift probe.

Each check is a Kubernetes Job the engine waits for (components/acceptance/component.py). A failed check fails the
`up` naming the check and the node, unless it is `advisory`: then the check reports the failure (stack
output, report) and the `up` goes on. Checks re-run when the platform's settings change or when `run` is
raised; an `up` with unchanged settings re-runs nothing.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from settings.declare import replaces, rerender, restarts
from settings.types import Image, Model, Namespace

# Images. Neither publisher lists a digest we can cite, so both are pinned by tag (docs/acceptance.md).
# pytorch/pytorch: the tag Kubeflow Trainer v2.3.0's torch runtime uses (charts/kubeflow-trainer values);
# alpine: the tag of its runtime installer Job (same chart).
GPU_IMAGE = "docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
TOOLS_IMAGE = "docker.io/library/alpine:3.21"
# curl's own image (github.com/curl/curl-container, published as curlimages/curl): Alpine with curl and BusyBox.
API_IMAGE = "docker.io/curlimages/curl:8.17.0"


class Check(Model):
    enabled: bool = True
    """Run this check on `up`."""
    advisory: bool = False
    """A failure is reported (stack output `acceptance`, the report) but does not fail the `up`."""
    timeout_seconds: int = Field(default=600, ge=60, le=7200)
    """How long the engine waits for the Job (`pulumi.com/timeoutSeconds`, the Job's `activeDeadlineSeconds`); a Job
    still pending then (e.g. GPUs not allocatable) fails."""

    CHANGES: ClassVar = {
        "enabled": rerender("the check's Job (created or removed)"),
        "advisory": rerender("how the check's failure is reported"),
        "timeout_seconds": rerender("the check's Job (it runs again)"),
    }


class NcclCheck(Check):
    ib_link_rate_gbps: int = Field(default=400, ge=10)
    """Line rate of one GPU node's InfiniBand link(s) in Gb/s, all ports together (NDR: 400 per port)."""
    ib_floor_fraction: float = Field(default=0.8, gt=0, le=1)
    """The two-node all-reduce passes at this fraction of the link rate (bus bandwidth, GB/s = rate / 8 x fraction);
    nccl-tests reaches about 0.9 on a healthy fabric."""
    nvlink_floor_gbs: float = Field(default=100.0, gt=0)
    """The single-node (NVLink) all-reduce passes at this bus bandwidth in GB/s."""
    message_size: str = Field(default="1G", pattern=r"^[0-9]+[KMG]$")
    """Largest message of the all-reduce sweep (nccl-tests -e)."""
    plateau_from: str = Field(default="256M", pattern=r"^[0-9]+[KMG]$")
    """The floor is compared with the mean bus bandwidth of the messages from this size up to `messageSize`: the
    bandwidth-bound plateau, where nccl-tests' figures are read; smaller messages are latency-bound."""

    @model_validator(mode="after")
    def _plateau_within_sweep(self) -> NcclCheck:
        if size_bytes(self.plateau_from) > size_bytes(self.message_size):
            raise ValueError(
                f"plateauFrom ({self.plateau_from}) is larger than messageSize ({self.message_size}): "
                "the plateau must lie within the sweep; lower plateauFrom or raise messageSize"
            )
        return self

    CHANGES: ClassVar = {
        "ib_link_rate_gbps": rerender("the check's Job (it runs again)"),
        "ib_floor_fraction": rerender("the check's Job (it runs again)"),
        "nvlink_floor_gbs": rerender("the check's Job (it runs again)"),
        "plateau_from": rerender("the check's Job (it runs again)"),
        "message_size": rerender("the check's Job (it runs again)"),
    }

    @property
    def ib_floor_gbs(self) -> float:
        """The two-node floor in GB/s, derived from the link rate."""
        return round(self.ib_link_rate_gbps / 8 * self.ib_floor_fraction, 1)


def size_bytes(size: str) -> int:
    """`256M` -> bytes (binary units, as the all-reduce sweep reads them)."""
    return int(size[:-1]) << {"K": 10, "M": 20, "G": 30}[size[-1]]


class StorageCheck(Check):
    size_mib: int = Field(default=1024, ge=16, le=65536)
    """Data written and read back per volume."""
    floor_mib_s: int = Field(default=100, ge=1)
    """Each volume passes at this sequential write and read throughput (MiB/s)."""

    CHANGES: ClassVar = {
        "size_mib": rerender("the check's Job (it runs again)"),
        "floor_mib_s": rerender("the check's Job (it runs again)"),
    }


class MonitoringCheck(Check):
    max_age_seconds: int = Field(default=600, ge=60)
    """Every inventory host's `agent.ping` must be at most this old in Zabbix."""

    CHANGES: ClassVar = {
        "max_age_seconds": rerender("the check's Job (it runs again)"),
    }


class DriftProbe(Model):
    enabled: bool = True
    """Run the drift probe DaemonSet (docs/acceptance.md)."""
    interval_seconds: int = Field(default=3600, ge=60)
    """How often each node refreshes its fingerprint."""

    CHANGES: ClassVar = {
        "enabled": rerender("the drift probe DaemonSet (created or removed)"),
        "interval_seconds": restarts("the drift probe DaemonSet's pods", "every node"),
    }


class AcceptanceSettings(Model):
    namespace: Namespace = "ml-platform-acceptance"
    """Namespace of the checks and the probe."""
    run: int = Field(default=0, ge=0)
    """Raise it to run every check again on the next `up` with otherwise unchanged settings."""
    gpu_image: Image = GPU_IMAGE
    """Image of the GPU node and NCCL checks (sh, python3 with torch and its NCCL); pinned by tag, pulled through the
    containerd mirrors like every other image."""
    tools_image: Image = TOOLS_IMAGE
    """Image of the storage and scheduling checks and the drift probe (BusyBox sh, dd, sha256sum)."""
    api_image: Image = API_IMAGE
    """Image of the monitoring check: it needs curl, which verifies the Zabbix certificate with the program's CA."""
    gpu_nodes: Check
    """Every GPU node: the GPU Operator's validations, all inventory GPUs and the RDMA resource allocatable."""
    nccl: NcclCheck
    """NCCL all-reduce over InfiniBand and NVLink."""
    storage: StorageCheck
    """Write and read back on tier 1, RBD and CephFS; S3 round trip on MinIO."""
    scheduling: Check
    """A small gang Job admitted by Kueue (a platform queue of its own) and placed by Volcano (a PodGroup); its
    `timeoutSeconds` must be shorter than `scheduling.waitForPodsReady.timeoutSeconds`."""
    monitoring: MonitoringCheck
    """Fresh data in Zabbix from every inventory host."""
    drift: DriftProbe
    """The per-node fingerprint DaemonSet."""

    CHANGES: ClassVar = {
        "namespace": replaces("the checks and the probe in another namespace"),
        "run": rerender("every check's Job runs again"),
        "gpu_image": rerender("the GPU checks' Jobs (they run again)"),
        "tools_image": restarts("the drift probe DaemonSet's pods; the other checks run again", "every node"),
        "api_image": rerender("the monitoring check's Job (it runs again)"),
    }
