#!/bin/sh
# One backup run of a tier-2 tree to MinIO, inside the rclone container (busybox sh, non-root).
#
# Parameters (environment):
#   SOURCE              the source's name: objects go to nas:BUCKET/SOURCE/, the run record to
#                       nas:BUCKET/status/SOURCE.json
#   SOURCE_DIR          the mounted tree (read-only)
#   BUCKET              the backup bucket
#   MODE                sync (the copy mirrors the source; deletions become noncurrent versions) or
#                       copy (object locking: the backup user may not delete, nothing is removed)
#   MAX_DELETE          sync only: a run that would delete more objects stops (rclone --max-delete)
#   MAX_SHRINK_PERCENT  a source with this many percent fewer files or bytes than the last success is refused
#   VERIFY              size (listing only) or download (reads the backup back, byte for byte)
#   STATUS_DIR          where the result goes for the next containers: patch.json (a JSON merge patch
#                       of the status ConfigMap's data) and rc (this run's exit status)
# The rclone remote `nas` comes from RCLONE_CONFIG_NAS_* variables (no config file).
#
# This script always exits 0 once it could write its result: the pod's last container exits with
# the code in STATUS_DIR/rc, after the status ConfigMap was written. A refused or failed run changes
# nothing it has not already copied, never deletes on the target, and records no success.
set -eu

target="nas:$BUCKET/$SOURCE"
record="nas:$BUCKET/status/$SOURCE.json"
log="$STATUS_DIR/rclone.log"
started=$(date +%s)

json_string() {
  # One line, JSON-escaped, at most 400 characters.
  printf '%s' "$1" | tr '\n\t' '  ' | cut -c1-400 | sed 's/\\/\\\\/g; s/"/\\"/g'
}

finish() {
  # finish RC RESULT [BYTES OBJECTS]: the ConfigMap patch (lastSuccessTime only on success), then rc.
  now=$(date +%s)
  if [ "$1" -eq 0 ]; then
    printf '{"data":{"lastRunTime":"%s","lastSuccessTime":"%s","lastResult":"ok","bytes":"%s","objects":"%s"}}\n' \
      "$now" "$now" "$3" "$4" >"$STATUS_DIR/patch.json"
  else
    printf '{"data":{"lastRunTime":"%s","lastResult":"%s"}}\n' "$now" "$(json_string "$2")" >"$STATUS_DIR/patch.json"
    echo "backup of $SOURCE failed: $2" >&2
  fi
  echo "$1" >"$STATUS_DIR/rc"
  exit 0
}

# run STEP ARGS...: rclone with its log kept for the failure message.
run() {
  step=$1
  shift
  rc=0
  rclone "$@" >"$log" 2>&1 || rc=$?
  cat "$log" >&2
  if [ "$rc" -ne 0 ]; then
    detail=$(grep -m1 -E 'ERROR|Failed|error' "$log" || true)
    finish "$rc" "rclone $step exited $rc: ${detail:-see the job log}"
  fi
}

field() { sed -n "s/.*\"$1\":\\([0-9-]*\\).*/\\1/p"; }

# --- guards: nothing is written to the target unless the source looks like the tree it was -------
[ -d "$SOURCE_DIR" ] || finish 2 "refused: $SOURCE_DIR does not exist"
if ! awk -v dir="$SOURCE_DIR" '$5 == dir { found = 1 } END { exit !found }' /proc/self/mountinfo; then
  finish 2 "refused: $SOURCE_DIR is not a mount point (the volume is not mounted); the backup was not touched"
fi
run size size --json --links "$SOURCE_DIR"
objects=$(field count <"$log")
bytes=$(field bytes <"$log")
if [ "${objects:-0}" -eq 0 ]; then
  finish 2 "refused: $SOURCE_DIR is empty (an unmounted or wiped volume?); the backup was not touched"
fi
previous=$(rclone cat "$record" 2>/dev/null || true)
if [ -n "$previous" ]; then
  for key in objects bytes; do
    before=$(printf '%s' "$previous" | field "$key")
    if [ "$key" = objects ]; then now_value=$objects; else now_value=$bytes; fi
    [ -n "$before" ] && [ "$before" -gt 0 ] || continue
    # shrink in whole percent, rounded down; a growing source gives a negative number
    shrink=$(((before - now_value) * 100 / before))
    if [ "$shrink" -gt "$MAX_SHRINK_PERCENT" ]; then
      finish 2 "refused: $SOURCE_DIR has $now_value $key, $shrink% fewer than the last successful run ($before); more than maxShrinkPercent ($MAX_SHRINK_PERCENT). The backup was not touched. If the deletion is intended, raise storage.minio.backup.maxShrinkPercent for one run"
    fi
  done
fi

# --- copy, verify, record -------------------------------------------------------------------------
# --links: symbolic links travel as <name>.rclonelink objects; --metadata: mode, owner, group and
# times travel as object metadata (restored by `rclone copy --links --metadata`).
common="--links --metadata --fast-list --transfers 8 --checkers 16 --stats-one-line -v"
if [ "$MODE" = sync ]; then
  # shellcheck disable=SC2086  # $common is a list of flags
  run sync sync "$SOURCE_DIR" "$target" $common --max-delete "$MAX_DELETE"
else
  # shellcheck disable=SC2086
  run copy copy "$SOURCE_DIR" "$target" $common
fi
if [ "$VERIFY" = download ]; then
  run check check --links --one-way --fast-list --download "$SOURCE_DIR" "$target"
else
  run check check --links --one-way --fast-list --size-only "$SOURCE_DIR" "$target"
fi
printf '{"source":"%s","started":%s,"finished":%s,"objects":%s,"bytes":%s}\n' \
  "$SOURCE" "$started" "$(date +%s)" "$objects" "$bytes" >"$STATUS_DIR/record.json"
run record copyto "$STATUS_DIR/record.json" "$record"
finish 0 ok "$bytes" "$objects"
