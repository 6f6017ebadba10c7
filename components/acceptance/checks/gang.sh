#!/bin/sh
# One pod of the gang Job. The Job runs only once Kueue admitted all its pods together through the
# platform's LocalQueue (QUEUE), and its pods are bound only once Volcano (SCHEDULER) can place all PODS of
# its PodGroup (POD_GROUP, minMember PODS): a pod that runs at all is the evidence.
# Parameters: QUEUE PODS SCHEDULER POD_GROUP JOB_COMPLETION_INDEX (from the Job)
set -eu
: "${QUEUE:?}" "${PODS:?}" "${SCHEDULER:=default-scheduler}" "${POD_GROUP:=}" "${JOB_COMPLETION_INDEX:=0}"
finish passed "$PODS" "$PODS" pods "pod $JOB_COMPLETION_INDEX of $PODS admitted together through LocalQueue $QUEUE, placed by $SCHEDULER${POD_GROUP:+ as PodGroup $POD_GROUP}"
