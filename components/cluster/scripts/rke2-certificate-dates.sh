#!/usr/bin/env bash
# rke2-certificate-dates: the expiry date of every RKE2 certificate file on this host, for the Zabbix
# agent. RKE2 keeps its certificates readable by root only (0600) and the agent runs unprivileged, so
# this runs as root (a systemd timer, installed by rke2-certificate-watch.sh) and writes only public
# facts, each file's path and notAfter, to /var/lib/ml-platform/rke2-certificates.json (0644):
#   {"written": <unix time>, "certificates": {"<path>": <notAfter, unix time, or null when unreadable>}}
# The files: /var/lib/rancher/rke2/server/tls (and its subdirectories: etcd, kube-controller-manager,
# kube-scheduler) on servers, /var/lib/rancher/rke2/agent on every node: the client, serving and CA
# certificates that `rke2 certificate check` lists. Of a file holding a chain, the first (leaf) counts.
# Parameters: HOST_ROOT (tests only: prefix of every path it reads and writes)
set -euo pipefail
umask 022

root=${HOST_ROOT:-}
rke2=/var/lib/rancher/rke2
out=/var/lib/ml-platform/rke2-certificates.json

entries=()
while IFS= read -r -d '' file; do
  path=${file#"$root"}
  # RKE2's file names are plain; anything else is left out rather than quoted into JSON.
  [[ $path =~ ^[A-Za-z0-9/._@+-]+$ ]] || continue
  end=null
  if not_after=$(openssl x509 -in "$file" -noout -enddate 2>/dev/null) &&
    seconds=$(date -u -d "${not_after#notAfter=}" +%s 2>/dev/null); then
    end=$seconds
  fi
  entries+=("\"$path\": $end")
done < <(
  {
    find "$root$rke2/server/tls" -maxdepth 2 -type f -name '*.crt' -print0 2>/dev/null || true
    find "$root$rke2/agent" -maxdepth 1 -type f -name '*.crt' -print0 2>/dev/null || true
  } | sort -z
)

list=""
for entry in "${entries[@]}"; do
  list+="${list:+, }$entry"
done
install -d -m 0755 "$root${out%/*}"
tmp=$(mktemp "$root$out.XXXXXX")
printf '{"written": %s, "certificates": {%s}}\n' "$(date -u +%s)" "$list" >"$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$root$out"
