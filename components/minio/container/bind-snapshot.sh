#!/bin/sh
# Bind a team's VolumeSnapshot into the backup's platform namespace, the way Velero's CSI data mover does
# (vmware-tanzu/velero pkg/exposer/csi_snapshot.go, createBackupVSC): read the snapshot's bound
# VolumeSnapshotContent, then write a new VolumeSnapshotContent with the same snapshotHandle, pre-bound to
# the platform namespace's VolumeSnapshot (the launcher's next step creates both). Runs in the rclone image
# (busybox sh, sed, wget), reading the API through the launcher pod's own kubectl proxy on loopback
# (GET only, these paths only; the launcher's RBAC is the real limit).
#
# Parameters (environment):
#   API                 the proxy's base URL (http://127.0.0.1:8001)
#   SOURCE_NAMESPACE    the team namespace of the snapshot
#   SNAPSHOT            the snapshot's name there
#   CSI_DRIVER          the CSI driver the content must belong to (the tier-2 CephFS driver)
#   TEMPLATE            the content manifest, its snapshotHandle left as @snapshotHandle@
#   OUT                 where the content manifest goes
#   TRIES               reads of each object before giving up, 2 s apart (default 30)
set -eu

group="$API/apis/snapshot.storage.k8s.io/v1"
work=$(dirname "$OUT")

fail() {
  echo "bind-snapshot: $*" >&2
  exit 1
}

# get PATH FILE: one object, retried while the proxy starts (a native sidecar gets no readiness wait here).
get() {
  tries=0
  # pretty=false: the API server pretty-prints for a "Wget" user agent (k8s.io/apiserver
  # pkg/endpoints/handlers/negotiation/negotiate.go, isPrettyPrint); the fields below match either way.
  until wget -q -O "$2" "$group/$1?pretty=false"; do
    tries=$((tries + 1))
    [ "$tries" -lt "${TRIES:-30}" ] || fail "cannot read $1 through the API proxy (is the launcher allowed to get it?)"
    sleep 2
  done
}

# string FIELD FILE: the value of a string field that occurs once in the object (managedFields name
# fields as "f:<name>" with an object value, which this does not match).
string() {
  count=$(grep -o "\"$1\": *\"[^\"]*\"" "$2" | wc -l)
  [ "$count" -eq 1 ] || fail "$1 occurs $count times in $2, expected once"
  grep -o "\"$1\": *\"[^\"]*\"" "$2" | sed "s/.*: *\"\\([^\"]*\\)\"/\\1/"
}

get "namespaces/$SOURCE_NAMESPACE/volumesnapshots/$SNAPSHOT" "$work/source-snapshot.json"
grep -Eq '"readyToUse": *true' "$work/source-snapshot.json" || fail "$SOURCE_NAMESPACE/$SNAPSHOT is not ready to use"
content=$(string boundVolumeSnapshotContentName "$work/source-snapshot.json")
printf '%s' "$content" | grep -Eqx '[a-z0-9]([-a-z0-9.]*[a-z0-9])?' || fail "odd content name: $content"

get "volumesnapshotcontents/$content" "$work/source-content.json"
driver=$(string driver "$work/source-content.json")
[ "$driver" = "$CSI_DRIVER" ] || fail "$content belongs to the driver $driver, not $CSI_DRIVER"
handle=$(string snapshotHandle "$work/source-content.json")
# A CSI snapshot id, used as a literal below: nothing that JSON or sed would read as syntax.
printf '%s' "$handle" | grep -Eqx '[A-Za-z0-9._:-]+' || fail "odd snapshot handle in $content: $handle"

grep -q '"@snapshotHandle@"' "$TEMPLATE" || fail "$TEMPLATE has no @snapshotHandle@ to fill"
sed "s/\"@snapshotHandle@\"/\"$handle\"/" "$TEMPLATE" >"$OUT"
echo "bound $SOURCE_NAMESPACE/$SNAPSHOT ($content, snapshot $handle): $OUT"
