#!/bin/sh
# NCCL all-reduce: within one node (NVLink, NNODES=1) or between two GPU nodes over InfiniBand (NNODES=2,
# an indexed Job whose pods rendezvous at MASTER). allreduce.py prints nccl-tests' table and its
# "# Avg bus bandwidth" line; rank 0's pod compares that with FLOOR_GBS (GB/s).
# Parameters: FLOOR_GBS NPROC (GPUs per node) NNODES MASTER MAX_BYTES JOB_COMPLETION_INDEX (from the Job)
set -eu
: "${FLOOR_GBS:?}" "${NPROC:?}" "${NNODES:=1}" "${MASTER:=}" "${MAX_BYTES:=1G}" "${JOB_COMPLETION_INDEX:=0}"
: "${CHECKS_DIR:=/checks}"

out=$(mktemp)
if [ "$NNODES" -gt 1 ]; then
  set -- --nnodes "$NNODES" --node-rank "$JOB_COMPLETION_INDEX" --master-addr "$MASTER" --master-port 29500
else
  set -- --standalone
fi
if ! torchrun "$@" --nproc-per-node "$NPROC" "$CHECKS_DIR/allreduce.py" "$MAX_BYTES" >"$out" 2>&1; then
  tail -n 40 "$out" >&2
  finish failed "" "$FLOOR_GBS" GB/s "the all-reduce did not run (torchrun failed; its last lines above)"
fi
cat "$out"
[ "$JOB_COMPLETION_INDEX" = 0 ] || exit 0 # rank 0's pod reports for both

nodes=$(sed -n 's/^# Nodes *: *//p' "$out")
NODE=${nodes:-$NODE}
busbw=$(sed -n 's/^# Avg bus bandwidth *: *\([0-9.]*\).*/\1/p' "$out")
[ -n "$busbw" ] || finish failed "" "$FLOOR_GBS" GB/s "no '# Avg bus bandwidth' line in the all-reduce output"
if at_least "$busbw" "$FLOOR_GBS"; then
  finish passed "$busbw" "$FLOOR_GBS" GB/s "all-reduce bus bandwidth $busbw GB/s (floor $FLOOR_GBS)"
fi
finish failed "$busbw" "$FLOOR_GBS" GB/s "all-reduce bus bandwidth $busbw GB/s is below the floor of $FLOOR_GBS GB/s"
