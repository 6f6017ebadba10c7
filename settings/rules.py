"""Rules that relate several fields or areas, in one place. Each problem names its path and the fix."""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from settings.erasure import ErasureLayout, default_parity, default_set_size, host_range, set_size_problem
from settings.monitoring import HOST_GROUPS
from settings.scheduling import CPU_FLAVOR, gpu_flavor_name
from settings.types import is_kernel_name, kernel_name_problem, kernel_name_warning, looks_like_ipv4

if TYPE_CHECKING:
    from settings.root import Settings


@dataclass(frozen=True)
class Rule:
    """A group of rules. `reads`: the top-level areas it looks at; `whole`: those whose lists it counts or
    compares as a whole (a count, a sum, "none has...", "which one is..."); `checks`: what it checks,
    said when it waits because an item or area it needs failed validation (settings.partial)."""

    check: Callable[[Settings, Callable[[str], None]], None]
    checks: str
    reads: frozenset[str]
    whole: frozenset[str] = frozenset()


EVERY_AREA = frozenset({"*"})


def cross_field_problems(s: Settings, missing: Set[str] = frozenset(), incomplete: Set[str] = frozenset()) -> list[str]:
    """Every rule that can judge `s`. `missing`: areas that failed validation; `incomplete`: areas with list
    items that failed (settings.partial). Each problem names its path and the fix."""
    problems: list[str] = []
    for rule in RULES:
        if not waits(rule, missing, incomplete):
            rule.check(s, problems.append)
    return problems


def waiting_rules(missing: Set[str], incomplete: Set[str]) -> list[str]:
    """What the rules that wait for `missing` and `incomplete` areas would have checked."""
    return [rule.checks for rule in RULES if waits(rule, missing, incomplete)]


def waits(rule: Rule, missing: Set[str], incomplete: Set[str]) -> bool:
    reads_missing = rule.reads & missing or (rule.reads == EVERY_AREA and missing)
    return bool(reads_missing or rule.whole & incomplete)


def _unique_problems(s: Settings, add) -> None:
    names = Counter(n.name for n in s.nodes) + Counter(h.name for h in s.nas.hosts)
    addresses = Counter(n.address for n in s.nodes) + Counter(h.address for h in s.nas.hosts)
    for i, node in enumerate(s.nodes):
        if names[node.name] > 1:
            add(f"nodes[{i}].name: {node.name!r} is used by more than one host; names must be unique")
        if addresses[node.address] > 1:
            add(f"nodes[{i}].address: {node.address!r} is used by more than one host; addresses must be unique")
    for i, host in enumerate(s.nas.hosts):
        if names[host.name] > 1:
            add(f"nas.hosts[{i}].name: {host.name!r} is used by more than one host; names must be unique")
        if addresses[host.address] > 1:
            add(f"nas.hosts[{i}].address: {host.address!r} is used by more than one host; addresses must be unique")


def _host_key_problems(s: Settings, add) -> None:
    if s.ssh.allow_unpinned_host_keys:
        return
    for i, node in enumerate(s.nodes):
        if node.host_key is None:
            add(
                f"nodes[{i}].hostKey: node {node.name!r} has no pinned host key; add the host's "
                "'ssh-ed25519 AAAA...' key (ssh-keyscan -t ed25519 <address>), or set "
                "ssh.allowUnpinnedHostKeys: true to accept any key (unsafe outside a lab)"
            )
    for i, host in enumerate(s.nas.hosts):
        if host.host_key is None:
            add(
                f"nas.hosts[{i}].hostKey: NAS host {host.name!r} has no pinned host key; add it, or set "
                "ssh.allowUnpinnedHostKeys: true"
            )
    if s.ssh.bastion is not None and s.ssh.bastion.host_key is None:
        add("ssh.bastion.hostKey: the bastion has no pinned host key; add it, or set ssh.allowUnpinnedHostKeys: true")


def _server_count_problems(s: Settings, add) -> None:
    servers = s.servers
    if len(servers) not in (1, 3, 5):
        add(
            f"nodes: {len(servers)} control-plane servers ({', '.join(n.name for n in servers) or 'none'}); "
            "etcd needs an odd number: set controlPlane: true on exactly 1, 3 or 5 CPU nodes "
            "(removing a server must leave an odd number)"
        )
    if s.cluster.init_server not in {n.name for n in servers}:
        add(
            f"cluster.initServer: {s.cluster.init_server!r} is not a control-plane node; name one of "
            f"{', '.join(n.name for n in servers) or '(none)'}"
        )


def _control_plane_problems(s: Settings, add) -> None:
    for i, node in enumerate(s.nodes):
        if node.control_plane and node.role != "cpu":
            add(f"nodes[{i}].controlPlane: {node.name!r} is a GPU node; control-plane servers must be CPU nodes")
    if s.cluster.virtual_ip is not None:
        if not looks_like_ipv4(s.cluster.api_endpoint):
            add(
                "cluster.apiEndpoint: with cluster.virtualIp the endpoint is the virtual IP itself; "
                "give an IPv4 address"
            )
        elif s.cluster.api_endpoint in {n.address for n in s.nodes}:
            add("cluster.apiEndpoint: the virtual IP must not be a node's own address; pick a free address")


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


def _rename_problems(s: Settings, add) -> None:
    names = {n.name for n in s.nodes}
    for i, node in enumerate(s.nodes):
        if node.renamed_from is None:
            continue
        if node.renamed_from in names:
            add(
                f"nodes[{i}].renamedFrom: {node.renamed_from!r} is still in nodes; a rename replaces the old "
                "entry: remove it, or drop renamedFrom"
            )
        if node.control_plane:
            add(
                f"nodes[{i}].renamedFrom: {node.name!r} is a control-plane server; its etcd member cannot be "
                "renamed in place: remove the server and add it under the new name in two changes "
                "(docs/runbook.md, section 15)"
            )


def _node_hardware_problems(s: Settings, add) -> None:
    ib_addresses = Counter(n.infiniband.address for n in s.nodes if n.infiniband)
    for i, node in enumerate(s.nodes):
        if node.role == "gpu":
            if node.infiniband is None:
                add(
                    f"nodes[{i}].infiniband: GPU node {node.name!r} has no InfiniBand settings; "
                    "add interface and address"
                )
            if node.gpu is None:
                add(f"nodes[{i}].gpu: GPU node {node.name!r} has no gpu settings; add model and count")
            if node.osd_devices:
                add(f"nodes[{i}].osdDevices: {node.name!r} is a GPU node; Ceph OSDs run on CPU nodes only, remove them")
        else:
            if node.infiniband is not None:
                add(
                    f"nodes[{i}].infiniband: {node.name!r} is a CPU node; "
                    "InfiniBand is configured on GPU nodes only, remove it"
                )
            if node.gpu is not None:
                add(f"nodes[{i}].gpu: {node.name!r} is a CPU node; remove gpu or set role: gpu")
            if node.nvme:
                add(
                    f"nodes[{i}].nvme: {node.name!r} is a CPU node; tier-1 NVMe volumes live on GPU nodes only, "
                    "remove them (use osdDevices for Ceph disks)"
                )
        if node.infiniband and ib_addresses[node.infiniband.address] > 1:
            add(
                f"nodes[{i}].infiniband.address: {node.infiniband.address!r} is used by more than one node; "
                "must be unique"
            )
        for field, devices in (
            ("nvme", [d.device for d in node.nvme]),
            ("osdDevices", [d.device for d in node.osd_devices]),
        ):
            seen = Counter(devices)
            for j, device in enumerate(devices):
                if seen[device] > 1:
                    add(f"nodes[{i}].{field}[{j}].device: {device!r} is listed twice on {node.name!r}; list it once")
        for j, dev in enumerate(node.nvme):
            if dev.format and is_kernel_name(dev.device):
                add(kernel_name_problem(f"nodes[{i}].nvme[{j}].device", dev.device, "format: true"))
        for j, osd in enumerate(node.osd_devices):
            if osd.wipe and is_kernel_name(osd.device):
                add(kernel_name_problem(f"nodes[{i}].osdDevices[{j}].device", osd.device, "wipe: true"))
        for j, dev in enumerate(node.nvme):
            if dev.force and not dev.format:
                add(f"nodes[{i}].nvme[{j}].force: force only applies with format: true; set format: true or drop force")
        # Each tier-1 device is mounted at gpu.tier1.mountRoot/<device basename>: basenames must differ.
        basenames = Counter(path.rsplit("/", 1)[1] for path in {d.device for d in node.nvme})
        for j, dev in enumerate(node.nvme):
            base = dev.device.rsplit("/", 1)[1]
            if basenames[base] > 1:
                add(
                    f"nodes[{i}].nvme[{j}].device: {dev.device!r} has the same name {base!r} as another device on "
                    f"{node.name!r}; both would mount at gpu.tier1.mountRoot/{base}; use paths whose last parts differ"
                )


def _network_problems(s: Settings, add) -> None:
    cluster = ipaddress.IPv4Network(s.network.cluster_cidr)
    service = ipaddress.IPv4Network(s.network.service_cidr)
    if cluster.overlaps(service):
        add(f"network.serviceCidr: {service} overlaps network.clusterCidr {cluster}; choose disjoint ranges")
    for field, net in (("clusterCidr", cluster), ("serviceCidr", service)):
        inside = [n for n in s.nodes if ipaddress.IPv4Address(n.address) in net]
        if inside:
            add(
                f"network.{field}: {net} contains node {inside[0].name!r}'s address {inside[0].address} "
                f"({len(inside)} node(s) in all); choose a range the hosts do not use"
            )
    ib = s.network.infiniband
    if ib.mode == "datagram" and ib.mtu > 4092:
        add(
            f"network.infiniband.mtu: {ib.mtu} is above 4092, the largest IPoIB MTU in datagram mode; "
            "lower it (2044 for a 2K IB MTU, 4092 for 4K) or set network.infiniband.mode: connected"
        )
    if ib.ipoib_network.enabled:
        net = ipaddress.IPv4Network(ib.ipoib_network.range)
        for node in s.nodes:
            if node.infiniband and ipaddress.IPv4Address(node.infiniband.address) in net:
                add(
                    f"network.infiniband.ipoibNetwork.range: {net} contains the host IB address of {node.name!r} "
                    f"({node.infiniband.address}); pods would get addresses the hosts use"
                )


def _network_capacity_problems(s: Settings, add) -> None:
    # RKE2 (kube-controller-manager) and Cilium's cluster-pool IPAM give every node a /24 of clusterCidr.
    cluster = ipaddress.IPv4Network(s.network.cluster_cidr)
    if cluster.prefixlen > 24:
        add(f"network.clusterCidr: {cluster} is smaller than one node's /24 pod range; use e.g. a /16")
    elif len(s.nodes) > 2 ** (24 - cluster.prefixlen):
        add(
            f"network.clusterCidr: {cluster} holds {2 ** (24 - cluster.prefixlen)} per-node /24 pod ranges but "
            f"there are {len(s.nodes)} nodes; choose a larger range (e.g. a /{24 - (len(s.nodes) - 1).bit_length()})"
        )
    ipoib = s.network.infiniband.ipoib_network
    if not ipoib.enabled:
        return
    net = ipaddress.IPv4Network(ipoib.range)
    gpu_nodes = s.gpu_nodes
    if len(gpu_nodes) * ipoib.per_node_block_size > net.num_addresses - 2:
        add(
            f"network.infiniband.ipoibNetwork.perNodeBlockSize: {len(gpu_nodes)} GPU nodes x "
            f"{ipoib.per_node_block_size} addresses do not fit in {net} ({net.num_addresses - 2} usable); "
            "lower the block size or widen the range"
        )
    interfaces = Counter(n.infiniband.interface for n in gpu_nodes if n.infiniband)
    if len(interfaces) > 1:
        common = interfaces.most_common(1)[0][0]
        for i, node in enumerate(s.nodes):
            if node.infiniband and node.role == "gpu" and node.infiniband.interface != common:
                add(
                    f"nodes[{i}].infiniband.interface: {node.infiniband.interface!r} differs from {common!r} "
                    "on the other GPU nodes; the IPoIB network (network.infiniband.ipoibNetwork) attaches "
                    "pods through one interface name on every GPU node: rename it (udev) or disable the network"
                )


RETIRE_TIER2 = "docs/runbook.md, 'Retire tier 2'"


def _storage_host_problems(s: Settings, add) -> None:
    if not s.storage_hosts:
        # Settings cannot see the stack state, so `storage.ceph.deployed` says that tier 2 exists. Without
        # it, emptying every osdDevices list (or losing them in an inventory edit) would uninstall the
        # CephCluster, pools and filesystem in one run; the protected Rook releases would stop that run
        # half-way, this stops it before anything is planned.
        if s.storage.ceph.deployed:
            add(
                "nodes: no node has osdDevices, but storage.ceph.deployed is true: this would remove every storage "
                "host of a deployed tier 2 and uninstall its CephCluster with the data on it. If that is not what "
                f"you meant, restore the osdDevices lists. To retire tier 2, follow {RETIRE_TIER2} (back up, "
                "delete the PVCs, unprotect the Rook releases), then set storage.ceph.deployed: false"
            )
        return  # no Ceph tier in this environment
    mons = s.storage.ceph.mon_count
    hosts = len(s.storage_hosts)
    if hosts < 3:
        add(
            f"nodes: {hosts} Ceph storage host(s); replicated pools of size 3 with failure domain 'host' need at "
            "least 3 CPU nodes with osdDevices"
        )
    if mons > hosts:
        add(f"storage.ceph.monCount: {mons} MONs but only {hosts} storage hosts; MONs need distinct hosts, lower it")


def _storage_problems(s: Settings, add) -> None:
    if not s.storage_hosts:
        return  # no Ceph tier in this environment (or its hosts' entries were set aside)
    mons = s.storage.ceph.mon_count
    if mons % 2 == 0 or mons < 3:
        add(f"storage.ceph.monCount: {mons}; MON quorum needs an odd count of at least 3 (3 or 5)")
    ceph = s.storage.ceph
    if ceph.block_storage_class == ceph.shared_storage_class:
        add(
            f"storage.ceph.sharedStorageClass: {ceph.shared_storage_class!r} is also the block storage class; "
            "give the CephFS and RBD storage classes different names"
        )
    for field, name in (
        ("blockStorageClass", ceph.block_storage_class),
        ("sharedStorageClass", ceph.shared_storage_class),
    ):
        if name == s.gpu.tier1.storage_class_name:
            add(f"storage.ceph.{field}: {name!r} is also gpu.tier1.storageClassName; give tier 2 its own name")
    if not re.fullmatch(r"([^\s@]+/)?[^\s@:/]+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", ceph.ceph_image):
        add(
            f"storage.ceph.cephImage: {ceph.ceph_image!r} is not '<repository>:<tag>'; give a pinned tag such as "
            "'quay.io/ceph/ceph:v20.2.4' (the Rook cluster chart takes repository and tag separately)"
        )
    if s.charts.rook_ceph.version != s.charts.rook_ceph_cluster.version:
        add(
            f"charts.rookCephCluster.version: {s.charts.rook_ceph_cluster.version!r} differs from "
            f"charts.rookCeph.version {s.charts.rook_ceph.version!r}; install both charts of the same Rook release"
        )


NO_COMMUNITY_BINARIES = (
    "MinIO stopped publishing community binaries (source-only since 2025-10; its download site answers "
    "410 Gone since 2026-09), so there is no working default download"
)


def minio_layout(s: Settings) -> ErasureLayout:
    """The erasure layout the settings ask for (valid only when `_erasure_problems` found nothing)."""
    hosts, drives = len(s.nas.hosts), len(s.nas.hosts[0].drives)
    size = s.storage.minio.erasure_set_drives or default_set_size(hosts, drives)
    return ErasureLayout(hosts, drives, size, s.storage.minio.parity or default_parity(size))


def _nas_problems(s: Settings, add) -> None:
    if s.nas.hosts and s.storage.minio.artifact is None:
        add(
            f"storage.minio.artifact: required with nas.hosts. {NO_COMMUNITY_BINARIES}. Mirror a pinned build on "
            "an internal server (the last official minio RELEASE.2025-09-07T16-13-09Z, a binary built from the "
            "final tag, or a maintained fork such as Silo with storage.minio.binary: silo and service: silo) and "
            "set storage.minio.artifact.url and storage.minio.artifact.sha256 (the file's `sha256sum`)"
        )
    for i, host in enumerate(s.nas.hosts):
        seen = Counter(d.device for d in host.drives)
        for j, drive in enumerate(host.drives):
            path = f"nas.hosts[{i}].drives[{j}]"
            if seen[drive.device] > 1:
                add(f"{path}.device: {drive.device!r} is listed twice on {host.name!r}; list it once")
            if drive.force and not drive.format:
                add(f"{path}.force: force only applies with format: true; set format: true or drop force")
            if drive.format and is_kernel_name(drive.device):
                add(
                    f"{path}.device: {drive.device!r} is a kernel name, which can point at another disk after a "
                    "reboot; a drive marked format: true must be named stably: use its /dev/disk/by-id/... path"
                )


def _erasure_problems(s: Settings, add) -> None:
    minio = s.storage.minio
    if not s.nas.hosts:
        return
    if not host_range([h.address for h in s.nas.hosts]):
        add(
            f"nas.hosts: MINIO_VOLUMES names the hosts with one {{a...b}} range, so their addresses must be "
            f"consecutive in list order within one /24; got {', '.join(h.address for h in s.nas.hosts)}"
        )
    first = s.nas.hosts[0]
    for i, host in enumerate(s.nas.hosts):
        if len(host.drives) != len(first.drives):
            add(
                f"nas.hosts[{i}].drives: {host.name!r} lists {len(host.drives)} drives, {first.name!r} "
                f"{len(first.drives)}; MinIO needs the same drive set on every host (same count, drive i at the "
                "same mount point everywhere)"
            )
    counts = {len(h.drives) for h in s.nas.hosts}
    if len(counts) > 1:
        return  # reported per host above; no layout to compute
    hosts, drives = len(s.nas.hosts), counts.pop()
    size = minio.erasure_set_drives or default_set_size(hosts, drives)
    if size == 0 or (minio.erasure_set_drives and set_size_problem(hosts, drives, size)):
        why = set_size_problem(hosts, drives, size) if size else "no set size of 2-16 fits"
        add(f"storage.minio.erasureSetDrives: {why}; pick a set size that does, or change the drive count")
        return
    parity = minio.parity or default_parity(size)
    if 2 * parity > size:
        add(
            f"storage.minio.parity: EC:{parity} is more than half the erasure set of {size} drives; "
            f"MinIO allows at most EC:{size // 2}"
        )
        return
    layout = ErasureLayout(hosts, drives, size, parity)
    need = minio.require_host_loss
    if need and (layout.read_tolerance_hosts < need.read or layout.write_tolerance_hosts < need.write):
        add(
            f"storage.minio.requireHostLoss: asks reads to survive {need.read} and writes {need.write} host "
            f"loss(es), but {layout.describe()}. Raise parity (reads only gain at EC = set/2), add NAS hosts "
            "(two-host write tolerance needs at least 5), or lower the requirement"
        )


def _backup_tier_problems(s: Settings, add) -> None:
    for i, _source in enumerate(s.storage.minio.backup.sources):
        path = f"storage.minio.backup.sources[{i}]"
        if not s.nas.hosts:
            add(f"{path}: backups go to the MinIO tier, and nas.hosts is empty; add NAS hosts or remove the source")
        if not s.storage_hosts:
            add(f"{path}: there is no tier 2 (no node has osdDevices), so no tier-2 shared volume to back up")


def _backup_source_problems(s: Settings, add) -> None:
    shared = s.storage.ceph.shared_storage_class
    for i, source in enumerate(s.storage.minio.backup.sources):
        if s.storage_hosts and source.storage_class != shared:
            add(
                f"storage.minio.backup.sources[{i}].storageClass: {source.storage_class!r} is not the tier-2 "
                f"shared class {shared!r}; only tier-2 shared (CephFS, ReadWriteMany) volumes can be mounted "
                "read-only by the backup job while in use (tier-1 local volumes and RBD block volumes cannot)"
            )
    names = Counter(src.name for src in s.storage.minio.backup.sources)
    for i, source in enumerate(s.storage.minio.backup.sources):
        if names[source.name] > 1:
            add(f"storage.minio.backup.sources[{i}].name: {source.name!r} is used twice; names must be unique")


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


def _version_warnings(s: Settings) -> list[str]:
    """Ranges taken from a neighbouring release's page: outside them is worth a look, not a refusal."""
    found = []
    for field, version in _chart_versions(s).items():
        row = _support_row(field, version) if version else None
        problem = _out_of_range(s, row, version) if row and not row.verified else None
        if problem:
            found.append(f"{problem} (range not verified for this release: check it before `pulumi up`)")
    return found


def settings_warnings(s: Settings) -> list[str]:
    """Not errors, but worth an operator's look; `pulumi up` and the offline plan print them."""
    warnings: list[str] = []
    for i, node in enumerate(s.nodes):
        for j, dev in enumerate(node.nvme):
            if not dev.format and is_kernel_name(dev.device):
                warnings.append(kernel_name_warning(f"nodes[{i}].nvme[{j}].device", dev.device))
        for j, osd in enumerate(node.osd_devices):
            if not osd.wipe and is_kernel_name(osd.device):
                warnings.append(kernel_name_warning(f"nodes[{i}].osdDevices[{j}].device", osd.device))
    warnings.extend(_version_warnings(s))
    return warnings


# Namespaces Kubernetes owns and those the components use without a setting (the Network Operator's,
# Calico's); the rest come from the settings (`platform_namespaces`).
SYSTEM_NAMESPACES = {
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "nvidia-network-operator",
    "tigera-operator",
    "calico-system",
    "calico-apiserver",
}


def platform_namespaces(s: Settings) -> set[str]:
    """Every namespace the platform itself uses: each settings field named `namespace` or `...Namespace`."""
    found = set(SYSTEM_NAMESPACES)

    def walk(model) -> None:
        for name in type(model).model_fields:
            value = getattr(model, name)
            if name == "namespace" or name.endswith("_namespace"):
                if isinstance(value, str):
                    found.add(value)
            elif hasattr(type(value), "model_fields"):
                walk(value)

    walk(s)
    return found


def flavor_capacity(s: Settings) -> dict[str, int]:
    """Schedulable `nvidia.com/gpu` per flavor: physical GPUs, times the time-slicing replicas."""
    replicas = s.gpu.time_slicing.replicas if s.gpu.time_slicing.enabled else 1
    capacity: Counter[str] = Counter({CPU_FLAVOR: 0} if s.cpu_nodes else {})
    for node in s.gpu_nodes:
        if node.gpu is not None:
            capacity[gpu_flavor_name(node.gpu.model)] += node.gpu.count * replicas
    return dict(capacity)


def _team_problems(s: Settings, add) -> None:
    sched = s.scheduling
    classes = Counter(c.name for c in sched.priority_classes)
    for i, pc in enumerate(sched.priority_classes):
        if classes[pc.name] > 1:
            add(f"scheduling.priorityClasses[{i}].name: {pc.name!r} is defined more than once; define it once")
    team_names = Counter(t.name for t in sched.teams)
    namespaces = Counter(ns for t in sched.teams for ns in t.namespace_names)
    reserved = platform_namespaces(s)
    for i, team in enumerate(sched.teams):
        at = f"scheduling.teams[{i}]"
        if team_names[team.name] > 1:
            add(f"{at}.name: team {team.name!r} is defined more than once; merge the blocks or rename one")
        for j, ns in enumerate(team.namespace_names):
            field = f"{at}.namespaces[{j}]" if team.namespaces else f"{at}.name"
            if namespaces[ns] > 1:
                add(f"{field}: namespace {ns!r} belongs to more than one team; give each team its own namespaces")
            if ns in reserved:
                add(f"{field}: namespace {ns!r} is a platform namespace; give the team another namespace")
        if team.rdma and team.pod_security != "privileged":
            add(
                f"{at}.podSecurity: team {team.name!r} runs RDMA pods, which need the IPC_LOCK capability (pinned "
                f"memory for InfiniBand verbs); Pod Security {team.pod_security!r} refuses it: set "
                "podSecurity: privileged, or rdma: false"
            )
        for flavor, quota in team.quotas.items():
            for limit in ("borrowing_limit", "lending_limit"):
                if getattr(quota, limit) is not None and sched.cohort is None:
                    camel = "borrowingLimit" if limit == "borrowing_limit" else "lendingLimit"
                    add(
                        f"{at}.quotas.{flavor}.{camel}: only applies inside a cohort and scheduling.cohort is null; "
                        f"set scheduling.cohort or remove {camel}"
                    )


def _priority_class_problems(s: Settings, add) -> None:
    classes = {c.name for c in s.scheduling.priority_classes}
    for i, team in enumerate(s.scheduling.teams):
        for name in team.priority_classes:
            if name not in classes:
                add(
                    f"scheduling.teams[{i}].priorityClasses: {name!r} is not defined; add it to "
                    f"scheduling.priorityClasses (defined: {', '.join(sorted(classes)) or 'none'})"
                )


def _quota_problems(s: Settings, add) -> None:
    sched = s.scheduling
    capacity = flavor_capacity(s)
    requested: Counter[str] = Counter()
    for i, team in enumerate(sched.teams):
        for flavor, quota in team.quotas.items():
            at = f"scheduling.teams[{i}].quotas.{flavor}"
            if flavor not in capacity:
                add(
                    f"{at}: no node provides flavor {flavor!r}; use one of {', '.join(sorted(capacity))} "
                    "(GPU flavors are named after nodes[].gpu.model)"
                )
            elif flavor == CPU_FLAVOR and quota.gpus:
                add(f"{at}.gpus: the cpu flavor has no GPUs; set 0 and give GPU quota on a GPU flavor")
            requested[flavor] += quota.gpus
    if sched.allow_overcommit:
        return
    for flavor, total in sorted(requested.items()):
        if flavor in capacity and total > capacity[flavor]:
            teams = ", ".join(f"{t.name} {t.quotas[flavor].gpus}" for t in sched.teams if flavor in t.quotas)
            add(
                f"scheduling.teams: nominal GPU quotas on flavor {flavor!r} add up to {total} ({teams}) but "
                f"its nodes offer {capacity[flavor]} schedulable GPUs (time-slicing counted); lower the "
                "quotas or set scheduling.allowOvercommit: true"
            )


def _topology_problems(s: Settings, add) -> None:
    with_topology = [n for n in s.gpu_nodes if n.topology is not None]
    for i, node in enumerate(s.nodes):
        if node.topology is not None and node.role != "gpu":
            add(f"nodes[{i}].topology: {node.name!r} is a CPU node; the IB topology is for GPU nodes only, remove it")
        elif with_topology and node.role == "gpu" and node.topology is None:
            add(
                f"nodes[{i}].topology: GPU node {node.name!r} has none but other GPU nodes do; topology-aware "
                "scheduling needs it on every GPU node: add block and rack"
            )


# Where each media type sends (the official webhooks' "Send to" forms).
_SLACK_SEND_TO = re.compile(r"^(#[a-z0-9][a-z0-9._-]{0,79}|@[A-Za-z0-9][A-Za-z0-9._-]{0,79}|[CGD][A-Z0-9]{8,12})$")
_MATTERMOST_SEND_TO = re.compile(
    r"^([a-z0-9][a-z0-9-]{0,63}/(#[a-z0-9][a-z0-9_-]{0,63}|@[a-z0-9][a-z0-9._-]{0,63})|[a-z0-9]{26})$"
)


def _monitoring_problems(s: Settings, add) -> None:
    mon = s.monitoring
    web = mon.web
    if (web.node_port is None) == (web.ingress_host is None):
        add(
            "monitoring.web: give exactly one of nodePort (http://<cluster.apiEndpoint>:<nodePort>) and "
            "ingressHost (https://<ingressHost>); set the other to null"
        )
    if web.node_port is not None and web.node_port == mon.server_node_port:
        add(f"monitoring.serverNodePort: {mon.server_node_port} is also monitoring.web.nodePort; use two ports")
    groups = HOST_GROUPS
    names = Counter(c.name for c in mon.alerting.channels)
    for i, channel in enumerate(mon.alerting.channels):
        path = f"monitoring.alerting.channels[{i}]"
        if names[channel.name] > 1:
            add(f"{path}.name: {channel.name!r} is used by more than one channel; names must be unique")
        form = _SLACK_SEND_TO if channel.type == "slack" else _MATTERMOST_SEND_TO
        if not form.match(channel.send_to):
            wanted = (
                "'#channel', '@user' or a channel ID such as 'C0123456789'"
                if channel.type == "slack"
                else "'team/#channel', 'team/@user' or a 26-character channel ID"
            )
            add(f"{path}.sendTo: {channel.send_to!r} is not a {channel.type} destination; use {wanted}")
        if channel.type == "mattermost" and mon.alerting.mattermost_url is None:
            add(f"{path}.type: a mattermost channel needs monitoring.alerting.mattermostUrl; set the server's URL")
        for j, group in enumerate(channel.host_groups):
            if group not in groups:
                add(f"{path}.hostGroups[{j}]: {group!r} is not a monitored host group; use one of {', '.join(groups)}")


def _rule(check, checks: str, reads: str, whole: str = "") -> Rule:
    return Rule(check, checks, EVERY_AREA if reads == "*" else frozenset(reads.split()), frozenset(whole.split()))


# Every rule group, with the areas it reads and those it judges as a whole (see `Rule`).
RULES = (
    _rule(_unique_problems, "unique names and addresses", "nodes nas"),
    _rule(_server_count_problems, "the control-plane count and cluster.initServer", "nodes cluster", "nodes"),
    _rule(_control_plane_problems, "control-plane roles and the virtual IP", "nodes cluster"),
    _rule(_upgrade_problems, "the RKE2 upgrade path", "cluster"),
    _rule(_rename_problems, "node renames", "nodes"),
    _rule(_node_hardware_problems, "each node's hardware for its role", "nodes"),
    _rule(_network_problems, "the pod, service and IPoIB ranges against the hosts", "network nodes"),
    _rule(_network_capacity_problems, "the pod and IPoIB ranges against the node count", "network nodes", "nodes"),
    _rule(_storage_host_problems, "the Ceph storage host count", "nodes storage", "nodes"),
    _rule(_storage_problems, "the Ceph settings", "nodes storage gpu charts"),
    _rule(_nas_problems, "the MinIO binary and each NAS drive", "nas storage"),
    _rule(_erasure_problems, "the NAS drive sets and the MinIO erasure layout", "nas storage", "nas"),
    _rule(_backup_tier_problems, "the backup sources against tiers 2 and 3", "storage nodes nas", "nodes nas"),
    _rule(_backup_source_problems, "each backup source", "storage nodes"),
    _rule(_version_problems, "the RKE2 release against the charts", "cluster charts network nodes"),
    _rule(_topology_problems, "the GPU nodes' InfiniBand topology", "nodes"),
    _rule(_team_problems, "each team's names, namespaces and Pod Security", "*"),
    _rule(_priority_class_problems, "the teams' priority classes", "scheduling", "scheduling"),
    _rule(_quota_problems, "the teams' GPU quotas against the GPU nodes", "scheduling nodes gpu", "nodes scheduling"),
    _rule(_monitoring_problems, "the Zabbix web access and alert channels", "monitoring"),
    _rule(_host_key_problems, "pinned host keys", "ssh nodes nas"),
)
