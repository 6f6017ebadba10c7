"""Identity of the machines and disks the settings name: each host its own host key; a device marked to be wiped or
formatted is a whole disk (never a partition or a logical volume: Rook and the mount steps accept those as they are,
but wiping one is a decision about the disk under it); no list names a filesystem's label or UUID (those exist only
where a filesystem does, and change when it is made again), nor a disk together with one of its own partitions; an
NVMe list names NVMe drives.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from settings.rules.base import rule

if TYPE_CHECKING:
    from settings.root import Settings

# What a path under /dev names, when it is not a whole disk (udev's 60-persistent-storage.rules: by-id names end in
# `-part<N>` for a partition; by-uuid, by-label, by-partuuid and by-partlabel name filesystems and partitions;
# device-mapper names logical volumes and crypt mappings).
# `always`: refused in any list; otherwise only on a device marked wipe or format.
_NOT_A_DISK = (
    (re.compile(r"^/dev/disk/by-id/.+-part\d+$"), "a partition (its by-id name ends in -partN)", False),
    (re.compile(r"^/dev/(sd|vd|hd|xvd)[a-z]+\d+$"), "a partition (a kernel disk name with a number)", False),
    (re.compile(r"^/dev/nvme\d+n\d+p\d+$"), "a partition (nvmeXnYpZ)", False),
    (re.compile(r"^/dev/disk/by-(uuid|label|partuuid|partlabel)/"), "a filesystem's or partition's name", True),
    (re.compile(r"^/dev/(mapper/|dm-\d+$)"), "a device-mapper volume (LVM, crypt)", False),
    (re.compile(r"^/dev/[a-z][a-z0-9_.+-]*/[A-Za-z0-9_.+-]+$"), "an LVM logical volume (/dev/<vg>/<lv>)", False),
)
_FIX = (
    "name the whole disk by its /dev/disk/by-id path (on the host: lsblk -o NAME,TYPE,MODEL,SERIAL, then ls -l "
    "/dev/disk/by-id/ | grep -w <disk>)"
)
# by-id prefixes of drives that are not NVMe (udev: ata- for SATA, scsi-/wwn- of SAS and SATA through libata).
_NOT_NVME = re.compile(r"^/dev/(disk/by-id/(ata|scsi|usb)-|sd[a-z]+$|vd[a-z]+$|hd[a-z]+$)")


def _disk_of_partition(path: str) -> str:
    """The disk a partition path belongs to (`...-part2` -> `...`, `/dev/sdb1` -> `/dev/sdb`), or the path."""
    for pattern, replacement in (
        (r"-part\d+$", ""),
        (r"^(/dev/nvme\d+n\d+)p\d+$", r"\1"),
        (r"^(/dev/[a-z]+)\d+$", r"\1"),
    ):
        stripped = re.sub(pattern, replacement, path)
        if stripped != path:
            return stripped
    return path


def _device_lists(s: Settings) -> Iterator[tuple[str, list[tuple[str, str]], str]]:
    """(config path, [(device, the destructive mark it carries or "")], what they are) of every device list."""
    for i, node in enumerate(s.nodes):
        if node.nvme:
            yield f"nodes[{i}].nvme", [(d.device, "format: true" * d.format) for d in node.nvme], "tier-1 NVMe"
        if node.osd_devices:
            yield f"nodes[{i}].osdDevices", [(d.device, "wipe: true" * d.wipe) for d in node.osd_devices], "Ceph OSD"
    for i, host in enumerate(s.nas.hosts):
        yield f"nas.hosts[{i}].drives", [(d.device, "format: true" * d.format) for d in host.drives], "MinIO drive"


def _device_problems(s: Settings, add) -> None:
    for path, marked, what in _device_lists(s):
        devices = [device for device, _ in marked]
        for j, (device, destructive) in enumerate(marked):
            for pattern, names, always in _NOT_A_DISK:
                if pattern.match(device) and (always or destructive):
                    why = f"marked {destructive}, which destroys the whole disk's data" if destructive else "not a disk"
                    add(f"{path}[{j}].device: {device!r} is {names}, {why}: {_FIX}")
                    break
            disk = _disk_of_partition(device)
            if disk != device and disk in devices:
                add(
                    f"{path}[{j}].device: {device!r} is a partition of {disk!r}, listed too: one disk used twice "
                    "(by the disk and by its partition, each wiped, formatted or given to Ceph on its own); list the "
                    "disk once"
                )
            if what == "tier-1 NVMe" and _NOT_NVME.match(device):
                add(
                    f"{path}[{j}].device: {device!r} is not an NVMe drive (a SATA/SAS or virtio name); tier-1 is local "
                    "NVMe: give the drive's /dev/disk/by-id/nvme-... path, or leave the disk out"
                )


def _host_key_problems(s: Settings, add) -> None:
    seen: dict[str, str] = {}
    hosts = [(f"nodes[{i}]", n.host_key) for i, n in enumerate(s.nodes)]
    hosts += [(f"nas.hosts[{i}]", h.host_key) for i, h in enumerate(s.nas.hosts)]
    for path, key in hosts:
        if not key:
            continue
        material = key.split()[-1]
        if material in seen:
            add(
                f"{path}.hostKey: the same key as {seen[material]}.hostKey: one machine under two names, or a key "
                "copied from another host; pin each host's own key (ssh-keyscan -t ed25519 ADDRESS)"
            )
        else:
            seen[material] = path


def _endpoint_problems(s: Settings, add) -> None:
    """An address that must reach one kind of machine names another: MinIO's endpoint on a cluster node (the backups
    would go into the cluster they must survive), the API endpoint on a NAS host."""
    nodes = {n.address: n.name for n in s.nodes}
    nas = {h.address: h.name for h in s.nas.hosts}
    endpoint = s.storage.minio.endpoint
    if endpoint in nodes:
        add(
            f"storage.minio.endpoint: {endpoint} is node {nodes[endpoint]}'s address; MinIO runs on the NAS hosts, "
            "outside the cluster (backups must survive its loss): give the NAS hosts' DNS name or VIP, or unset it "
            "(the first NAS host)"
        )
    api = s.cluster.api_endpoint
    if api in nas:
        add(
            f"cluster.apiEndpoint: {api} is NAS host {nas[api]}'s address; the API endpoint is a server's virtual IP "
            "or a load balancer in front of the servers: give that address"
        )


RULES = (
    rule(_endpoint_problems, "endpoints name the right kind of machine", "storage cluster nodes nas"),
    rule(
        _device_problems,
        "device lists name whole disks (no partition, LVM volume or UUID), NVMe for tier 1",
        "nodes nas",
    ),
    rule(_host_key_problems, "each host its own SSH host key", "nodes nas", whole="nodes nas"),
)
