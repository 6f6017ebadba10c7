#!/usr/bin/env bash
# shellcheck disable=SC2329  # the functions here are called by the scripts this is prepended to
# Shared helpers, prepended to every host script by components/hosts/remote.py (one `bash -c` program).
# Scripts log each change as "changed: ..." on stdout; a run that prints no such line changed nothing.
set -euo pipefail

# Every step is bounded: its program runs again under `timeout`, for STEP_TIMEOUT seconds (by default an
# hour plus the waits its parameters declare: JOIN_TIMEOUT per server it waits for and for its own join,
# HEALTH_TIMEOUT, DRAIN_TIMEOUT), and a step ended so says so, naming itself.
if [[ -z ${STEP_TIMED:-} && -n ${BASH_EXECUTION_STRING:-} && $0 == *.sh ]]; then
  read -ra step_after <<<"${JOIN_AFTER:-}"
  step_limit=${STEP_TIMEOUT:-$((3600 + ${JOIN_TIMEOUT:-0} * (${#step_after[@]} + 3) + ${HEALTH_TIMEOUT:-0} + 2 * ${DRAIN_TIMEOUT:-0}))}
  step_rc=0
  STEP_TIMED=$step_limit timeout -k 30 "$step_limit" bash -c "$BASH_EXECUTION_STRING" "$0" || step_rc=$?
  if ((step_rc == 124 || step_rc == 137)); then
    echo "error: host step $0 did not finish within ${step_limit}s and was stopped (STEP_TIMEOUT)" >&2
  fi
  exit "$step_rc"
fi

changed() { echo "changed: $*"; }
note() { echo "$*" >&2; }
fail() { echo "error: $*" >&2; exit 1; }

# io_fail WHAT PATH ERROR: stop the step because a file operation on PATH failed. A full file system
# (ENOSPC: no blocks or no inodes left) is named as such, with what is free there: running the step again
# does not help until space is freed. `fail` exits the whole step whatever the caller's context (`if`,
# `&&`), where `set -e` does not apply.
io_fail() {
  local what=$1 path=$2 err=$3 dir=$2 free
  while [[ ! -e $dir && $dir == */* ]]; do dir=${dir%/*}; done
  free=$(df -P -- "${dir:-/}" 2>/dev/null | awk 'NR == 2 {print $4 " KiB free on " $6}' || true)
  free+=$(df -Pi -- "${dir:-/}" 2>/dev/null | awk 'NR == 2 {print ", " $4 " inodes free"}' || true)
  if [[ $err == *"No space left on device"* || $free == "0 KiB"* || $free == *", 0 inodes"* ]]; then
    fail "cannot $what: the file system holding $path is full (ENOSPC; ${free:-df gave nothing}). Free space there (df -h, df -i), then run the step again"
  fi
  fail "cannot $what: ${err:-no reason given}${free:+ ($free)}"
}

# --- Applied state: what a change needs to take effect (a restart, a reload, `sysctl --system`) --------
# A change that needs an action marks it pending *before* the change is made (pending_set, or the keys
# given to write_file/remove_file), and the mark is removed only once the action succeeded (apply_pending):
# a run cut anywhere between the change and the action leaves the mark, and the next run does the action
# although it finds every file as it should be. Marks are files under /var/lib/ml-platform/pending, one per
# action (e.g. restart-zabbix-agent2), written through to disk so that they survive a power cut.
pending_dir() { echo "${HOST_ROOT:-}/var/lib/ml-platform/pending"; }

# pending_set KEY...: mark each (non-empty) KEY pending.
pending_set() {
  local key dir err
  dir=$(pending_dir)
  for key in "$@"; do
    [[ -n $key ]] || continue
    [[ -e $dir/$key ]] && continue
    err=$({ mkdir -p -- "$dir" && : >"$dir/$key" && sync -- "$dir/$key" "$dir"; } 2>&1) ||
      io_fail "mark '$key' pending" "$dir/$key" "$err"
  done
}

# pending KEY: true when KEY is pending.
pending() { [[ -e $(pending_dir)/$1 ]]; }

# pending_clear KEY: the action of KEY has been done (or is no longer needed).
pending_clear() {
  local err
  [[ -e $(pending_dir)/$1 ]] || return 0
  err=$(rm -f -- "$(pending_dir)/$1" 2>&1) || io_fail "clear the pending mark $1" "$(pending_dir)/$1" "$err"
}

# apply_pending KEY DESCRIPTION COMMAND...: when KEY is pending, run COMMAND (the step fails, naming it,
# when it fails), then clear KEY and log "changed: DESCRIPTION". Returns 1 when KEY was not pending.
apply_pending() {
  local key=$1 what=$2
  shift 2
  pending "$key" || return 1
  mark "before $key"
  "$@" || fail "$what failed: $* (it stays pending; the step does it again when run again)"
  pending_clear "$key"
  changed "$what"
}

# mark NAME: a named point of a step ("after write PATH", "before restart-zabbix-agent2"). Nothing happens
# unless the host holds /run/ml-platform/hold (a test harness that cuts steps at named points): then each
# point is logged to /run/ml-platform/marks as "<script>: NAME", and a point the hold file names stops the
# step there (it writes /run/ml-platform/held) until the harness kills it, at most 10 minutes.
mark() {
  local run=${HOST_ROOT:-}/run/ml-platform
  [[ -f $run/hold ]] || return 0
  printf '%s: %s\n' "${0##*/}" "$*" >>"$run/marks" || true
  if grep -qxF -- "${0##*/}: $*" "$run/hold"; then
    printf '%s: %s\n' "${0##*/}" "$*" >"$run/held" || true
    sleep 600
    fail "held at '$*' for 10 minutes and never cut: remove $run/hold"
  fi
}

# step_lock NAME: one run of a step at a time on a host. A second run waits for the first, at most
# STEP_LOCK_WAIT seconds (default 900), then fails naming the run that holds it. The lock is a file lock
# (flock) on /run/ml-platform/steps/NAME.lock: a run cut short releases it with its process.
step_lock() {
  local name=$1 dir=${HOST_ROOT:-}/run/ml-platform/steps wait=${STEP_LOCK_WAIT:-900} err holder="" fd
  err=$(mkdir -p -- "$dir" 2>&1) || io_fail "create $dir" "$dir" "$err"
  exec {STEP_LOCK_FD}>>"$dir/$name.lock" || io_fail "open $dir/$name.lock" "$dir/$name.lock" ""
  if ! flock -w "$wait" "$STEP_LOCK_FD"; then
    # The processes that hold the lock file open (only read on this failure).
    for fd in /proc/[0-9]*/fd/*; do
      [[ $(readlink "$fd" 2>/dev/null) == "$dir/$name.lock" && ${fd#/proc/} != "$$/"* ]] && holder+=" ${fd#/proc/}"
    done
    holder=$(tr ' ' '\n' <<<"${holder:-}" | cut -d/ -f1 | sort -u | xargs)
    fail "another run of this step ($name) held $dir/$name.lock for ${wait}s${holder:+ (pids: $holder)}; it is still running or hung: look at it (ps), then run the step again"
  fi
}

# write_file PATH MODE CONTENT [PENDING_KEY...]: make PATH hold exactly CONTENT, ending in one newline,
# with MODE. Returns 0 when it changed the file, 1 when the file was already right; any failure stops the
# step with its cause (a full disk named as such), whatever the caller's context. Never prints CONTENT.
# PENDING_KEYs are marked pending (pending_set) before the file changes: the action that makes the new
# content take effect. The content goes to a temporary file of this run next to PATH (created 0600,
# written, flushed to disk and its size checked), then renamed over PATH. Temporary files that a run cut
# short left behind (their run's process is gone) are removed.
write_file() {
  local path=$1 mode=$2 content=$3 dir tmp err current expected actual
  shift 3
  # Trailing newlines are normalised to one, so content with or without them compares equal.
  while [[ $content == *$'\n' ]]; do content=${content%$'\n'}; done
  dir=$(dirname -- "$path")
  stale_temporaries "$path"
  if [[ -f $path ]]; then
    # cat's own message goes to stderr: a read cut short must not print part of a secret in ours.
    current=$(cat -- "$path") || io_fail "read $path" "$path" "cat failed"
    if [[ $current == "$content" && "$(stat -c %a -- "$path")" == "${mode#0}" ]]; then
      return 1
    fi
  fi
  err=$(install -d -m 0755 -- "$dir" 2>&1) || io_fail "create the directory $dir" "$dir" "$err"
  tmp=$(mktemp -- "$dir/.${path##*/}.ml-platform.$$.XXXXXX" 2>&1) || io_fail "create a file in $dir" "$dir" "$tmp"
  err=$({ chmod "$mode" -- "$tmp" && printf '%s\n' "$content" >"$tmp" && sync -- "$tmp"; } 2>&1) || {
    rm -f -- "$tmp"
    io_fail "write $path" "$path" "$err"
  }
  expected=$(LC_ALL=C && echo $((${#content} + 1)))
  actual=$(stat -c %s -- "$tmp" 2>/dev/null || echo 0)
  if [[ $actual != "$expected" ]]; then
    rm -f -- "$tmp"
    io_fail "write $path" "$path" "wrote $actual of $expected bytes"
  fi
  pending_set "$@"
  err=$(mv -f -- "$tmp" "$path" 2>&1) || {
    rm -f -- "$tmp"
    io_fail "move the new $path into place" "$path" "$err"
  }
  changed "wrote $path"
  mark "after write $path"
}

# stale_temporaries PATH: remove the temporary files of PATH that runs cut short left behind (named by
# their run's pid, which no longer runs), and the fixed-name one of earlier versions of this program.
stale_temporaries() {
  local path=$1 dir tmp pid
  dir=$(dirname -- "$path")
  for tmp in "$dir/.${path##*/}.ml-platform."* "$path.ml-platform-new"; do
    [[ -e $tmp ]] || continue
    pid=${tmp##*.ml-platform.}
    pid=${pid%%.*}
    if [[ $tmp == "$path.ml-platform-new" || ! -d /proc/$pid ]]; then rm -f -- "$tmp"; fi
  done
}

# remove_file PATH [PENDING_KEY...]: delete PATH if it exists, the keys marked pending first. Returns 0
# when it removed it.
remove_file() {
  local path=$1 err
  shift
  [[ -e $path || -L $path ]] || return 1
  pending_set "$@"
  err=$(rm -f -- "$path" 2>&1) || io_fail "remove $path" "$path" "$err"
  changed "removed $path"
  mark "after remove $path"
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
# Every call is bounded: apt-get gives up on a mirror that accepts a connection and then stays silent after
# APT_TIMEOUT seconds (30) per request (Acquire::http(s)::Timeout, apt.conf(5)), waits at most 5 minutes for
# dpkg's own lock (DPkg::Lock::Timeout, apt 1.9.11 changelog: "apt(8): Wait for lock"), and `apt-get update`
# fails on any source it could not fetch (--error-on=any, apt 2.1.16 changelog) instead of keeping old
# lists. The whole command is ended after PACKAGE_TIMEOUT seconds (1800), named.
package_manager() {
  local lock=${HOST_ROOT:-}/run/ml-platform/packages.lock rc=0 limit=${PACKAGE_TIMEOUT:-1800} wait=${APT_TIMEOUT:-30}
  local args=("$@")
  mkdir -p "${lock%/*}" || io_fail "create ${lock%/*}" "${lock%/*}" ""
  if [[ $1 == apt-get ]]; then
    args=(apt-get "${@:2}" -o "Acquire::http::Timeout=$wait" -o "Acquire::https::Timeout=$wait" -o Acquire::Retries=2
      -o DPkg::Lock::Timeout=300)
    [[ $2 != update ]] || args+=(--error-on=any)
  fi
  flock -o -w 900 -E 75 "$lock" timeout -k 30 "$limit" env DEBIAN_FRONTEND=noninteractive "${args[@]}" || rc=$?
  ((rc != 75)) || fail "another package-manager run on this host held $lock for 15 minutes: $*"
  ((rc != 124 && rc != 137)) || fail "$* did not finish within ${limit}s and was stopped (PACKAGE_TIMEOUT)"
  return "$rc"
}

# apt_update: `apt-get update`, its failure explained: which source, and whether its mirror refused the
# connection, did not answer within the timeout, could not be resolved, or answered with an error.
apt_update() {
  local out rc=0 why
  out=$(package_manager apt-get update -q 2>&1) || rc=$?
  ((rc)) || return 0
  why=$(grep -E '^(E|W|Err):' <<<"$out" | head -5 || true)
  case $out in
    *"Connection refused"*) fail "apt-get update: a package mirror refused the connection (nothing listens there; check the sources and the mirror): $why" ;;
    *"Connection failed"*) # apt 2.6's word for a server that accepted the connection and then sent nothing
      fail "apt-get update: a package mirror accepted the connection but did not answer within ${APT_TIMEOUT:-30}s per request (a silent mirror): $why" ;;
    *"timed out"* | *"Could not wait for server fd"*)
      fail "apt-get update: a package mirror did not answer within ${APT_TIMEOUT:-30}s per request (no answer to the connection: a dropped route or a silent mirror): $why" ;;
    *"Temporary failure resolving"* | *"Could not resolve"*) fail "apt-get update: a package mirror's name does not resolve: $why" ;;
    *"No space left on device"*) io_fail "update the package lists" /var/lib/apt/lists "No space left on device" ;;
    *) fail "apt-get update failed (exit $rc): ${why:-$(tail -5 <<<"$out")}" ;;
  esac
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
      apt_update
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

# One run of a step at a time on a host (step_lock): named by its program ($0, the host script) and the node
# it is about (several nodes' removals run on the init server, each a step of its own).
if [[ $0 == *.sh ]]; then step_lock "${0##*/}${NODE_NAME:+.$NODE_NAME}"; fi
