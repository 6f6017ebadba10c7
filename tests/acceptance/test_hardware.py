"""The hardware table: every row cites a source, rates match what the kernel prints, floors cannot exceed them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from settings.acceptance import NcclCheck
from settings.hardware import GPU_MODELS, IB_GENERATIONS, floor, gpu_model, ib_port_gbps, ib_rate_text


def test_every_row_cites_a_published_source() -> None:
    for row in GPU_MODELS:
        assert row.source.startswith("https://www.nvidia.com/"), row.name
        assert row.peer_gbs > 0 and row.memory_gb > 0, row.name
        # Temperatures are either published (then cited with the row) or said to be unpublished.
        assert (row.slowdown_c is None) == (row.shutdown_c is None), row.name
    assert [g.name for g in IB_GENERATIONS][-3:] == ["HDR", "NDR", "XDR"]


@pytest.mark.parametrize(
    ("generation", "width", "text"),
    [
        ("NDR", 4, "400 Gb/sec (4X NDR)"),
        ("HDR", 4, "200 Gb/sec (4X HDR)"),
        ("HDR", 2, "100 Gb/sec (2X HDR)"),  # an HDR100 split port
        ("FDR", 4, "56 Gb/sec (4X FDR)"),
        ("SDR", 1, "2.5 Gb/sec (1X)"),  # rate_show() names no speed for SDR
        ("XDR", 4, "800 Gb/sec (4X XDR)"),
    ],
)
def test_port_rates_are_the_kernels_rate_file(generation: str, width: int, text: str) -> None:
    assert ib_rate_text(generation, width) == text
    assert ib_port_gbps(generation, width) == float(text.split()[0])


def test_floors_are_fractions_of_the_physical_rate() -> None:
    nccl = NcclCheck.model_validate({"ibGeneration": "NDR", "ibPorts": 2, "ibFloorFraction": 0.9})
    assert nccl.ib_floor_gbs == 90.0  # 2 x 400 Gb/s = 100 GB/s, x 0.9
    assert nccl.nvlink_floor_gbs("NVIDIA H100 80GB HBM3") == 315.0  # 900 / 2 x 0.7
    assert nccl.nvlink_floor_gbs("NVIDIA L40S") == 22.4  # PCIe Gen4 x16: 64 / 2 x 0.7
    assert nccl.nvlink_floor_gbs("NVIDIA GeForce RTX 4090") is None  # not in the table: the check is unverified
    assert gpu_model("NVIDIA H200").memory_gb == 141


@pytest.mark.parametrize("field", ["ibFloorFraction", "nvlinkFloorFraction"])
def test_a_floor_above_the_physical_rate_is_refused(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        NcclCheck.model_validate({field: 1.05})
    with pytest.raises(ValueError, match="not a fraction"):
        floor(450.0, 1.2, field)


@pytest.mark.parametrize(
    ("raw", "says"), [({"ibPortWidth": 3}, "ibPortWidth"), ({"ibGeneration": "NDR200"}, "ibGeneration")]
)
def test_a_port_the_table_does_not_know_is_refused(raw: dict, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        NcclCheck.model_validate(raw)
