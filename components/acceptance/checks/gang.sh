#!/bin/sh
# One pod of the gang Job. The Job runs only once Kueue admitted all its pods together through the
# platform's LocalQueue (QUEUE), and its pods are bound only once Volcano (SCHEDULER) can place all PODS of
# its PodGroup (POD_GROUP, minMember PODS). The pods must land on PODS different nodes (a required
# anti-affinity), so a partial placement is one Volcano refuses, not one that would also run pod by pod.
# The evidence is each pod seeing every other pod of its gang placed at the same time: the peer's DNS name
# `<JOB_NAME>-<i>.<SUBDOMAIN>` (the Job's headless Service, which publishes a pod's address once it has one)
# resolves within WAIT seconds. A pod that runs alone (its peers never placed) times out: failed.
# Parameters: QUEUE PODS SCHEDULER POD_GROUP JOB_NAME SUBDOMAIN WAIT RETRY_EVERY JOB_COMPLETION_INDEX
set -eu
: "${QUEUE:?}" "${PODS:?}" "${SCHEDULER:=default-scheduler}" "${POD_GROUP:=}" "${JOB_COMPLETION_INDEX:=0}"
: "${JOB_NAME:=}" "${SUBDOMAIN:=}" "${WAIT:=120}" "${RETRY_EVERY:=2}"

measured "pods of the gang placed at the same time (each peer's DNS name resolves)"
expect peers_seen "$((PODS - 1))"
started_ms=$(now_ms)
started=$(date +%s)
seen=0 missing=""
i=0
while [ "$i" -lt "$PODS" ]; do
  if [ "$i" != "$JOB_COMPLETION_INDEX" ]; then
    peer="$JOB_NAME-$i${SUBDOMAIN:+.$SUBDOMAIN}"
    until nslookup "$peer" >/dev/null 2>&1; do
      if [ $(($(date +%s) - started)) -ge "$WAIT" ]; then
        missing="$missing $peer"
        break
      fi
      sleep "$RETRY_EVERY"
    done
    case " $missing " in *" $peer "*) ;; *) seen=$((seen + 1)) ;; esac
  fi
  i=$((i + 1))
done
took peers "$started_ms" "$(now_ms)"
amount peers_seen "$seen"
amount pods "$PODS"
[ -z "$missing" ] ||
  finish failed "$((seen + 1))" "$PODS" pods "pod $JOB_COMPLETION_INDEX of $PODS ran without its peers:$missing not placed within ${WAIT}s (a partial placement: the gang was not held back)"
finish passed "$PODS" "$PODS" pods "pod $JOB_COMPLETION_INDEX of $PODS admitted together through LocalQueue $QUEUE, placed by $SCHEDULER${POD_GROUP:+ as PodGroup $POD_GROUP}; saw its $seen peers placed"
