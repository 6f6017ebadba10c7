#!/bin/sh
# Every inventory host (HOSTS) has fresh data in Zabbix: its `agent.ping` item was collected at most
# MAX_AGE seconds ago. Asks the Zabbix API (item.get, one host at a time) with the API token from
# TOKEN_FILE, which goes in the request body (never on a command line): Zabbix 7.0 still accepts `auth`
# there (deprecated since 6.4).
# A host without fresh data is asked again every RETRY_EVERY seconds for up to WAIT seconds (a node
# that joined in the same `up` registers its agent a little after the check starts).
# Parameters: ZABBIX_URL HOSTS ("host host ...") MAX_AGE TOKEN_FILE WAIT RETRY_EVERY NOW (tests only)
set -eu
: "${ZABBIX_URL:?}" "${HOSTS:?}" "${MAX_AGE:?}" "${TOKEN_FILE:?}" "${WAIT:=0}" "${RETRY_EVERY:=30}"
started=$(date +%s)

request=$(mktemp)
trap 'rm -f "$request"' EXIT
umask 077
token=$(cat "$TOKEN_FILE")

# lastclock HOST: when Zabbix last collected HOST's agent.ping (empty: no such item).
lastclock() {
  printf '{"jsonrpc":"2.0","method":"item.get","params":{"output":["lastclock"],"host":"%s","filter":{"key_":"agent.ping"}},"auth":"%s","id":1}' \
    "$1" "$token" >"$request"
  if ! response=$(wget -q -O - --header 'Content-Type: application/json-rpc' --post-file "$request" "$ZABBIX_URL/api_jsonrpc.php"); then
    finish failed "" "$MAX_AGE" s "the Zabbix API at $ZABBIX_URL did not answer"
  fi
  case $response in *'"error"'*) finish failed "" "$MAX_AGE" s "the Zabbix API refused item.get: $response" ;; esac
  printf '%s' "$response" | sed -n 's/.*"lastclock" *: *"\([0-9]*\)".*/\1/p' | head -n 1
}

pending=$HOSTS oldest=0
while :; do
  now=${NOW:-$(date +%s)}
  stale=""
  for host in $pending; do
    clock=$(lastclock "$host")
    age=$((now - ${clock:-0}))
    [ "$age" -gt "$oldest" ] && oldest=$age
    if [ -z "$clock" ] || [ "$clock" = 0 ] || [ "$age" -gt "$MAX_AGE" ]; then stale="$stale $host"; fi
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
finish passed "$oldest" "$MAX_AGE" s "every inventory host reported within ${MAX_AGE}s"
