#!/bin/sh
# The NCCL acceptance check (nccl.sh with allreduce.py, exactly as the Job runs them) on one machine with
# NVIDIA GPUs: torchrun from PyTorch at TORCH_VENV (default /opt/torch/.venv), NCCL over every GPU present,
# NCCL_DEBUG=INFO captured, every sum verified, the bus bandwidth of the large-message plateau printed.
# Ends with one line `DEVICE CHECK PASS|FAIL: ...` and exit status 0|1, in well under 3 minutes.
#   sh tests/acceptance/device_check.sh            # from the repository root
# FLOOR_GBS (default 0: report only) is the NVLink floor to compare with; with one GPU the bus bandwidth is
# 0 by definition (2(n-1)/n), so only correctness, NCCL's start and the timing path are exercised.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
checks=$root/components/acceptance/checks
: "${TORCH_VENV:=/opt/torch/.venv}" "${FLOOR_GBS:=0}" "${MAX_BYTES:=1G}" "${PLATEAU_BYTES:=256M}"
fail() { echo "DEVICE CHECK FAIL: $*"; exit 1; }

[ -x "$TORCH_VENV/bin/torchrun" ] || fail "no torchrun at $TORCH_VENV/bin (set TORCH_VENV)"
gpus=$(timeout 60 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ "$gpus" -ge 1 ] || fail "nvidia-smi lists no GPU"
echo "GPUs: $gpus; driver $(timeout 60 nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u | tr '\n' ' ')"
"$TORCH_VENV/bin/python" -c 'import torch; print("torch", torch.__version__, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))' ||
  fail "torch does not import"

work=$(mktemp -d)
program=$work/nccl-check.sh
cat "$checks/lib.sh" "$checks/nccl.sh" >"$program"
log=$work/check.log
start=$(date +%s)
PATH="$TORCH_VENV/bin:$PATH" CHECK=nccl-device NODE="$(hostname)" ADVISORY=false FLOOR_GBS="$FLOOR_GBS" \
  NPROC="$gpus" NNODES=1 MAX_BYTES="$MAX_BYTES" PLATEAU_BYTES="$PLATEAU_BYTES" ALLREDUCE_PY="$checks/allreduce.py" \
  HOME="$work" TMPDIR="$work" timeout 170 sh "$program" >"$log" 2>&1
status=$?
cat "$log"
echo "--- elapsed $(($(date +%s) - start)) s, check exit status $status"
result=$(grep '^ACCEPTANCE ' "$log" | tail -n 1)
[ -n "$result" ] || fail "the check printed no ACCEPTANCE line (exit status $status; 124: over 170 s)"
echo "$result"
case $result in *'"status":"passed"'*) ;; *) fail "the check did not pass: $result" ;; esac
grep -q '^# Out of bounds values : 0 OK' "$log" || fail "the all-reduce sums were not verified right"
plateau=$(sed -n 's/^# Plateau bus bandwidth *: *//p' "$log")
[ -n "$plateau" ] || fail "no plateau bus bandwidth line"
# NCCL_DEBUG=INFO reached the output (the check reads the transport from it); print what NCCL reported.
# (nccl.sh keeps torchrun's whole output in a temporary file under TMPDIR.)
info=$(cat "$work"/tmp.* 2>/dev/null | grep -c 'NCCL INFO' || true)
[ "${info:-0}" -gt 0 ] || fail "no NCCL INFO line in torchrun's output: NCCL_DEBUG=INFO did not reach it"
echo "NCCL INFO lines: $info; connections: $(cat "$work"/tmp.* | sed -n 's/.* via \([A-Za-z0-9/()_-]*\).*/\1/p' | sort | uniq -c | tr '\n' ' ')"
echo "DEVICE CHECK PASS: $gpus GPU(s), sums right, plateau bus bandwidth $plateau GB/s (floor $FLOOR_GBS)"
