"""One rule over every claim the settings declare (`settings.declare`): no two fields hold the same thing, and none
holds what the system owns.

Each field of a claim type contributes (kind, value, path) wherever it sits, so a field added later is checked
without a line here. Refused:
- the same namespace, host name, bucket, storage class or IPv4 address claimed twice;
- one device path twice on a host; a `/dev/disk/by-id/...` path on two hosts (by-id names carry the disk's model
  and serial or WWN, so the same name on two hosts is a copy-paste mistake);
- one port twice in the same port space (the hosts' listening ports, the cluster's NodePorts);
- any two CIDRs of different networks that overlap (Ethernet, pod, service, InfiniBand, IPoIB pods), and two
  different ranges of one network that overlap;
- an address of one network inside another network's range (a node address in the pod range, an NTP server in
  the service range);
- a claim in a reserved set: namespaces Kubernetes, RKE2 and the pinned charts create, the platform's own fixed
  namespaces, and ports the cluster's own daemons listen on.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from settings.declare import Held, claims
from settings.rules.base import rule
from settings.rules.scheduling import SYSTEM_NAMESPACES
from settings.storage import BACKUP_NAMESPACE
from settings.types import looks_like_ipv4

if TYPE_CHECKING:
    from settings.root import Settings

# Namespaces the platform creates under fixed names (no setting names them): the system-upgrade-controller's
# (components/cluster/upgrades.py, NAMESPACE: its vendored manifest's namespace) and the backups' status namespace.
# tests/test_declarations.py checks that every namespace the prod and lab plans create outside the teams' is
# here, in SYSTEM_NAMESPACES or claimed by a setting.
PLATFORM_NAMESPACES = frozenset({"system-upgrade", BACKUP_NAMESPACE})
RESERVED_NAMESPACES = frozenset(SYSTEM_NAMESPACES) | PLATFORM_NAMESPACES
# Ports the cluster's own daemons listen on, on every node (RKE2 docs, "Inbound Network Rules": 9345 supervisor,
# 6443 kube-apiserver, 10250 kubelet, 2379/2380 etcd) and the Zabbix agent on every node and NAS host (10050).
_HOST_PORTS = {6443: "kube-apiserver", 9345: "the RKE2 supervisor", 10250: "the kubelet", 2379: "etcd", 2380: "etcd"}
RESERVED_PORTS = {"host": {**_HOST_PORTS, 10050: "the Zabbix agent"}}

_UNIQUE = ("namespace", "hostname", "bucket", "storage-class", "ipv4", "port", "device")
_FIX = {
    "namespace": "give each its own namespace",
    "hostname": "names must be unique over nodes and NAS hosts",
    "bucket": "a bucket serves one purpose (its own retention, locking and access): give each its own name",
    "storage-class": "give each StorageClass its own name",
    "ipv4": "addresses must be unique",
    "port": "give each its own port",
    "device": "list each disk once, by its own path",
}


def _scope(held: Held) -> tuple:
    claim = held.claim
    if claim.kind == "device":
        by_id = str(held.value).startswith("/dev/disk/by-id/")
        return ("device", "" if by_id else held.host)
    if claim.kind == "port":
        return ("port", claim.scope)
    return (claim.kind,)


def _collisions(everything: list[Held], add) -> None:
    first: dict[tuple, Held] = {}
    for held in everything:
        if not held.claim.owns or held.claim.kind not in _UNIQUE:
            continue
        key = (*_scope(held), held.value)
        other = first.setdefault(key, held)
        if other is held:
            continue
        if held.claim.scope.startswith("shared:") and held.claim.scope == other.claim.scope:
            continue  # fields of one component that may name the same thing (the component creates it once)
        where = f" (another host: {other.host})" if held.claim.kind == "device" and held.host != other.host else ""
        add(
            f"{held.path}: {held.claim.kind} {held.value!r} is also claimed by {other.path}{where}; "
            f"{_FIX[held.claim.kind]}"
        )


def _reserved(everything: list[Held], add) -> None:
    for held in everything:
        if not held.claim.owns:
            continue
        if held.claim.kind == "namespace" and held.value in RESERVED_NAMESPACES:
            add(
                f"{held.path}: namespace {held.value!r} is reserved (Kubernetes, RKE2, a pinned chart or the platform "
                f"creates and owns it: {', '.join(sorted(RESERVED_NAMESPACES))}); choose another name"
            )
        owner = RESERVED_PORTS.get(held.claim.scope, {}).get(held.value) if held.claim.kind == "port" else None
        if owner:
            add(f"{held.path}: port {held.value} is where {owner} listens on the hosts; choose another port")


def _networks(everything: list[Held], add) -> None:
    # One network's identical ranges (every GPU node's InfiniBand subnet) are one range, named by its first holder.
    cidrs = [h for h in everything if h.claim.kind == "cidr"]
    unique = {(h.claim.network, ipaddress.IPv4Network(h.value)): h for h in reversed(cidrs)}
    ranges = [(h, net) for (_, net), h in reversed(unique.items())]
    reported: set[tuple[str, str]] = set()
    for i, (held, net) in enumerate(ranges):
        for other, other_net in ranges[:i]:
            same = held.claim.network == other.claim.network
            if not net.overlaps(other_net) or (same and net == other_net) or (other.path, held.path) in reported:
                continue
            reported.add((other.path, held.path))
            kinds = f"the {held.claim.network} range" if same else f"{held.claim.network} vs {other.claim.network}"
            add(
                f"{held.path}: {net} overlaps {other_net} of {other.path} ({kinds}); every network needs its own "
                "range: choose disjoint ones"
            )
    inside: dict[tuple[str, str], list[Held]] = {}
    for held in everything:
        if held.claim.kind != "ipv4" or not looks_like_ipv4(str(held.value)):
            continue
        address, network = ipaddress.IPv4Address(held.value), held.claim.network or "ethernet"
        for owner, net in ranges:
            if owner.claim.network != network and address in net:
                inside.setdefault((owner.path, network), []).append(held)
                break
    for (owner_path, network), held_list in inside.items():
        held, owner = held_list[0], next(h for h, _ in ranges if h.path == owner_path)
        more = f" ({len(held_list)} {network} addresses in all)" if len(held_list) > 1 else ""
        add(
            f"{held.path}: {held.value} ({network}) lies inside {owner.value}, the {owner.claim.network} range of "
            f"{owner.path}{more}; choose an address outside it, or another range there"
        )


def _claim_problems(s: Settings, add) -> None:
    everything = list(claims(s))
    _collisions(everything, add)
    _reserved(everything, add)
    _networks(everything, add)


RULES = (rule(_claim_problems, "every claimed name, address, range, device, bucket and port", "*"),)
