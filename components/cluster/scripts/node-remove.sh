#!/usr/bin/env bash
# Runs on the init server when a node leaves the settings (or its RKE2 step is replaced): cordon and
# drain it through the eviction API (PodDisruptionBudgets are honoured; the drain fails after
# DRAIN_TIMEOUT seconds rather than force anything), then delete the Node (RKE2 also removes a
# deleted server from etcd, and the node's password secret, so the host can join again).
# A NotReady node cannot confirm that its pods stopped: the evictions still honour budgets, but the
# drain does not wait out the timeout for pods that will never report back.
# A failed drain says why: a PodDisruptionBudget, or a pod without a controller (never evicted).
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
  wait_flags=()
  ready=$("$KUBECTL" get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')
  if [[ $ready != True ]]; then
    note "node $NODE_NAME is NotReady (Ready=${ready:-none}): evicting its pods without waiting for them to stop"
    wait_flags=(--skip-wait-for-delete-timeout=1)
  fi
  errors=$(mktemp)
  trap 'rm -f "$errors"' EXIT
  if ! "$KUBECTL" drain "$NODE_NAME" --ignore-daemonsets --delete-emptydir-data \
    --timeout="${DRAIN_TIMEOUT}s" "${wait_flags[@]}" 2>"$errors" >&2; then
    cat "$errors" >&2
    if grep -q "declare no controller" "$errors"; then
      fail "drain of $NODE_NAME refused: pods without a controller run there (listed above) and would be lost; \
delete or move them, then run pulumi up again. The node stays cordoned"
    elif grep -q "disruption budget" "$errors"; then
      fail "drain of $NODE_NAME did not finish in ${DRAIN_TIMEOUT}s: a PodDisruptionBudget refuses the evictions \
(kubectl get pdb -A); the node stays cordoned. Resolve it, then run pulumi up again"
    fi
    fail "drain of $NODE_NAME failed (above); the node stays cordoned. Resolve it, then run pulumi up again"
  fi
  changed "drained $NODE_NAME"
fi
"$KUBECTL" delete node "$NODE_NAME" --wait=true >/dev/null
changed "deleted node $NODE_NAME"
