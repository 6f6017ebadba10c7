#!/bin/sh
# The drift probe (one pod per node, a DaemonSet): every INTERVAL seconds, print this node's fingerprint
# as one line, `FINGERPRINT {json}`: RKE2 version (the installed binary's, run in the host's root),
# kernel, NVIDIA driver and Mellanox (OFED) driver versions (from the host's /sys/module), and the
# sha256 of each file in FILES that the host steps write (under HOST, the host's root mounted read-only;
# "absent" when missing). `python -m stacks.drift` reads the lines and compares them with the settings.
# Parameters: NODE_NAME HOST FILES ("path path ...") INTERVAL ONCE (tests: one fingerprint, then exit)
set -eu
: "${NODE_NAME:?}" "${HOST:=/host}" "${FILES:=}" "${INTERVAL:=3600}" "${ONCE:=false}" "${SYS:=/sys}"

rke2_version() {
  for bin in /usr/local/bin/rke2 /opt/rke2/bin/rke2 /usr/bin/rke2; do
    if [ -x "$HOST$bin" ]; then
      chroot "$HOST" "$bin" --version 2>/dev/null | awk 'NR == 1 { print $3 }'
      return
    fi
  done
}

module_version() { cat "$SYS/module/$1/version" 2>/dev/null || true; }

fingerprint() {
  files=""
  for path in $FILES; do
    if [ -f "$HOST$path" ]; then
      sum=$(sha256sum "$HOST$path" | cut -d' ' -f1)
    else
      sum=absent
    fi
    files="$files${files:+,}\"$path\":\"$sum\""
  done
  printf 'FINGERPRINT {"node":"%s","rke2":"%s","kernel":"%s","nvidia":"%s","ofed":"%s","files":{%s}}\n' \
    "$NODE_NAME" "$(rke2_version)" "$(uname -r)" "$(module_version nvidia)" "$(module_version mlx5_core)" "$files"
}

while :; do
  fingerprint
  [ "$ONCE" = true ] && exit 0
  sleep "$INTERVAL"
done
