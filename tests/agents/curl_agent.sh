#!/bin/sh
# A shell agent that posts a webhook with curl to the HTTP stand-in: no crashpoint probe, no
# Python. The harness judges it from the request alone (an effect of kind "POST /hook").
#
#   sh curl_agent.sh STATE_DIR [--keyed] [URL]      (URL: default $CRASHPOINT_HTTP)
#
# It POSTs {"msg":"hello"} to URL/hook (curl retries a failed or timed-out request up to 3
# times), then records `posted` in STATE_DIR (temp + rename) and prints `posted`; a run that
# finds `posted` just prints it.
#
# Without --keyed (the bug) a kill after the service applied the POST and before the agent
# recorded it makes the next attempt post again, and nothing can tell the two apart: a
# duplicate. --keyed sends an Idempotency-Key drawn once and written to STATE_DIR before the
# first try, so a retry or a restart reuses it and the service applies the webhook once.
set -eu

state=${1:?usage: curl_agent.sh STATE_DIR [--keyed] [URL]}
keyed=""
url=${CRASHPOINT_HTTP:-}
shift
for arg in "$@"; do
    case "$arg" in
        --keyed) keyed=1 ;;
        *) url=$arg ;;
    esac
done
[ -n "$url" ] || { echo "curl_agent: no URL (set CRASHPOINT_HTTP or pass {http})" >&2; exit 2; }
mkdir -p "$state"
if [ -f "$state/posted" ]; then
    echo posted
    exit 0
fi
set -- -sS --fail --max-time 2 --retry 3 --retry-all-errors --retry-delay 0 \
    -X POST -H "Content-Type: application/json" --data '{"msg":"hello"}'
if [ -n "$keyed" ]; then
    if [ ! -f "$state/key" ]; then
        echo "hook-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" > "$state/key.tmp"
        mv "$state/key.tmp" "$state/key"
    fi
    set -- "$@" -H "Idempotency-Key: $(cat "$state/key")"
fi
curl "$@" "${url%/}/hook" > /dev/null
echo 1 > "$state/posted.tmp"
mv "$state/posted.tmp" "$state/posted"
echo posted
