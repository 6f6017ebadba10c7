#!/bin/sh
# Shared by every acceptance check (prepended to it): the evidence a check gathers, the one record it ends with,
# and the clock. CHECK (the check's name), NODE (where it ran, or what it covers) and ADVISORY come from the Job.
# shellcheck disable=SC2034,SC2329  # variables and helpers the checks use
: "${CHECK:?}" "${NODE:=}" "${ADVISORY:=false}" "${PROC:=/proc}"

# Evidence (checks/evidence.py says what counts): what was measured, amounts and what was asked of them,
# durations on the monotonic clock, digests, and when.
EV_MEASURED="" EV_AMOUNTS="" EV_EXPECTED="" EV_DURATIONS="" EV_DIGESTS="" EV_BOUND=floor
EV_AT=$(date -u +%Y-%m-%dT%H:%M:%SZ)
measured() { EV_MEASURED=$*; }
# amount NAME VALUE: a count the check read (bytes, GPUs, pods); expect NAME VALUE: what it must be exactly.
amount() { EV_AMOUNTS="$EV_AMOUNTS $1=$(ev_clean "$2")"; }
expect() { EV_EXPECTED="$EV_EXPECTED $1=$(ev_clean "$2")"; }
# took NAME START_MS END_MS: a duration from two now_ms readings (none when a reading is missing).
took() { [ -n "$2" ] && [ -n "$3" ] && EV_DURATIONS="$EV_DURATIONS $1=$(($3 - $2))" || true; }
# digest NAME SHA256: a digest of what was written or read; all digests of a record must agree.
digest() { EV_DIGESTS="$EV_DIGESTS $1=$(ev_clean "$2")"; }
# ceiling: the value must stay at most FLOOR (an age), instead of reaching it (a rate).
ceiling() { EV_BOUND=ceiling; }
ev_clean() { printf '%s' "$1" | tr -d '"\\= \n\t' | cut -c1-80; }

# finish CLAIM VALUE FLOOR UNIT DETAIL: print `ACCEPTANCE {record}` and end the check. CLAIM is passed, failed,
# skipped (the check could not run on its node, e.g. one cordoned) or unverified (it ran but cannot vouch for it). The status is derived from the evidence by
# evidence.py's rule (a passed claim without positive evidence is unverified) and sets the exit status: passed 0,
# failed 1, skipped and unverified 3, so only a passed check leaves its Job Complete (a Job that is not is run
# again by the next `up`). An advisory check reports and exits 0.
finish() {
  ended=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  verdict=$(awk -v claim="$1" -v value="$2" -v floor="$3" -v unit="$4" -v bound="$EV_BOUND" -v measured="$EV_MEASURED" \
    -v amounts="$EV_AMOUNTS" -v expected="$EV_EXPECTED" -v durations="$EV_DURATIONS" -v digests="$EV_DIGESTS" '
    function num(s) { return s ~ /^[0-9]+(\.[0-9]+)?$/ }
    function done(status, why) { print status "\t" why; exit }
    BEGIN {
      if (claim == "failed" || claim == "skipped" || claim == "unverified") done(claim, "")
      if (claim != "passed") done("failed", "the check claims " claim)
      ceil = bound == "ceiling"; why = ""
      if (!num(value) || (value + 0 <= 0 && !ceil)) why = why "; the measured value \x27" value "\x27 is not a decimal number" (ceil ? "" : " above 0")
      else if (floor == "") why = why "; there is no " (ceil ? "ceiling" : "floor") " to compare it with"
      else {
        if (!num(floor)) why = why "; the floor \x27" floor "\x27 is not a decimal number"
        else if (ceil && value + 0 > floor + 0) done("failed", value " is above the ceiling of " floor)
        else if (!ceil && value + 0 < floor + 0) done("failed", value " is below the floor of " floor)
      }
      n = split(amounts, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); got[kv[1]] = kv[2] }
      n = split(expected, e, " ")
      for (i = 1; i <= n; i++) {
        split(e[i], kv, "="); asked[kv[1]] = 1; g = (kv[1] in got) ? got[kv[1]] : ""
        if (!(num(g) && num(kv[2]) && g + 0 == kv[2] + 0)) done("failed", kv[1] " is " (g == "" ? "missing" : g) ", " kv[2] " was asked")
      }
      for (k in got) if (!(k in asked) && (!num(got[k]) || got[k] + 0 <= 0)) why = why "; " k " is \x27" got[k] "\x27, not above 0"
      n = split(durations, d, " "); timed = 0
      for (i = 1; i <= n; i++) { split(d[i], kv, "="); if (num(kv[2]) && kv[2] + 0 > 0) timed = 1 }
      if (!timed && unit ~ /\/s$/) why = why "; a rate without a duration above 0 on a monotonic clock"
      n = split(digests, h, " "); first = ""; differ = 0; badhash = ""
      for (i = 1; i <= n; i++) {
        split(h[i], kv, "=")
        if (kv[2] !~ /^[0-9a-f]+$/ || length(kv[2]) != 64) badhash = badhash " " kv[1]
        if (first == "") first = kv[2]; else if (kv[2] != first) differ = 1
      }
      if (badhash != "") why = why "; digest" badhash " is not a SHA-256"
      else if (differ) done("failed", "the digests differ: " digests)
      if (measured == "") why = why "; it names nothing it measured"
      if (why != "") done("unverified", substr(why, 3))
      done("passed", "")
    }')
  status=${verdict%%"	"*}
  why=${verdict#*"	"}
  detail=$(printf '%s%s' "$5" "${why:+ ($status: $why)}" | tr '"\\\n' "'/ ")
  advisory=false
  if [ "$status" != passed ] && [ "$ADVISORY" = true ]; then advisory=true; fi
  printf 'ACCEPTANCE {"check":"%s","node":"%s","claim":"%s","status":"%s","value":"%s","floor":"%s","unit":"%s","advisory":%s,"detail":"%s","evidence":{"measured":"%s","bound":"%s","at":"%s","ended":"%s","amounts":{%s},"expected":{%s},"durations_ms":{%s},"digests":{%s}}}\n' \
    "$CHECK" "$NODE" "$1" "$status" "$(ev_clean "$2")" "$(ev_clean "$3")" "$4" "$advisory" "$detail" \
    "$(printf '%s' "$EV_MEASURED" | tr '"\\\n' "'/ ")" "$EV_BOUND" "$EV_AT" "$ended" \
    "$(ev_json "$EV_AMOUNTS")" "$(ev_json "$EV_EXPECTED")" "$(ev_json "$EV_DURATIONS")" "$(ev_json "$EV_DIGESTS")"
  case $status in
    passed) exit 0 ;;
    failed) echo "acceptance check $CHECK failed on ${NODE:-?}: $detail" >&2 ;;
    *) echo "acceptance check $CHECK $status on ${NODE:-?}: $detail (not passed: the next up runs it again)" >&2 ;;
  esac
  [ "$ADVISORY" = true ] && exit 0
  [ "$status" = failed ] && exit 1
  exit 3
}

# ev_json " a=1 b=2": `"a":"1","b":"2"` (values as strings: the reader decides what is a number).
ev_json() { printf '%s' "$1" | awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); printf "%s\"%s\":\"%s\"", (i > 1 ? "," : ""), kv[1], kv[2] } }'; }

# at_least VALUE FLOOR: VALUE >= FLOOR, both decimal numbers.
at_least() { awk -v v="$1" -v f="$2" 'BEGIN { exit !(v + 0 >= f + 0) }'; }

# now_ms: milliseconds on a monotonic clock: the kernel's uptime (/proc/uptime, CLOCK_BOOTTIME in hundredths of a
# second), which no NTP step moves (`date +%s%N` is the wall clock: a step during a run would fake a rate). Empty
# when it cannot be read: a rate needs two readings.
now_ms() { awk '{ printf "%d\n", $1 * 1000 }' "$PROC/uptime" 2>/dev/null || true; }

# clock_ms: the resolution of now_ms, below which an elapsed time means nothing.
clock_ms() { echo 10; }

# mib_per_s MIB START_MS END_MS: the rate, or nothing (status 1) when the time cannot be read: a reading is
# missing, or the elapsed time is below the clock's resolution.
mib_per_s() {
  [ -n "$2" ] && [ -n "$3" ] || return 1
  awk -v m="$1" -v a="$2" -v b="$3" -v r="$(clock_ms)" 'BEGIN { if (b - a < r) exit 1; printf "%.1f\n", m * 1000 / (b - a) }'
}
