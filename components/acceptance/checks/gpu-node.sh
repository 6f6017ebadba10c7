#!/bin/sh
# Runs on one GPU node, in a pod that requests all EXPECTED_GPUS GPUs of the inventory (and one RDMA
# device on InfiniBand nodes): it is scheduled only if the node has them allocatable. Then: the GPU
# Operator's validations passed (its validator writes /run/nvidia/validations/{driver,toolkit,cuda,
# plugin}-ready on the host), the container sees EXPECTED_GPUS GPUs, every GPU runs the driver
# EXPECTED_DRIVER (`gpu.driver.version`; empty: drivers preinstalled on the host, not compared) and is the
# model EXPECTED_MODEL (`nodes[].gpu.model`), and an RDMA device is there when RDMA=true. nvidia-smi is bounded
# by SMI_TIMEOUT seconds (a hung GPU hangs it).
# Parsing is strict: a CSV query (index, uuid, name, driver_version; no header, no units), its stderr kept
# apart (a warning such as `infoROM is corrupted` is reported, never counted), and every line must be one GPU:
# a line that is not `<index>, GPU-<uuid>, <name>, <version>` fails the check, and so do repeated indices or
# UUIDs (the count is of distinct GPUs, not of lines).
# Parameters: EXPECTED_GPUS EXPECTED_DRIVER EXPECTED_MODEL RDMA VALIDATIONS (the host directory, mounted read-only)
#   SMI_TIMEOUT WAIT RETRY_EVERY
set -eu
: "${EXPECTED_GPUS:?}" "${EXPECTED_DRIVER:=}" "${EXPECTED_MODEL:=}" "${RDMA:=false}" "${VALIDATIONS:=/run/nvidia/validations}"
: "${DEV_INFINIBAND:=/dev/infiniband}" "${SMI_TIMEOUT:=60}" "${WAIT:=0}" "${RETRY_EVERY:=10}"

# The validator removes and writes these again when its operands restart (a driver upgrade): wait for them
# up to WAIT seconds (a minute less than the Job's deadline, so the check still ends with its result).
started=$(date +%s)
while :; do
  missing=""
  for component in driver toolkit cuda plugin; do
    [ -e "$VALIDATIONS/$component-ready" ] || missing="$missing $component"
  done
  [ -n "$missing" ] || break
  [ $(($(date +%s) - started)) -lt "$WAIT" ] ||
    finish failed "" "" "" "GPU Operator validations not passed:$missing (no *-ready file in $VALIDATIONS after ${WAIT}s)"
  sleep "$RETRY_EVERY"
done

measured "GPUs visible to nvidia-smi (index, UUID, model, driver)"
expect gpus "$EXPECTED_GPUS"
errors=$(mktemp)
started_ms=$(now_ms)
if ! gpus=$(timeout "$SMI_TIMEOUT" nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader 2>"$errors"); then
  finish failed "" "$EXPECTED_GPUS" GPUs "nvidia-smi failed or hung (more than ${SMI_TIMEOUT}s): $(head -c 300 "$errors")"
fi
took nvidia_smi "$started_ms" "$(now_ms)"
warnings=$(head -c 300 "$errors")
rm -f "$errors"
# Every line one GPU, or the check fails naming the first line that is not.
bad=$(printf '%s\n' "$gpus" | grep -v -E -x '[0-9]+, GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}, [^,]+, [0-9]+(\.[0-9]+)+' | head -n 1 || true)
[ -z "$bad" ] || finish failed "" "$EXPECTED_GPUS" GPUs "nvidia-smi printed a line that is not a GPU: '$bad'${warnings:+ (stderr: $warnings)}"
count=$(printf '%s\n' "$gpus" | cut -d, -f1 | sort -u | grep -c . || true)
uuids=$(printf '%s\n' "$gpus" | cut -d, -f2 | sort -u | grep -c . || true)
lines=$(printf '%s\n' "$gpus" | grep -c . || true)
[ "$count" = "$lines" ] && [ "$uuids" = "$lines" ] ||
  finish failed "$count" "$EXPECTED_GPUS" GPUs "nvidia-smi listed $lines lines but $count distinct indices and $uuids distinct UUIDs"
amount gpus "$count"
if [ "$count" -ne "$EXPECTED_GPUS" ]; then
  finish failed "$count" "$EXPECTED_GPUS" GPUs "the pod sees $count GPUs, the inventory gives $EXPECTED_GPUS"
fi
if [ -n "$EXPECTED_MODEL" ]; then
  other=$(printf '%s\n' "$gpus" | cut -d, -f3 | sed 's/^ //' | grep -v -x -F "$EXPECTED_MODEL" | sort -u | tr '\n' ' ' || true)
  [ -z "$other" ] || finish failed "$count" "$EXPECTED_GPUS" GPUs "GPU model ${other% } found, nodes[].gpu.model is $EXPECTED_MODEL"
fi
if [ -n "$EXPECTED_DRIVER" ]; then
  other=$(printf '%s\n' "$gpus" | cut -d, -f4 | tr -d ' ' | grep -v -x -F "$EXPECTED_DRIVER" | sort -u | tr '\n' ' ' || true)
  [ -z "$other" ] || finish failed "$count" "$EXPECTED_GPUS" GPUs "driver ${other% } runs, gpu.driver.version is $EXPECTED_DRIVER (a node not yet upgraded, or the driver pod not restarted)"
fi
if [ "$RDMA" = true ] && ! ls "$DEV_INFINIBAND"/uverbs* >/dev/null 2>&1; then
  finish failed "$count" "$EXPECTED_GPUS" GPUs "the RDMA resource was allocated but $DEV_INFINIBAND has no uverbs device"
fi
finish passed "$count" "$EXPECTED_GPUS" GPUs "validations passed; $count GPUs allocatable and visible${EXPECTED_DRIVER:+, driver $EXPECTED_DRIVER}; RDMA=$RDMA${warnings:+; nvidia-smi warned: $warnings}"
