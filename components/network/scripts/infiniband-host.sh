#!/usr/bin/env bash
# InfiniBand on a GPU node: RDMA user space, the IPoIB interface with its static address, MTU and
# mode (persisted: netplan on debian, a NetworkManager keyfile on rhel), unlimited memlock for the
# container runtime, and a report of the IB port state. Idempotent: a second run changes nothing.
# A port that is not Active is reported, never a failure: the fabric (cabling, subnet manager) is
# outside this host.
# Parameters: NODE_NAME OS_FAMILY (debian|rhel) HOST_STACK (inbox|ofed) IB_INTERFACE IB_ADDRESS
#             IB_PREFIX IB_MTU IB_MODE (datagram|connected) NM_UUID (the keyfile's fixed UUID, rhel)
set -euo pipefail
: "${NODE_NAME:?}" "${OS_FAMILY:?}" "${HOST_STACK:?}" "${IB_INTERFACE:?}" "${IB_ADDRESS:?}" "${IB_PREFIX:?}"
: "${IB_MTU:?}" "${IB_MODE:?}" "${NM_UUID:?}"

case $IB_MODE in datagram | connected) ;; *) fail "IB_MODE must be datagram or connected, got '$IB_MODE'" ;; esac
case $HOST_STACK in inbox | ofed) ;; *) fail "HOST_STACK must be inbox or ofed, got '$HOST_STACK'" ;; esac

# RDMA user space and kernel modules. With `ofed` the Network Operator's DOCA-OFED driver container
# builds and loads the kernel drivers itself (and replaces the inbox modules); the host then gets
# neither the distribution's RDMA packages nor a modules-load entry for the inbox modules.
if [[ $HOST_STACK == inbox ]]; then
  case $OS_FAMILY in
    # ibverbs-providers holds the mlx5 verbs provider; without it ibv_devices lists nothing.
    debian) ensure_packages debian rdma-core ibverbs-providers ibverbs-utils infiniband-diags ;;
    rhel) ensure_packages rhel rdma-core libibverbs-utils infiniband-diags ;;
    *) fail "OS_FAMILY must be debian or rhel, got '$OS_FAMILY'" ;;
  esac
  # IPoIB, the umad interface (ibstat, diagnostics) and the RDMA connection manager, now and at boot.
  write_file /etc/modules-load.d/ml-platform-infiniband.conf 0644 $'ib_ipoib\nib_umad\nrdma_ucm' || true
  for module in ib_ipoib ib_umad rdma_ucm; do
    if [[ ! -d /sys/module/$module ]]; then
      modprobe "$module"
      changed "loaded kernel module $module"
    fi
  done
else
  # Switched from inbox: stop loading the inbox modules at boot; the driver container loads its own.
  remove_file /etc/modules-load.d/ml-platform-infiniband.conf || true
  note "host stack ofed: inbox RDMA packages are not installed; the Network Operator's DOCA-OFED driver container provides the drivers"
fi

# RDMA pins memory: containers inherit RLIMIT_MEMLOCK from the runtime (RKE2's containerd, started by
# rke2-agent; GPU nodes are always agents). CAP_IPC_LOCK lifts the limit only for root containers.
memlock_dropin=/etc/systemd/system/rke2-agent.service.d/90-ml-platform-memlock.conf
write_file "$memlock_dropin" 0644 $'[Service]\nLimitMEMLOCK=infinity' daemon-reload || true
apply_pending daemon-reload "reloaded systemd's units" systemctl daemon-reload || true

# The IPoIB interface, persisted. One file with a fixed name, so a renamed interface leaves nothing behind.
address="$IB_ADDRESS/$IB_PREFIX"
case $OS_FAMILY in
  debian)
    netplan_file=/etc/netplan/60-ml-platform-infiniband.yaml
    netplan="network:
  version: 2
  ethernets:
    $IB_INTERFACE:
      renderer: networkd
      dhcp4: false
      dhcp6: false
      link-local: []
      addresses: [\"$address\"]
      mtu: $IB_MTU
      infiniband-mode: $IB_MODE"
    # Ubuntu ships netplan; a Debian 12 server install does not (ifupdown): install it there.
    command -v netplan >/dev/null || ensure_packages debian netplan.io
    # netplan refuses world-readable configuration files.
    # Render it for networkd now, so it also applies to an interface that appears later; pending from
    # before the write, so a run cut after it renders it when run again.
    write_file "$netplan_file" 0600 "$netplan" netplan-generate "reconfigure-$IB_INTERFACE" || true
    render() { netplan generate && { ! systemctl is-active --quiet systemd-networkd || networkctl reload; }; }
    apply_pending netplan-generate "rendered $netplan_file for systemd-networkd" render || true
    ;;
  rhel)
    keyfile=/etc/NetworkManager/system-connections/ml-platform-infiniband.nmconnection
    connection="[connection]
id=ml-platform-infiniband
uuid=$NM_UUID
type=infiniband
interface-name=$IB_INTERFACE
autoconnect=true

[infiniband]
mtu=$IB_MTU
transport-mode=$IB_MODE

[ipv4]
method=manual
address1=$address

[ipv6]
method=disabled"
    # NetworkManager ignores keyfiles that others can read.
    write_file "$keyfile" 0600 "$connection" reload-NetworkManager-connections "reconfigure-$IB_INTERFACE" || true
    apply_pending reload-NetworkManager-connections "NetworkManager read its connections again" nmcli connection reload || true
    ;;
  *) fail "OS_FAMILY must be debian or rhel, got '$OS_FAMILY'" ;;
esac

if [[ -e /sys/class/net/$IB_INTERFACE ]]; then
  # Also re-apply when the file was right but the running interface lost its address (driver reload).
  if ! ip -4 -o addr show dev "$IB_INTERFACE" | grep -qF " inet $address "; then
    pending_set "reconfigure-$IB_INTERFACE"
  fi
  reconfigure() {
    if [[ $OS_FAMILY == debian ]] && systemctl is-active --quiet systemd-networkd; then
      # Only this interface: `netplan apply` would also bounce the Ethernet bond that carries the cluster.
      networkctl reconfigure "$IB_INTERFACE"
    elif [[ $OS_FAMILY == debian ]]; then
      netplan apply
    else
      nmcli connection up id ml-platform-infiniband >/dev/null
    fi
  }
  apply_pending "reconfigure-$IB_INTERFACE" \
    "applied the configuration of $IB_INTERFACE: $address, mtu $IB_MTU, $IB_MODE mode" reconfigure || true
else
  # With `ofed` the interface appears once the driver container runs; networkd/NetworkManager then
  # apply the persisted configuration by interface name.
  pending_clear "reconfigure-$IB_INTERFACE"
  echo "warning: interface $IB_INTERFACE does not exist (yet); its configuration is persisted and applies when it appears"
fi

# Report: what the interface runs with, whether the ports are Active, the runtime's memlock limit.
if [[ -e /sys/class/net/$IB_INTERFACE ]]; then
  actual_mode=$(cat "/sys/class/net/$IB_INTERFACE/mode" 2>/dev/null || echo unknown)
  actual_mtu=$(cat "/sys/class/net/$IB_INTERFACE/mtu" 2>/dev/null || echo unknown)
  actual_addresses=$(ip -4 -o addr show dev "$IB_INTERFACE" | awk '{printf "%s ", $4}')
  echo "ipoib: $IB_INTERFACE mode $actual_mode, mtu $actual_mtu, addresses ${actual_addresses:-none} (wanted $IB_MODE, $IB_MTU, $address)"
  if [[ $actual_mode != "$IB_MODE" ]]; then
    echo "warning: $IB_INTERFACE runs in $actual_mode mode; ConnectX-4 and later use enhanced IPoIB, which is datagram only"
  fi
fi
active=0
ports=0
for state_file in /sys/class/infiniband/*/ports/*/state; do
  [[ -e $state_file ]] || continue
  port_dir=$(dirname "$state_file")
  device=$(basename "$(dirname "$(dirname "$port_dir")")")
  state=$(cat "$state_file")
  phys=$(cat "$port_dir/phys_state" 2>/dev/null || echo unknown)
  rate=$(cat "$port_dir/rate" 2>/dev/null || echo unknown)
  ports=$((ports + 1))
  [[ $state == *ACTIVE* ]] && active=$((active + 1))
  echo "infiniband: $device port $(basename "$port_dir"): state ${state#*: }, physical ${phys#*: }, rate $rate"
done
if ((ports == 0)); then
  echo "warning: no InfiniBand ports found under /sys/class/infiniband (driver not loaded yet?)"
elif ((active == 0)); then
  echo "warning: no InfiniBand port is Active on $NODE_NAME (check cabling and the subnet manager); RDMA will not work"
else
  echo "infiniband: $active of $ports port(s) Active on $NODE_NAME"
fi
containerd_pid=$(pgrep -x containerd | head -n 1 || true)
if [[ -n $containerd_pid ]]; then
  memlock=$(awk '/^Max locked memory/ {print $4}' "/proc/$containerd_pid/limits")
  if [[ $memlock != unlimited ]]; then
    echo "warning: the running containerd has a memlock limit of $memlock bytes; restart rke2-agent (or reboot) in a maintenance window to apply LimitMEMLOCK=infinity"
  fi
fi
echo "infiniband host $NODE_NAME ready (host stack: $HOST_STACK)"
