#!/bin/sh
# Writes SIZE_MIB to a fresh volume of one storage class (mounted at DIR) with direct I/O (oflag=direct, then
# fsync), reads it back (iflag=direct), and compares the slower of the two with FLOOR_MIB_S. dd, not fio: see
# docs/acceptance.md. The time is the check's own monotonic clock around dd (BusyBox dd prints no time).
# What is written is random data (a 1 MiB random block repeated), not zeros: a volume that drops writes reads
# back zeros. The evidence: the bytes dd says it moved (its `records in/out`) and the file's size against what
# was asked, the SHA-256 of a second direct read against that of the data written, and each transfer's time.
# Direct I/O is verified, not assumed: BusyBox dd turns O_DIRECT off and goes on buffered when a read or a
# write fails with EINVAL (coreutils/dd.c, clear_O_DIRECT), so the check reads dd's file flags
# (/proc/PID/fdinfo) while it runs; a run that went buffered says so, and a buffered read-back (from the
# page cache) does not measure the volume: the check fails. A write it never saw the flags of is reported
# `unverified I/O`, and such a read-back is not a pass either.
# Parameters: DIR SIZE_MIB FLOOR_MIB_S BLOCK (dd's block size; 1M)
set -eu
: "${DIR:?}" "${SIZE_MIB:?}" "${FLOOR_MIB_S:?}" "${BLOCK:=1M}"

file=$DIR/acceptance.bin
# O_DIRECT in the octal `flags:` of fdinfo (asm-generic/fcntl.h; arm64 and arm use 0200000).
case $(uname -m) in aarch64 | arm*) direct_flag=200000 ;; *) direct_flag=40000 ;; esac

# has_direct OCTAL_FLAGS: whether O_DIRECT is set.
has_direct() { awk -v f="$1" -v d="$direct_flag" 'BEGIN {
  n = 0; for (i = 1; i <= length(f); i++) n = n * 8 + substr(f, i, 1)
  m = 0; for (i = 1; i <= length(d); i++) m = m * 8 + substr(d, i, 1)
  exit !(int(n / m) % 2) }'; }

# run_dd FD ARGS...: run dd, watching the O_DIRECT flag of its file descriptor FD (0 input, 1 output) once
# that is the test file; sets `output` (dd's messages), `mode` (direct, buffered or unverified: dd ended
# before a look) and `start`/`end` (now_ms). Status: dd's.
run_dd() {
  fd=$1
  shift
  log=$(mktemp)
  start=$(now_ms)
  dd "$@" 2>"$log" &
  pid=$!
  mode=unverified
  while kill -0 "$pid" 2>/dev/null; do
    flags=""
    if [ "$(readlink "$PROC/$pid/fd/$fd" 2>/dev/null || true)" = "$file" ]; then
      flags=$(sed -n 's/^flags:[[:space:]]*//p' "$PROC/$pid/fdinfo/$fd" 2>/dev/null || true)
    fi
    if [ -n "$flags" ]; then
      if has_direct "$flags"; then
        [ "$mode" = buffered ] || mode=direct
      else
        mode=buffered
      fi
    fi
    sleep 0.01 2>/dev/null || sleep 1
  done
  status=0
  wait "$pid" || status=$?
  end=$(now_ms)
  output=$(cat "$log")
  rm -f "$log"
  return "$status"
}

block_bytes=$(printf '%s' "$BLOCK" | awk '{ n = $1 + 0; u = substr($1, length($1)); print (u == "M") ? n * 1048576 : (u == "K") ? n * 1024 : n }')
count=$((SIZE_MIB * 1048576 / block_bytes))
asked=$((count * block_bytes))
measured "sequential direct write, then direct read, of $asked bytes on $DIR"
expect bytes_written "$asked"
expect bytes_on_disk "$asked"
expect bytes_read "$asked"
pattern=$(mktemp)
dd if=/dev/urandom of="$pattern" bs=1048576 count=1 2>/dev/null
# The data: the random block over and over, exactly `asked` bytes.
data() { while :; do cat "$pattern" || return; done | head -c "$asked"; }
expected_digest=$(data | sha256sum | cut -d' ' -f1)
digest written "$expected_digest"
# dd_bytes: the bytes of whole records dd reports it moved ("N+M records in|out"); empty when it says nothing.
dd_bytes() { printf '%s\n' "$output" | sed -n "s/^\([0-9]*\)+[0-9]* records $1\$/\1/p" | awk -v b="$block_bytes" 'NR == 1 { print $1 * b }'; }

fifo=$(mktemp -u)
mkfifo "$fifo"
data >"$fifo" &
writer=$!
written=0
run_dd 1 if="$fifo" of="$file" bs="$BLOCK" count="$count" iflag=fullblock oflag=direct conv=fsync || written=$?
# A dd that never opened the pipe (or stopped early) leaves the writer waiting: end it.
kill "$writer" 2>/dev/null || true
rm -f "$fifo"
if [ "$written" != 0 ]; then
  rm -f "$pattern"
  finish failed "" "$FLOOR_MIB_S" MiB/s "write to $DIR failed: $output"
fi
write_mode=$mode
took write "$start" "$end"
amount bytes_written "$(dd_bytes out)"
amount bytes_on_disk "$(stat -c %s "$file" 2>/dev/null || echo 0)"
write_rate=$(mib_per_s "$SIZE_MIB" "$start" "$end") ||
  finish failed "" "$FLOOR_MIB_S" MiB/s "the write's time could not be read (clock readings '$start' and '$end', resolution $(clock_ms) ms): raise sizeMib"
if ! run_dd 0 if="$file" of=/dev/null bs="$BLOCK" iflag=direct; then
  finish failed "" "$FLOOR_MIB_S" MiB/s "read from $DIR failed: $output"
fi
read_mode=$mode
took read "$start" "$end"
amount bytes_read "$(dd_bytes in)"
read_rate=$(mib_per_s "$SIZE_MIB" "$start" "$end") ||
  finish failed "" "$FLOOR_MIB_S" MiB/s "the read's time could not be read (clock readings '$start' and '$end', resolution $(clock_ms) ms): raise sizeMib"
# The read-back compared: a second direct read, untimed, through SHA-256.
digest read "$(dd if="$file" bs="$BLOCK" iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)"
rm -f "$file" "$pattern"
slower=$(awk -v w="$write_rate" -v r="$read_rate" 'BEGIN { print (w < r) ? w : r }')
detail="write $write_rate MiB/s ($write_mode I/O), read $read_rate MiB/s ($read_mode I/O), $SIZE_MIB MiB"
case $read_mode in
  buffered) finish failed "$slower" "$FLOOR_MIB_S" MiB/s "$detail: the file system refused O_DIRECT, the read came from the page cache and does not measure the volume" ;;
esac
case "$write_mode $read_mode" in
  *unverified*) finish unverified "$slower" "$FLOOR_MIB_S" MiB/s "$detail: dd ended before the check saw its file flags, so the I/O may have gone through the page cache; not a measurement of the volume (raise sizeMib)" ;;
esac
at_least "$slower" "$FLOOR_MIB_S" && finish passed "$slower" "$FLOOR_MIB_S" MiB/s "$detail"
finish failed "$slower" "$FLOOR_MIB_S" MiB/s "$detail: below the floor of $FLOOR_MIB_S MiB/s"
