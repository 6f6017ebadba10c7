"""The hardware table: physical rates the checks' floors derive from, each row with its published source.

A floor is never a free number: it is a declared fraction (at most 1) of a physical rate from this table, so a
floor above what the hardware can carry cannot be written. A model or generation that is not here has no physical
rate: the check that needs it reports `unverified` (never `passed`) and names this file, where a row with its
published source is the fix.

Units: GB/s are 10^9 bytes per second, Gb/s 10^9 bits per second, as the sources give them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

# NVIDIA's product pages give temperatures per board only through the driver (`nvidia-smi -q -d TEMPERATURE`:
# "GPU Shutdown Temp", "GPU Slowdown Temp"); none of the pages cited below publishes them, so the table leaves
# them unset rather than guess.
_TEMPERATURES_UNPUBLISHED = "not on NVIDIA's product page; read per board with nvidia-smi -q -d TEMPERATURE"


@dataclass(frozen=True)
class GpuModel:
    """One GPU model as `nvidia-smi --query-gpu=name` names it (the value `nodes[].gpu.model` declares)."""

    name: str
    peer_link: Literal["nvlink", "pcie"]
    """How the GPUs of one node reach each other for the single-node all-reduce."""
    link_generation: str
    """NVLink generation (`4`), or the PCIe generation and width of the card (`Gen4 x16`)."""
    peer_gbs: float
    """Published GPU-to-GPU bandwidth per GPU in GB/s, both directions together (how NVIDIA publishes it)."""
    memory_gb: int
    """Published memory per GPU in GB."""
    source: str
    slowdown_c: Optional[int] = None
    shutdown_c: Optional[int] = None
    temperatures: str = _TEMPERATURES_UNPUBLISHED

    @property
    def peer_gbs_per_direction(self) -> float:
        """The rate one direction carries: what an all-reduce's bus bandwidth (nccl-tests' busbw, Ring) is bounded
        by (nccl-tests doc/PERFORMANCE.md: busbw is comparable to the hardware's peak unidirectional bandwidth)."""
        return self.peer_gbs / 2


GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel(
        "NVIDIA H100 80GB HBM3", "nvlink", "4", 900.0, 80,
        "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM: NVLink 900GB/s, 80GB); "
        "NVIDIA H100 Tensor Core GPU Architecture whitepaper (NVLink 4: 18 links x 50 GB/s)",
    ),
    GpuModel(
        "NVIDIA H200", "nvlink", "4", 900.0, 141,
        "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: NVLink 900GB/s, 141GB)",
    ),
    GpuModel(
        "NVIDIA A100-SXM4-80GB", "nvlink", "3", 600.0, 80,
        "https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB SXM: NVLink 600GB/s)",
    ),
    GpuModel(
        "NVIDIA A100-SXM4-40GB", "nvlink", "3", 600.0, 40,
        "https://www.nvidia.com/en-us/data-center/a100/ (A100 40GB SXM: NVLink 600GB/s)",
    ),
    GpuModel(
        "NVIDIA B200", "nvlink", "5", 1800.0, 180,
        "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200: NVLink 5, 1.8TB/s GPU-to-GPU, 1.4TB for 8 GPUs)",
    ),
    GpuModel(
        "NVIDIA L40S", "pcie", "Gen4 x16", 64.0, 48,
        "https://www.nvidia.com/en-us/data-center/l40s/ (no NVLink; PCIe Gen4 x16: 64GB/s bidirectional; 48GB)",
    ),
)  # fmt: skip


def gpu_model(name: str) -> Optional[GpuModel]:
    """The table's row for a model name as nvidia-smi prints it, or None."""
    return next((row for row in GPU_MODELS if row.name == name), None)


@dataclass(frozen=True)
class IbGeneration:
    """One InfiniBand speed as the kernel reports it in `/sys/class/infiniband/<hca>/ports/<n>/rate`."""

    name: str
    lane_gbps: float
    """Per-lane rate the kernel reports for this speed (rate_show: the 2.5 Gb/s multiples it prints)."""


# Linux, drivers/infiniband/core/sysfs.c, rate_show(): per-lane rates in units of 0.1 Gb/s (SDR 25, DDR 50,
# QDR 100, FDR10 100, FDR 140, EDR 250, HDR 500, NDR 1000, XDR 2000) times the active width; it prints
# "<rate> Gb/sec (<width>X<speed>)", e.g. "400 Gb/sec (4X NDR)". The same rates: IBTA InfiniBand Roadmap
# (https://www.infinibandta.org/infiniband-roadmap/).
IB_SOURCE = "Linux drivers/infiniband/core/sysfs.c rate_show(); https://www.infinibandta.org/infiniband-roadmap/"
IB_GENERATIONS: tuple[IbGeneration, ...] = (
    IbGeneration("SDR", 2.5),
    IbGeneration("DDR", 5.0),
    IbGeneration("QDR", 10.0),
    IbGeneration("FDR10", 10.0),
    IbGeneration("FDR", 14.0),
    IbGeneration("EDR", 25.0),
    IbGeneration("HDR", 50.0),
    IbGeneration("NDR", 100.0),
    IbGeneration("XDR", 200.0),
)
# Link widths a port trains at (include/rdma/ib_verbs.h, enum ib_port_width: 1X, 2X, 4X, 8X, 12X).
IB_WIDTHS: tuple[int, ...] = (1, 2, 4, 8, 12)
IbGenerationName = Literal["SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR"]


def ib_generation(name: str) -> IbGeneration:
    return next(row for row in IB_GENERATIONS if row.name == name)


def ib_port_gbps(generation: str, width: int) -> float:
    """A port's physical rate in Gb/s: what the kernel's `rate` file prints for it."""
    return ib_generation(generation).lane_gbps * width


def ib_rate_text(generation: str, width: int) -> str:
    """The `rate` file's text for a port at this speed and width, as rate_show() prints it."""
    rate = ib_port_gbps(generation, width)
    shown = f"{rate:.1f}".removesuffix(".0")
    speed = "" if generation == "SDR" else f" {generation}"  # rate_show() names every speed but SDR
    return f"{shown} Gb/sec ({width}X{speed})"


def floor(physical: float, fraction: float, what: str) -> float:
    """A floor derived from a physical rate; a fraction above 1 (a floor above the hardware) is refused."""
    if not 0 < fraction <= 1:
        raise ValueError(f"{what}: {fraction} is not a fraction of the physical rate {physical}: give 0 < f <= 1")
    return round(physical * fraction, 1)
