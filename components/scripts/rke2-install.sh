#!/usr/bin/env bash
# Install (or upgrade) RKE2 at the pinned version, write its configuration, start it and wait until
# this node is registered. The join token arrives on stdin and is written 0600; it is never printed.
# Parameters: NODE_NAME RKE2_TYPE (server|agent) RKE2_VERSION INSTALLER_URL ARTIFACT_URL
#   INSTALL_METHOD RKE2_CONFIG REGISTRIES_YAML KUBE_VIP_MANIFEST REGISTRATION_ADDRESS JOIN_TIMEOUT
#   HOST_ROOT (tests only: prefix of the paths this script reads and writes)
set -euo pipefail
: "${NODE_NAME:?}" "${RKE2_TYPE:?}" "${RKE2_VERSION:?}" "${INSTALLER_URL:?}" "${INSTALL_METHOD:?}" "${RKE2_CONFIG:?}"
: "${ARTIFACT_URL=}" "${REGISTRIES_YAML=}" "${KUBE_VIP_MANIFEST=}" "${REGISTRATION_ADDRESS=}" "${JOIN_TIMEOUT:=900}"
umask 077

token=$(cat)
[[ -n $token ]] || fail "no join token on standard input"

HOST_ROOT=${HOST_ROOT:-}
etc=$HOST_ROOT/etc/rancher/rke2
static_pods=$HOST_ROOT/var/lib/rancher/rke2/agent/pod-manifests
kubelet_kubeconfig=$HOST_ROOT/var/lib/rancher/rke2/agent/kubelet.kubeconfig

restart=false
install -d -m 0700 "$etc"
write_file "$etc/join-token" 0600 "$token" && restart=true
write_file "$etc/config.yaml" 0600 "$RKE2_CONFIG" && restart=true
if [[ -n $REGISTRIES_YAML ]]; then
  write_file "$etc/registries.yaml" 0600 "$REGISTRIES_YAML" && restart=true
else
  remove_file "$etc/registries.yaml" && restart=true
fi
if [[ -n $KUBE_VIP_MANIFEST ]]; then
  write_file "$static_pods/kube-vip.yaml" 0600 "$KUBE_VIP_MANIFEST" || true
else
  remove_file "$static_pods/kube-vip.yaml" || true
fi

installed=""
for bin in "$HOST_ROOT"{/usr/local/bin,/opt/rke2/bin,/usr/bin}/rke2; do
  if [[ -x $bin ]]; then
    installed=$("$bin" --version | awk 'NR == 1 {print $3}')
    break
  fi
done
if [[ $installed != "$RKE2_VERSION" ]]; then
  installer=$(mktemp)
  trap 'rm -f "$installer"' EXIT
  curl -sfL --retry 5 --retry-delay 5 "$INSTALLER_URL" -o "$installer"
  env INSTALL_RKE2_VERSION="$RKE2_VERSION" INSTALL_RKE2_TYPE="$RKE2_TYPE" INSTALL_RKE2_METHOD="$INSTALL_METHOD" \
    ${ARTIFACT_URL:+INSTALL_RKE2_ARTIFACT_URL="$ARTIFACT_URL"} sh "$installer" >&2
  changed "installed RKE2 $RKE2_VERSION (was: ${installed:-none})"
  restart=true
fi

unit="rke2-$RKE2_TYPE.service"
if ! systemctl is-enabled --quiet "$unit"; then
  systemctl enable "$unit" >/dev/null 2>&1
  changed "enabled $unit"
fi

ping_registration() { curl -ksf --max-time 5 "https://$REGISTRATION_ADDRESS/ping"; }

if ! systemctl is-active --quiet "$unit"; then
  if grep -q '^server:' "$etc/config.yaml"; then
    wait_until "$JOIN_TIMEOUT" "the registration address $REGISTRATION_ADDRESS to answer" ping_registration
  fi
  note "starting $unit (a first server start takes a few minutes)"
  systemctl start "$unit"
  changed "started $unit"
elif [[ $restart == true ]]; then
  systemctl restart "$unit"
  changed "restarted $unit"
fi

node_registered() {
  "$KUBECTL" --kubeconfig "$kubelet_kubeconfig" get node "$NODE_NAME"
}
wait_until "$JOIN_TIMEOUT" "node $NODE_NAME to register" node_registered
if [[ -n $REGISTRATION_ADDRESS ]]; then
  # On the init server: done only once the registration address (VIP or load balancer) answers.
  wait_until "$JOIN_TIMEOUT" "the registration address $REGISTRATION_ADDRESS to answer" ping_registration
fi
echo "RKE2 $RKE2_VERSION $RKE2_TYPE running on $NODE_NAME; node registered"
