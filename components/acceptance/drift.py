"""What the drift probe (checks/drift-probe.sh, a DaemonSet) reads on every node: the files the host steps
write, the directories where a hand-added file changes how the host runs, the program's sysctl and
modules-load files (live values compared with them), and the packages the host steps install.
`python -m stacks.drift` compares the fingerprints with the settings and with the node's peers."""

from __future__ import annotations

import re

from components.hosts.remote import expanded

SYSCTL_FILE = "/etc/sysctl.d/90-ml-platform.conf"
MODULE_FILES = ("/etc/modules-load.d/ml-platform.conf", "/etc/modules-load.d/ml-platform-infiniband.conf")
MEMLOCK_DROPIN = "/etc/systemd/system/rke2-agent.service.d/90-ml-platform-memlock.conf"
IPOIB_FILES = (
    "/etc/netplan/60-ml-platform-infiniband.yaml",
    "/etc/NetworkManager/system-connections/ml-platform-infiniband.nmconnection",
)
# Files the host steps write (tokens and keys are not hashed: the probe prints what it reads).
DRIFT_FILES = (
    "/etc/rancher/rke2/config.yaml",
    "/etc/rancher/rke2/registries.yaml",
    SYSCTL_FILE,
    *MODULE_FILES,
    "/etc/chrony/sources.d/ml-platform.sources",
    "/etc/NetworkManager/conf.d/ml-platform-cni.conf",
    "/var/lib/rancher/rke2/agent/pod-manifests/kube-vip.yaml",
    MEMLOCK_DROPIN,
    *IPOIB_FILES,
)
# Directories where any file counts: systemd and the kernel read every file there (sysctl.d, modules-load.d),
# RKE2 merges every config.yaml.d/*.yaml into its configuration, systemd every drop-in of its units.
OWNED_DIRS = (
    "/etc/rancher/rke2/config.yaml.d",
    "/etc/systemd/system/rke2-server.service.d",
    "/etc/systemd/system/rke2-agent.service.d",
)
SHARED_DIRS = ("/etc/sysctl.d", "/etc/modules-load.d")
DRIFT_DIRS = (*OWNED_DIRS, *SHARED_DIRS)
# Files a host script edits one line of, not owns: not fingerprinted (the rest is the site's and differs per host).
LINE_OWNED = {"/etc/hosts": "prepare-host.sh keeps one line, `127.0.1.1 <node name>`, so the node's name resolves"}
# The host scripts of cluster nodes that install packages (ensure_packages) and write files (write_file),
# read with what they include (the RKE2 step's certificate watch).
HOST_SCRIPTS = ("prepare-host.sh", "rke2-install.sh", "infiniband-host.sh", "nvme-tier1.sh")


def installed_packages() -> tuple[str, ...]:
    """Every package a cluster host script installs (`ensure_packages FAMILY PACKAGE...`), both OS families:
    a package absent on a host reads `absent`, compared with its peers."""
    names: set[str] = set()
    for script in HOST_SCRIPTS:
        for match in re.finditer(r"ensure_packages\s+(?:debian|rhel|\"\$[a-zA-Z_]+\")\s+([^;\n]+)", expanded(script)):
            names.update(w for w in match.group(1).split() if re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", w))
    return tuple(sorted(names))


def probe_environment() -> dict[str, str]:
    """The probe's parameters (environment variables)."""
    return {
        "FILES": " ".join(DRIFT_FILES),
        "DIRS": " ".join(DRIFT_DIRS),
        "SYSCTL_FILES": SYSCTL_FILE,
        "MODULE_FILES": " ".join(MODULE_FILES),
        "PACKAGES": " ".join(installed_packages()),
    }
