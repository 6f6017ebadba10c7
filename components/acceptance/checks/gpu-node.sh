#!/bin/sh
# Runs on one GPU node, in a pod that requests all EXPECTED_GPUS GPUs of the inventory (and one RDMA
# device on InfiniBand nodes): it is scheduled only if the node has them allocatable. Then: the GPU
# Operator's validations passed (its validator writes /run/nvidia/validations/{driver,toolkit,cuda,
# plugin}-ready on the host), the container sees EXPECTED_GPUS GPUs, and an RDMA device when RDMA=true.
# Parameters: EXPECTED_GPUS RDMA VALIDATIONS (the host directory, mounted read-only)
set -eu
: "${EXPECTED_GPUS:?}" "${RDMA:=false}" "${VALIDATIONS:=/run/nvidia/validations}" "${DEV_INFINIBAND:=/dev/infiniband}"

missing=""
for component in driver toolkit cuda plugin; do
  [ -e "$VALIDATIONS/$component-ready" ] || missing="$missing $component"
done
[ -z "$missing" ] || finish failed "" "" "" "GPU Operator validations not passed:$missing (no *-ready file in $VALIDATIONS)"

count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "$count" -ne "$EXPECTED_GPUS" ]; then
  finish failed "$count" "$EXPECTED_GPUS" GPUs "the pod sees $count GPUs, the inventory gives $EXPECTED_GPUS"
fi
if [ "$RDMA" = true ] && ! ls "$DEV_INFINIBAND"/uverbs* >/dev/null 2>&1; then
  finish failed "$count" "$EXPECTED_GPUS" GPUs "the RDMA resource was allocated but $DEV_INFINIBAND has no uverbs device"
fi
finish passed "$count" "$EXPECTED_GPUS" GPUs "validations passed; $count GPUs allocatable and visible${RDMA:+; RDMA=$RDMA}"
