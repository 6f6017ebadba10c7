#!/bin/sh
# Runs on one GPU node, in a pod that requests all EXPECTED_GPUS GPUs of the inventory (and one RDMA
# device on InfiniBand nodes): it is scheduled only if the node has them allocatable. Then: the GPU
# Operator's validations passed (its validator writes /run/nvidia/validations/{driver,toolkit,cuda,
# plugin}-ready on the host), the container sees EXPECTED_GPUS GPUs, every GPU runs the driver
# EXPECTED_DRIVER (`gpu.driver.version`; empty: drivers preinstalled on the host, not compared), and an
# RDMA device is there when RDMA=true. nvidia-smi is bounded by SMI_TIMEOUT seconds (a hung GPU hangs it).
# Parameters: EXPECTED_GPUS EXPECTED_DRIVER RDMA VALIDATIONS (the host directory, mounted read-only) SMI_TIMEOUT
#   WAIT RETRY_EVERY
set -eu
: "${EXPECTED_GPUS:?}" "${EXPECTED_DRIVER:=}" "${RDMA:=false}" "${VALIDATIONS:=/run/nvidia/validations}"
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

if ! drivers=$(timeout "$SMI_TIMEOUT" nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1); then
  finish failed "" "$EXPECTED_GPUS" GPUs "nvidia-smi failed or hung (more than ${SMI_TIMEOUT}s): $drivers"
fi
count=$(printf '%s\n' "$drivers" | grep -c '[0-9]' || true)
if [ "$count" -ne "$EXPECTED_GPUS" ]; then
  finish failed "$count" "$EXPECTED_GPUS" GPUs "the pod sees $count GPUs, the inventory gives $EXPECTED_GPUS"
fi
if [ -n "$EXPECTED_DRIVER" ]; then
  other=$(printf '%s\n' "$drivers" | tr -d ' ' | grep -v -x -F "$EXPECTED_DRIVER" | sort -u | tr '\n' ' ' || true)
  [ -z "$other" ] || finish failed "$count" "$EXPECTED_GPUS" GPUs "driver ${other% } runs, gpu.driver.version is $EXPECTED_DRIVER (a node not yet upgraded, or the driver pod not restarted)"
fi
if [ "$RDMA" = true ] && ! ls "$DEV_INFINIBAND"/uverbs* >/dev/null 2>&1; then
  finish failed "$count" "$EXPECTED_GPUS" GPUs "the RDMA resource was allocated but $DEV_INFINIBAND has no uverbs device"
fi
finish passed "$count" "$EXPECTED_GPUS" GPUs "validations passed; $count GPUs allocatable and visible${EXPECTED_DRIVER:+, driver $EXPECTED_DRIVER}; RDMA=$RDMA"
