#!/usr/bin/env bash
# Print the admin kubeconfig of the cluster, with the server address rewritten to the API endpoint
# and names set to the cluster's, once the API answers through that endpoint. The output is secret:
# the caller disables logging and marks stdout secret. Diagnostics go to stderr.
# CERTIFICATE_ROTATION: `cluster.certificateRotation`; raising it re-runs this step after the servers'
# certificates were rotated (the admin client certificate in rke2.yaml is new).
# Parameters: API_ENDPOINT API_PORT CLUSTER_NAME [TIMEOUT] [CERTIFICATE_ROTATION]
set -euo pipefail
: "${API_ENDPOINT:?}" "${API_PORT:?}" "${CLUSTER_NAME:?}" "${TIMEOUT:=900}" "${CERTIFICATE_ROTATION:=0}"
umask 077

if ((CERTIFICATE_ROTATION > 0)); then
  note "reading the admin kubeconfig after certificate rotation $CERTIFICATE_ROTATION"
fi

wait_until "$TIMEOUT" "$ADMIN_KUBECONFIG" test -s "$ADMIN_KUBECONFIG"
kubeconfig=$(mktemp)
trap 'rm -f "$kubeconfig"' EXIT
sed -E \
  -e "s#server: https://127\.0\.0\.1:[0-9]+#server: https://$API_ENDPOINT:$API_PORT#" \
  -e "s#^([[:space:]]*(- )?(name|cluster|user|current-context)): default\$#\1: $CLUSTER_NAME#" \
  "$ADMIN_KUBECONFIG" >"$kubeconfig"
wait_until "$TIMEOUT" "the API at https://$API_ENDPOINT:$API_PORT to answer" \
  "$KUBECTL" --kubeconfig "$kubeconfig" get --raw=/readyz
cat "$kubeconfig"
