#!/usr/bin/env bash
# Tier-1 local NVMe on one GPU node: format the listed devices that the settings mark for it and mount
# each listed device at MOUNT_ROOT/<device basename>, where the local static provisioner discovers
# mount points and turns each into one PersistentVolume.
#
# Parameters:
#   MOUNT_ROOT    directory the provisioner watches (gpu.tier1.mountRoot)
#   FS_TYPE       xfs or ext4: the filesystem of devices this script formats (gpu.tier1.fsType)
#   NVME_DEVICES  space-separated DEVICE=ACTION entries (nodes[].nvme), ACTION one of
#                   keep          never format; mount the device only if it already holds a filesystem
#                   format        format the device only if it holds no signature at all
#                   format-force  also format a device that holds someone else's filesystem or
#                                 partition table (never one that is mounted)
#   HOST_ROOT     tests only: prefix of the files this script writes (fstab, mount points)
#
# A filesystem this script made carries the label ml-tier1 and is never formatted again, force or not,
# so a re-run changes nothing. A device that cannot be used as the settings say is reported, the other
# devices are still handled, and the step fails at the end so that `pulumi up` shows it.
# Not safe to interrupt inside mkfs: a device cut off there can carry the label on an incomplete
# filesystem, which a re-run cannot tell from its own; recovery in docs/runbook.md, section 6.
set -euo pipefail

: "${MOUNT_ROOT:?MOUNT_ROOT is required}" "${FS_TYPE:?FS_TYPE is required}" "${NVME_DEVICES:?NVME_DEVICES is required}"
HOST_ROOT=${HOST_ROOT:-}
FSTAB="$HOST_ROOT/etc/fstab"
TIER1_LABEL=ml-tier1
# nofail: a dead NVMe must not stop the node from booting; the device timeout keeps boot short.
FSTAB_OPTIONS="defaults,nofail,noatime,x-systemd.device-timeout=30s"

case $FS_TYPE in
  xfs | ext4) ;;
  *) fail "FS_TYPE must be xfs or ext4, got '$FS_TYPE'" ;;
esac

problems=0
declare -A seen_devices=()

refuse() {
  echo "refused: $*" >&2
  problems=$((problems + 1))
}

# probe DEVICE: fs_type, fs_uuid, fs_label, pt_type from blkid's low-level probe ("" when absent).
probe() {
  local out rc=0
  out=$(blkid -p -o export "$1") || rc=$?
  if ((rc == 2)); then
    out="" # nothing found: the device holds no signature
  elif ((rc != 0)); then
    fail "blkid could not probe $1 (exit $rc, e.g. ambiguous signatures); inspect it with wipefs -n $1"
  fi
  fs_type=$(sed -n 's/^TYPE=//p' <<<"$out")
  fs_uuid=$(sed -n 's/^UUID=//p' <<<"$out")
  fs_label=$(sed -n 's/^LABEL=//p' <<<"$out")
  pt_type=$(sed -n 's/^PTTYPE=//p' <<<"$out")
}

format_device() {
  local dev=$1 real=$2
  case $FS_TYPE in
    xfs) mkfs.xfs -q -L "$TIER1_LABEL" "$real" ;;
    ext4) mkfs.ext4 -q -L "$TIER1_LABEL" "$real" ;;
  esac
  changed "formatted $dev ($real) as $FS_TYPE"
}

# ensure_fstab MOUNTPOINT LINE: the fstab holds LINE as the only entry for MOUNTPOINT.
ensure_fstab() {
  local mnt=$1 line=$2 current="" others
  [[ -f $FSTAB ]] && current=$(cat "$FSTAB")
  if grep -qxF -- "$line" <<<"$current"; then
    return 0
  fi
  others=$(awk -v mnt="$mnt" '$2 != mnt' <<<"$current")
  write_file "$FSTAB" 0644 "${others:+$others$'\n'}$line" daemon-reload || true
}

# mount_device DEVICE REAL MOUNTPOINT MOUNTS: fstab entry by UUID, mount point, mounted.
mount_device() {
  local dev=$1 real=$2 mnt=$3 mounts=$4
  probe "$real"
  [[ -n $fs_uuid ]] || fail "$dev ($real) holds $fs_type without a UUID; cannot write a stable fstab entry"
  ensure_fstab "$mnt" "UUID=$fs_uuid $mnt $fs_type $FSTAB_OPTIONS 0 0"
  if [[ ! -d $HOST_ROOT$mnt ]]; then
    install -d -m 0755 "$HOST_ROOT$mnt"
    changed "created $mnt"
  fi
  if ! grep -qxF -- "$mnt" <<<"$mounts"; then
    mount -t "$fs_type" -o noatime "$real" "$mnt"
    changed "mounted $dev at $mnt"
  fi
}

handle() {
  local dev=$1 action=$2 real mnt mounts elsewhere
  real=$(readlink -f -- "$dev")
  mnt="$MOUNT_ROOT/$(basename -- "$dev")"
  if [[ -n ${seen_devices[$real]:-} ]]; then
    refuse "$dev is the same device as ${seen_devices[$real]} ($real); list it once"
    return 0
  fi
  seen_devices[$real]=$dev
  if ! lsblk -dn -o TYPE -- "$real" >/dev/null 2>&1; then
    refuse "$dev ($real) is not a block device on this host; fix nodes[].nvme"
    return 0
  fi
  # Mount points of the device and its partitions; only our own mount point is acceptable.
  mounts=$(lsblk -n -o MOUNTPOINT -- "$real" | sed '/^$/d' | sort -u)
  elsewhere=$(grep -vxF -- "$mnt" <<<"$mounts" || true)
  if [[ -n $elsewhere ]]; then
    refuse "$dev ($real) is in use, mounted at $(tr '\n' ' ' <<<"$elsewhere"); unmount it or remove it from nodes[].nvme"
    return 0
  fi
  probe "$real"

  if [[ $fs_label == "$TIER1_LABEL" && -n $fs_type ]]; then
    : # formatted by this script before: never again
  elif [[ -z $fs_type && -z $pt_type ]]; then
    if [[ $action == keep ]]; then
      refuse "$dev ($real) holds no filesystem and is not marked format: true; nothing to mount"
      return 0
    fi
    format_device "$dev" "$real"
  elif [[ $action == format-force ]]; then
    note "$dev ($real) holds ${fs_type:-a $pt_type partition table}; formatting it because force: true"
    wipefs -a -- "$real" >/dev/null
    changed "wiped the signatures on $dev ($real)"
    format_device "$dev" "$real"
  elif [[ $action == format ]]; then
    refuse "$dev ($real) already holds ${fs_type:-a $pt_type partition table}; not formatted (set force: true to reformat it, or format: false to use its filesystem)"
    return 0
  elif [[ -z $fs_type ]]; then
    refuse "$dev ($real) holds a $pt_type partition table and no filesystem; nothing to mount (list a partition, or set format: true and force: true)"
    return 0
  fi
  mount_device "$dev" "$real" "$mnt" "$mounts"
}

read -ra entries <<<"$NVME_DEVICES"
for entry in "${entries[@]}"; do
  device=${entry%=*}
  action=${entry##*=}
  case $action in
    keep | format | format-force) handle "$device" "$action" ;;
    *) fail "NVME_DEVICES entry '$entry': action must be keep, format or format-force" ;;
  esac
done

if command -v systemctl >/dev/null 2>&1; then
  # systemd generates mount units from fstab; keep them in step with the file (pending from the write on).
  apply_pending daemon-reload "reloaded systemd's units (fstab)" systemctl daemon-reload || true
fi

if ((problems > 0)); then
  fail "$problems tier-1 device(s) not set up as the settings say; see the 'refused:' lines above"
fi
