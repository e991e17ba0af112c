#!/bin/sh
# A shell agent with no crashpoint in it: curl posts a webhook per item to the HTTP stand-in.
#
# Usage: curl_webhook.sh BASE_URL STATE_DIR [--keyed]
# BASE_URL is the scenario's {http}. For each of 3 items it POSTs {"item": N} to BASE_URL/hook,
# then records N+1 in STATE_DIR/done (temp file, then mv). A restart skips the items done.
# Without --keyed the POST has no key: a kill after the service applied it and before the
# agent recorded it makes the next attempt post it again (a duplicate, judged by content).
# With --keyed it sends Idempotency-Key: <run id>:hook:<N>, so the retry is deduplicated.
set -eu
base=${1:?usage: curl_webhook.sh BASE_URL STATE_DIR [--keyed]}
state=${2:?usage: curl_webhook.sh BASE_URL STATE_DIR [--keyed]}
mode=${3:-}
mkdir -p "$state"
done_n=$(cat "$state/done" 2>/dev/null || echo 0)
i=$done_n
while [ "$i" -lt 3 ]; do
    if [ "$mode" = "--keyed" ]; then
        curl -sS --fail --max-time 30 -X POST "$base/hook" -H 'Content-Type: application/json' \
            -H "Idempotency-Key: ${CRASHPOINT_RUN_ID:-local}:hook:$i" \
            --data-binary "{\"item\":$i}" >/dev/null
    else
        curl -sS --fail --max-time 30 -X POST "$base/hook" -H 'Content-Type: application/json' \
            --data-binary "{\"item\":$i}" >/dev/null
    fi
    i=$((i + 1))
    echo "$i" > "$state/done.tmp"
    mv "$state/done.tmp" "$state/done"
done
echo "posted 3 items"
