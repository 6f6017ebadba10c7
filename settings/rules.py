"""Rules that relate several fields or areas, in one place. Each problem names its path and the fix."""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from typing import TYPE_CHECKING

from settings.types import looks_like_ipv4

if TYPE_CHECKING:
    from settings.root import Settings


def cross_field_problems(s: Settings) -> list[str]:
    """Rules that relate several fields. Each problem names its path and the fix."""
    problems: list[str] = []
    add = problems.append

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

    _control_plane_problems(s, add)
    _node_hardware_problems(s, add)
    _network_problems(s, add)
    _storage_problems(s, add)

    if not s.ssh.allow_unpinned_host_keys:
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
            add(
                "ssh.bastion.hostKey: the bastion has no pinned host key; add it, "
                "or set ssh.allowUnpinnedHostKeys: true"
            )

    return problems


def _control_plane_problems(s: Settings, add) -> None:
    servers = s.servers
    if len(servers) not in (1, 3, 5):
        add(
            f"nodes: {len(servers)} control-plane servers ({', '.join(n.name for n in servers) or 'none'}); "
            "etcd needs an odd number: set controlPlane: true on exactly 1, 3 or 5 CPU nodes "
            "(removing a server must leave an odd number)"
        )
    for i, node in enumerate(s.nodes):
        if node.control_plane and node.role != "cpu":
            add(f"nodes[{i}].controlPlane: {node.name!r} is a GPU node; control-plane servers must be CPU nodes")
    if s.cluster.init_server is not None and s.cluster.init_server not in {n.name for n in servers}:
        add(
            f"cluster.initServer: {s.cluster.init_server!r} is not a control-plane node; name one of "
            f"{', '.join(n.name for n in servers) or '(none)'}"
        )
    if s.cluster.virtual_ip is not None:
        if not looks_like_ipv4(s.cluster.api_endpoint):
            add(
                "cluster.apiEndpoint: with cluster.virtualIp the endpoint is the virtual IP itself; "
                "give an IPv4 address"
            )
        elif s.cluster.api_endpoint in {n.address for n in s.nodes}:
            add("cluster.apiEndpoint: the virtual IP must not be a node's own address; pick a free address")


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
    for i, host in enumerate(s.nas.hosts):
        seen = Counter(host.drives)
        for j, drive in enumerate(host.drives):
            if seen[drive] > 1:
                add(f"nas.hosts[{i}].drives[{j}]: {drive!r} is listed twice on {host.name!r}; list it once")


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
    # RKE2 (kube-controller-manager) and Cilium's cluster-pool IPAM give every node a /24 of clusterCidr.
    if cluster.prefixlen > 24:
        add(f"network.clusterCidr: {cluster} is smaller than one node's /24 pod range; use e.g. a /16")
    elif len(s.nodes) > 2 ** (24 - cluster.prefixlen):
        add(
            f"network.clusterCidr: {cluster} holds {2 ** (24 - cluster.prefixlen)} per-node /24 pod ranges but "
            f"there are {len(s.nodes)} nodes; choose a larger range (e.g. a /{24 - (len(s.nodes) - 1).bit_length()})"
        )
    ib = s.network.infiniband
    if ib.mode == "datagram" and ib.mtu > 4092:
        add(
            f"network.infiniband.mtu: {ib.mtu} is above 4092, the largest IPoIB MTU in datagram mode; "
            "lower it (2044 for a 2K IB MTU, 4092 for 4K) or set network.infiniband.mode: connected"
        )
    ipoib = ib.ipoib_network
    if ipoib.enabled:
        net = ipaddress.IPv4Network(ipoib.range)
        for node in s.nodes:
            if node.infiniband and ipaddress.IPv4Address(node.infiniband.address) in net:
                add(
                    f"network.infiniband.ipoibNetwork.range: {net} contains the host IB address of {node.name!r} "
                    f"({node.infiniband.address}); pods would get addresses the hosts use"
                )
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


def _storage_problems(s: Settings, add) -> None:
    if not s.storage_hosts:
        return  # no Ceph tier in this environment
    mons = s.storage.ceph.mon_count
    hosts = len(s.storage_hosts)
    if hosts < 3:
        add(
            f"nodes: {hosts} Ceph storage host(s); replicated pools of size 3 with failure domain 'host' need at "
            "least 3 CPU nodes with osdDevices"
        )
    if mons % 2 == 0 or mons < 3:
        add(f"storage.ceph.monCount: {mons}; MON quorum needs an odd count of at least 3 (3 or 5)")
    if mons > hosts:
        add(f"storage.ceph.monCount: {mons} MONs but only {hosts} storage hosts; MONs need distinct hosts, lower it")
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
    # The CephTier values are written for the Rook v1.19 charts (CSI tolerations in the operator chart).
    for field, chart in (("rookCeph", s.charts.rook_ceph), ("rookCephCluster", s.charts.rook_ceph_cluster)):
        if not re.fullmatch(r"v?1\.19\.\d+", chart.version):
            add(
                f"charts.{field}.version: {chart.version!r} is not a Rook v1.19 release; this program configures "
                "Ceph-CSI through the v1.19 operator chart (v1.20 moved it to the ceph-csi-drivers chart), "
                "use e.g. 'v1.19.10'"
            )
    if s.charts.rook_ceph.version != s.charts.rook_ceph_cluster.version:
        add(
            f"charts.rookCephCluster.version: {s.charts.rook_ceph_cluster.version!r} differs from "
            f"charts.rookCeph.version {s.charts.rook_ceph.version!r}; install both charts of the same Rook release"
        )
