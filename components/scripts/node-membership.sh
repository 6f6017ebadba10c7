#!/usr/bin/env bash
# Runs on the init server for one node: wait until the Node object exists, then reconcile the
# labels and taints that the settings give it. RKE2's node-label/node-taint only act when a node
# first registers (kubernetes#59314), so later changes in settings are applied here. Labels and
# taints that this program set before but the settings no longer give are removed; the keys it
# manages are remembered in annotations on the Node.
# Parameters: NODE_NAME LABELS ("k=v k=v") TAINTS ("k=v:Effect ...") REGISTER_TIMEOUT
set -euo pipefail
: "${NODE_NAME:?}" "${LABELS=}" "${TAINTS=}" "${REGISTER_TIMEOUT:=900}"
export KUBECONFIG=$ADMIN_KUBECONFIG
node="node/$NODE_NAME"

wait_until "$REGISTER_TIMEOUT" "node $NODE_NAME to register" "$KUBECTL" get "$node"

annotation() { "$KUBECTL" get "$node" -o "jsonpath={.metadata.annotations.ml-platform\.io/$1}"; }
label_value() { "$KUBECTL" get "$node" -o "jsonpath={.metadata.labels.${1//./\\.}}"; }
taint_present() { "$KUBECTL" get "$node" -o jsonpath='{range .spec.taints[*]}{.key}={.value}:{.effect}{"\n"}{end}' | grep -qxF "$1"; }

read -r -a labels <<<"$LABELS"
read -r -a taints <<<"$TAINTS"
wanted_label_keys=" "
for label in "${labels[@]}"; do wanted_label_keys+="${label%%=*} "; done
wanted_taint_keys=" "
for taint in "${taints[@]}"; do wanted_taint_keys+="${taint%%=*} "; done

IFS=, read -r -a old_label_keys <<<"$(annotation managed-labels)"
for key in "${old_label_keys[@]}"; do
  if [[ -n $key && $wanted_label_keys != *" $key "* ]]; then
    "$KUBECTL" label "$node" "$key-" >/dev/null
    changed "removed label $key"
  fi
done
for label in "${labels[@]}"; do
  if [[ "$(label_value "${label%%=*}")" != "${label#*=}" ]]; then
    "$KUBECTL" label --overwrite "$node" "$label" >/dev/null
    changed "label $label"
  fi
done

IFS=, read -r -a old_taint_keys <<<"$(annotation managed-taints)"
for key in "${old_taint_keys[@]}"; do
  if [[ -n $key && $wanted_taint_keys != *" $key "* ]]; then
    "$KUBECTL" taint nodes "$NODE_NAME" "$key-" >/dev/null 2>&1 || true
    changed "removed taint $key"
  fi
done
for taint in "${taints[@]}"; do
  if ! taint_present "$taint"; then
    "$KUBECTL" taint nodes --overwrite "$NODE_NAME" "$taint" >/dev/null
    changed "taint $taint"
  fi
done

label_keys=$(tr ' ' '\n' <<<"$wanted_label_keys" | grep -v '^$' | paste -sd, -)
taint_keys=$(tr ' ' '\n' <<<"$wanted_taint_keys" | grep -v '^$' | paste -sd, - || true)
if [[ "$(annotation managed-labels)" != "$label_keys" || "$(annotation managed-taints)" != "$taint_keys" ]]; then
  "$KUBECTL" annotate --overwrite "$node" "ml-platform.io/managed-labels=$label_keys" \
    "ml-platform.io/managed-taints=$taint_keys" >/dev/null
  changed "recorded managed label and taint keys"
fi
echo "node $NODE_NAME: labels and taints as in settings"
