"""docs/air-gap.md: everything the platform pulls and the setting that redirects it to a mirror, from the
settings models (the keys that name a chart, image, repository or URL) and what no key names directly."""

from __future__ import annotations

import re
import typing

from pydantic import AfterValidator

from components.network.fabric import MELLANOX_REPOSITORY
from settings import Chart
from settings.types import url
from stacks.docs import GENERATED, REQUIRED, Row, cell, default_text, rows, unwrapped

# What the platform pulls that no settings key names directly: (what, from where, the key that redirects it).
# `{path}` placeholders are settings keys, filled in with their defaults (`<path>` when required).
DERIVED = (
    (
        "RKE2 release tarball and checksums (`rke2.linux-amd64.tar.gz`, `sha256sum-amd64.txt`), "
        "downloaded by the install script on every host",
        "`https://github.com/rancher/rke2/releases/download/{cluster.rke2Version}/`",
        "`cluster.install.artifactUrl` (a mirror of the release assets)",
    ),
    (
        "RKE2 RPMs (`rke2-common`, `rke2-server`/`rke2-agent`, `rke2-selinux`) with `cluster.install.method: rpm`",
        "the RKE2 RPM repository the install script configures",
        "none: the hosts' dnf configuration must point at a mirror of it (docs/limitations.md)",
    ),
    (
        "RKE2's own images (kube-apiserver, etcd, CoreDNS, ingress, ...), pulled by every node",
        "`docker.io/rancher/...`",
        "`cluster.systemDefaultRegistry` (a registry holding them), or `cluster.registryMirrors` for `docker.io`",
    ),
    (
        "rke2-upgrade image of the upgrade Plans' Jobs, tagged by the system-upgrade-controller with the version "
        "(`+` as `-`)",
        "`{cluster.upgrade.upgradeImage}:<cluster.rke2Version, + as ->`",
        "`cluster.upgrade.upgradeImage` (a repository holding the same tags)",
    ),
    (
        "NVIDIA driver container (`gpu.driver.managedBy: operator`)",
        "`nvcr.io/nvidia/driver:{gpu.driver.version}-<os>`",
        "`cluster.registryMirrors` for `nvcr.io`",
    ),
    (
        "NicClusterPolicy components (RDMA shared device plugin; with the IPoIB network Multus, CNI plugins, "
        "IPoIB CNI, nv-ipam)",
        f"`{MELLANOX_REPOSITORY}/<component>:network-operator-v{{charts.networkOperator.version}}`",
        "`cluster.registryMirrors` for `nvcr.io`",
    ),
    (
        "DOCA-OFED driver container (`network.infiniband.hostStack: ofed`)",
        f"`{MELLANOX_REPOSITORY}/doca-driver:{{network.infiniband.docaDriverVersion}}`",
        "`cluster.registryMirrors` for `nvcr.io`",
    ),
    (
        "The images every chart deploys (operators, agents, CSI drivers, exporters)",
        "their upstream registries: `quay.io`, `docker.io`, `registry.k8s.io`, `nvcr.io`, `ghcr.io`",
        "`cluster.registryMirrors`, one entry per registry",
    ),
    (
        "OS packages (prepare step: curl, chrony, iptables, lvm2, gdisk, xfsprogs, nvme-cli, jq, ...; "
        "inbox InfiniBand: rdma-core and tools)",
        "the hosts' configured apt or dnf repositories",
        "none: the hosts' own package mirror configuration",
    ),
)

_IMAGE = re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)+(:[0-9]+)?/[^\s:]+:[^\s]+$")


def air_gap() -> str:
    by_path = {r.path: r for r in rows()}
    lines = [
        "# Air-gapped sites: everything the platform pulls, and the key that points it at a mirror",
        "",
        f"<!-- {GENERATED} -->",
        "",
        "Defaults as in `settings/`; a stack file may pin other versions. `pulumi up` itself also needs the",
        "provider plugins ([README: what a real deployment needs](../README.md#what-a-real-deployment-needs)).",
        "",
        "## Helm charts",
        "",
        "Each chart's `repository` may be an internal Helm repository (`https://...`) or OCI registry (`oci://...`).",
        "",
        "| chart | version | default repository | mirror key |",
        "|---|---|---|---|",
    ]
    for row in rows():
        if isinstance(row.default, Chart):
            chart = row.default
            lines.append(f"| `{chart.name}` | `{chart.version}` | `{chart.repository}` | `{row.path}.repository` |")
    lines += [
        "",
        "## Images and URLs set by a key",
        "",
        "Set the key itself to the mirror's copy.",
        "",
        "| key | default | what |",
        "|---|---|---|",
    ]
    for row in rows():
        if _pulled_directly(row):
            lines.append(f"| `{row.path}` | {default_text(row.default)} | {cell(row.description)} |")
    lines += ["", "## Pulled by RKE2, the charts and the hosts", "", "| what | from | mirror key |", "|---|---|---|"]
    for what, source, key in DERIVED:
        lines.append(f"| {cell(what)} | {cell(_fill(source, by_path))} | {cell(key)} |")
    return "\n".join(lines) + "\n"


def _pulled_directly(row: Row) -> bool:
    """An image reference or a download URL held by one key (chart repositories are listed with their chart)."""
    if row.path.startswith("charts."):
        return False
    is_url = any(isinstance(m, AfterValidator) and m.func is url for m in row.metadata)
    single = typing.get_origin(unwrapped(row.annotation)) not in (list, dict)
    return (is_url and single) or (isinstance(row.default, str) and bool(_IMAGE.match(row.default)))


def _fill(template: str, by_path: dict[str, Row]) -> str:
    def value(match: re.Match) -> str:
        row = by_path[match.group(1)]
        return f"<{row.path}>" if row.default is REQUIRED else str(row.default)

    return re.sub(r"\{([A-Za-z0-9.\[\]]+)\}", value, template)
