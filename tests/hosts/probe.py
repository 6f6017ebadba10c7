"""A host's fingerprint: what the program's host steps can change, read as root over SSH.

Sections: files (path, mode, owner, sha256; symlinks by target) under the directories the steps
write, enabled unit files, active units, installed packages with versions, users and groups, mounts
and fstab with each filesystem UUID replaced by the /dev/disk/by-id name of its device (a twin's
loop devices and UUIDs differ, what was written must not), sysctls the steps manage,
and what the daemons loaded (`loaded`: each service started after its configuration changed, live
sysctls against the file, actions still pending).
"""

from __future__ import annotations

from tests.hosts.runner import Ssh

# Left out: what a machine has of its own (host keys, machine id, the NVMe host id nvme-cli generates at
# install), the harness's stand-ins (ml-platform-standin), the certificate timer's temporary file while it
# runs, the programs the step runner keeps (/var/lib/ml-platform/scripts: a cache named by SHA-256 that
# gains the program of every step run there, deletes included, so it tells which steps ran, not what they
# left; each program is verified against its name before it runs), and active targets (milestones systemd reaches
# on its own, not units the steps manage; enabled ones are compared).
_SCRIPT = r"""
set -eu
section() { echo "## $1"; }
section files
find /etc /usr/local /var/lib/ml-platform /srv /mnt -xdev \( -type f -o -type l \) 2>/dev/null \
  | grep -Ev '^/etc/(fstab$|ssh/ssh_host_|machine-id$|nvme/host(id|nqn)$|ld\.so\.cache$|\.pwd\.lock$)' \
  | grep -v ml-platform-standin | grep -Ev '^/var/lib/ml-platform/(rke2-certificates\.json\.|scripts/)' \
  | grep -Ev '^/etc/(shadow|gshadow|passwd|group|subuid|subgid)-$' \
  | LC_ALL=C sort | while IFS= read -r f; do
    if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"
    elif [ "$f" = /var/lib/ml-platform/rke2-certificates.json ]; then
      # Data, not configuration: its timer rewrites it with the dates of the certificates RKE2 has by then.
      echo "$f $(stat -c '%a %U:%G' "$f") (certificate dates)"
    else echo "$f $(stat -c '%a %U:%G' "$f") $(sha256sum <"$f" | cut -c1-16)"; fi
  done | sed -E 's/(shadow|gshadow) [0-9]+ root:shadow [0-9a-f]+$/\1 (dates vary)/'
section enabled
systemctl list-unit-files --state=enabled --no-legend --no-pager | awk '{print $1}' | LC_ALL=C sort
section active
systemctl list-units --state=active --no-legend --no-pager --plain \
  | awk '{print $1}' | grep -Ev '^(session-|user@|user-|run-|dev-|sys-|proc-|systemd-|-)|\.target$' | LC_ALL=C sort
section packages
dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\n' | LC_ALL=C sort
section users
getent passwd | cut -d: -f1,3,4,6,7 | LC_ALL=C sort
getent group | cut -d: -f1,3,4 | LC_ALL=C sort
section mounts
findmnt -rn -o SOURCE,TARGET,FSTYPE,LABEL | grep -E '^/dev/(loop|disk)' | LC_ALL=C sort || true
grep -v '^#' /etc/fstab | grep . || true
section sysctl
cat /run/ml-platform-standin/sysctl 2>/dev/null | LC_ALL=C sort || true
section hostname
hostname
section loaded
# What the daemons loaded: each service the steps configure runs since after its configuration last changed
# (its start time against the newest mtime of its files), or it is stale; and actions still pending.
loaded() {
  unit=$1; shift
  systemctl is-active --quiet "$unit" || { echo "$unit inactive"; return 0; }
  started=$(systemctl show -p ActiveEnterTimestamp --value "$unit")
  started=$(date -d "$started" +%s 2>/dev/null || echo 0)
  newest=$(stat -c %Y "$@" 2>/dev/null | sort -n | tail -1)
  if [ -z "$newest" ]; then echo "$unit (no configuration)"
  elif [ "$started" -ge "$newest" ]; then echo "$unit started after its configuration"
  else echo "$unit STALE: started $started, configuration changed $newest"; fi
}
for unit in rke2-server rke2-agent; do
  systemctl cat "$unit" >/dev/null 2>&1 && \
    loaded "$unit" /etc/rancher/rke2/{config.yaml,join-token,agent-token,registries.yaml,oidc-ca.pem}
done
systemctl cat zabbix-agent2 >/dev/null 2>&1 && \
  loaded zabbix-agent2 /etc/zabbix/zabbix_agent2.d/*.conf /etc/zabbix/ml-platform.psk
systemctl cat chrony >/dev/null 2>&1 && loaded chrony /etc/chrony/chrony.conf /etc/chrony/sources.d/*
systemctl cat minio >/dev/null 2>&1 && loaded minio /etc/default/minio /etc/minio/certs/*.* /etc/minio/certs/CAs/*
if [ -f /etc/sysctl.d/90-ml-platform.conf ]; then
  sed -n 's/^\([^#=]*[^ ]\) *= *\(.*\)$/\1 \2/p' /etc/sysctl.d/90-ml-platform.conf | while read -r key value; do
    echo "sysctl $key: file $value, live $(sysctl -n "$key" 2>/dev/null || echo none)"
  done
fi
systemctl show -p NeedDaemonReload --value ml-platform-rke2-certificates.timer 2>/dev/null \
  | sed 's/^/certificate timer needs a daemon-reload: /'
ls /var/lib/ml-platform/pending 2>/dev/null | sed 's/^/pending: /'
"""


def fingerprint(ssh: Ssh, address: str) -> dict[str, list[str]]:
    proc = ssh.sudo(address, _SCRIPT + _normalise_uuids())
    if proc.returncode != 0:
        raise RuntimeError(f"fingerprint of {address} failed: {proc.stderr[-1000:]}")
    sections: dict[str, list[str]] = {}
    current = None
    for line in proc.stdout.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:], [])
        elif current is not None:
            current.append(line)
    uuids = dict(line.split(" ", 1) for line in sections.pop("uuids", []))
    loops = dict(line.split(" ", 1) for line in sections.pop("loops", []))
    for name, lines in sections.items():
        text = "\n".join(lines)
        for uuid, disk in uuids.items():
            text = text.replace(uuid, f"<uuid of {disk}>")
        for loop, disk in loops.items():
            text = text.replace(f"{loop} ", f"{disk} ")
        sections[name] = text.splitlines()
    # fstab and files holding a UUID hash differently on a twin: compare them by their normalised text.
    return sections


def _normalise_uuids() -> str:
    return r"""
section uuids
for link in /dev/disk/by-id/*; do
  [ -e "$link" ] || continue
  uuid=$(blkid -s UUID -o value "$link" 2>/dev/null || true)
  [ -z "$uuid" ] || echo "$uuid $(basename "$link")"
done
section loops
for link in /dev/disk/by-id/*; do [ -e "$link" ] && echo "$(readlink -f "$link") $(basename "$link")"; done
section fstab
grep -v '^#' /etc/fstab | grep . || true
"""


def differences(a: dict[str, list[str]], b: dict[str, list[str]]) -> list[str]:
    """Lines in one fingerprint and not the other, per section ('-' only in a, '+' only in b)."""
    out = []
    for section in sorted(set(a) | set(b)):
        left, right = set(a.get(section, [])), set(b.get(section, []))
        out += [f"{section}: - {line}" for line in sorted(left - right)]
        out += [f"{section}: + {line}" for line in sorted(right - left)]
    return out
