#!/usr/bin/env bash
# Before the upgrade Plans exist, on the init server: refuse a downgrade and a jump of more than one
# minor version from the release this server runs (Kubernetes' version skew policy; RKE2 cannot start
# on an etcd a newer release wrote), then save a new etcd snapshot `pre-upgrade-<version>-<unix time>`
# (RKE2 appends the node name and its own timestamp; with etcd-s3 configured it is uploaded too), the
# way back to the cluster as it was (docs/runbook.md, rolling an upgrade back). Every Plan waits for
# this step. Each run is an attempt and saves its own snapshot, never reusing an older attempt's: the
# step runs only when the upgrade's version changes or a new attempt starts, not on every `up`.
# Parameters: RKE2_VERSION HOST_ROOT (tests only: prefix of the paths this script reads)
set -euo pipefail
: "${RKE2_VERSION:?}"

HOST_ROOT=${HOST_ROOT:-}

# include rke2-binary.sh
[[ -n $rke2_bin ]] || fail "RKE2 is not installed on this host: no etcd to snapshot"
installed=$("$rke2_bin" --version | awk 'NR == 1 {print $3}')

release() { [[ $1 =~ ^v1\.([0-9]+)\.([0-9]+)\+rke2r([0-9]+)$ ]] && printf '%05d%05d%05d' "${BASH_REMATCH[@]:1:3}"; }
have=$(release "$installed") || fail "cannot read the installed RKE2 version '$installed'"
want=$(release "$RKE2_VERSION") || fail "RKE2_VERSION '$RKE2_VERSION' is not an RKE2 release"
if [[ $want < $have ]]; then
  fail "this server runs RKE2 $installed; $RKE2_VERSION would be a downgrade, which RKE2 does not support; \
no upgrade Plan was created"
elif ((10#${want:0:5} > 10#${have:0:5} + 1)); then
  fail "this server runs RKE2 $installed; $RKE2_VERSION skips a minor version; upgrade one minor at a time; \
no upgrade Plan was created"
fi

# RKE2 snapshot names allow letters, digits, '-', '_' and '.': '+' becomes '-' as in the image tags.
name=pre-upgrade-${RKE2_VERSION//+/-}-$(date +%s)
"$rke2_bin" etcd-snapshot save --name "$name" >&2
changed "saved etcd snapshot $name (RKE2 $installed runs here)"
