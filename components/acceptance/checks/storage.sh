#!/bin/sh
# Writes SIZE_MIB to a fresh volume of one storage class (mounted at DIR) with direct I/O, reads it back,
# and compares the slower of the two with FLOOR_MIB_S. dd, not fio: see docs/acceptance.md.
# Parameters: DIR SIZE_MIB FLOOR_MIB_S
set -eu
: "${DIR:?}" "${SIZE_MIB:?}" "${FLOOR_MIB_S:?}"

file=$DIR/acceptance.bin
# dd's last line: "... bytes (...) copied, 2.51 s, 428 MB/s" (GNU) or "... copied, 2.51 seconds, ..." (BusyBox).
seconds() { printf '%s\n' "$1" | sed -n 's/.*copied, *\([0-9.]*\) *s.*/\1/p' | tail -n 1; }

if ! written=$(dd if=/dev/zero of="$file" bs=1M count="$SIZE_MIB" oflag=direct 2>&1); then
  finish failed "" "$FLOOR_MIB_S" MiB/s "write to $DIR failed: $written"
fi
if ! read_back=$(dd if="$file" of=/dev/null bs=1M iflag=direct 2>&1); then
  finish failed "" "$FLOOR_MIB_S" MiB/s "read from $DIR failed: $read_back"
fi
rm -f "$file"
write_rate=$(mib_per_s "$SIZE_MIB" "$(seconds "$written")")
read_rate=$(mib_per_s "$SIZE_MIB" "$(seconds "$read_back")")
slower=$(awk -v w="$write_rate" -v r="$read_rate" 'BEGIN { print (w < r) ? w : r }')
detail="write $write_rate MiB/s, read $read_rate MiB/s ($SIZE_MIB MiB, direct I/O)"
at_least "$slower" "$FLOOR_MIB_S" && finish passed "$slower" "$FLOOR_MIB_S" MiB/s "$detail"
finish failed "$slower" "$FLOOR_MIB_S" MiB/s "$detail: below the floor of $FLOOR_MIB_S MiB/s"
