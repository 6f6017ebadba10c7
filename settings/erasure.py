"""MinIO erasure-coding arithmetic: what a NAS layout survives, computed from its shape.

Rules (minio/docs `operations/concepts/erasure-coding.rst`, `reference/minio-server/settings/storage-class.rst`):
an erasure set holds 2-16 drives, fixed when the pool is created; parity is at most half the set; a
read needs `set - parity` drives of the set, a write the same except at parity = set/2, where it needs
`set/2 + 1` (MinIO's split-brain guard). The drives of each set are spread evenly over the hosts, so
losing k hosts takes `k x ceil(set / hosts)` drives (at most the whole set) from the worst-hit set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from settings.nodes import NasSettings
    from settings.storage import MinioSettings


def default_set_size(hosts: int, drives_per_host: int) -> int:
    """The set size MinIO picks: the largest of 2..16 that divides the drive count and spreads
    symmetrically over the hosts (a multiple or a divisor of the host count)."""
    total = hosts * drives_per_host
    for size in range(16, 1, -1):
        if total % size == 0 and (size % hosts == 0 or hosts % size == 0):
            return size
    return 0  # no valid set: the settings rules report it


def default_parity(set_size: int) -> int:
    """MinIO's default STANDARD parity for a set size: 2-3 -> 1, 4-5 -> 2, 6-7 -> 3, 8-16 -> 4."""
    return 1 if set_size < 4 else 2 if set_size < 6 else 3 if set_size < 8 else 4


def set_size_problem(hosts: int, drives_per_host: int, size: int) -> str:
    """Why `size` cannot be this layout's erasure set size ("" when it can)."""
    total = hosts * drives_per_host
    if total % size:
        return f"{size} does not divide the {total} drives ({hosts} hosts x {drives_per_host})"
    if size % hosts and hosts % size:
        return f"{size} drives do not spread evenly over {hosts} hosts (use a multiple or divisor of {hosts})"
    return ""


@dataclass(frozen=True)
class ErasureLayout:
    hosts: int
    drives_per_host: int
    set_size: int
    parity: int

    @property
    def sets(self) -> int:
        return self.hosts * self.drives_per_host // self.set_size

    @property
    def read_quorum(self) -> int:
        return self.set_size - self.parity

    @property
    def write_quorum(self) -> int:
        return self.read_quorum + 1 if 2 * self.parity == self.set_size else self.read_quorum

    @property
    def set_drives_per_host(self) -> int:
        return math.ceil(self.set_size / self.hosts)

    def _hosts_survived(self, quorum: int) -> int:
        survived = 0
        for lost in range(1, self.hosts + 1):
            if self.set_size - min(self.set_size, lost * self.set_drives_per_host) < quorum:
                break
            survived = lost
        return survived

    @property
    def read_tolerance_hosts(self) -> int:
        return self._hosts_survived(self.read_quorum)

    @property
    def write_tolerance_hosts(self) -> int:
        return self._hosts_survived(self.write_quorum)

    @property
    def usable_fraction(self) -> float:
        return self.read_quorum / self.set_size

    def describe(self) -> str:
        return (
            f"{self.hosts} hosts x {self.drives_per_host} drives = {self.sets} set(s) of {self.set_size}, "
            f"EC:{self.parity}: reads survive {self.read_tolerance_hosts} host loss(es), writes "
            f"{self.write_tolerance_hosts}, {self.usable_fraction:.1%} usable"
        )


def host_range(addresses: list[str]) -> str:
    """The NAS hosts as one MinIO ellipsis pattern: `10.20.3.{11...14}` for addresses consecutive in
    list order within one /24, the address itself for a single host; "" when no pattern fits."""
    if len(addresses) == 1:
        return addresses[0]
    prefixes = {a.rsplit(".", 1)[0] for a in addresses}
    lasts = [int(a.rsplit(".", 1)[1]) for a in addresses]
    if len(prefixes) != 1 or lasts != list(range(lasts[0], lasts[0] + len(lasts))):
        return ""
    return f"{prefixes.pop()}.{{{lasts[0]}...{lasts[-1]}}}"


def erasure_layout(minio: MinioSettings, nas: NasSettings) -> Optional[ErasureLayout]:
    """The erasure layout `storage.minio` asks for on the NAS hosts; None without NAS hosts (no tier 3).
    Valid only when the settings rules found no problem with it."""
    if not nas.hosts:
        return None
    hosts, drives = len(nas.hosts), len(nas.hosts[0].drives)
    size = minio.erasure_set_drives or default_set_size(hosts, drives)
    return ErasureLayout(hosts, drives, size, minio.parity or default_parity(size))
