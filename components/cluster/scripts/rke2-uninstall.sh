#!/usr/bin/env bash
# Remove RKE2 from a host that left the cluster (runs when its node is removed from the settings or
# its RKE2 step is replaced, after the node was drained and deleted). Idempotent: nothing to do when
# RKE2 is gone.
# Only from the host it was installed for: when the host's config.yaml names another node (the node
# was renamed, or the address now belongs to another node), RKE2 there is live and is left alone.
# The etcd snapshots on a server are copied aside first, under KEEP_SNAPSHOTS_IN (outside the
# directories RKE2's uninstall removes): removing a server never deletes the cluster's backups.
# First the RKE2 certificate watch the RKE2 step installed (its timer, program and files), unless it belongs
# to another node name now.
# Parameters: NODE_NAME KEEP_SNAPSHOTS_IN HOST_ROOT (tests only: prefix of the paths it uses)
set -euo pipefail
: "${NODE_NAME:?}" "${KEEP_SNAPSHOTS_IN:=/var/backups/rke2-etcd-snapshots}"
HOST_ROOT=${HOST_ROOT:-}

# include rke2-certificate-watch.sh
certificate_watch_remove "$NODE_NAME"

uninstall=""
for candidate in "$HOST_ROOT"{/usr/local/bin,/opt/rke2/bin,/usr/bin}/rke2-uninstall.sh; do
  if [[ -x $candidate ]]; then
    uninstall=$candidate
    break
  fi
done
if [[ -z $uninstall ]]; then
  echo "RKE2 is not installed; nothing to do"
  exit 0
fi

config=$HOST_ROOT/etc/rancher/rke2/config.yaml
running_as=$(sed -n 's/^node-name: *["'\'']*\([^"'\'' ]*\).*/\1/p' "$config" 2>/dev/null || true)
if [[ -n $running_as && $running_as != "$NODE_NAME" ]]; then
  echo "refused: this host runs RKE2 as node '$running_as', not '$NODE_NAME'; left RKE2 alone"
  exit 0
fi

snapshots=$HOST_ROOT/var/lib/rancher/rke2/server/db/snapshots
if compgen -G "$snapshots/*" >/dev/null; then
  kept=$HOST_ROOT$KEEP_SNAPSHOTS_IN/$NODE_NAME-$(date -u +%Y%m%dT%H%M%SZ)
  install -d -m 0700 "$kept"
  cp -a "$snapshots/." "$kept/"
  changed "kept the etcd snapshots in ${kept#"$HOST_ROOT"}"
fi
"$uninstall" >&2
changed "uninstalled RKE2 ($uninstall)"
