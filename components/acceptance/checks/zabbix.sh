#!/bin/sh
# Every inventory host has fresh data in Zabbix: its `agent.ping` item was collected at most
# MAX_AGE seconds ago. The hosts are those the read-only token may read, monitored (host.get): the members of the
# node groups' and the NAS's tracked host sets, in the host groups the reader was given. HOSTS (tests) names them
# instead. The Job names no host: a node added changes its group's host set, not this check. Asks the Zabbix API (item.get, one host at a time) with curl, which verifies the
# server's certificate with the CA in CA_FILE (the program's own CA; empty file: the system's CAs). The API
# token from TOKEN_FILE goes in an `Authorization: Bearer` header (Zabbix 7.0's way; `auth` in the body is
# deprecated since 6.4), read by curl from a file, never on a command line.
# A host without fresh data is asked again every RETRY_EVERY seconds for up to WAIT seconds (a node
# that joined in the same `up` registers its agent a little after the check starts).
# Parameters: ZABBIX_URL MAX_AGE TOKEN_FILE CA_FILE WAIT RETRY_EVERY; HOSTS ("host host ...") and NOW: tests only
set -eu
: "${ZABBIX_URL:?}" "${HOSTS:=}" "${MAX_AGE:?}" "${TOKEN_FILE:?}" "${CA_FILE:=}" "${WAIT:=0}" "${RETRY_EVERY:=30}"
command -v curl >/dev/null || finish failed "" "$MAX_AGE" s "curl is not in the image (acceptance.apiImage must carry it)"
started=$(date +%s)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umask 077
printf 'Authorization: Bearer %s\nContent-Type: application/json-rpc\n' "$(cat "$TOKEN_FILE")" >"$work/headers"
set --
if [ -s "$CA_FILE" ]; then set -- --cacert "$CA_FILE"; fi

# api METHOD PARAMS [CURL OPTION...]: the API's answer in $work/response, or `failure` set to why there is none.
api() {
  failure="" method=$1
  printf '{"jsonrpc":"2.0","method":"%s","params":%s,"id":1}' "$method" "$2" >"$work/request"
  shift 2 # the rest: curl's TLS options
  if ! curl --silent --show-error --fail --connect-timeout 10 --max-time 30 "$@" -H "@$work/headers" \
    --data-binary "@$work/request" -o "$work/response" "$ZABBIX_URL/api_jsonrpc.php" 2>"$work/error"; then
    failure="the Zabbix API at $ZABBIX_URL did not answer: $(cat "$work/error")"
  elif grep -q '"error"' "$work/response"; then
    failure="the Zabbix API refused $method: $(cat "$work/response")"
  fi
}

# lastclock HOST [CURL OPTION...]: sets `clock` to when Zabbix last collected HOST's agent.ping (empty: no such item), or
# `failure` to why the API gave no answer. Runs in this shell (not a command substitution), so a failure
# ends the check with its result line.
lastclock() {
  clock="" host=$1
  shift # the rest: curl's TLS options
  api item.get "$(printf '{"output":["lastclock"],"host":"%s","filter":{"key_":"agent.ping"}}' "$host")" "$@"
  [ -z "$failure" ] || return 0
  clock=$(sed -n 's/.*"lastclock" *: *"\([0-9]*\)".*/\1/p' "$work/response" | head -n 1)
}

if [ -z "$HOSTS" ]; then
  api host.get '{"output":["host"],"monitored_hosts":true}' "$@"
  [ -z "$failure" ] || finish failed "" "$MAX_AGE" s "$failure"
  HOSTS=$(grep -o '"host" *: *"[^"]*"' "$work/response" | sed 's/.*: *"\([^"]*\)"/\1/' | tr '\n' ' ')
  # No host at all is nothing measured: the reader sees no host group, or the host sets hold none.
  [ -n "$HOSTS" ] || finish failed "" "$MAX_AGE" s "the Zabbix API lists no monitored host the check may read"
fi

pending=$HOSTS oldest=0 fresh=0
ceiling
measured "age of the last agent.ping of every inventory host in Zabbix"
# shellcheck disable=SC2086  # a list of names
expect hosts_fresh "$(set -- $HOSTS && echo $#)"
while :; do
  now=${NOW:-$(date +%s)}
  stale=""
  for host in $pending; do
    lastclock "$host" "$@"
    [ -z "$failure" ] || finish failed "" "$MAX_AGE" s "$failure"
    age=$((now - ${clock:-0}))
    [ "$age" -gt "$oldest" ] && oldest=$age
    # No clock, or one from the future (a host whose clock runs ahead reports data that is not fresh).
    if [ -z "$clock" ] || [ "$clock" = 0 ] || [ "$age" -gt "$MAX_AGE" ] || [ "$age" -lt -60 ]; then stale="$stale $host"; else fresh=$((fresh + 1)); fi
  done
  [ -n "$stale" ] && [ $(($(date +%s) - started)) -lt "$WAIT" ] || break
  pending=$stale
  sleep "$RETRY_EVERY"
done
if [ -n "$stale" ]; then
  # shellcheck disable=SC2034  # read by finish (lib.sh)
  NODE=$(echo "$stale" | sed 's/^ //; s/ /,/g')
  finish failed "$oldest" "$MAX_AGE" s "no agent.ping in the last ${MAX_AGE}s from:$stale"
fi
amount hosts_fresh "$fresh"
finish passed "$oldest" "$MAX_AGE" s "every inventory host reported within ${MAX_AGE}s"
