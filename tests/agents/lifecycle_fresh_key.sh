#!/bin/sh
# A shell agent that checkpoints with crashpoint's lifecycle CLI: it resumes from its last
# completed step after kill -9, power loss or a damaged checkpoint, and sends its email once.
#
#   sh agent.sh STATE_DIR [CRASHPOINT_COMMAND...]     (default command: crashpoint)
#   sh agent.sh /tmp/state python3 -m crashpoint      (any way of running crashpoint works)
#
# Steps: greet (make a greeting), send (email it: one side effect), finish. The run id comes
# from $CRASHPOINT_RUN_ID (the harness sets it), else "report-1"; the checkpoint store is
# STATE_DIR/store. See docs/how-to/checkpoint-from-any-language.md.
set -eu

state=${1:?usage: agent.sh STATE_DIR [CRASHPOINT_COMMAND...]}
shift
crashpoint=${*:-crashpoint}  # word-split on purpose: "python3 -m crashpoint"
run=${CRASHPOINT_RUN_ID:-report-1}
export CRASHPOINT_STORE="$state/store"

ckpt() { $crashpoint checkpoints "$@"; }

# effect ARGS...: true = send it now; false = an earlier attempt already did (skip it);
# any error of the store (locked 73, corrupt 65, disk 74, ...) ends the agent with its code
effect() {
    rc=0
    ckpt effect "$@" || rc=$?
    [ "$rc" -eq 0 ] && return 0
    [ "$rc" -eq 3 ] && return 1
    exit "$rc"
}

send_email() {  # the real side effect; its receiver deduplicates by the key
    echo "email to $1 sent (key $2)" >&2
}

# start (or resume): prints the step to run next, nothing once every step is done
next=$(ckpt start "$run" --steps greet,send,finish --on-corrupt rollback)
while [ -n "$next" ]; do
    case $next in
        greet)
            result='"hello from sh"'
            ;;
        send)
            greeting=$(ckpt status "$run" --result greet)  # a completed step's result, as JSON
            key="$run:send_email:$$"  # THE BUG: the shell's pid, a fresh key every attempt
            payload="{\"to\":\"ops@example.com\",\"text\":$greeting}"
            if effect "$run" send_email --key "$key" --payload "$payload"; then
                send_email ops@example.com "$key"
            fi
            result='"sent"'
            ;;
        finish)
            result=null
            ;;
        *)
            echo "agent.sh: unknown step $next" >&2
            exit 70
            ;;
    esac
    next=$(ckpt step "$run" "$next" --result "$result")  # durable; prints the next step
done
ckpt complete "$run" --output '{"agent":"sh","sent":"ops@example.com"}' --print
