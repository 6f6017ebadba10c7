#!/usr/bin/env bash
# rke2-certificate-watch.sh: installs rke2-certificate-dates (the script in DATES_SCRIPT) and a systemd
# timer that runs it as root 2 minutes after boot (or after this install) and then every hour, so the
# Zabbix agent can read when each RKE2 certificate expires (the template "ml-platform RKE2 certificate
# files"). Runs it once now too. Idempotent: writes only what differs, reloads systemd only then.
# ACTION=remove (the step's delete): stops the timer and removes the script, the units and the file.
# Parameters: ACTION (install|remove) NODE_NAME OS_FAMILY (debian|rhel) DATES_SCRIPT (the script's text)
#             HOST_ROOT (tests only: prefix of the paths this script writes)
set -euo pipefail

: "${ACTION:?}" "${NODE_NAME:?}"
HOST_ROOT=${HOST_ROOT:-}
unit=ml-platform-rke2-certificates
bin=/usr/local/libexec/ml-platform/rke2-certificate-dates
units=/etc/systemd/system
state=/var/lib/ml-platform

if [[ $ACTION == remove ]]; then
  # A renamed node (the same machine under a new name) installed it again under its new name before
  # the old name's step is deleted: leave that alone.
  owner=$(cat "$HOST_ROOT$state/rke2-certificates.node" 2>/dev/null || true)
  if [[ -n $owner && $owner != "$NODE_NAME" ]]; then
    note "left alone: the certificate timer here belongs to node $owner now, not $NODE_NAME"
    exit 0
  fi
  if systemctl is-enabled --quiet "$unit.timer" 2>/dev/null || systemctl is-active --quiet "$unit.timer"; then
    systemctl disable --now "$unit.timer" >/dev/null 2>&1
    changed "stopped $unit.timer"
  fi
  gone=0
  for file in "$units/$unit.timer" "$units/$unit.service" "$bin" "$state/rke2-certificates.json" \
    "$state/rke2-certificates.node"; do
    if remove_file "$HOST_ROOT$file"; then gone=1; fi
  done
  if ((gone)); then systemctl daemon-reload; fi
  exit 0
fi
[[ $ACTION == install ]] || fail "ACTION must be install or remove, got '$ACTION'"
: "${OS_FAMILY:?}" "${DATES_SCRIPT:?}"

ensure_packages "$OS_FAMILY" openssl

reload=0
install -d -m 0755 "$HOST_ROOT$state"
write_file "$HOST_ROOT$state/rke2-certificates.node" 0644 "$NODE_NAME" || true
write_file "$HOST_ROOT$bin" 0755 "$DATES_SCRIPT" || true
if write_file "$HOST_ROOT$units/$unit.service" 0644 "[Unit]
Description=ml-platform: expiry dates of the RKE2 certificates, for the Zabbix agent

[Service]
Type=oneshot
ExecStart=$bin
# Root to read RKE2's 0600 files: reading any file is the one capability kept (a file another user
# owns, e.g. with the CIS profile); no network, the system read-only but for the one directory it writes.
CapabilityBoundingSet=CAP_DAC_READ_SEARCH
NoNewPrivileges=yes
PrivateNetwork=yes
PrivateTmp=yes
ProtectHome=yes
ProtectSystem=strict
ReadWritePaths=$state"; then reload=1; fi
if write_file "$HOST_ROOT$units/$unit.timer" 0644 "[Unit]
Description=ml-platform: hourly expiry dates of the RKE2 certificates

[Timer]
OnActiveSec=2min
OnUnitActiveSec=1h

[Install]
WantedBy=timers.target"; then reload=1; fi
if ((reload)); then systemctl daemon-reload; fi
if ! systemctl is-enabled --quiet "$unit.timer" || ! systemctl is-active --quiet "$unit.timer"; then
  systemctl enable --now "$unit.timer" >/dev/null 2>&1
  changed "started $unit.timer"
fi
# The first dates now (before RKE2 runs: none yet; the timer's next run lists them).
"$HOST_ROOT$bin"
