#!/usr/bin/env bash
# Install RKE2 at RKE2_VERSION on a fresh host, write its configuration, start it and wait until
# this node is registered (or, when it was Ready before this run, Ready again).
# An installed RKE2 is never upgraded or downgraded here: upgrades are the system-upgrade-controller's
# Plans (components/upgrades.py: servers first, agents drained; pre-upgrade.sh refuses downgrades and
# skipped minors). So a configuration change on a node at another release restarts it at that release.
# With INSTALL_METHOD=rpm the RKE2 packages are excluded from the package manager's updates.
# Secrets arrive on stdin, are written 0600 and never printed: line 1 the join token (on joiners in
# RKE2's CA-pinned form K10<CA sha256>::server:... or ::node:...), line 2 on servers only the agent
# token (agent-token-file). Agents get one line: they never hold the server token.
# A CA-pinned token is checked against the CA that the registration address presents before anything
# changes, so a wrong pin never restarts a running node into a join that RKE2 refuses.
# Every wait shares one deadline (JOIN_TIMEOUT); on a timeout the unit's last journal lines are printed.
# Refuses, before changing anything, a host that runs RKE2 under another node name (unless
# RENAMED_FROM names it).
# A server whose config has no `server:` (the init server) joins the running cluster instead of
# initialising a new one whenever the registration address answers and the host has no etcd data.
# Servers join one at a time (rancher/rke2#642, #1600) while every joining server's step starts as soon
# as the init server runs: a server without etcd data first waits, in order, until each server listed
# in JOIN_AFTER ("address:6443 ...", the servers before it) answers on its API port, each within
# JOIN_TIMEOUT. RKE2 starts a server's kube-apiserver only once that server's etcd member runs.
# Once the node runs, the RKE2 certificate watch (a root timer listing the expiry dates of RKE2's certificate
# files for the Zabbix agent: include/rke2-certificate-watch.sh), installed or corrected.
# Parameters: NODE_NAME RKE2_TYPE (server|agent) RKE2_VERSION INSTALLER_URL ARTIFACT_URL
#   INSTALL_METHOD RKE2_CONFIG OIDC_CA_PEM REGISTRIES_YAML KUBE_VIP_MANIFEST REGISTRATION_ADDRESS JOIN_TIMEOUT
#   JOIN_AFTER RENAMED_FROM OS_FAMILY (debian|rhel) HOST_ROOT (tests only: prefix of the paths this script
#   reads and writes)
set -euo pipefail
: "${NODE_NAME:?}" "${RKE2_TYPE:?}" "${RKE2_VERSION:?}" "${INSTALLER_URL:?}" "${INSTALL_METHOD:?}" "${RKE2_CONFIG:?}"
: "${OS_FAMILY:?}"
: "${ARTIFACT_URL=}" "${OIDC_CA_PEM=}" "${REGISTRIES_YAML=}" "${KUBE_VIP_MANIFEST=}" "${REGISTRATION_ADDRESS=}" "${JOIN_TIMEOUT:=900}"
: "${RENAMED_FROM=}" "${JOIN_AFTER=}"
umask 077

IFS= read -r token || true
IFS= read -r agent_token || true
[[ -n $token ]] || fail "no join token on standard input"
if [[ $RKE2_TYPE == server ]]; then
  [[ -n $agent_token ]] || fail "no agent token on standard input (line 2; servers hold it for agent-token-file)"
elif [[ -n $agent_token ]]; then
  fail "an agent receives one token only (the agent token); refusing a second secret on standard input"
fi

HOST_ROOT=${HOST_ROOT:-}
etc=$HOST_ROOT/etc/rancher/rke2
static_pods=$HOST_ROOT/var/lib/rancher/rke2/agent/pod-manifests
kubelet_kubeconfig=$HOST_ROOT/var/lib/rancher/rke2/agent/kubelet.kubeconfig
etcd_data=$HOST_ROOT/var/lib/rancher/rke2/server/db/etcd
unit="rke2-$RKE2_TYPE.service"
deadline=$((SECONDS + JOIN_TIMEOUT))

# await DESCRIPTION COMMAND...: retry until the step's deadline; then print the journal and fail.
await() {
  local what=$1
  shift
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      note "last lines of the $unit journal:"
      journalctl -u "$unit" -n 40 --no-pager >&2 || true
      fail "timed out after ${JOIN_TIMEOUT}s waiting for $what (journal above)"
    fi
    sleep 5
  done
}

# include rke2-binary.sh
installed=""
[[ -z $rke2_bin ]] || installed=$("$rke2_bin" --version | awk 'NR == 1 {print $3}')

# The host's identity: the node name RKE2 was configured with here.
running_as=$(sed -n 's/^node-name: *["'\'']*\([^"'\'' ]*\).*/\1/p' "$etc/config.yaml" 2>/dev/null || true)
if [[ -n $running_as && $running_as != "$NODE_NAME" && $running_as != "$RENAMED_FROM" ]]; then
  fail "this host runs RKE2 as node '$running_as', not '$NODE_NAME'; changed nothing. If this is a rename, \
set renamedFrom: $running_as on node $NODE_NAME (docs/runbook.md, section 15); otherwise fix the node's address"
fi

ping_registration() { curl -ksf --max-time 5 "https://$REGISTRATION_ADDRESS/ping"; }

if [[ $token =~ ^K10([0-9a-f]{64}):: && -n $REGISTRATION_ADDRESS ]]; then
  pinned=${BASH_REMATCH[1]}
  await "the registration address $REGISTRATION_ADDRESS to answer" ping_registration
  cacerts=$(mktemp)
  curl -ksf --max-time 10 "https://$REGISTRATION_ADDRESS/cacerts" -o "$cacerts" || {
    rm -f "$cacerts"
    fail "could not read the cluster CA from https://$REGISTRATION_ADDRESS/cacerts; changed nothing"
  }
  presented=$(sha256sum "$cacerts" | cut -d' ' -f1)
  rm -f "$cacerts"
  [[ $presented == "$pinned" ]] || fail "the cluster at $REGISTRATION_ADDRESS presents a CA with sha256 \
$presented, the join token pins $pinned; changed nothing (docs/runbook.md, section 19)"
fi

config=$RKE2_CONFIG
if [[ $RKE2_TYPE == server && -n $REGISTRATION_ADDRESS ]] && ! grep -q '^server:' <<<"$config"; then
  # A server once joined stays joined; a server without etcd data joins whenever the cluster is up.
  if grep -q '^server:' "$etc/config.yaml" 2>/dev/null || { [[ ! -d $etcd_data ]] && ping_registration >/dev/null 2>&1; }; then
    note "the cluster at $REGISTRATION_ADDRESS is up: joining it, not initialising a new one"
    config=$(printf '%s\n%s: https://%s\n' "$config" server "$REGISTRATION_ADDRESS")
  fi
fi

# Each change marks the unit's restart pending before it is made (lib.sh, apply_pending): a run cut between
# a change and the restart restarts the unit when run again, though it finds the files right.
restart=restart-$unit
install -d -m 0700 "$etc"
write_file "$etc/join-token" 0600 "$token" "$restart" || true
if [[ $RKE2_TYPE == server ]]; then
  write_file "$etc/agent-token" 0600 "$agent_token" "$restart" || true
fi
write_file "$etc/config.yaml" 0600 "$config" "$restart" || true
if [[ -n $REGISTRIES_YAML ]]; then
  write_file "$etc/registries.yaml" 0600 "$REGISTRIES_YAML" "$restart" || true
else
  remove_file "$etc/registries.yaml" "$restart" || true
fi
if [[ -n $OIDC_CA_PEM ]]; then
  # The CA of the site's OIDC provider (kube-apiserver-arg oidc-ca-file): public, 0644.
  write_file "$etc/oidc-ca.pem" 0644 "$OIDC_CA_PEM" "$restart" || true
else
  remove_file "$etc/oidc-ca.pem" "$restart" || true
fi
if [[ -n $KUBE_VIP_MANIFEST ]]; then
  write_file "$static_pods/kube-vip.yaml" 0600 "$KUBE_VIP_MANIFEST" || true
else
  remove_file "$static_pods/kube-vip.yaml" || true
fi

node_field() {
  "$KUBECTL" --kubeconfig "$kubelet_kubeconfig" --request-timeout=10s get node "$NODE_NAME" -o "jsonpath=$1"
}
node_ready() { [[ "$(node_field '{.status.conditions[?(@.type=="Ready")].status}')" == True ]]; }
# The release this host runs (a fresh install: the wanted one).
node_at_version() { [[ "$(node_field '{.status.nodeInfo.kubeletVersion}')" == "$installed" ]]; }
# A node that was Ready must be Ready again; a new one cannot be before the CNI is installed.
was_ready=false
if systemctl is-active --quiet "$unit" && node_ready >/dev/null 2>&1; then was_ready=true; fi

if [[ -z $installed ]]; then
  pending_set "$restart"
  installer=$(mktemp)
  trap 'rm -f "$installer"' EXIT
  curl -sfL --retry 5 --retry-delay 5 --max-time 300 "$INSTALLER_URL" -o "$installer"
  env INSTALL_RKE2_VERSION="$RKE2_VERSION" INSTALL_RKE2_TYPE="$RKE2_TYPE" INSTALL_RKE2_METHOD="$INSTALL_METHOD" \
    ${ARTIFACT_URL:+INSTALL_RKE2_ARTIFACT_URL="$ARTIFACT_URL"} sh "$installer" >&2
  changed "installed RKE2 $RKE2_VERSION"
  installed=$RKE2_VERSION
elif [[ $installed != "$RKE2_VERSION" ]]; then
  note "RKE2 $installed is installed and kept: the upgrade Plans change releases (docs/upgrades.md)"
fi

# With the rpm method the package manager must never move RKE2 outside the upgrade Plans (a `dnf
# upgrade` would replace the binary the Plans put there, undrained): every section of the installer's
# repositories (rancher-rke2*.repo, rewritten by each install) excludes the RKE2 packages.
if [[ $INSTALL_METHOD == rpm ]]; then
  for repo in "$HOST_ROOT"/etc/yum.repos.d/rancher-rke2*.repo; do
    [[ -f $repo ]] || continue
    locked=$(awk '$0 != "exclude=rke2-*" {print} /^\[rancher-rke2/ {print "exclude=rke2-*"}' "$repo")
    write_file "$repo" 0644 "$locked" || true
  done
fi

if ! systemctl is-enabled --quiet "$unit"; then
  systemctl enable "$unit" >/dev/null 2>&1
  changed "enabled $unit"
fi

# Any HTTP answer (401 included) on a server's API port: its kube-apiserver, so its etcd member, runs.
api_answers() { [[ "$(curl -ks --max-time 5 -o /dev/null -w '%{http_code}' "https://$1/readyz")" =~ ^[1-5][0-9]{2}$ ]]; }

# RKE2's units are Type=notify without a start timeout: never let systemctl block on them.
if ! systemctl is-active --quiet "$unit"; then
  if grep -q '^server:' "$etc/config.yaml"; then
    await "the registration address $REGISTRATION_ADDRESS to answer" ping_registration
  fi
  if [[ $RKE2_TYPE == server && ! -d $etcd_data ]]; then
    for earlier in $JOIN_AFTER; do
      deadline=$((SECONDS + JOIN_TIMEOUT))
      await "the server before this one ($earlier) to answer: servers join one at a time" api_answers "$earlier"
    done
    deadline=$((SECONDS + JOIN_TIMEOUT))
  fi
  note "starting $unit (a first server start takes a few minutes)"
  mark "before start-$unit"
  systemctl start --no-block "$unit"
  pending_clear "$restart" # a start reads the configuration as it is now
  changed "started $unit"
elif pending "$restart"; then
  invocation=$(systemctl show -p InvocationID --value "$unit")
  # Still the old process until the restart job ran: wait for a new invocation.
  restarted() { [[ "$(systemctl show -p InvocationID --value "$unit")" != "$invocation" ]]; }
  restart_unit() { systemctl restart --no-block "$unit" && await "$unit to restart" restarted; }
  apply_pending "$restart" "restarted $unit" restart_unit
fi
await "$unit to be active" systemctl is-active --quiet "$unit"

if [[ $was_ready == true ]]; then
  # Any release: an upgrade Plan may replace the binary while this step runs.
  await "node $NODE_NAME to be Ready" node_ready
else
  await "node $NODE_NAME to register at $installed" node_at_version
fi
if [[ -n $REGISTRATION_ADDRESS ]]; then
  await "the registration address $REGISTRATION_ADDRESS to answer" ping_registration
fi

# include rke2-certificate-watch.sh
# The program the watch's timer runs (components/cluster/scripts/rke2-certificate-dates.sh).
certificate_dates_program() {
  cat <<'ML_PLATFORM_DATES'
# include rke2-certificate-dates.sh
ML_PLATFORM_DATES
}
certificate_watch_install "$NODE_NAME" "$OS_FAMILY" "$(certificate_dates_program)"
echo "RKE2 $installed $RKE2_TYPE running on $NODE_NAME; node registered"
