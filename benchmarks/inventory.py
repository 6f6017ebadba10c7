"""Generated inventories of N nodes with an address plan a site could actually deploy.

    python -m benchmarks.inventory N [--unpinned] [--out FILE]     # a Pulumi.<stack>.yaml to preview

Everything that is not inventory (charts, GPU, storage, scheduling, monitoring, the cluster's RKE2
settings, SSH through the bastion) is taken from `Pulumi.prod.yaml`, so the benchmark follows the
real configuration. The inventory itself:

- Roles: 30% GPU nodes (8x H100, one InfiniBand port, two tier-1 NVMe devices), the rest CPU nodes;
  3 dedicated control-plane servers (5 from 500 nodes on); one CPU agent in four is a Ceph storage
  host with 4 OSD disks named by id (`/dev/disk/by-id/wwn-...`); prod's NAS hosts and drives for MinIO.
- Racks: node addresses are 10.20.<rack>.<11+slot>, one /24 per rack. Rack 0 holds the bastion
  (.5), the API virtual IP (.10) and the servers; CPU racks hold 32 nodes, GPU racks 4 (an 8-GPU
  server draws ~10 kW, a 40 kW rack holds four); the NAS hosts have the last rack. Every node carries
  its rack as the label `ml-platform.io/rack`.
- Pod network: RKE2 and Cilium hand every node a /24 of `clusterCidr`, so it is sized for the node
  count plus a quarter for growth, rounded up to a power of two (1000 nodes: a /13 at 10.64.0.0).
- InfiniBand: host IB addresses in 10.30.0.0, a subnet sized for the GPU nodes (at least a /24); the
  IPoIB pod pool (`ipoibNetwork.range`) at 10.128.0.0, sized for prod's per-node block on every GPU
  node, and disjoint from the host addresses.
- Host keys: each host gets a well-formed ed25519 public key (derived from its name), or none with
  `ssh.allowUnpinnedHostKeys: true` (`pinned=False`).
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import ipaddress
import math
from pathlib import Path
from typing import Any, Optional

import yaml

from settings import NAMESPACE
from stacks.cli import emit

ROOT = Path(__file__).resolve().parent.parent
GPU_SHARE = 0.3
CPU_PER_RACK = 32
GPU_PER_RACK = 4
OSDS_PER_HOST = 4
NODE_NETWORK = ipaddress.IPv4Network("10.20.0.0/16")
BASTION = "10.20.0.5"
API_VIP = "10.20.0.10"
POD_BASE = ipaddress.IPv4Address("10.64.0.0")
IB_HOST_BASE = ipaddress.IPv4Address("10.30.0.0")
IPOIB_BASE = ipaddress.IPv4Address("10.128.0.0")


def prod_config() -> dict[str, Any]:
    """Pulumi.prod.yaml's settings, keys without the namespace."""
    doc = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())["config"]
    return {key.split(":", 1)[1]: value for key, value in doc.items()}


def host_key(name: str) -> str:
    """A well-formed `ssh-ed25519` public key (the wire format ssh-keyscan prints), unique per host."""
    blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + hashlib.sha256(name.encode()).digest()
    return "ssh-ed25519 " + base64.b64encode(blob).decode()


def _network(base: ipaddress.IPv4Address, addresses: int, smallest_prefix: int = 32) -> ipaddress.IPv4Network:
    """The smallest network at `base` holding `addresses` addresses, at most a /`smallest_prefix`."""
    prefix = min(smallest_prefix, 32 - math.ceil(math.log2(max(addresses, 2))))
    return ipaddress.IPv4Network(f"{base}/{prefix}")


def _name(role: str, index: int, total: int) -> str:
    return f"{role}-{index:0{max(2, len(str(total)))}d}"


class _Racks:
    """Hands out addresses rack by rack: 10.20.<rack>.<11+slot>."""

    def __init__(self) -> None:
        self.rack = 0

    def fill(self, count: int, per_rack: int) -> list[tuple[str, str]]:
        """(rack label, address) for `count` hosts in new racks of `per_rack`."""
        out = []
        for i in range(count):
            if i % per_rack == 0:
                self.rack += 1
            if self.rack > 250:
                raise ValueError(f"{count} hosts need more than 250 racks of the 10.20.0.0/16 plan")
            out.append(
                (f"rack-{self.rack:03d}", str(NODE_NETWORK.network_address + self.rack * 256 + 11 + i % per_rack))
            )
        return out


# Node groups of about this many nodes, whole racks each (servers: a group of their own).
GROUP_NODES = 64


def inventory(
    total: int, *, pinned: bool = True, gpu_share: float = GPU_SHARE, layout: str = "single"
) -> dict[str, Any]:
    """Settings (area key -> value, as in a stack file) of a `total`-node environment."""
    if total < 8:
        raise ValueError("a generated inventory needs at least 8 nodes (servers, 3 storage hosts, GPU nodes)")
    raw = prod_config()
    servers = 3 if total < 500 else 5
    gpus = round(total * gpu_share)
    agents = total - gpus - servers
    storage_hosts = max(3, agents // 4)
    storage_every = agents // storage_hosts
    racks = _Racks()
    key = (lambda name: {"hostKey": host_key(name)}) if pinned else (lambda name: {})

    nodes = [
        {
            "name": _name("cpu", i + 1, total),
            "address": str(NODE_NETWORK.network_address + 11 + i),
            "role": "cpu",
            "controlPlane": True,
            "labels": {"ml-platform.io/rack": "rack-000"},
        }
        for i in range(servers)
    ]
    for i, (rack, address) in enumerate(racks.fill(agents, CPU_PER_RACK)):
        node = {
            "name": _name("cpu", servers + i + 1, total),
            "address": address,
            "role": "cpu",
            "labels": {"ml-platform.io/rack": rack},
        }
        if i % storage_every == 0 and i // storage_every < storage_hosts:
            node["osdDevices"] = [
                {"device": f"/dev/disk/by-id/wwn-0x5000c500{servers + i + 1:04x}{d + 1:04x}", "wipe": False}
                for d in range(OSDS_PER_HOST)
            ]
        nodes.append(node)
    ib_hosts = _network(IB_HOST_BASE, gpus + 2, smallest_prefix=24)
    for i, (rack, address) in enumerate(racks.fill(gpus, GPU_PER_RACK)):
        nodes.append(
            {
                "name": _name("gpu", i + 1, total),
                "address": address,
                "role": "gpu",
                "labels": {"ml-platform.io/rack": rack},
                "gpu": {"model": "NVIDIA H100 80GB HBM3", "count": 8},
                "infiniband": {
                    "interface": "ibp65s0",
                    "address": str(ib_hosts.network_address + i + 1),
                    "prefixLength": ib_hosts.prefixlen,
                },
                # By id: settings refuse kernel names on devices marked format (they can change at boot).
                "nvme": [
                    {"device": f"/dev/disk/by-id/nvme-SAMSUNG_MZWLO3T8HCLS-00A07_S7FX{i + 1:06d}{d}", "format": True}
                    for d in (1, 2)
                ],
            }
        )
    for node in nodes:
        node.update(key(node["name"]))
    _group_by_racks(nodes)
    # Prod's NAS hosts (names, drives by id: MinIO's erasure sets are sized for them), re-addressed.
    prod_nas = raw["nas"]["hosts"]
    nas = [
        {**{k: v for k, v in host.items() if k != "hostKey"}, "address": address, **key(host["name"])}
        for host, (_, address) in zip(prod_nas, racks.fill(len(prod_nas), CPU_PER_RACK), strict=True)
    ]

    raw["cluster"] = {
        **raw["cluster"],
        "name": f"ml-bench-{total}",
        "apiEndpoint": API_VIP,
        "initServer": nodes[0]["name"],
    }
    raw["ssh"] = copy.deepcopy(raw["ssh"])
    raw["ssh"]["bastion"]["host"] = BASTION
    raw["ssh"]["allowUnpinnedHostKeys"] = not pinned
    if not pinned:
        raw["ssh"]["bastion"].pop("hostKey", None)
    raw["nodes"] = nodes
    raw["nas"] = {"hosts": nas}
    raw["layout"] = layout
    network = copy.deepcopy(raw["network"])
    network["clusterCidr"] = str(_network(POD_BASE, math.ceil(total * 1.25) * 256))
    ipoib = network["infiniband"]["ipoibNetwork"]
    ipoib["range"] = str(_network(IPOIB_BASE, gpus * ipoib["perNodeBlockSize"] + 2))
    raw["network"] = network
    raw["storage"] = copy.deepcopy(raw["storage"])
    raw["storage"]["ceph"]["monCount"] = 5 if storage_hosts >= 5 else 3
    # prod's teams (120 nominal GPUs) are kept so every size previews the same scheduling objects; a
    # generated site with fewer GPUs needs overcommit allowed to pass the quota check, and no single team
    # may ask for more GPUs than the site has, nor lend more than it is given.
    scheduling = copy.deepcopy(raw["scheduling"])
    capacity = sum(n["gpu"]["count"] for n in nodes if n.get("gpu"))
    replicas = raw["gpu"]["timeSlicing"]["replicas"] if raw["gpu"].get("timeSlicing", {}).get("enabled") else 1
    for team in scheduling["teams"]:
        for quota in team["quotas"].values():
            quota["gpus"] = min(quota.get("gpus", 0), capacity * replicas)
            if quota.get("lendingLimit", {}).get("gpus") is not None:
                quota["lendingLimit"]["gpus"] = min(quota["lendingLimit"]["gpus"], quota["gpus"])
    # A site so small that every CPU node is a server or a storage host lets team pods share them (as the lab).
    tenant_nodes = any(n.get("role") == "cpu" and not n.get("controlPlane") and not n.get("osdDevices") for n in nodes)
    # A team with an IPoIB pool of its own (prod's) gets one sized for every GPU node, after the shared pool.
    block = ipoib["perNodeBlockSize"] * gpus
    start = ipaddress.ip_network(ipoib["range"]).broadcast_address + 1
    for team in scheduling["teams"]:
        if team.get("ipoibRange"):
            pool = _network(start, block)
            team["ipoibRange"] = str(pool)
            start = pool.broadcast_address + 1
    raw["scheduling"] = {**scheduling, "allowOvercommit": True, "tenantNodesOnly": tenant_nodes}
    return raw


def _group_by_racks(nodes: list[dict[str, Any]]) -> None:
    """Each node's `group`: whole racks, in order, packed into groups of at most GROUP_NODES nodes; the servers'
    rack is the group `servers`."""
    racks: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        racks.setdefault(node["labels"]["ml-platform.io/rack"], []).append(node)
    group, size = 0, GROUP_NODES
    for rack, members in racks.items():
        if rack == "rack-000":
            name = "servers"
        else:
            if size + len(members) > GROUP_NODES:
                group, size = group + 1, 0
            size += len(members)
            name = f"group-{group:02d}"
        for node in members:
            node["group"] = name


def stack_file(raw: dict[str, Any], comment: str = "") -> str:
    """`raw` as a Pulumi.<stack>.yaml (what `python -m stacks.plan STACK --config FILE` reads)."""
    doc = {"config": {f"{NAMESPACE}:{key}": value for key, value in raw.items()}}
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    return head + yaml.safe_dump(doc, sort_keys=False, width=120)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.inventory", description=__doc__.split("\n\n")[0])
    parser.add_argument("nodes", type=int)
    parser.add_argument("--unpinned", action="store_true", help="no host keys; ssh.allowUnpinnedHostKeys: true")
    parser.add_argument("--out", type=Path, help="write here instead of standard output")
    args = parser.parse_args(argv)
    text = stack_file(
        inventory(args.nodes, pinned=not args.unpinned), f"Generated by benchmarks/inventory.py ({args.nodes} nodes)"
    )
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
