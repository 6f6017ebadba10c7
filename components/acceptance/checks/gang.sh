#!/bin/sh
# One pod of a team's gang Job. The Job runs only once Kueue admitted all its pods together through the
# team's LocalQueue (QUEUE), so a pod that runs at all is the evidence.
# Parameters: QUEUE PODS JOB_COMPLETION_INDEX (from the Job)
set -eu
: "${QUEUE:?}" "${PODS:?}" "${JOB_COMPLETION_INDEX:=0}"
finish passed "$PODS" "$PODS" pods "pod $JOB_COMPLETION_INDEX of $PODS admitted together through LocalQueue $QUEUE"
