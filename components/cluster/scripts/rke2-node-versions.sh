#!/usr/bin/env bash
# With no upgrade pending, on the init server: every Node must report RKE2_VERSION as its kubelet
# version. Runs when `cluster.rke2Version` / `deployedRke2Version` say the cluster has arrived (after an
# upgrade, or a roll-back); when a node still runs another release (an upgrade Job failed or is held,
# a roll-back skipped a node) it fails, naming them, so the settings do not claim a release the nodes
# do not run. Reads only.
# Parameters: RKE2_VERSION; KUBECTL ADMIN_KUBECONFIG (lib.sh: RKE2's kubectl and admin kubeconfig)
set -euo pipefail
: "${RKE2_VERSION:?}"

versions=$("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" --request-timeout=30s get nodes --no-headers \
  -o=custom-columns=NAME:.metadata.name,VERSION:.status.nodeInfo.kubeletVersion)
others=$(awk -v want="$RKE2_VERSION" '$2 != want {printf "%s%s (%s)", sep, $1, $2; sep = ", "}' <<<"$versions")
if [[ -n $others ]]; then
  fail "cluster.rke2Version is $RKE2_VERSION with no upgrade pending, but these nodes run another release: \
$others. Finish the upgrade (set deployedRke2Version back to the release they run, docs/runbook.md) or \
roll them back first"
fi
echo "every node ($(wc -l <<<"$versions")) runs RKE2 $RKE2_VERSION"
