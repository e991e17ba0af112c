"""A tiny agent with a chosen bug, to prove the resume checks catch it.

    python tests/crash/broken_agent.py --state DIR --bug {none,fresh-key,from-scratch,lost-effect}

``none``          correct: the same shape as the demo agent (must pass every check)
``fresh-key``     a new random idempotency key per attempt: an effect in doubt is sent twice
``from-scratch``  a new run id per attempt: completed steps run again, effects repeat
``lost-effect``   records "sent" before sending: a kill in between loses the effect
"""

from __future__ import annotations

import argparse
import json
import os
import uuid

from crashpoint import probe
from crashpoint.checkpoint import Store, open_run, run_main


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--state", required=True)
    ap.add_argument(
        "--bug", choices=["none", "fresh-key", "from-scratch", "lost-effect"], default="none"
    )
    args = ap.parse_args()
    store = Store(os.path.join(args.state, "checkpoints"))
    run_id = f"broken-{uuid.uuid4().hex}" if args.bug == "from-scratch" else "broken"
    with open_run(store, run_id, steps=["prepare", "notify", "report"]) as run:
        text = run.step("prepare", lambda: "hello")
        note = {"to": "ops", "text": text}
        if args.bug == "lost-effect":
            fresh: list[bool] = []
            run.step("notify", lambda: fresh.append(True) or True)  # "sent", before sending
            if fresh:
                probe.effect("notify", note, key="broken:notify")
        else:
            key = f"notify-{uuid.uuid4().hex}" if args.bug == "fresh-key" else None
            run.step("notify", lambda: run.effect("notify", note, key=key) is not None)
        out = run.step("report", lambda: {"text": text, "notified": True})
        run.finish(out)
    print(json.dumps(out, sort_keys=True), flush=True)


if __name__ == "__main__":
    run_main(main)
