#!/bin/sh
# S3 round trip on MinIO as a backup identity (the rclone remote `nas` of a backup source's Secret): put
# an object of SIZE_MIB in BUCKET under PREFIX (the source's prefix, all that identity may write), get it
# back and compare, delete it. The backup's next sync would remove a leftover object there anyway. Each
# transfer is timed in milliseconds (lib.sh, now_ms): a put under a second still gives its true rate.
# With object locking the backup identity may not delete (DELETE=false): the object has one fixed key, so
# each run adds a version and the older ones expire with the bucket's noncurrent-version lifecycle.
# Parameters: BUCKET PREFIX SIZE_MIB FLOOR_MIB_S WORK (a scratch directory) DELETE (true or false)
set -eu
: "${BUCKET:?}" "${PREFIX:?}" "${SIZE_MIB:?}" "${FLOOR_MIB_S:?}" "${WORK:=/tmp}" "${DELETE:=true}"

if [ "$DELETE" = true ]; then
  object="nas:$BUCKET/$PREFIX/.acceptance-$(hostname)"
else
  object="nas:$BUCKET/$PREFIX/.acceptance"
fi
dd if=/dev/urandom of="$WORK/put" bs=1M count="$SIZE_MIB" 2>/dev/null
asked=$((SIZE_MIB * 1048576))
measured "put, get back and compare an object of $asked bytes as the backup identity"
expect bytes_put "$asked"
expect bytes_got "$asked"
amount bytes_put "$(wc -c <"$WORK/put" | tr -d ' ')"
start=$(now_ms)
rclone copyto "$WORK/put" "$object" || finish failed "" "$FLOOR_MIB_S" MiB/s "put of $object failed"
put_done=$(now_ms)
rclone copyto "$object" "$WORK/got" || finish failed "" "$FLOOR_MIB_S" MiB/s "get of $object failed"
got_done=$(now_ms)
deleted="delete ok"
if [ "$DELETE" = true ]; then
  rclone deletefile "$object" || finish failed "" "$FLOOR_MIB_S" MiB/s "delete of $object failed"
else
  deleted="kept (object locking)"
fi
took put "$start" "$put_done"
took get "$put_done" "$got_done"
amount bytes_got "$(wc -c <"$WORK/got" | tr -d ' ')"
digest put "$(sha256sum "$WORK/put" | cut -d' ' -f1)"
digest got "$(sha256sum "$WORK/got" | cut -d' ' -f1)"
cmp -s "$WORK/put" "$WORK/got" || finish failed "" "$FLOOR_MIB_S" MiB/s "the object read back differs from the one written"
rm -f "$WORK/put" "$WORK/got"
unreadable="could not be timed (clock readings '$start', '$put_done', '$got_done'; resolution $(clock_ms) ms): raise sizeMib"
put_rate=$(mib_per_s "$SIZE_MIB" "$start" "$put_done") || finish failed "" "$FLOOR_MIB_S" MiB/s "the put $unreadable"
get_rate=$(mib_per_s "$SIZE_MIB" "$put_done" "$got_done") || finish failed "" "$FLOOR_MIB_S" MiB/s "the get $unreadable"
slower=$(awk -v p="$put_rate" -v g="$get_rate" 'BEGIN { print (p < g) ? p : g }')
detail="put $put_rate MiB/s ($((put_done - start)) ms), get $get_rate MiB/s ($((got_done - put_done)) ms), $deleted ($SIZE_MIB MiB)"
at_least "$slower" "$FLOOR_MIB_S" && finish passed "$slower" "$FLOOR_MIB_S" MiB/s "$detail"
finish failed "$slower" "$FLOOR_MIB_S" MiB/s "$detail: below the floor of $FLOOR_MIB_S MiB/s"
