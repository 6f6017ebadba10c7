#!/usr/bin/env bash
# Remove RKE2 from a host that left the cluster (runs only when its node is removed from the
# settings, after the node was drained and deleted). Idempotent: nothing to do when RKE2 is gone.
set -euo pipefail
for uninstall in /usr/local/bin/rke2-uninstall.sh /opt/rke2/bin/rke2-uninstall.sh /usr/bin/rke2-uninstall.sh; do
  if [[ -x $uninstall ]]; then
    "$uninstall" >&2
    changed "uninstalled RKE2 ($uninstall)"
    exit 0
  fi
done
echo "RKE2 is not installed; nothing to do"
