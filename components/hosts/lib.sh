#!/usr/bin/env bash
# shellcheck disable=SC2329  # the functions here are called by the scripts this is prepended to
# Shared helpers, prepended to every host script by components/hosts/remote.py (one `bash -c` program).
# Scripts log each change as "changed: ..." on stdout; a run that prints no such line changed nothing.
set -euo pipefail

changed() { echo "changed: $*"; }
note() { echo "$*" >&2; }
fail() { echo "error: $*" >&2; exit 1; }

# write_file PATH MODE CONTENT: make PATH hold exactly CONTENT, ending in one newline, with MODE.
# Returns 0 when it changed the file, 1 when the file was already right. Never prints CONTENT.
# The content goes to PATH.ml-platform-new (created 0600), then is renamed over PATH: one fixed name, so a
# run cut between the two leaves no stray file behind once the step has run again.
write_file() {
  local path=$1 mode=$2 content=$3 tmp=$1.ml-platform-new
  # Trailing newlines are normalised to one, so content with or without them compares equal.
  while [[ $content == *$'\n' ]]; do content=${content%$'\n'}; done
  if [[ -f $path ]] && [[ "$(cat "$path")" == "$content" ]] && [[ "$(stat -c %a "$path")" == "${mode#0}" ]]; then
    [[ ! -e $tmp ]] || rm -f "$tmp"
    return 1
  fi
  install -d -m 0755 "$(dirname "$path")"
  rm -f "$tmp"
  install -m 0600 /dev/null "$tmp"
  chmod "$mode" "$tmp"
  printf '%s\n' "$content" >"$tmp"
  mv -f "$tmp" "$path"
  changed "wrote $path"
}

# remove_file PATH: delete PATH if it exists. Returns 0 when it removed it.
remove_file() {
  [[ -e $1 ]] || return 1
  rm -f "$1"
  changed "removed $1"
}

# wait_until SECONDS DESCRIPTION COMMAND...: retry COMMAND every 5 s until it succeeds or time runs out.
wait_until() {
  local timeout=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      fail "timed out after ${timeout}s waiting for $what"
    fi
    sleep 5
  done
}

# package_manager COMMAND...: run a package-manager command (apt-get, dpkg, dnf) with the host's package
# lock held. A host's steps run side by side (after its preparation; both NAS steps at once), and apt-get
# update or install fails at once, without waiting, while another holds apt's lock: every package-manager
# call of a host step takes this lock first and waits for it up to 15 minutes. The lock is a file lock
# (flock): a step cut short releases it with its process; `-o`: the command does not inherit it.
package_manager() {
  local lock=${HOST_ROOT:-}/run/ml-platform/packages.lock rc=0
  mkdir -p "${lock%/*}"
  flock -o -w 900 -E 75 "$lock" env DEBIAN_FRONTEND=noninteractive "$@" || rc=$?
  ((rc != 75)) || fail "another package-manager run on this host held $lock for 15 minutes: $*"
  return "$rc"
}

# finish_dpkg: a run cut short inside dpkg (a lost connection, a reboot) leaves packages unpacked but not
# configured, and apt refuses every install until `dpkg --configure -a` has run: finish it first. A run cut
# while dpkg unpacked leaves the package half installed (its new files still *.dpkg-new, marked
# reinst-required): neither `dpkg --configure -a` nor an install of the same version repairs that, and both
# exit 0; such a package is installed again, at the version it was being installed at.
finish_dpkg() {
  if [[ -n "$(dpkg --audit 2>/dev/null)" ]] || compgen -G "/var/lib/dpkg/updates/[0-9]*" >/dev/null; then
    package_manager dpkg --configure -a >/dev/null
    changed "finished an interrupted dpkg run (dpkg --configure -a)"
  fi
  local half
  # ${db:Status-Abbrev}: desired, state (H: half installed) and error flag (R: reinst-required).
  half=$({ dpkg-query -W -f='${db:Status-Abbrev}${binary:Package}=${Version}\n' 2>/dev/null || true; } |
    awk 'substr($0, 2, 1) == "H" || substr($0, 3, 1) == "R" {print substr($0, 4)}')
  if [[ -n $half ]]; then
    # shellcheck disable=SC2086  # one word per package
    package_manager apt-get install -y -q --reinstall --no-install-recommends $half >/dev/null
    changed "installed again what an interrupted dpkg run left half installed: ${half//$'\n'/ }"
  fi
}

# installed_as PACKAGE [VERSION]: fail unless dpkg has PACKAGE fully installed (at VERSION): apt-get can
# exit 0 and leave a package as it was.
installed_as() {
  local status
  status=$(dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null || true)
  [[ $status == "install ok installed"* && (-z ${2:-} || $status == "install ok installed $2") ]] ||
    fail "package $1${2:+ $2} is not installed after apt-get install (dpkg: ${status:-not known}); see dpkg --audit"
}

# ensure_packages OS_FAMILY PACKAGE...: install the packages that are missing (apt on debian, dnf on
# rhel); installs nothing and prints nothing when all are there.
ensure_packages() {
  local family=$1 pkg
  shift
  local missing=()
  case $family in
    debian)
      finish_dpkg
      for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
      done
      ((${#missing[@]})) || return 0
      package_manager apt-get update -q >/dev/null
      package_manager apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
      for pkg in "${missing[@]}"; do installed_as "$pkg"; done
      ;;
    rhel)
      for pkg in "$@"; do
        # --whatprovides: EL9 ships curl-minimal, which provides curl (installing curl conflicts).
        rpm -q --whatprovides "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
      done
      ((${#missing[@]})) || return 0
      package_manager dnf install -y -q "${missing[@]}" >/dev/null
      ;;
    *) fail "OS_FAMILY must be debian or rhel, got '$family'" ;;
  esac
  changed "installed ${missing[*]}"
}

# RKE2's own kubectl and the admin kubeconfig it writes on servers (tests point them at stubs).
# shellcheck disable=SC2034
KUBECTL=${KUBECTL:-/var/lib/rancher/rke2/bin/kubectl}
# shellcheck disable=SC2034
ADMIN_KUBECONFIG=${ADMIN_KUBECONFIG:-/etc/rancher/rke2/rke2.yaml}
