#!/bin/sh
# Every inventory host (HOSTS) has fresh data in Zabbix: its `agent.ping` item was collected at most
# MAX_AGE seconds ago. Asks the Zabbix API (item.get) with the API token from TOKEN_FILE, which goes in
# the request body (never on a command line): Zabbix 7.0 still accepts `auth` there.
# Parameters: ZABBIX_URL HOSTS ("host host ...") MAX_AGE TOKEN_FILE NOW (tests only)
set -eu
: "${ZABBIX_URL:?}" "${HOSTS:?}" "${MAX_AGE:?}" "${TOKEN_FILE:?}"
now=${NOW:-$(date +%s)}

request=$(mktemp)
trap 'rm -f "$request"' EXIT
umask 077
printf '{"jsonrpc":"2.0","method":"item.get","params":{"output":["lastclock"],"selectHosts":["host"],"filter":{"key_":"agent.ping"}},"auth":"%s","id":1}' \
  "$(cat "$TOKEN_FILE")" >"$request"
if ! response=$(wget -q -O - --header 'Content-Type: application/json-rpc' --post-file "$request" "$ZABBIX_URL/api_jsonrpc.php"); then
  finish failed "" "$MAX_AGE" s "the Zabbix API at $ZABBIX_URL did not answer"
fi
case $response in *'"error"'*) finish failed "" "$MAX_AGE" s "the Zabbix API refused item.get: $response" ;; esac

# One item per line; each line's lastclock and host, in whichever order the API gives the keys.
items=$(printf '%s' "$response" | tr -d '\n' | sed 's/{"itemid"/\n{"itemid"/g')
stale="" oldest=0
for host in $HOSTS; do
  clock=$(printf '%s\n' "$items" | grep "\"host\":\"$host\"" | sed -n 's/.*"lastclock":"\([0-9]*\)".*/\1/p' | head -n 1)
  age=$((now - ${clock:-0}))
  [ "$age" -gt "$oldest" ] && oldest=$age
  if [ -z "$clock" ] || [ "$clock" = 0 ] || [ "$age" -gt "$MAX_AGE" ]; then stale="$stale $host"; fi
done
if [ -n "$stale" ]; then
  # shellcheck disable=SC2034  # read by finish (lib.sh)
  NODE=$(echo "$stale" | sed 's/^ //; s/ /,/g')
  finish failed "$oldest" "$MAX_AGE" s "no agent.ping in the last ${MAX_AGE}s from:$stale"
fi
finish passed "$oldest" "$MAX_AGE" s "every inventory host reported within ${MAX_AGE}s"
