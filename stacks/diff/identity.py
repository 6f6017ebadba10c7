"""Danger about the machines behind the names, from the two plans' settings: a node is followed by its identity (its
address, its pinned host key, its disks named by id), not by its name or its place in the list. So the review names:

- a rename without `renamedFrom`: a node left and another came with the same address, host key or disk; the up would
  drain and delete the old name's node and uninstall RKE2 from the very machine the new name then joins;
- an address given to another name: a staying node now has the address, key or disks another node had, so its steps
  run on that other machine;
- a server or storage host re-addressed (same name, new address): what stays behind at the old address: the etcd
  member registered with its old peer URL, the Ceph MON address in the monmap and the OSDs that report from it.
"""

from __future__ import annotations

from typing import Any, Optional

from stacks.diff.core import DangerClass, Sides
from stacks.diff.declared import documents

BY_ID = "/dev/disk/by-id/"


def identities(node: dict[str, Any]) -> dict[str, str]:
    """What names the machine, whatever the entry is called: key -> what it is (for the message)."""
    found = {}
    if node.get("address"):
        found[f"address {node['address']}"] = "address"
    if node.get("hostKey"):
        found[f"host key {node['hostKey'].split()[-1][-12:]}"] = "host key"
    for list_key in ("osdDevices", "nvme"):
        for device in node.get(list_key) or []:
            path = device.get("device", "") if isinstance(device, dict) else ""
            if path.startswith(BY_ID):
                found[f"disk {path}"] = "disk"
    return found


def _nodes(doc: Optional[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in (doc or {}).get("nodes", []) if isinstance(n, dict) and "name" in n}


def _shared(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(identities(a).keys() & identities(b).keys())


def _rename_danger(sides: Sides) -> list[str]:
    before, after = documents(sides.old, sides.new)
    old, new = _nodes(before), _nodes(after)
    gone, came = [n for n in old if n not in new], [n for n in new if n not in old]
    out = []
    for name in came:
        renamed_from = new[name].get("renamedFrom")
        for left in gone:
            shared = _shared(old[left], new[name])
            if not shared or renamed_from == left:
                continue
            out.append(
                f"node {left} left and {name} came with its {', '.join(shared)}: the same machine under a new name, "
                f"without renamedFrom. The up would drain and delete {left} and uninstall RKE2 on that machine (its "
                f"delete runs after {name} joins there), and {name}'s RKE2 step refuses a host that runs RKE2 as "
                f"{left}. Set nodes[name={name}].renamedFrom: {left} (docs/runbook.md §15), or give {name} its own "
                "machine"
            )
    for name in new.keys() & old.keys():
        for other in old:
            if other == name:
                continue
            moved = [key for key in _shared(old[other], new[name]) if key not in identities(old[name])]
            if moved:
                out.append(
                    f"node {name} now has {', '.join(moved)}, which was {other}'s: {name}'s host steps, drain and "
                    f"membership would run on {other}'s machine. If the machines were swapped, change one node per up; "
                    "otherwise correct the value"
                )
    return out


def _readdress_danger(sides: Sides) -> list[str]:
    before, after = documents(sides.old, sides.new)
    old, new = _nodes(before), _nodes(after)
    out = []
    for name in sorted(old.keys() & new.keys()):
        was, now = old[name].get("address"), new[name].get("address")
        if not was or not now or was == now:
            continue
        left = []
        if old[name].get("controlPlane") and new[name].get("controlPlane"):
            left.append(
                f"its etcd member stays registered at https://{was}:2380 (etcd does not follow a server's address): "
                "the restarted server cannot rejoin under it; remove the member and join it again, one server per up "
                "(docs/runbook.md §14)"
            )
        devices = [d.get("device") for d in old[name].get("osdDevices") or [] if isinstance(d, dict)]
        if devices:
            left.append(
                f"a Ceph MON placed on it keeps {was} in the monmap (Rook does not move a MON's address; it fails "
                f"over to a new MON after the MON is out), and its {len(devices)} OSD(s) ({', '.join(devices)}) "
                "restart and report from the new address: set noout first and watch `ceph -s`"
            )
        if left:
            out.append(f"node {name} re-addressed {was} -> {now}: " + "; ".join(left))
    return out


CLASSES = (
    DangerClass(
        "a machine followed by its identity (address, host key, by-id disks): a rename without renamedFrom, an "
        "address or disk given to another name",
        _rename_danger,
    ),
    DangerClass(
        "a server or storage host re-addressed: the etcd member and Ceph MON/OSDs left at the old address",
        _readdress_danger,
    ),
)
