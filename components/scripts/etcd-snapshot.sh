#!/usr/bin/env bash
# Save an on-demand etcd snapshot named SNAPSHOT_NAME on this server (RKE2 appends the node name and a
# timestamp; with etcd-s3 configured it is uploaded too). Runs before the upgrade Plans change, so
# `pre-upgrade-<version>` holds the cluster as it was before the first server is upgraded
# (restore: docs/runbook.md, section 17). Idempotent: a snapshot of that name already on disk is kept.
# Parameters: SNAPSHOT_NAME HOST_ROOT (tests only: prefix of the paths this script reads)
set -euo pipefail
: "${SNAPSHOT_NAME:?}"

HOST_ROOT=${HOST_ROOT:-}
snapshots=$HOST_ROOT/var/lib/rancher/rke2/server/db/snapshots

rke2_bin=""
for bin in "$HOST_ROOT"{/usr/local/bin,/opt/rke2/bin,/usr/bin}/rke2; do
  if [[ -x $bin ]]; then
    rke2_bin=$bin
    break
  fi
done
[[ -n $rke2_bin ]] || fail "RKE2 is not installed on this host: no etcd to snapshot"

if compgen -G "$snapshots/$SNAPSHOT_NAME-*" >/dev/null; then
  echo "etcd snapshot $SNAPSHOT_NAME already saved"
  exit 0
fi
"$rke2_bin" etcd-snapshot save --name "$SNAPSHOT_NAME" >&2
changed "saved etcd snapshot $SNAPSHOT_NAME"
