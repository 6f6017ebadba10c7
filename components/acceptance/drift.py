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
    # systemd (246 and later) applies every drop-in here to every service (systemd.unit(5), "service.d/").
    "/etc/systemd/system/service.d",
)
# modprobe.d: an `options`, `blacklist` or `install` line there changes how a module loads (modprobe.d(5)).
SHARED_DIRS = ("/etc/sysctl.d", "/etc/modules-load.d", "/etc/modprobe.d")
# Files the program never writes whose presence changes how RKE2 runs: the EnvironmentFiles its units read
# (`EnvironmentFile=-/etc/default/%N` and `-/etc/sysconfig/%N` in the units RKE2's installer writes: an
# HTTP_PROXY there reaches containerd and the kubelet), a full override of a unit in /etc/systemd/system, and
# RKE2's containerd templates (docs.rke2.io, "Configuring containerd": a config.toml.tmpl replaces the generated
# config). Each is expected absent on every node.
UNWRITTEN_FILES = (
    "/etc/default/rke2-server",
    "/etc/default/rke2-agent",
    "/etc/sysconfig/rke2-server",
    "/etc/sysconfig/rke2-agent",
    "/etc/systemd/system/rke2-server.service",
    "/etc/systemd/system/rke2-agent.service",
    "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl",
    "/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.tmpl",
)
# Modules the platform relies on: a modprobe.d line that blacklists one or installs it as a no-op is drift (the
# probe also watches every module of the program's modules-load files).
WATCHED_MODULES = ("nvidia", "nvidia_uvm", "nvidia_peermem", "mlx5_core", "mlx5_ib", "ib_ipoib", "ib_umad", "rdma_ucm")
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
        "FILES": " ".join((*DRIFT_FILES, *UNWRITTEN_FILES)),
        "WATCHED_MODULES": " ".join(WATCHED_MODULES),
        "DIRS": " ".join(DRIFT_DIRS),
        "SYSCTL_FILES": SYSCTL_FILE,
        "MODULE_FILES": " ".join(MODULE_FILES),
        "PACKAGES": " ".join(installed_packages()),
    }
