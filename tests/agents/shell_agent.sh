#!/bin/sh
# A tiny agent in POSIX sh that speaks crashpoint's wire protocol without Python, through the
# ledger's HTTP front with curl (docs/reference/wire-protocol.md). Three steps, one effect:
#
#   greet   write a greeting to the state folder
#   send    send it to the outside world: effect "send_message" with an idempotency key
#   finish  print the final output (one line of JSON, the same with or without crashes)
#
#   sh shell_agent.sh STATE_DIR [--fresh-key | --durable]
#
# Crash-safe by construction: after each step the number of completed steps is written to a
# temp file and renamed over STATE_DIR/progress (rename is atomic), and only then is the step
# reported completed; the effect's key is derived from the run id and the step, so a retry
# after a crash reuses it and the ledger deduplicates it.
#
# Safe against kill -9, not against a power cut: nothing is fsynced, so after a power cut
# `progress` can be empty or name fewer steps than were reported completed (the power_loss
# family catches it). --durable adds the barriers: `sync FILE` (coreutils: fsync) on the temp
# file before the rename and `sync STATE_DIR` (fsync of the folder) after it.
#
# --fresh-key makes it deliberately broken: the key contains the shell's pid ($$), so a retry
# after a crash in the in-doubt window sends the message a second time (exactly_once fails).
#
# Outside the harness (no CRASHPOINT_LEDGER_HTTP) the probe calls are no-ops.
set -eu

state=${1:?usage: shell_agent.sh STATE_DIR [--fresh-key]}
mode=${2:-}
run_id=${CRASHPOINT_RUN_ID:-local}

# probe PATH BODY [CURL ARGS...]: one blocking request to the ledger; prints the reply.
# The agent waits for the reply: that is what lets the harness kill it at an exact boundary.
probe() {
    [ -n "${CRASHPOINT_LEDGER_HTTP:-}" ] || { printf '{"ok":true,"applied":true}'; return 0; }
    path=$1 body=$2
    shift 2
    curl -sS --fail --max-time 30 -X POST "$CRASHPOINT_LEDGER_HTTP$path" \
        -H 'Content-Type: application/json' \
        -H "X-Crashpoint-Attempt: ${CRASHPOINT_ATTEMPT:-0}" -H "X-Crashpoint-Pid: $$" \
        --data-binary "$body" "$@"
}
step_started() { probe /events/step_started "{\"step\":\"$1\"}" >/dev/null; }
step_completed() { probe /events/step_completed "{\"step\":\"$1\"}" >/dev/null; }

# save N: record that N steps are done, atomically (temp file in the same folder, then mv)
save() {
    put "$state/progress" "$1"
}

# put FILE TEXT: FILE's new content, by temp file and rename (and fsyncs with --durable)
put() {
    printf '%s\n' "$2" > "$1.tmp"
    [ "$mode" = "--durable" ] && sync "$1.tmp"
    mv -f "$1.tmp" "$1"
    [ "$mode" = "--durable" ] && sync "$state"
    return 0
}

mkdir -p "$state"
completed=0
[ -f "$state/progress" ] && completed=$(cat "$state/progress")

if [ "$completed" -lt 1 ]; then
    step_started greet
    put "$state/greeting" 'hello from sh'
    save 1
    step_completed greet
fi

if [ "$completed" -lt 2 ]; then
    step_started send
    key="$run_id:send_message:0"
    [ "$mode" = "--fresh-key" ] && key="$run_id:send_message:$$"
    text=$(cat "$state/greeting")
    reply=$(probe /effects/send_message "{\"to\":\"ops\",\"text\":\"$text\"}" \
        -H "Idempotency-Key: $key")
    case $reply in
        *'"applied": true'* | *'"applied":true'*) echo "sent ($key)" >&2 ;;
        *) echo "already sent earlier ($key): deduplicated" >&2 ;;
    esac
    save 2
    step_completed send
fi

if [ "$completed" -lt 3 ]; then
    step_started finish
    save 3
    step_completed finish
fi

printf '{"agent":"sh","greeting":"%s","steps":["greet","send","finish"]}\n' \
    "$(cat "$state/greeting")"
