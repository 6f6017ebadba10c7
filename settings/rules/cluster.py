"""Rules about the RKE2 release: the upgrade path, and the Kubernetes range each pinned chart line supports."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

from settings.rules.base import rule

if TYPE_CHECKING:
    from settings.root import Settings


def rke2_release(version: str) -> tuple[int, int, int]:
    """(minor, patch, rke2 revision) of 'v1.MINOR.PATCH+rke2rN', for ordering releases."""
    minor, patch, revision = re.fullmatch(r"v1\.(\d+)\.(\d+)\+rke2r(\d+)", version).groups()
    return int(minor), int(patch), int(revision)


def _upgrade_problems(s: Settings, add) -> None:
    # Kubernetes' version skew policy: one minor version at a time, never back (RKE2 refuses to
    # start an etcd written by a newer release). pre-upgrade.sh checks the same against the init server.
    deployed, wanted = s.cluster.deployed_rke2_version, s.cluster.rke2_version
    if deployed is None:
        return
    if rke2_release(wanted) < rke2_release(deployed):
        add(
            f"cluster.rke2Version: {wanted!r} is older than the deployed {deployed!r}; RKE2 does not support "
            "downgrades: restore an etcd snapshot taken before the upgrade instead (docs/runbook.md, section 17)"
        )
    elif rke2_release(wanted)[0] > rke2_release(deployed)[0] + 1:
        add(
            f"cluster.rke2Version: {wanted!r} skips minor versions from the deployed {deployed!r}; upgrade one "
            f"minor version at a time (first to the newest v1.{rke2_release(deployed)[0] + 1}.x release)"
        )


class K8sSupport(NamedTuple):
    """The Kubernetes minors one chart line supports upstream, and where that is written."""

    field: str  # the `charts.<field>` key
    line: str  # version prefix: "v1.20" matches v1.20.6
    lowest: int  # Kubernetes 1.<lowest>
    highest: int  # Kubernetes 1.<highest>
    source: str
    verified: bool = True  # False: the pinned release's own page could not be read; outside -> warning only


# The CephTier values are written for Rook v1.20 (ceph-csi-drivers chart), so another Rook line is
# refused as well (REQUIRED_LINES). docs/hardening.md "Versions that fit together" shows this table.
K8S_SUPPORT: tuple[K8sSupport, ...] = (
    K8sSupport(
        "rookCeph",
        "v1.20",
        31,
        36,
        "rook/rook prerequisites.md on the v1.20 line (Kubernetes v1.31-v1.36; research/reliability-security.md 1.1)",
    ),
    K8sSupport("rookCephCluster", "v1.20", 31, 36, "as rookCeph"),
    K8sSupport(
        "cilium",
        "1.19",
        34,
        36,
        "rancher/rke2 charts/chart_versions.yaml: rke2-cilium 1.19.601 in v1.34.10, v1.35.7, v1.36.3",
    ),
    K8sSupport(
        "gpuOperator",
        "v26.7",
        33,
        37,
        "NVIDIA/cloud-native-docs gpu-operator/platform-support.rst for 26.7.0: 1.33-1.37 "
        "(PR #488 raised the top to 1.37, PR #490 the Ubuntu 24.04 floor to 1.33)",
    ),
    K8sSupport(
        "networkOperator",
        "26.4",
        31,
        35,
        "Mellanox/network-operator-docs docs/platform-support.rst as of the 26.1 line (Kubernetes >=1.31 and "
        "<=1.35, Rancher RKE2 1.31-1.35); the 26.4 page (docs.nvidia.com/networking/display/kubernetes2640/"
        "platform-support.html) was not readable here",
        verified=False,
    ),
)
# Lines the program's values are written for; a chart field listed here must match one of its lines.
REQUIRED_LINES = {"rookCeph", "rookCephCluster"}


def _chart_versions(s: Settings) -> dict[str, str | None]:
    """The pinned version of every chart this configuration deploys that K8S_SUPPORT can judge."""
    has_gpus = bool(s.gpu_nodes)
    return {
        "rookCeph": s.charts.rook_ceph.version,
        "rookCephCluster": s.charts.rook_ceph_cluster.version,
        "cilium": s.charts.cilium.version if s.network.cni == "cilium" else None,
        "gpuOperator": s.charts.gpu_operator.version if has_gpus else None,
        "networkOperator": s.charts.network_operator.version if has_gpus else None,
    }


def _support_row(field: str, version: str) -> K8sSupport | None:
    line = ".".join(version.split(".")[:2])
    return next((row for row in K8S_SUPPORT if row.field == field and row.line == line), None)


def _out_of_range(s: Settings, row: K8sSupport, version: str) -> str | None:
    minor = int(s.cluster.rke2_version.split(".")[1])
    if row.lowest <= minor <= row.highest:
        return None
    return (
        f"cluster.rke2Version: {s.cluster.rke2_version!r} is Kubernetes 1.{minor}, but charts.{row.field}.version "
        f"{version!r} supports Kubernetes 1.{row.lowest}-1.{row.highest} ({row.source}); pick an RKE2 release in "
        "that range or a chart release that supports it"
    )


def _version_problems(s: Settings, add) -> None:
    """The RKE2 minor against the Kubernetes range each pinned chart line supports upstream."""
    for field, version in _chart_versions(s).items():
        if version is None:
            continue
        row = _support_row(field, version)
        if row is None:
            if field in REQUIRED_LINES:
                add(
                    f"charts.{field}.version: {version!r} is not a Rook v1.20 release; this program configures "
                    "Ceph-CSI through the ceph-csi-drivers chart that Rook v1.20 introduced, use e.g. 'v1.20.6'"
                )
            continue
        problem = _out_of_range(s, row, version)
        if problem and row.verified:
            add(problem)


def version_warnings(s: Settings) -> list[str]:
    """Ranges taken from a neighbouring release's page: outside them is worth a look, not a refusal."""
    found = []
    for field, version in _chart_versions(s).items():
        row = _support_row(field, version) if version else None
        problem = _out_of_range(s, row, version) if row and not row.verified else None
        if problem:
            found.append(f"{problem} (range not verified for this release: check it before `pulumi up`)")
    return found


RULES = (
    rule(_upgrade_problems, "the RKE2 upgrade path", "cluster"),
    rule(_version_problems, "the RKE2 release against the charts", "cluster charts network nodes"),
)
