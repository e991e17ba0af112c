#!/bin/sh
# A report mailer in POSIX sh on crashpoint's lifecycle CLI (`crashpoint checkpoints ...`):
# three steps, each recorded durably by the CLI; the e-mail is sent with curl to the mail API
# under $2 with an Idempotency-Key from the run and the step, and recorded first as an effect
# (intent before, result after) so a restart knows it may be in doubt.
#
# Planted bug (third argument `keyless`): curl sends the e-mail without the key.
#
#   sh shell_lifecycle.sh STATE_DIR BASE_URL [BUG] [CRASHPOINT_COMMAND...]
set -eu

state=${1:?usage: shell_lifecycle.sh STATE_DIR BASE_URL [BUG] [CRASHPOINT_COMMAND...]}
base=$2
bug=$3
shift 3
crashpoint=${*:-crashpoint}
run=${CRASHPOINT_RUN_ID:-report-1}
export CRASHPOINT_STORE="$state/store"

ckpt() { $crashpoint checkpoints "$@"; }

effect() {
    rc=0
    ckpt effect "$@" || rc=$?
    [ "$rc" -eq 0 ] && return 0
    [ "$rc" -eq 3 ] && return 1
    exit "$rc"
}

send_email() {  # $1 payload, $2 key
    if [ "$bug" = keyless ]; then
        curl -fsS -X POST -H 'Content-Type: application/json' -d "$1" "$base/email" >/dev/null
    else
        curl -fsS -X POST -H 'Content-Type: application/json' -H "Idempotency-Key: $2" \
            -d "$1" "$base/email" >/dev/null
    fi
}

next=$(ckpt start "$run" --steps greet,send,finish --on-corrupt rollback)
while [ -n "$next" ]; do
    case $next in
        greet)
            result='"hello from sh"'
            ;;
        send)
            greeting=$(ckpt status "$run" --result greet)
            key="$run:send_email:1"
            payload="{\"to\":\"ops@example.com\",\"text\":$greeting}"
            if effect "$run" send_email --key "$key" --payload "$payload"; then
                send_email "$payload" "$key"
            fi
            result='"sent"'
            ;;
        finish)
            result=null
            ;;
        *)
            echo "shell_lifecycle.sh: unknown step $next" >&2
            exit 70
            ;;
    esac
    next=$(ckpt step "$run" "$next" --result "$result")
done
ckpt complete "$run" --output '{"agent":"sh","sent":"ops@example.com"}' --print
