"""The compatibility table: which versions go together, each row with its upstream source. The settings rules
(`settings.rules.compatibility`) bound every version by it, and docs/settings.md shows it (`make docs`). A new CUDA
major, chart release or OS family is one row here, not a code change.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CudaDriver:
    """A CUDA major release and the oldest Linux driver branch that runs it (minor version compatibility)."""

    cuda_major: int
    min_driver_major: int
    source: str


CUDA_SOURCE = (
    "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html (Table 1: CUDA Toolkit 11.x, "
    "12.x and 13.x driver version ranges)"
)
CUDA_DRIVERS: tuple[CudaDriver, ...] = (
    CudaDriver(13, 580, CUDA_SOURCE),
    CudaDriver(12, 525, CUDA_SOURCE),
    CudaDriver(11, 450, CUDA_SOURCE),
)


def min_driver(cuda_major: int) -> CudaDriver | None:
    return next((row for row in CUDA_DRIVERS if row.cuda_major == cuda_major), None)


@dataclass(frozen=True)
class ChartComponent:
    """What a chart release deploys or expects for one of its components (the value its release pins)."""

    chart: str
    version: str
    component: str
    value: str
    source: str


CHART_COMPONENTS: tuple[ChartComponent, ...] = (
    ChartComponent(
        "network-operator",
        "26.4.1",
        "doca-driver",
        "doca3.4.1-26.04-1.1.0.0-1",
        "Mellanox/network-operator v26.4.1 hack/release.yaml (the doca-driver image tag)",
    ),
    ChartComponent(
        "gpu-operator",
        "v26.7.0",
        "driver",
        "595.91.07",
        "NVIDIA/gpu-operator v26.7.0 deployments/gpu-operator/values.yaml (driver.version)",
    ),
)


def chart_component(chart: str, version: str, component: str) -> ChartComponent | None:
    return next((r for r in CHART_COMPONENTS if (r.chart, r.version, r.component) == (chart, version, component)), None)


@dataclass(frozen=True)
class OsInstall:
    """The RKE2 install methods an OS family can use."""

    family: str
    methods: tuple[str, ...]
    source: str


RKE2_INSTALL_SOURCE = (
    "https://docs.rke2.io/install/methods (the RPM method needs rpm/yum/dnf; the tarball works everywhere); "
    "rancher/rke2 install.sh: INSTALL_RKE2_METHOD defaults to rpm on RPM-based systems, tar on all else"
)
OS_INSTALL: tuple[OsInstall, ...] = (
    OsInstall("debian", ("tar",), RKE2_INSTALL_SOURCE),
    OsInstall("rhel", ("rpm", "tar"), RKE2_INSTALL_SOURCE),
)


def install_methods(family: str) -> tuple[str, ...]:
    return next((row.methods for row in OS_INSTALL if row.family == family), ())


# registries.yaml `mirrors` are keyed by the registry's host name (and port), or `*` for every registry: containerd
# matches the name an image reference starts with (https://docs.rke2.io/install/private_registry, Mirrors).
MIRROR_KEY_SOURCE = "https://docs.rke2.io/install/private_registry (Mirrors: keyed by registry name, e.g. docker.io)"


@dataclass(frozen=True)
class IpoibModes:
    """The IPoIB modes the HCAs that run an InfiniBand speed offer by default."""

    speed: str
    hca: str
    modes: tuple[str, ...]
    source: str


_ENHANCED = (
    "https://docs.redhat.com/en/documentation/red_hat_enterprise_linux/9/html/configuring_infiniband_and_rdma_networks/"
    "configuring-ipoib_configuring-infiniband-and-rdma-networks (ConnectX-4 and later use Enhanced IPoIB: datagram "
    "only, connected mode not supported); NVIDIA MLNX_OFED documentation, IP over InfiniBand (Enhanced IPoIB on "
    "ConnectX-4 and above)"
)
IPOIB_MODES: tuple[IpoibModes, ...] = (
    IpoibModes("EDR", "ConnectX-4 or later", ("datagram",), _ENHANCED),
    IpoibModes("HDR", "ConnectX-6 or later", ("datagram",), _ENHANCED),
    IpoibModes("NDR", "ConnectX-7 or later", ("datagram",), _ENHANCED),
    IpoibModes("XDR", "ConnectX-8", ("datagram",), _ENHANCED),
)


def ipoib_modes(speed: str) -> IpoibModes | None:
    return next((row for row in IPOIB_MODES if row.speed == speed), None)
