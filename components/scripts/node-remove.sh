#!/usr/bin/env bash
# Runs on the init server when a node leaves the settings: cordon and drain it through the eviction
# API (PodDisruptionBudgets are honoured; the drain fails after DRAIN_TIMEOUT seconds rather than
# force anything), then delete the Node (RKE2 also removes a deleted server from etcd).
# DRAIN=false skips the drain (tearing a whole environment down).
# Parameters: NODE_NAME DRAIN_TIMEOUT DRAIN
set -euo pipefail
: "${NODE_NAME:?}" "${DRAIN_TIMEOUT:=900}" "${DRAIN:=true}"
export KUBECONFIG=$ADMIN_KUBECONFIG

if ! "$KUBECTL" get node "$NODE_NAME" >/dev/null 2>&1; then
  echo "node $NODE_NAME is not in the cluster; nothing to do"
  exit 0
fi
if [[ $DRAIN == true ]]; then
  "$KUBECTL" cordon "$NODE_NAME" >/dev/null
  changed "cordoned $NODE_NAME"
  if ! "$KUBECTL" drain "$NODE_NAME" --ignore-daemonsets --delete-emptydir-data \
    --timeout="${DRAIN_TIMEOUT}s" >&2; then
    fail "drain of $NODE_NAME did not finish in ${DRAIN_TIMEOUT}s (a PodDisruptionBudget may block it); \
the node stays cordoned. Resolve the blocking pods, then run pulumi up again"
  fi
  changed "drained $NODE_NAME"
fi
"$KUBECTL" delete node "$NODE_NAME" --wait=true >/dev/null
changed "deleted node $NODE_NAME"
