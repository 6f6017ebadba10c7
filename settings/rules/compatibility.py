"""Versions bounded by the compatibility table (settings/compatibility.py): the GPU driver against the CUDA the images
name, the DOCA driver against the Network Operator release, the RKE2 install method against the OS family, and the
containerd mirrors' keys against what registries.yaml matches."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from settings.compatibility import MIRROR_KEY_SOURCE, chart_component, install_methods, ipoib_modes, min_driver
from settings.quantities import IMAGE_ORDER, ordered_by
from settings.rules.base import rule

if TYPE_CHECKING:
    from settings.root import Settings

_CUDA_TAG = re.compile(r"(?:^|[-_.])cuda[-_]?(\d+)\.(\d+)", re.I)


def images(model: BaseModel, path: str = "") -> Iterator[tuple[str, str]]:
    """(config path, value) of every image field in the settings (typed `Image`), walked through sections and lists."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name, None)
        at = f"{path}.{info.alias or name}" if path else (info.alias or name)
        if isinstance(value, str) and ordered_by(info) is IMAGE_ORDER:
            yield at, value
        for sub, where in _nested(value, at):
            yield from images(sub, where)


def _nested(value: Any, at: str) -> Iterator[tuple[BaseModel, str]]:
    if isinstance(value, BaseModel):
        yield value, at
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _nested(item, f"{at}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _nested(item, f"{at}.{key}")


def _cuda_problems(s: Settings, add) -> None:
    driver = s.gpu.driver
    if not s.gpu_nodes or driver.managed_by != "operator":
        return
    major = int(re.match(r"\d+", driver.version)[0]) if re.match(r"\d+", driver.version) else None
    for path, image in images(s):
        tag = image.partition("@")[0].rsplit("/", 1)[-1].rpartition(":")[2]
        cuda = _CUDA_TAG.search(tag)
        row = min_driver(int(cuda[1])) if cuda else None
        if row is None or major is None or major >= row.min_driver_major:
            continue
        add(
            f"gpu.driver.version: {driver.version!r} is older than CUDA {cuda[1]}.{cuda[2]} needs ({path}: {image!r}); "
            f"CUDA {row.cuda_major}.x runs on driver {row.min_driver_major} or newer ({row.source}): pin a driver of "
            f"branch {row.min_driver_major} or later, or an image built for an older CUDA"
        )


def _doca_release(tag: str) -> tuple[str, str]:
    """The DOCA release and OFED date of a doca-driver tag (`doca3.4.1-26.04-...` -> ('doca3.4', '26.04'))."""
    release = re.match(r"^(doca\d+\.\d+)", tag)
    ofed = re.search(r"-(\d{2}\.\d{2})-", tag)
    return (release[1] if release else "", ofed[1] if ofed else "")


def _doca_problems(s: Settings, add) -> None:
    ib = s.network.infiniband
    if not s.gpu_nodes or ib.host_stack != "ofed":
        return
    chart = s.charts.network_operator
    row = chart_component("network-operator", chart.version, "doca-driver")
    if row is None:
        add(
            f"charts.networkOperator.version: {chart.version!r} has no row in the compatibility table "
            "(settings/compatibility.py): the DOCA driver it deploys is not known, so "
            "network.infiniband.docaDriverVersion cannot be checked; add the release's doca-driver tag from its "
            "hack/release.yaml"
        )
        return
    if _doca_release(ib.doca_driver_version) != _doca_release(row.value):
        add(
            f"network.infiniband.docaDriverVersion: {ib.doca_driver_version!r} is from another DOCA release than "
            f"Network Operator {chart.version} deploys ({row.value!r}, {row.source}): pin that release's tag, or "
            "change the chart with it"
        )


def _install_problems(s: Settings, add) -> None:
    family, method = s.cluster.os_family, s.cluster.install.method
    methods = install_methods(family)
    if methods and method not in methods:
        add(
            f"cluster.install.method: {method!r} is not an RKE2 install method for the {family} family (it uses "
            f"{' or '.join(methods)}; settings/compatibility.py): the rpm method needs rpm/yum/dnf, which {family} "
            "hosts do not have; use 'tar', or set cluster.osFamily to the hosts' family"
        )


_REGISTRY = re.compile(r"^(\*|[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?)$")


def _mirror_problems(s: Settings, add) -> None:
    for key in s.cluster.registry_mirrors:
        if _REGISTRY.match(key):
            continue
        bare = re.sub(r"^[a-z]+://", "", key).split("/", 1)[0]
        add(
            f"cluster.registryMirrors.{key}: a mirror is keyed by the registry's name as image references start with "
            f"it (no scheme, no path), or '*' for every registry ({MIRROR_KEY_SOURCE}): write {bare!r}; the mirror's "
            "own URL goes in the list"
        )


def _ipoib_mode_problems(s: Settings, add) -> None:
    speed, mode = s.acceptance.nccl.ib_generation, s.network.infiniband.mode
    row = ipoib_modes(speed)
    if s.gpu_nodes and row is not None and mode not in row.modes:
        add(
            f"network.infiniband.mode: {mode!r} is not offered by the {speed} HCAs ({row.hca}, from "
            f"acceptance.nccl.ibGeneration), which run Enhanced IPoIB: {', '.join(row.modes)} only ({row.source}); "
            "use 'datagram' (MTU up to 4092)"
        )


RULES = (
    rule(_ipoib_mode_problems, "the IPoIB mode against the fabric's HCAs", "network acceptance nodes"),
    rule(_cuda_problems, "the GPU driver against the CUDA the images need", "*"),
    rule(_doca_problems, "the DOCA driver against the Network Operator release", "network charts nodes"),
    rule(_install_problems, "the RKE2 install method against the OS family", "cluster"),
    rule(_mirror_problems, "registry mirror keys", "cluster"),
)
