#!/bin/sh
# The drift probe (one pod per node, a DaemonSet): every INTERVAL seconds, and at once on SIGHUP, print this
# node's fingerprint as one line, `FINGERPRINT {json}`, read from HOST (the host's root, mounted read-only):
# - rke2 (the installed binary's version, run in the host's root), kernel, nvidia and ofed (driver versions
#   from /sys/module);
# - files: the sha256 of each file in FILES ("absent" when missing) and of every file in the directories
#   DIRS (a file someone added there shows up);
# - sysctl: for each `key = value` of the program's sysctl files (SYSCTL_FILES), the value in the file and
#   the live one (/proc/sys), so a `sysctl -w` shows;
# - modules: the modules the program's modules-load files (MODULE_FILES) name that are not loaded;
# - packages: the installed version of each of PACKAGES (dpkg's status file, else rpm in the host's root),
#   and of every other package installed on purpose (one installed by hand shows beside its peers);
# - fstab: the sha256 of the host's fstab without its first field (device names and UUIDs differ per node)
#   and the number of swap entries that are not commented out;
# - modules_blocked: the modules of the modules-load files and WATCHED_MODULES that a modprobe.d file
#   blacklists or installs as a no-op (`install nvidia_peermem /bin/false`);
# - not_checked: each source the probe could not read, with why (the host's root not mounted, no package
#   database, no /proc/sys): what depends on it is reported `not checked`, never compared as if empty.
# Each fingerprint carries a sequence number (`seq`, counted from the probe's start): `--refresh` waits for one
# newer than the last it saw before its SIGHUP.
# It runs in the host's network namespace (hostNetwork), so the `net.*` sysctls it reads are the host's, not
# its pod's; the host's files come from its root mounted read-only.
# `python -m stacks.drift` reads the lines and compares them with the settings and with the node's peers.
# Parameters: NODE_NAME HOST FILES DIRS SYSCTL_FILES MODULE_FILES PACKAGES INTERVAL
#   ONCE (tests: one fingerprint, then exit) SYS PROC (tests: stand-ins for /sys and /proc)
set -eu
: "${NODE_NAME:?}" "${HOST:=/host}" "${FILES:=}" "${DIRS:=}" "${SYSCTL_FILES:=}" "${MODULE_FILES:=}"
: "${PACKAGES:=}" "${WATCHED_MODULES:=}" "${INTERVAL:=3600}" "${ONCE:=false}" "${SYS:=/sys}" "${PROC:=/proc}"

rke2_version() {
  for bin in /usr/local/bin/rke2 /opt/rke2/bin/rke2 /usr/bin/rke2; do
    if [ -x "$HOST$bin" ]; then
      chroot "$HOST" "$bin" --version 2>/dev/null | awk 'NR == 1 { print $3 }'
      return
    fi
  done
}

module_version() { cat "$SYS/module/$1/version" 2>/dev/null || true; }

# json_escape TEXT: TEXT as the inside of a JSON string (quotes, backslashes, tabs; no newlines expected).
json_escape() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g; s/	/\\t/g'; }

# pair KEY VALUE: `"KEY":"VALUE"`, both escaped.
pair() { printf '"%s":"%s"' "$(json_escape "$1")" "$(json_escape "$2")"; }

file_sum() {
  if [ -f "$HOST$1" ]; then sha256sum "$HOST$1" | cut -d' ' -f1; else echo absent; fi
}

files_json() {
  out="" seen=" "
  for path in $FILES; do
    seen="$seen$path "
    out="$out${out:+,}$(pair "$path" "$(file_sum "$path")")"
  done
  for dir in $DIRS; do
    for file in "$HOST$dir"/*; do
      [ -f "$file" ] || continue
      path=${file#"$HOST"}
      case $seen in *" $path "*) continue ;; esac
      seen="$seen$path "
      out="$out${out:+,}$(pair "$path" "$(file_sum "$path")")"
    done
  done
  printf '{%s}' "$out"
}

# The live value of a sysctl, whitespace collapsed as `sysctl -n` prints it ("absent": no such key).
live_sysctl() {
  path="$PROC/sys/$(printf '%s' "$1" | tr . /)"
  if [ -r "$path" ]; then tr -s ' \t' '  ' <"$path" | sed 's/ *$//'; else echo absent; fi
}

sysctl_json() {
  out=""
  for file in $SYSCTL_FILES; do
    [ -f "$HOST$file" ] || continue
    # `key = value` lines; comments and blank lines skipped; the last line for a key wins, as for sysctl.
    while IFS= read -r line || [ -n "$line" ]; do
      case $line in '' | '#'* | ';'*) continue ;; esac
      key=$(printf '%s' "${line%%=*}" | tr -d ' \t')
      want=$(printf '%s' "${line#*=}" | tr -s ' \t' '  ' | sed 's/^ *//; s/ *$//')
      out="$out${out:+,}\"$(json_escape "$key")\":{$(pair file "$want"),$(pair live "$(live_sysctl "$key")")}"
    done <"$HOST$file"
  done
  printf '{%s}' "$out"
}

missing_modules() {
  missing=""
  for file in $MODULE_FILES; do
    [ -f "$HOST$file" ] || continue
    # shellcheck disable=SC2013  # one module per line; words are what modules-load.d reads too
    for module in $(sed 's/#.*//' "$HOST$file"); do
      # /sys/module names use underscores where modprobe accepts dashes.
      [ -d "$SYS/module/$(printf '%s' "$module" | tr - _)" ] || missing="$missing${missing:+ }$module"
    done
  done
  printf '%s' "$missing"
}

package_version() {
  status=$HOST/var/lib/dpkg/status
  if [ -f "$status" ]; then
    awk -v want="$1" '
      /^Package: / { name = $2; installed = 0; version = "" }
      /^Status: .* installed$/ { installed = 1 }
      /^Version: / { version = $2 }
      /^$/ { if (name == want && installed) { print version; found = 1; exit } name = "" }
      END { if (!found && name == want && installed) print version }' "$status"
  elif [ -x "$HOST/usr/bin/rpm" ] || [ -x "$HOST/bin/rpm" ]; then
    chroot "$HOST" rpm -q --qf '%{VERSION}-%{RELEASE}' "$1" 2>/dev/null || true
  fi
}

# Every other package installed on purpose (apt's manual ones: not marked Auto-Installed in extended_states,
# so a dependency pulled in with it is left out), as `NAME VERSION` lines; on rpm hosts every package.
other_packages() {
  status=$HOST/var/lib/dpkg/status
  if [ -f "$status" ]; then
    extended=$HOST/var/lib/apt/extended_states
    [ -f "$extended" ] || extended=/dev/null
    awk -v known=" $PACKAGES " -v extended="$extended" '
      function out() {
        if (name != "" && installed && !(name in auto) && index(known, " " name " ") == 0) print name, version
        name = ""
      }
      FILENAME == extended && /^Package: / { name = $2 }
      FILENAME == extended && /^Auto-Installed: 1/ { auto[name] = 1 }
      FILENAME == extended { next }
      /^Package: / { name = $2; installed = 0; version = "" }
      /^Status: .* installed$/ { installed = 1 }
      /^Version: / { version = $2 }
      /^$/ { out() }
      END { out() }' "$extended" "$status"
  elif [ -x "$HOST/usr/bin/rpm" ] || [ -x "$HOST/bin/rpm" ]; then
    chroot "$HOST" rpm -qa --qf '%{NAME} %{VERSION}-%{RELEASE}\n' 2>/dev/null |
      awk -v known=" $PACKAGES " 'index(known, " " $1 " ") == 0' || true
  fi
}

packages_json() {
  out=""
  for package in $PACKAGES; do
    version=$(package_version "$package")
    out="$out${out:+,}$(pair "$package" "${version:-absent}")"
  done
  others=$(other_packages)
  while read -r package version; do
    if [ -n "$package" ]; then out="$out${out:+,}$(pair "$package" "$version")"; fi
  done <<EOF
$others
EOF
  printf '{%s}' "$out"
}

fstab_sum() {
  if [ -f "$HOST/etc/fstab" ]; then
    awk '!/^[ \t]*(#|$)/ { $1 = ""; sub(/^ /, ""); print }' "$HOST/etc/fstab" | sha256sum | cut -d' ' -f1
  else
    echo absent
  fi
}

active_swap() {
  if [ -f "$HOST/etc/fstab" ]; then awk '!/^[ \t]*#/ && $3 == "swap" { n++ } END { print n + 0 }' "$HOST/etc/fstab"; else echo 0; fi
}

# blocked_modules: watched modules (and those of the modules-load files) that modprobe.d blacklists or installs
# as a no-op; dashes and underscores alike, as modprobe reads them.
blocked_modules() {
  watched=$WATCHED_MODULES
  for file in $MODULE_FILES; do
    [ -f "$HOST$file" ] && watched="$watched $(sed 's/#.*//' "$HOST$file" | tr '\n' ' ')"
  done
  for conf in "$HOST"/etc/modprobe.d/*.conf; do
    [ -f "$conf" ] && cat "$conf"
  done | tr - _ | awk -v watched=" $(printf '%s' "$watched" | tr - _) " '
    $1 == "blacklist" && index(watched, " " $2 " ") { print $2 }
    $1 == "install" && index(watched, " " $2 " ") && $3 ~ /(\/bin\/)?(true|false)$/ { print $2 }' | sort -u | tr '\n' ' ' | sed 's/ $//'
}

# unreadable: `"source":"why"` for each source the probe cannot read.
unreadable() {
  out=""
  [ -d "$HOST/etc" ] || out="$out${out:+,}$(pair host "the host's root is not mounted at $HOST")"
  if [ -n "$PACKAGES" ] && [ ! -r "$HOST/var/lib/dpkg/status" ] && [ ! -x "$HOST/usr/bin/rpm" ] && [ ! -x "$HOST/bin/rpm" ]; then
    out="$out${out:+,}$(pair packages "no package database readable (dpkg status, rpm)")"
  fi
  [ -d "$PROC/sys" ] && [ -r "$PROC/sys" ] || out="$out${out:+,}$(pair sysctl "$PROC/sys is not readable")"
  printf '{%s}' "$out"
}

seq=0
fingerprint() {
  seq=$((seq + 1))
  printf 'FINGERPRINT {"seq":%s,%s,%s,%s,%s,%s,"files":%s,"sysctl":%s,%s,"packages":%s,%s,%s,%s,"not_checked":%s}\n' \
    "$seq" "$(pair node "$NODE_NAME")" "$(pair rke2 "$(rke2_version)")" "$(pair kernel "$(uname -r)")" \
    "$(pair nvidia "$(module_version nvidia)")" "$(pair ofed "$(module_version mlx5_core)")" \
    "$(files_json)" "$(sysctl_json)" "$(pair modules_missing "$(missing_modules)")" "$(packages_json)" \
    "$(pair fstab "$(fstab_sum)")" "$(pair swap_entries "$(active_swap)")" \
    "$(pair modules_blocked "$(blocked_modules)")" "$(unreadable)"
}

trap 'refresh=true' HUP
while :; do
  fingerprint
  [ "$ONCE" = true ] && exit 0
  # Sleep in the background so that a SIGHUP (`kubectl exec ... kill -HUP 1`) ends the wait at once.
  refresh=false
  sleep "$INTERVAL" &
  wait $! || true
  [ "$refresh" = true ] && kill $! 2>/dev/null || true
done
