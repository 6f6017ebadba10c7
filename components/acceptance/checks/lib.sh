#!/bin/sh
# Shared by every acceptance check (prepended to it): the one result line a check ends with, and the clock.
# CHECK (the check's name), NODE (where it ran, or what it covers) and ADVISORY come from the Job.
# shellcheck disable=SC2034,SC2329  # variables and helpers the checks use
: "${CHECK:?}" "${NODE:=}" "${ADVISORY:=false}" "${PROC:=/proc}"

# finish STATUS VALUE FLOOR UNIT DETAIL: print `ACCEPTANCE {json}` and end the check. STATUS is passed,
# failed or skipped (the check could not run on its node, e.g. one cordoned; it does not fail the `up`).
# A failed check exits 1 (the Job fails, so does the `up`) unless it is advisory: then it reports and exits 0.
finish() {
  detail=$(printf '%s' "$5" | tr '"\\\n' "'/ ")
  advisory=false
  if [ "$1" = failed ] && [ "$ADVISORY" = true ]; then advisory=true; fi
  printf 'ACCEPTANCE {"check":"%s","node":"%s","status":"%s","value":"%s","floor":"%s","unit":"%s","advisory":%s,"detail":"%s"}\n' \
    "$CHECK" "$NODE" "$1" "$2" "$3" "$4" "$advisory" "$detail"
  if [ "$1" = failed ]; then
    echo "acceptance check $CHECK failed on ${NODE:-?}: $detail" >&2
    [ "$ADVISORY" = true ] || exit 1
  fi
  exit 0
}

# at_least VALUE FLOOR: VALUE >= FLOOR, both decimal numbers.
at_least() { awk -v v="$1" -v f="$2" 'BEGIN { exit !(v + 0 >= f + 0) }'; }

# now_ms: milliseconds on a monotonic clock. `date +%s%N` where date has nanoseconds (GNU, BusyBox with
# FEATURE_DATE_NANO), else the kernel's uptime (/proc/uptime, hundredths of a second). Empty when neither
# can be read: a rate needs two readings.
now_ms() {
  ns=$(date +%s%N 2>/dev/null || true)
  case $ns in
    *[!0-9]* | '') ;;
    ?????????????*) echo $((ns / 1000000)) && return ;;
  esac
  awk '{ printf "%d\n", $1 * 1000 }' "$PROC/uptime" 2>/dev/null || true
}

# CLOCK_MS: the resolution of now_ms, below which an elapsed time means nothing.
clock_ms() {
  ns=$(date +%s%N 2>/dev/null || true)
  case $ns in *[!0-9]* | '') echo 10 ;; ?????????????*) echo 1 ;; *) echo 10 ;; esac
}

# mib_per_s MIB START_MS END_MS: the rate, or nothing (status 1) when the time cannot be read: a reading is
# missing, or the elapsed time is below the clock's resolution.
mib_per_s() {
  [ -n "$2" ] && [ -n "$3" ] || return 1
  awk -v m="$1" -v a="$2" -v b="$3" -v r="$(clock_ms)" 'BEGIN { if (b - a < r) exit 1; printf "%.1f\n", m * 1000 / (b - a) }'
}
