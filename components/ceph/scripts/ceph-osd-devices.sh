#!/usr/bin/env bash
# Ceph OSD devices on one storage host: check every device settings list for Rook, and wipe the
# ones marked `wipe: true` -- but never a device that is in use.
#
# Rook skips, without an error, any listed device that holds partitions, a filesystem or an LVM
# signature: the OSD is simply never created. This step reports each such device, so the operator
# sees it in `pulumi up` instead of weeks later as missing capacity.
#
# Wiping (wipefs -a on the device and its partitions, sgdisk --zap-all when installed, zeroes over
# the first 100 MiB) happens only when all of these hold:
#   - the device is listed in WIPE (settings: nodes[].osdDevices[].wipe: true);
#   - it is not clean (a clean device is left alone, so re-runs change nothing);
#   - it carries no Ceph OSD signature (BlueStore label, or an LVM PV in a `ceph-*` volume group):
#     such a device is an OSD, running or stopped, of this cluster or an earlier one. `wipe: true`
#     left in settings after the first bring-up therefore never destroys an OSD; retiring one is a
#     Ceph operation (`ceph osd purge`, then zap by hand), not something this step guesses at;
#   - nothing on it is mounted or used as swap, and no device-mapper / md device sits on top of it.
#     Asking to wipe such a device is refused with an error: it is almost certainly the wrong disk.
# A listed device that does not exist is an error (a typo in settings, or a dead disk). Errors are
# reported after every other device has been handled; then the step fails.
#
# Parameters: NODE_NAME, DEVICES (space-separated device paths), WIPE (the subset to wipe).
set -euo pipefail
: "${NODE_NAME:?}" "${DEVICES:?}" "${WIPE=}"

# Every signature on one block device, space-separated ("" when none): filesystem, LVM or
# BlueStore superblocks (ext4, xfs, LVM2_member, ceph_bluestore, ...) and the partition table (gpt,
# dos). When blkid finds several superblocks it reports none ("ambivalent", exit 8): then wipefs,
# without -a a read-only lister, names them all, so a BlueStore label next to an old one is not missed.
signatures() {
  local dev=$1 rc=0 found
  local -a all
  found=$(blkid -p -o value -s TYPE "$dev" 2>/dev/null) || rc=$?
  if ((rc == 8)); then
    found=$(wipefs --noheadings --output TYPE "$dev" 2>/dev/null || true)
  fi
  found+=" $(blkid -p -o value -s PTTYPE "$dev" 2>/dev/null || true)"
  read -r -a all <<<"${found//$'\n'/ }"
  printf '%s' "${all[*]}"
}

has() { [[ " $1 " == *" $2 "* ]]; }

# The device and everything below it (partitions, LVs, ...), one path per line.
tree() { lsblk -nrpo NAME "$1"; }

# Is this device (or anything on it) a Ceph OSD? Prints what was found.
ceph_osd() {
  local dev=$1 part sig vg
  while read -r part; do
    sig=$(signatures "$part")
    if has "$sig" ceph_bluestore; then
      echo "BlueStore OSD label on $part"
      return 0
    fi
    if has "$sig" LVM2_member; then
      if ! command -v pvs >/dev/null 2>&1; then
        echo "LVM physical volume on $part (no pvs to tell whether it is a Ceph OSD; assuming it is)"
        return 0
      fi
      vg=$(pvs --noheadings -o vg_name "$part" 2>/dev/null | tr -d '[:space:]' || true)
      if [[ $vg == ceph-* ]]; then
        echo "LVM physical volume of Ceph volume group $vg on $part"
        return 0
      fi
    fi
  done < <(tree "$dev")
  return 1
}

# Is something on this device mounted, swap, or held by device-mapper / md? Prints what.
in_use() {
  local dev=$1 name type mount
  while read -r name type mount; do
    if [[ -n $mount ]]; then
      echo "$name is mounted at $mount"
      return 0
    fi
    if [[ $type != disk && $type != part ]]; then
      echo "$name ($type) is active on it"
      return 0
    fi
  done < <(lsblk -nrpo NAME,TYPE,MOUNTPOINT "$dev")
  return 1
}

# What Rook would trip over: partitions, a filesystem or another signature. "" when clean.
contents() {
  local dev=$1 parts sig
  parts=$(lsblk -nrpo TYPE "$dev" | grep -c '^part$' || true)
  sig=$(signatures "$dev")
  if ((parts > 0)); then
    printf '%s partition(s)%s' "$parts" "${sig:+ ($sig)}"
  elif [[ -n $sig ]]; then
    printf '%s' "$sig"
  fi
}

wipe() {
  local dev=$1 part
  while read -r part; do
    [[ $part == "$(lsblk -dnrpo NAME "$dev")" ]] && continue
    wipefs -a "$part" >/dev/null
  done < <(tree "$dev")
  wipefs -a "$dev" >/dev/null
  if command -v sgdisk >/dev/null 2>&1; then
    sgdisk --zap-all "$dev" >/dev/null
  fi
  dd if=/dev/zero of="$dev" bs=1M count=100 oflag=direct,dsync status=none
  if command -v udevadm >/dev/null 2>&1; then
    udevadm settle || true
  fi
}

wanted() { [[ " $WIPE " == *" $1 "* ]]; }

# A wrong device does not stop the others: every device is handled, then the step fails if any was wrong.
errors=()
read -r -a devices <<<"$DEVICES"
for dev in "${devices[@]}"; do
  if ! lsblk -dnrpo NAME "$dev" >/dev/null 2>&1; then
    errors+=("$dev is not a block device on this host; fix nodes[].osdDevices for $NODE_NAME")
    continue
  fi
  if osd=$(ceph_osd "$dev"); then
    echo "$dev: Ceph OSD ($osd); left alone"
    continue
  fi
  found=$(contents "$dev")
  if [[ -z $found ]]; then
    echo "$dev: clean; Rook can create an OSD on it"
    continue
  fi
  if ! wanted "$dev"; then
    echo "warning: $dev holds $found; Rook skips such devices, so it gets no OSD." \
      "Set wipe: true for it in nodes[].osdDevices of $NODE_NAME to clear it (destroys its data)."
    continue
  fi
  if use=$(in_use "$dev"); then
    errors+=("refusing to wipe $dev: $use; it holds $found. Check that it is the right disk")
    continue
  fi
  wipe "$dev"
  changed "wiped $dev (held $found) for a Ceph OSD"
done
if ((${#errors[@]})); then
  for error in "${errors[@]}"; do
    echo "error: $NODE_NAME: $error" >&2
  done
  exit 1
fi
