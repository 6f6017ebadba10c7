"""Rules about the hosts: pinned keys, the control plane, renames, hardware, topology (names, addresses and
devices are claims: `settings.rules.claims`)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from settings.rules.base import rule
from settings.types import is_kernel_name, kernel_name_problem, kernel_name_warning, looks_like_ipv4

if TYPE_CHECKING:
    from settings.root import Settings


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


# Node groups of "about 64 nodes": a stack of this many nodes previews and saves its state in seconds
# (docs/benchmarks.md); past it a group is two groups.
MAX_GROUP_NODES = 128


# A group's stack is `<env>-nodes-<group>`; the environment's others end in these. A group name that ends in one,
# or holds `nodes-`, would make a stack name that reads as another stack (of this or another environment).
STACK_SUFFIXES = ("cluster", "platform")


def _group_name_problem(name: str) -> str:
    if name in STACK_SUFFIXES or name.endswith(tuple(f"-{s}" for s in STACK_SUFFIXES)):
        return "ends like the environment's cluster or platform stack"
    if name.startswith("nodes-") or "-nodes-" in name:
        return "holds `nodes-`, which separates an environment from its group in stack names"
    return ""


def _group_problems(s: Settings, add) -> None:
    for i, node in enumerate(s.nodes):
        why = _group_name_problem(node.group) if node.group else ""
        if why:
            add(
                f"nodes[{i}].group: {node.group!r} {why} (its stack would be <env>-nodes-{node.group}); "
                "name groups after racks or rows, e.g. 'rack-07'"
            )
    groups = s.node_groups
    for name, members in groups.items():
        if len(members) > MAX_GROUP_NODES:
            add(
                f"nodes: group {name!r} has {len(members)} nodes, more than {MAX_GROUP_NODES}; split it (by rack) "
                "into groups of about 64 with each node's `group`"
            )
    if s.layout == "layered":
        for i, node in enumerate(s.nodes):
            if node.group is None:
                add(
                    f"nodes[{i}].group: node {node.name!r} names no group; with layout: layered every node names its "
                    "group (its stack is <env>-nodes-<group>), e.g. the rack it sits in"
                )
    racks: dict[str, set[str]] = {}
    for node in s.nodes:
        if node.topology is not None:
            racks.setdefault(node.topology.rack, set()).add(node.group_name)
    for rack, names in sorted(racks.items()):
        if len(names) > 1:
            add(
                f"nodes: rack {rack!r} is split over groups {', '.join(sorted(names))}; node groups are aligned to "
                "racks (a rack's nodes share a leaf switch and a maintenance window): give its nodes one group"
            )


def host_warnings(s: Settings) -> list[str]:
    """Devices named by kernel name that the program will not format or wipe: worth a look, not a refusal."""
    warnings: list[str] = []
    for i, node in enumerate(s.nodes):
        for j, dev in enumerate(node.nvme):
            if not dev.format and is_kernel_name(dev.device):
                warnings.append(kernel_name_warning(f"nodes[{i}].nvme[{j}].device", dev.device))
        for j, osd in enumerate(node.osd_devices):
            if not osd.wipe and is_kernel_name(osd.device):
                warnings.append(kernel_name_warning(f"nodes[{i}].osdDevices[{j}].device", osd.device))
    return warnings


# Label prefixes that other owners write on a Node: Kubernetes itself (the NodeRestriction admission plugin
# refuses kubelet-set labels under kubernetes.io/ and k8s.io/ outside a short allow list), Node Feature
# Discovery and NVIDIA's GPU feature discovery. The program's own role and hardware labels are derived from
# `role`, `gpu` and `osdDevices`: set by hand they would make a node look like what it is not (a CPU node
# that GPU jobs are sent to). The topology labels (`topology`) are the one ml-platform.io key set here.
RESERVED_LABEL_PREFIXES = ("kubernetes.io/", "k8s.io/", "feature.node.kubernetes.io/", "nvidia.com/")
DERIVED_LABELS = frozenset(
    {
        "ml-platform.io/role",
        "ml-platform.io/control-plane",
        "ml-platform.io/gpu-model",
        "ml-platform.io/gpu-count",
        "ml-platform.io/ceph-storage",
    }
)


def _label_problems(s: Settings, add) -> None:
    for i, node in enumerate(s.nodes):
        for key in node.labels:
            domain = key.split("/", 1)[0] + "/" if "/" in key else ""
            if key in DERIVED_LABELS:
                add(
                    f"nodes[{i}].labels.{key}: the program derives this label from the node's role and hardware; "
                    "remove it (change role, gpu or osdDevices instead)"
                )
            elif domain and any(domain == p or domain.endswith("." + p) for p in RESERVED_LABEL_PREFIXES):
                add(
                    f"nodes[{i}].labels.{key}: {domain} labels belong to Kubernetes, Node Feature Discovery or the "
                    "GPU Operator, which set and overwrite them; use your own prefix, e.g. 'example.com/...'"
                )


RULES = (
    rule(_server_count_problems, "the control-plane count and cluster.initServer", "nodes cluster", "nodes"),
    rule(_control_plane_problems, "control-plane roles and the virtual IP", "nodes cluster"),
    rule(_rename_problems, "node renames", "nodes"),
    rule(_node_hardware_problems, "each node's hardware for its role", "nodes"),
    rule(_topology_problems, "the GPU nodes' InfiniBand topology", "nodes"),
    rule(_host_key_problems, "pinned host keys", "ssh nodes nas"),
    rule(_label_problems, "node labels under reserved prefixes", "nodes"),
    rule(_group_problems, "node groups: size, rack alignment, declared with layout: layered", "nodes layout"),
)
