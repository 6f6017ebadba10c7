#!/bin/sh
# NCCL all-reduce: within one node (NVLink, NNODES=1) or between two GPU nodes over InfiniBand (NNODES=2,
# an indexed Job whose pods rendezvous at MASTER). allreduce.py (written to ALLREDUCE_PY by the lines
# before this script) prints nccl-tests' table with `#wrong`, the out-of-bounds count and the plateau's bus
# bandwidth; rank 0's pod checks that every sum was right, compares the plateau with FLOOR_GBS (GB/s) and
# reports the transport NCCL chose, from its NCCL_DEBUG=INFO lines: `via NET/IB/<dev>[/GDRDMA]` between
# nodes (src/transport/net.cc), `via P2P/...` or `via SHM` within one (src/transport/p2p.cc, shm.cc). With
# EXPECT_TRANSPORT=NET/IB a run that went over sockets (NET/Socket) fails: it does not measure the fabric.
# Parameters: FLOOR_GBS NPROC (GPUs per node) NNODES MASTER MAX_BYTES PLATEAU_BYTES EXPECT_TRANSPORT
#   JOB_COMPLETION_INDEX (from the Job) ALLREDUCE_PY
set -eu
: "${FLOOR_GBS:?}" "${NPROC:?}" "${NNODES:=1}" "${MASTER:=}" "${MAX_BYTES:=1G}" "${PLATEAU_BYTES:=256M}"
: "${EXPECT_TRANSPORT:=}" "${JOB_COMPLETION_INDEX:=0}" "${ALLREDUCE_PY:?}"
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET

out=$(mktemp)
if [ "$NNODES" -gt 1 ]; then
  set -- --nnodes "$NNODES" --node-rank "$JOB_COMPLETION_INDEX" --master-addr "$MASTER" --master-port 29500
else
  set -- --standalone
fi
if ! torchrun "$@" --nproc-per-node "$NPROC" "$ALLREDUCE_PY" "$MAX_BYTES" "$PLATEAU_BYTES" >"$out" 2>&1; then
  tail -n 40 "$out" >&2
  finish failed "" "$FLOOR_GBS" GB/s "the all-reduce did not run (torchrun failed; its last lines above)"
fi
grep -v 'NCCL INFO' "$out" || true
[ "$JOB_COMPLETION_INDEX" = 0 ] || exit 0 # rank 0's pod reports for both

nodes=$(sed -n 's/^# Nodes *: *//p' "$out")
NODE=${nodes:-$NODE}
# The transports of the connections NCCL set up: "NET/IB/0/GDRDMA" -> "NET/IB/GDRDMA", "P2P/CUMEM", "SHM".
transports=$(sed -n 's/.* via \([A-Za-z0-9/()_-]*\).*/\1/p' "$out" | sed 's#^\(NET/[A-Za-z]*\)/[0-9()]*#\1#' | sort -u | tr '\n' ' ')
transports=${transports% }
wrong=$(sed -n 's/^# Out of bounds values *: *\([0-9]*\).*/\1/p' "$out")
busbw=$(sed -n 's/^# Plateau bus bandwidth *: *\([0-9.]*\).*/\1/p' "$out")
[ -n "$busbw" ] && [ -n "$wrong" ] ||
  finish failed "" "$FLOOR_GBS" GB/s "no '# Plateau bus bandwidth' or '# Out of bounds values' line in the all-reduce output"
[ "$wrong" = 0 ] ||
  finish failed "$busbw" "$FLOOR_GBS" GB/s "the all-reduce returned $wrong wrong elements (sums that differ from n(n+1)/2): a GPU, link or driver corrupts data"
via="transport ${transports:-not reported (no NCCL INFO 'via' lines)}"
if [ -n "$EXPECT_TRANSPORT" ]; then
  case " $transports " in
    *" $EXPECT_TRANSPORT "* | *" $EXPECT_TRANSPORT/"*) ;;
    *) finish failed "$busbw" "$FLOOR_GBS" GB/s "the all-reduce did not run over $EXPECT_TRANSPORT ($via): it measured another path, not the fabric" ;;
  esac
fi
if at_least "$busbw" "$FLOOR_GBS"; then
  finish passed "$busbw" "$FLOOR_GBS" GB/s "all-reduce bus bandwidth $busbw GB/s on the large-message plateau (floor $FLOOR_GBS), sums right, $via"
fi
finish failed "$busbw" "$FLOOR_GBS" GB/s "all-reduce bus bandwidth $busbw GB/s on the large-message plateau is below the floor of $FLOOR_GBS GB/s ($via)"
