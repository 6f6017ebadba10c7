#!/usr/bin/env bash
# zabbix-agent2-nas.sh: Zabbix agent 2 on a NAS host (Debian), pinned, PSK-encrypted, active checks.
# Parameters: APT_REPOSITORY APT_SUITE APT_KEY_URL AGENT_VERSION ZBX_HOSTNAME ZBX_SERVER
#             ZBX_SERVER_ACTIVE PSK_IDENTITY. The PSK (hex) arrives on stdin, never on the command line.
# Idempotent: writes the apt source, key, config and PSK file only when they differ, installs only a
# different version, restarts the agent when something changed: marked pending before each change
# (lib.sh, apply_pending), so a run cut between a change and the restart restarts it when run again.
set -euo pipefail

: "${APT_REPOSITORY:?}" "${APT_SUITE:?}" "${APT_KEY_URL:?}" "${AGENT_VERSION:?}" "${ZBX_HOSTNAME:?}"
: "${ZBX_SERVER:?}" "${ZBX_SERVER_ACTIVE:?}" "${PSK_IDENTITY:?}"

keyring=/usr/share/keyrings/ml-platform-zabbix.gpg
psk_file=/etc/zabbix/ml-platform.psk
restart="restart-zabbix-agent2"

IFS= read -r psk || true
[[ $psk =~ ^[0-9a-fA-F]{32,512}$ ]] || fail "the PSK on stdin must be 32-512 hex digits"

# The repository key: fetched once; replaced only when the URL in settings changes.
if [[ ! -s $keyring || "$(cat "$keyring.url" 2>/dev/null)" != "$APT_KEY_URL" ]]; then
  pending_set apt-update # a new key: the lists are fetched again with it
  key=$(mktemp)
  curl -fsSL --retry 3 -o "$key" "$APT_KEY_URL" || fail "cannot download the zabbix repository key from $APT_KEY_URL"
  if grep -q "BEGIN PGP PUBLIC KEY BLOCK" "$key"; then
    ensure_packages debian gpg # an armored key needs gpg to dearmor (Debian ships it as optional)
    gpg --batch --yes --dearmor -o "$keyring" "$key"
  else
    install -m 0644 "$key" "$keyring"
  fi
  rm -f "$key"
  printf '%s\n' "$APT_KEY_URL" >"$keyring.url"
  changed "installed the zabbix repository key from $APT_KEY_URL"
fi

write_file /etc/apt/sources.list.d/ml-platform-zabbix.list 0644 \
  "deb [signed-by=$keyring] $APT_REPOSITORY $APT_SUITE main" apt-update || true
apply_pending apt-update "updated the package lists" apt_update || true

finish_dpkg # an earlier run of this step cut inside dpkg would make apt refuse the install
installed=$(dpkg-query -W -f='${Status} ${Version}' zabbix-agent2 2>/dev/null || true)
if [[ $installed != "install ok installed $AGENT_VERSION" ]]; then
  pending_set "$restart"
  package_manager apt-get install -y -q --no-install-recommends \
    "zabbix-agent2=$AGENT_VERSION" >/dev/null
  installed_as zabbix-agent2 "$AGENT_VERSION"
  changed "installed zabbix-agent2 $AGENT_VERSION (was: ${installed:-not installed})"
fi

# The agent runs as user zabbix (created by the package): the PSK is its file, 0400, or the step fails
# (a root-owned PSK makes the agent exit with "invalid TLSPSKFile ... permission denied").
id -u zabbix >/dev/null 2>&1 || fail "user zabbix does not exist; the zabbix-agent2 package should have created it"
write_file "$psk_file" 0400 "$psk" "$restart" || true
if [[ "$(stat -c %U:%G "$psk_file")" != zabbix:zabbix ]]; then
  pending_set "$restart"
  chown zabbix:zabbix "$psk_file" || fail "cannot give $psk_file to zabbix:zabbix"
  changed "gave $psk_file to zabbix:zabbix"
fi

# A drop-in: the package's zabbix_agent2.conf includes /etc/zabbix/zabbix_agent2.d/*.conf.
write_file /etc/zabbix/zabbix_agent2.d/ml-platform.conf 0644 "$(
  cat <<CONF
# Written by ml-platform (zabbix-agent2-nas.sh); changes here are overwritten.
Hostname=$ZBX_HOSTNAME
Server=$ZBX_SERVER
ServerActive=$ZBX_SERVER_ACTIVE
TLSConnect=psk
TLSAccept=psk
TLSPSKIdentity=$PSK_IDENTITY
TLSPSKFile=$psk_file
CONF
)" "$restart" || true

systemctl enable zabbix-agent2 >/dev/null 2>&1
systemctl is-active --quiet zabbix-agent2 || pending_set "$restart"
apply_pending "$restart" "restarted zabbix-agent2" systemctl restart zabbix-agent2 || true
