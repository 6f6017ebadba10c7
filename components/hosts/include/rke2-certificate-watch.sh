# The RKE2 certificate watch, part of a node's RKE2 step (rke2-install.sh installs it, rke2-uninstall.sh
# removes it): the program rke2-certificate-dates and a systemd timer that runs it as root 2 minutes after
# boot (or after this install) and then every hour, so the Zabbix agent can read when each RKE2 certificate
# expires (the template "ml-platform RKE2 certificate files"). Idempotent: writes only what differs; a
# changed unit marks systemd's reload (and the timer's restart) pending before it is written (apply_pending). Paths under HOST_ROOT (tests only).
watch_unit=ml-platform-rke2-certificates
watch_bin=/usr/local/libexec/ml-platform/rke2-certificate-dates
watch_units=/etc/systemd/system
watch_state=/var/lib/ml-platform

# Who installed the watch (its owner file): "<node> rke2". A stack deployed while the watch was a step of its
# own (`<node>-rke2-certificate-dates`, owner: the bare node name) runs that step's delete once, at the end of
# the first `up` after the RKE2 step took the watch over: that delete leaves alone a watch it does not own.
watch_owner() { echo "$1 rke2"; }

# certificate_watch_install NODE_NAME OS_FAMILY DATES_PROGRAM: install (or correct) the watch and list the
# dates once now.
certificate_watch_install() {
  local node=$1 family=$2 program=$3 root=${HOST_ROOT:-}
  ensure_packages "$family" openssl
  install -d -m 0755 "$root$watch_state"
  write_file "$root$watch_state/rke2-certificates.node" 0644 "$(watch_owner "$node")" || true
  write_file "$root$watch_bin" 0755 "$program" || true
  write_file "$root$watch_units/$watch_unit.service" 0644 "[Unit]
Description=ml-platform: expiry dates of the RKE2 certificates, for the Zabbix agent

[Service]
Type=oneshot
ExecStart=$watch_bin
# Root to read RKE2's 0600 files: reading any file is the one capability kept (a file another user
# owns, e.g. with the CIS profile); no network, the system read-only but for the one directory it writes.
CapabilityBoundingSet=CAP_DAC_READ_SEARCH
NoNewPrivileges=yes
PrivateNetwork=yes
PrivateTmp=yes
ProtectHome=yes
ProtectSystem=strict
ReadWritePaths=$watch_state" daemon-reload || true
  write_file "$root$watch_units/$watch_unit.timer" 0644 "[Unit]
Description=ml-platform: hourly expiry dates of the RKE2 certificates

[Timer]
OnActiveSec=2min
OnUnitActiveSec=1h

[Install]
WantedBy=timers.target" daemon-reload "restart-$watch_unit.timer" || true
  apply_pending daemon-reload "reloaded systemd's units" systemctl daemon-reload || true
  if ! systemctl is-enabled --quiet "$watch_unit.timer" || ! systemctl is-active --quiet "$watch_unit.timer"; then
    systemctl enable --now "$watch_unit.timer" >/dev/null 2>&1 || fail "could not enable and start $watch_unit.timer"
    pending_clear "restart-$watch_unit.timer"
    changed "started $watch_unit.timer"
  fi
  apply_pending "restart-$watch_unit.timer" "restarted $watch_unit.timer" systemctl restart "$watch_unit.timer" || true
  "$root$watch_bin"
}

# certificate_watch_remove NODE_NAME: stop the timer and remove its program, units and file, unless the
# watch belongs to another node name now (a renamed node, the same machine, installed it again under its
# new name before the old name's RKE2 step is deleted).
certificate_watch_remove() {
  local node=$1 root=${HOST_ROOT:-} owner file
  owner=$(cat "$root$watch_state/rke2-certificates.node" 2>/dev/null || true)
  if [[ -n $owner && $owner != "$(watch_owner "$node")" ]]; then
    note "left alone: the certificate timer here belongs to node ${owner% rke2} now, not $node"
    return 0
  fi
  if systemctl is-enabled --quiet "$watch_unit.timer" 2>/dev/null || systemctl is-active --quiet "$watch_unit.timer"; then
    systemctl disable --now "$watch_unit.timer" >/dev/null 2>&1
    changed "stopped $watch_unit.timer"
  fi
  for file in "$watch_units/$watch_unit.timer" "$watch_units/$watch_unit.service" "$watch_bin" \
    "$watch_state/rke2-certificates.json" "$watch_state/rke2-certificates.node"; do
    remove_file "$root$file" daemon-reload || true
  done
  apply_pending daemon-reload "reloaded systemd's units" systemctl daemon-reload || true
  pending_clear "restart-$watch_unit.timer"
}
