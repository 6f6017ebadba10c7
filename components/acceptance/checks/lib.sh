#!/bin/sh
# Shared by every acceptance check (prepended to it): the one result line a check ends with.
# CHECK (the check's name), NODE (where it ran, or what it covers) and ADVISORY come from the Job.
# shellcheck disable=SC2034,SC2329  # variables and helpers the checks use
: "${CHECK:?}" "${NODE:=}" "${ADVISORY:=false}"

# finish STATUS VALUE FLOOR UNIT DETAIL: print `ACCEPTANCE {json}` and end the check. A failed check
# exits 1 (the Job fails, so does the `up`) unless it is advisory: then it reports and exits 0.
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

# mib_per_s MIB SECONDS
mib_per_s() { awk -v m="$1" -v s="$2" 'BEGIN { if (s <= 0) s = 0.001; printf "%.1f", m / s }'; }
