"""Every stand-in of the host harness, declared here and nowhere else, and named in the test output.

A machine here is a container on a shared kernel: what needs its own kernel or hardware cannot be had,
and RKE2's and MinIO's release files cannot be downloaded. Everything not listed is real: Debian's
packages from the mirror, systemd units and timers, users, files, fstab, sshd, sudo, XFS on loop devices.
"""

from __future__ import annotations

from pathlib import Path

# name -> what stands in, and why; printed by the tests (tests/test_hosts.py) and docs/testing.md.
STANDINS = {
    "kernel modules": "modprobe is /usr/local/sbin/modprobe, which marks the module loaded in a private "
    "/sys/module (a tmpfs): a container cannot load modules into the shared kernel",
    "sysctls": "/proc/sys is read-only in these containers (net.* included): /usr/local/sbin/sysctl records "
    "what `sysctl --system` would apply in /run/ml-platform-standin/sysctl instead of applying it, and "
    "`sysctl -n KEY` reads the value recorded there",
    "clock": "chronyd runs for real with -x (it never sets the clock): a container has no CAP_SYS_TIME",
    "disks": "NVMe and OSD disks are loop devices over sparse files; their /dev/disk/by-id names are "
    "links made by systemd-tmpfiles at boot (there is no udev in a container)",
    "GPUs": "none; the NVIDIA driver version the drift probe reads is a file in the private /sys/module",
    "InfiniBand": "no HCA and no ib0: the step persists the IPoIB configuration and reports no ports",
    "RKE2 release files": "the installer and the release tarball come from the harness's https artifact server "
    "(tests/hosts/artifacts.py) through the stack's cluster.install.installerUrl and artifactUrl; the tarball "
    "holds a stand-in rke2 (tests/hosts/rke2_standin/): `rke2 --version`, rke2-server/rke2-agent units that "
    "answer /ping, /cacerts (the cluster CA, its pin checked) and /readyz, register each node with its join "
    "token at the init server, and a kubectl for the calls the steps make. No containerd, etcd or Kubernetes",
    "MinIO server binary": "storage.minio.artifact points at the artifact server's stand-in `minio` "
    "(tests/hosts/minio_standin/minio, Python; its real sha256 in the stack file): `minio --version`, and "
    "`minio server` as the step's unit runs it: it refuses to start without the root credentials, the certs "
    "directory's TLS key pair or with a drive of this host that is not a mounted XFS filesystem holding its "
    "writable data directory, writes each drive's .minio.sys/format.json once, reports ready to systemd "
    "(Type=notify) and serves https on the configured port: /minio/health/cluster 200 while its drives are "
    "mounted. No object storage, no erasure coding, no other hosts; everything else of the step is real",
    "Zabbix apt repository": "monitoring.nasAgent points at a repository of the artifact server "
    "(tests/hosts/nas.py) holding Debian 12's own zabbix-agent2 package (real: its version pinned, its "
    "dependencies from the Debian mirror), signed by a key the harness generates and serves as the binary "
    "key; not repo.zabbix.com's 7.0 build, which cannot be downloaded here. No Zabbix server answers the "
    "agent's active checks",
}

_MODPROBE = """#!/bin/sh
# Stand-in (tests/hosts/standins.py): "load" a kernel module into this container's private /sys/module.
for arg in "$@"; do case $arg in -*) ;; *) mkdir -p "/sys/module/$arg" ;; esac; done
"""

_SYSCTL = """#!/bin/bash
# Stand-in (tests/hosts/standins.py): /proc/sys is read-only in this container; `sysctl --system` records
# what it would apply in /run/ml-platform-standin/sysctl (the last value of each key wins, as sysctl's).
set -euo pipefail
record=/run/ml-platform-standin/sysctl
mkdir -p "$(dirname "$record")"
if [[ ${1-} == --system ]]; then
  shopt -s nullglob
  for file in /usr/lib/sysctl.d/*.conf /etc/sysctl.d/*.conf /etc/sysctl.conf; do
    while IFS= read -r line; do
      line=${line%%#*}
      [[ $line == *=* ]] || continue
      key=$(echo "${line%%=*}" | tr -d '[:space:]' | tr / .)
      key=${key#-}  # a leading '-': sysctl ignores the key's errors; not part of the name
      value=$(echo "${line#*=}" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
      { grep -v "^$key = " "$record" 2>/dev/null || true; echo "$key = $value"; } >"$record.new"
      mv "$record.new" "$record"
    done <"$file"
  done
  exit 0
fi
# `sysctl -n KEY`: the value it recorded (what the kernel would hold), as the step compares it with the file.
if [[ ${1-} == -n && -f $record ]] && grep -q "^${2-} = " "$record"; then
  sed -n "s/^${2//./\\.} = //p" "$record" | tail -1
  exit 0
fi
exec /usr/sbin/sysctl "$@"
"""

_CHRONY = """[Unit]
# Stand-in (tests/hosts/standins.py): no CAP_SYS_TIME in a container; chronyd runs without setting the clock.
ConditionCapability=
[Service]
ExecStart=
ExecStart=!/usr/sbin/chronyd $DAEMON_OPTS -x
"""


def install(root: Path, gateway: str) -> None:
    """Put the stand-ins into a machine's root before it boots."""
    for name, text in (("modprobe", _MODPROBE), ("sysctl", _SYSCTL)):
        path = root / "usr/local/sbin" / name
        path.write_text(text)
        path.chmod(0o755)
    dropin = root / "etc/systemd/system/chrony.service.d/ml-platform-standin.conf"
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(_CHRONY)


def link_disks(root: Path, disks: dict[str, str]) -> None:
    """/dev/disk/by-id/<name> -> the loop device, made at boot by systemd-tmpfiles."""
    if disks:
        lines = [f"L /dev/disk/by-id/{name} - - - - {loop}" for name, loop in sorted(disks.items())]
        (root / "etc/tmpfiles.d/ml-platform-standin-disks.conf").write_text("\n".join(lines) + "\n")


def nspawn_options(root: Path) -> list[str]:
    """A private, writable /sys/module for the modprobe stand-in."""
    return ["--tmpfs=/sys/module:mode=0755"]


def report() -> str:
    return "stand-ins (everything else is real):\n" + "\n".join(f"  {k}: {v}" for k, v in STANDINS.items())
