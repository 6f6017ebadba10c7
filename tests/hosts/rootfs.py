"""The machines' root file system: Debian 12 (minbase plus what a server install has), built once with
mmdebstrap from the Debian mirror and cached as a tarball keyed on everything that goes into it."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

SUITE = "bookworm"
MIRROR = os.environ.get("MLP_HOSTS_MIRROR", "http://deb.debian.org/debian")
# What a Debian 12 server install has that minbase lacks and the host steps or the harness rely on:
# systemd as PID 1 with its bus, sshd, sudo, and the tools an operator's host always has.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "libpam-systemd",
    "openssh-server",
    "sudo",
    "iproute2",
    "procps",
    "kmod",
    "ca-certificates",
    "curl",
    "e2fsprogs",
    "python3",
)
# What the host steps install (prepare-host.sh, infiniband-host.sh, the RKE2 step's certificate watch), downloaded
# into apt's cache of the image (not installed): the steps' apt-get still resolves, unpacks and configures
# every package for real; only the download from the mirror is saved on each machine. The image also
# keeps apt's package lists, as an installed host does.
DOWNLOADED = (
    "chrony",
    "iptables",
    "conntrack",
    "lvm2",
    "gdisk",
    "xfsprogs",
    "nvme-cli",
    "jq",
    "openssl",
    "rdma-core",
    "ibverbs-providers",
    "ibverbs-utils",
    "infiniband-diags",
    "netplan.io",
)
CACHE = Path(os.environ.get("MLP_HOSTS_CACHE", Path.home() / ".cache" / "ml-platform" / "hosts"))
# Bump when the build itself changes (not only the package list).
BUILD = "2"


def key() -> str:
    return hashlib.sha256(repr((BUILD, SUITE, MIRROR, PACKAGES, DOWNLOADED)).encode()).hexdigest()[:16]


def tarball() -> Path:
    """The cached root file system, built on the first call (about a minute, 250 MB)."""
    path = CACHE / f"debian12-{key()}.tar"
    if path.is_file():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    command = [
        "mmdebstrap",
        "--variant=minbase",
        "--format=tar",
        f"--include={','.join(PACKAGES)}",
        # Every machine gets its own host keys and machine id (see machines.py).
        "--customize-hook=rm -f $1/etc/ssh/ssh_host_* && : > $1/etc/machine-id",
        "--customize-hook=chroot $1 apt-get update -q",
        "--customize-hook=chroot $1 apt-get install -q -y --download-only --no-install-recommends "
        + " ".join(DOWNLOADED),
        "--skip=cleanup/apt/lists",
        "--skip=cleanup/apt/cache",
        SUITE,
        str(partial),
        MIRROR,
    ]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(
            f"building the machines' root file system failed: {' '.join(command)}\n{proc.stderr[-2000:]}"
        )
    partial.rename(path)
    for stale in CACHE.glob("debian12-*.tar"):  # images of earlier package lists
        if stale != path:
            stale.unlink()
    return path


if __name__ == "__main__":
    print(tarball())
