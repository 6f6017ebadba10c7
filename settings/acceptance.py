"""`ml-platform:acceptance`: the checks every `pulumi up` ends with, and the drift probe.

Each check is a Kubernetes Job the engine waits for (components/acceptance/component.py). A failed check fails the
`up` naming the check and the node, unless it is `advisory`: then the check reports the failure (stack
output, report) and the `up` goes on. Checks re-run when the platform's settings change or when `run` is
raised; an `up` with unchanged settings re-runs nothing.
"""

from __future__ import annotations

from typing import ClassVar, Optional

from pydantic import Field, model_validator

from settings.declare import replaces, rerender, restarts
from settings.hardware import IB_WIDTHS, IbGenerationName, floor, gpu_model, ib_port_gbps
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
    ib_generation: IbGenerationName = "NDR"
    """InfiniBand speed the GPU nodes' ports train at (settings/hardware.py: SDR to XDR). The check reads each port's
    trained rate from the HCA (`/sys/class/infiniband/*/ports/*/rate`) and fails a port below it."""
    ib_port_width: int = Field(default=4)
    """Lanes per port (1, 2, 4, 8 or 12; a ConnectX port is 4X)."""
    ib_ports: int = Field(default=1, ge=1, le=16)
    """Active InfiniBand ports per GPU node the pair check's traffic may use."""
    ib_floor_fraction: float = Field(default=0.8, gt=0, le=1)
    """The two-node all-reduce (NCCL_ALGO=Ring) passes at this fraction of the ports' physical rate (bus bandwidth,
    GB/s = rate / 8 x fraction); nccl-tests reaches about 0.9 on a healthy fabric."""
    nvlink_floor_fraction: float = Field(default=0.7, gt=0, le=1)
    """The single-node all-reduce (NCCL_ALGO=Ring) passes at this fraction of the GPU model's per-direction
    GPU-to-GPU rate from the hardware table (H100 SXM: 450 GB/s, so 315 GB/s; a healthy 8x H100 reaches about 370
    with Ring, nccl-tests#212)."""
    nvlink_every_runs: int = Field(default=4, ge=1, le=100)
    """Every GPU node's NVLink check must have run within this many runs (`run` values): a node busy that often is
    reported `not checked` by the report."""
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
        if self.ib_port_width not in IB_WIDTHS:
            raise ValueError(
                f"ibPortWidth: {self.ib_port_width} is not an InfiniBand link width; give one of "
                f"{', '.join(map(str, IB_WIDTHS))} (4 for a ConnectX port)"
            )
        return self

    CHANGES: ClassVar = {
        "ib_generation": rerender("the check's Job (it runs again)"),
        "ib_port_width": rerender("the check's Job (it runs again)"),
        "ib_ports": rerender("the check's Job (it runs again)"),
        "ib_floor_fraction": rerender("the check's Job (it runs again)"),
        "nvlink_floor_fraction": rerender("the check's Job (it runs again)"),
        "nvlink_every_runs": rerender("the report's verdict on nodes whose NVLink check is older"),
        "plateau_from": rerender("the check's Job (it runs again)"),
        "message_size": rerender("the check's Job (it runs again)"),
    }

    @property
    def ib_port_gbps(self) -> float:
        """One port's physical rate (Gb/s) from the hardware table."""
        return ib_port_gbps(self.ib_generation, self.ib_port_width)

    @property
    def ib_link_rate_gbps(self) -> float:
        """All ports of one GPU node together, Gb/s."""
        return self.ib_port_gbps * self.ib_ports

    @property
    def ib_floor_gbs(self) -> float:
        """The two-node floor in GB/s: a fraction of the physical rate."""
        return floor(self.ib_link_rate_gbps / 8, self.ib_floor_fraction, "acceptance.nccl.ibFloorFraction")

    def nvlink_floor_gbs(self, model: str) -> Optional[float]:
        """The single-node floor in GB/s for a GPU model; None when the table has no row for it (the check then
        reports `unverified`)."""
        row = gpu_model(model)
        if row is None:
            return None
        return floor(row.peer_gbs_per_direction, self.nvlink_floor_fraction, "acceptance.nccl.nvlinkFloorFraction")


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
