#!/bin/sh
# NCCL all-reduce: within one node (NVLink, NNODES=1) or between two GPU nodes over InfiniBand (NNODES=2,
# an indexed Job whose pods rendezvous at MASTER). allreduce.py (written to ALLREDUCE_PY by the lines
# before this script) prints nccl-tests' table with `#wrong`, the out-of-bounds count and the plateau's bus
# bandwidth; rank 0's pod checks that every sum was right, compares the plateau with FLOOR_GBS (GB/s) and
# reports the transport NCCL chose, from its NCCL_DEBUG=INFO lines: `via NET/IB/<dev>[/GDRDMA]` between
# nodes (src/transport/net.cc), `via P2P/...` or `via SHM` within one (src/transport/p2p.cc, shm.cc). With
# EXPECT_TRANSPORT=NET/IB a run that went over sockets (NET/Socket) fails: it does not measure the fabric.
# NCCL_ALGO=Ring: on two nodes NCCL would pick Tree, whose bus bandwidth can exceed the link rate
# (nccl-tests#196, #22, #153), so a port trained below its rate could pass; Ring's is bounded by it.
# Between nodes every rank first reads its HCA's active ports (SYS/class/infiniband/*/ports/*/{state,rate}, the
# kernel's rate_show()): fewer than IB_PORTS active ports at IB_RATE_GBPS (the settings' generation and width,
# settings/hardware.py) fail, naming the port and its trained rate. FLOOR_GBS empty: the GPU model has no row in
# the hardware table, so there is no floor and the check is unverified, never passed.
# Parameters: FLOOR_GBS NPROC (GPUs per node) NNODES MASTER MAX_BYTES PLATEAU_BYTES EXPECT_TRANSPORT IB_RATE_GBPS
#   IB_PORTS SYS JOB_COMPLETION_INDEX (from the Job) ALLREDUCE_PY
set -eu
: "${FLOOR_GBS?}" "${NPROC:?}" "${NNODES:=1}" "${MASTER:=}" "${MAX_BYTES:=1G}" "${PLATEAU_BYTES:=256M}"
: "${EXPECT_TRANSPORT:=}" "${JOB_COMPLETION_INDEX:=0}" "${ALLREDUCE_PY:?}" "${IB_RATE_GBPS:=}" "${IB_PORTS:=1}"
: "${SYS:=/sys}"
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_ALGO=Ring
measured "NCCL all-reduce (Ring) bus bandwidth over $NNODES node(s), $NPROC GPUs each"

if [ "$NNODES" -gt 1 ] && [ -n "$IB_RATE_GBPS" ]; then
  # rate: "400 Gb/sec (4X NDR)"; state: "4: ACTIVE".
  at_rate=0 seen=""
  for port in "$SYS"/class/infiniband/*/ports/*; do
    [ -r "$port/state" ] && [ -r "$port/rate" ] || continue
    case $(cat "$port/state") in *ACTIVE*) ;; *) continue ;; esac
    rate=$(cat "$port/rate")
    seen="$seen ${port#"$SYS"/class/infiniband/}: $rate;"
    gbps=$(printf '%s' "$rate" | sed -n 's/^\([0-9][0-9]*\(\.[0-9]*\)\{0,1\}\) Gb\/sec (.*)$/\1/p')
    [ -n "$gbps" ] && at_least "$gbps" "$IB_RATE_GBPS" && at_rate=$((at_rate + 1))
  done
  if [ "$at_rate" -lt "$IB_PORTS" ]; then
    finish failed "" "$FLOOR_GBS" GB/s "$at_rate of $IB_PORTS InfiniBand ports active at $IB_RATE_GBPS Gb/s on ${NODE:-this node} (active:${seen:- none}): a port trained below its rate, or the settings' ibGeneration/ibPortWidth are wrong"
  fi
fi

out=$(mktemp)
if [ "$NNODES" -gt 1 ]; then
  set -- --nnodes "$NNODES" --node-rank "$JOB_COMPLETION_INDEX" --master-addr "$MASTER" --master-port 29500
else
  set -- --standalone
fi
started_ms=$(now_ms)
if ! torchrun "$@" --nproc-per-node "$NPROC" "$ALLREDUCE_PY" "$MAX_BYTES" "$PLATEAU_BYTES" >"$out" 2>&1; then
  tail -n 40 "$out" >&2
  finish failed "" "$FLOOR_GBS" GB/s "the all-reduce did not run (torchrun failed; its last lines above)"
fi
took torchrun "$started_ms" "$(now_ms)"
grep -v 'NCCL INFO' "$out" || true
[ "$JOB_COMPLETION_INDEX" = 0 ] || exit 0 # rank 0's pod reports for both

nodes=$(sed -n 's/^# Nodes *: *//p' "$out")
NODE=${nodes:-$NODE}
# The transports of the connections NCCL set up: "NET/IB/0/GDRDMA" -> "NET/IB/GDRDMA", "P2P/CUMEM", "SHM".
transports=$(sed -n 's/.* via \([A-Za-z0-9/()_-]*\).*/\1/p' "$out" | sed 's#^\(NET/[A-Za-z]*\)/[0-9()]*#\1#' | sort -u | tr '\n' ' ')
transports=${transports% }
wrong=$(sed -n 's/^# Out of bounds values : \([0-9][0-9]*\) [A-Z][A-Z]*$/\1/p' "$out")
expect ranks "$((NPROC * NNODES))"
amount ranks "$(sed -n 's/^# Ranks *: *\([0-9]*\)$/\1/p' "$out")"
amount elements_checked "$(sed -n 's/^# Elements checked *: *\([0-9]*\)$/\1/p' "$out")"
expect wrong_elements 0
amount wrong_elements "$wrong"
# The plateau's own time: the table's time(us) of the messages from its first size (perf_counter, monotonic).
from=$(sed -n 's/^# Plateau bus bandwidth .*sizes from \([0-9]*\) B.*/\1/p' "$out")
amount plateau_sizes "$(awk -v f="${from:-0}" '$1 ~ /^[0-9]+$/ && NF == 5 && $1 + 0 >= f + 0 { n++ } END { print n + 0 }' "$out")"
EV_DURATIONS="$EV_DURATIONS plateau=$(awk -v f="${from:-0}" '$1 ~ /^[0-9]+$/ && NF == 5 && $1 + 0 >= f + 0 && $2 ~ /^[0-9]+(\.[0-9]+)?$/ { t += $2 } END { printf "%.3f", t / 1000 }' "$out")"
# The whole line as allreduce.py prints it, or nothing: a number in another unit, with a decimal comma, or with
# anything after it is not read as a bandwidth.
busbw=$(sed -n 's/^# Plateau bus bandwidth : \([0-9][0-9]*\.[0-9][0-9]*\) ([0-9][0-9]* sizes from [0-9][0-9]* B)$/\1/p' "$out")
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
[ -n "$FLOOR_GBS" ] ||
  finish unverified "$busbw" "" GB/s "all-reduce bus bandwidth $busbw GB/s, sums right, $via; no floor: the GPU model has no row in the hardware table (settings/hardware.py)"
if at_least "$busbw" "$FLOOR_GBS"; then
  finish passed "$busbw" "$FLOOR_GBS" GB/s "all-reduce bus bandwidth $busbw GB/s on the large-message plateau (floor $FLOOR_GBS), sums right, $via"
fi
finish failed "$busbw" "$FLOOR_GBS" GB/s "all-reduce bus bandwidth $busbw GB/s on the large-message plateau is below the floor of $FLOOR_GBS GB/s ($via)"
