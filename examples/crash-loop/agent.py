"""An ops agent that reboots the host it runs on, and cannot crash-loop.

    python agent.py --state DIR [--max-attempts K] [--run-id ID]

Three steps, built on ``crashpoint.checkpoint``: ``update``, ``reboot`` and ``report``, each an
HTTP effect (a POST to ``$CRASHPOINT_HTTP/<step>``, its key as ``Idempotency-Key``). The reboot
takes the process down with it when it works; if it fails the same way on every start, a naive
agent re-sends it after every restart forever: a reboot loop.

This one runs its run under the library's :class:`~crashpoint.checkpoint.Supervisor`, in
process, with ``max_attempts`` (default 2): the supervisor counts the attempts in the run's
durable state (across process restarts), and once they are spent it dead-letters the run
instead of starting it again. The agent then says so on stderr and exits 69 (the library's
``EXIT_CODES["dead"]``); started again, it finds the run dead-lettered and refuses the same way,
sending nothing. Its crash-free output is one line of JSON.

Under the gate (``scenarios/crash-loop.scenario.yaml``) a kill at the same point on every
attempt (``every_attempt: true``) shows it: killed twice, it stops at its third start, and the
``crash_loop`` check passes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from crashpoint.checkpoint import Supervisor, http_effect, open_run, open_store

STEPS = ["update", "reboot", "report"]
DEAD = 69  # crashpoint.checkpoint.EXIT_CODES["dead"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True)
    ap.add_argument("--max-attempts", type=int, default=2)
    ap.add_argument("--run-id", default=os.environ.get("CRASHPOINT_RUN_ID", "ops-1"))
    args = ap.parse_args()
    base = os.environ.get("CRASHPOINT_HTTP", "")
    if not base:
        print(
            "agent.py: CRASHPOINT_HTTP is not set (the URL to POST the commands to)",
            file=sys.stderr,
        )
        return 2
    store = open_store(os.path.join(args.state, "checkpoints"))
    if not store.exists(args.run_id):  # register the run, so the supervisor can count it
        open_run(store, args.run_id, steps=STEPS).close()

    def work(run_id: str) -> None:
        with open_run(store, run_id, steps=STEPS) as run:
            for step in STEPS:
                post = http_effect(f"{base}/{step}", timeout=10)
                command = {"host": "web-1", "command": step}
                run.step(step, lambda s=step, c=command, p=post: run.effect(s, c, p)["status"])
            run.finish({"host": "web-1", "done": STEPS})

    out = Supervisor(store, resume=work, max_attempts=args.max_attempts).resume_one(args.run_id)
    if out.status == "completed":
        with open_run(store, args.run_id, steps=STEPS) as run:  # a finished run: its output
            print(json.dumps(run.output, sort_keys=True))
        return 0
    if out.status == "dead":
        print(
            f"agent.py: run {args.run_id!r} dead-lettered after {out.attempts} attempts, not "
            f"starting it again: {out.reason}",
            file=sys.stderr,
        )
        return DEAD
    print(f"agent.py: run {args.run_id!r} ended {out.status}: {out.reason}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
