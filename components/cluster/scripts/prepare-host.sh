#!/usr/bin/env bash
# Prepare a node for RKE2: hostname, swap off (and kept off), kernel modules, sysctls, time sync,
# packages, NetworkManager kept away from CNI interfaces. Idempotent: a second run changes nothing.
# Parameters: NODE_NAME OS_FAMILY (debian|rhel) TIME_SERVERS (space-separated) CIS_PROFILE CNI
#   HOST_ROOT (tests only: prefix of the paths this script reads and writes)
set -euo pipefail
: "${NODE_NAME:?}" "${OS_FAMILY:?}" "${TIME_SERVERS=}" "${CIS_PROFILE:=false}" "${CNI:=cilium}"
HOST_ROOT=${HOST_ROOT:-}

# Hostname: Kubernetes node names and host names should agree.
if [[ "$(hostname)" != "$NODE_NAME" ]]; then
  hostnamectl set-hostname "$NODE_NAME"
  changed "hostname set to $NODE_NAME"
fi

# The host name resolves locally, as the Debian installer sets it up (127.0.1.1): sudo and tools that
# look up their own name otherwise stall on DNS and warn on every call. The line is replaced, never
# appended again.
hosts_line="127.0.1.1 $NODE_NAME"
if ! awk -v n="$NODE_NAME" '$1 == "127.0.1.1" { for (i = 2; i <= NF; i++) if ($i == n) found = 1 } END { exit !found }' \
  "$HOST_ROOT/etc/hosts" 2>/dev/null; then
  hosts_now=$(grep -v '^127\.0\.1\.1[[:space:]]' "$HOST_ROOT/etc/hosts" || true)
  write_file "$HOST_ROOT/etc/hosts" 0644 "$(printf '%s\n%s' "$hosts_line" "$hosts_now")" || true
fi

# Swap off now, and kept off after a reboot (fstab entries commented, systemd swap units masked).
if [[ -n "$(swapon --show --noheadings 2>/dev/null)" ]]; then
  swapoff -a
  changed "swap turned off"
fi
if grep -Eq '^[^#].*[[:space:]]swap[[:space:]]' "$HOST_ROOT/etc/fstab"; then
  sed -i -E 's/^([^#].*[[:space:]]swap[[:space:]].*)$/# \1 # disabled by ml-platform/' "$HOST_ROOT/etc/fstab"
  changed "swap entries in /etc/fstab commented out"
fi
if [[ "$(systemctl is-enabled swap.target 2>/dev/null || true)" != "masked" ]]; then
  systemctl mask swap.target >/dev/null 2>&1
  changed "swap.target masked"
fi

# Kernel modules for container networking, loaded now and at boot.
write_file "$HOST_ROOT/etc/modules-load.d/ml-platform.conf" 0644 $'overlay\nbr_netfilter' || true
for module in overlay br_netfilter; do
  if [[ ! -d $HOST_ROOT/sys/module/$module ]]; then
    modprobe "$module"
    changed "loaded kernel module $module"
  fi
done

# Sysctls: forwarding and bridge netfilter for Kubernetes; inotify limits for ML workloads
# (data loaders, many watched files); CIS profile values that RKE2 checks when profile: cis.
sysctls=$'net.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1'
sysctls+=$'\nfs.inotify.max_user_instances = 8192\nfs.inotify.max_user_watches = 1048576\nfs.file-max = 2097152'
sysctls+=$'\nvm.max_map_count = 262144'
if [[ $CIS_PROFILE == true ]]; then
  sysctls+=$'\nvm.panic_on_oom = 0\nvm.overcommit_memory = 1\nkernel.panic = 10\nkernel.panic_on_oops = 1'
fi
# Applied when the file changed (marked pending before the change, so a cut between the write and the
# apply is repaired by the next run) and whenever a value the kernel holds differs from the file's.
write_file "$HOST_ROOT/etc/sysctl.d/90-ml-platform.conf" 0644 "$sysctls" sysctl || true
sysctl_system() { sysctl --system >/dev/null; }
while IFS='=' read -r key value; do
  key=${key//[[:space:]]/} value=${value#"${value%%[![:space:]]*}"}
  live=$(sysctl -n "$key" 2>/dev/null || true)
  if [[ $live != "$value" ]]; then
    pending_set sysctl
    break
  fi
done <<<"$sysctls"
apply_pending sysctl "applied the sysctls of /etc/sysctl.d (sysctl --system)" sysctl_system || true

# The CIS profile runs etcd as its own user.
if [[ $CIS_PROFILE == true ]] && ! id etcd >/dev/null 2>&1; then
  useradd --system --comment "etcd user" --shell /sbin/nologin --no-create-home --user-group etcd
  changed "created user etcd"
fi

# Packages: curl (RKE2 installer), chrony (time), iptables, lvm2 and gdisk (Ceph OSDs), xfsprogs and
# nvme-cli (tier-1 NVMe), jq and conntrack for operators.
case $OS_FAMILY in
  debian)
    ensure_packages debian curl ca-certificates chrony iptables conntrack lvm2 gdisk xfsprogs nvme-cli jq
    chrony_conf=$HOST_ROOT/etc/chrony/chrony.conf
    chrony_unit=chrony
    ;;
  rhel)
    ensure_packages rhel curl ca-certificates chrony iptables conntrack-tools lvm2 gdisk xfsprogs nvme-cli jq tar
    chrony_conf=$HOST_ROOT/etc/chrony.conf
    chrony_unit=chronyd
    ;;
  *) fail "OS_FAMILY must be debian or rhel, got '$OS_FAMILY'" ;;
esac

# Time sync: chrony with the site's servers when settings give them (etcd and TLS need sane clocks).
# A change marks the restart pending first: a run cut before the restart restarts chrony when run again.
if [[ -n $TIME_SERVERS ]]; then
  if ! grep -q '^sourcedir /etc/chrony/sources.d' "$chrony_conf"; then
    conf=$(cat "$chrony_conf") || fail "cannot read $chrony_conf"
    write_file "$chrony_conf" "$(stat -c %a "$chrony_conf")" \
      "$(printf '%s\n\n# added by ml-platform\nsourcedir /etc/chrony/sources.d' "$conf")" "restart-$chrony_unit" || true
  fi
  sources=""
  for server in $TIME_SERVERS; do
    sources+="server $server iburst"$'\n'
  done
  write_file "$HOST_ROOT/etc/chrony/sources.d/ml-platform.sources" 0644 "${sources%$'\n'}" "restart-$chrony_unit" || true
fi
if ! systemctl is-enabled --quiet "$chrony_unit" || ! systemctl is-active --quiet "$chrony_unit"; then
  systemctl enable --now "$chrony_unit" >/dev/null 2>&1 || fail "could not enable and start $chrony_unit"
  pending_clear "restart-$chrony_unit" # started now: it read the files as they are
  changed "$chrony_unit enabled and started"
fi
apply_pending "restart-$chrony_unit" "$chrony_unit restarted" systemctl restart "$chrony_unit" || true

# NetworkManager must not manage the CNI's interfaces (RKE2 known issue).
if systemctl is-active --quiet NetworkManager; then
  unmanaged="interface-name:cali*;interface-name:tunl*;interface-name:vxlan.calico;interface-name:vxlan-v6.calico"
  unmanaged+=";interface-name:wireguard.cali;interface-name:wg-v6.cali;interface-name:cilium_*;interface-name:lxc*"
  write_file "$HOST_ROOT/etc/NetworkManager/conf.d/ml-platform-cni.conf" 0644 $'[keyfile]\nunmanaged-devices='"$unmanaged" \
    reload-NetworkManager || true
  apply_pending reload-NetworkManager "NetworkManager reloaded" systemctl reload NetworkManager || true
fi

echo "host $NODE_NAME prepared (cni: $CNI)"
