"""A naive agent, shipped broken on purpose so the example's gate has something to catch.

    python broken_agent.py --state DIR

It remembers its progress in ``DIR/progress.json``, but it reports a step complete *before* it
saves it (a kill in between makes it redo a step it said was done), and it sends its email with
a fresh idempotency key on every run (a retry after a kill sends the email twice).
"""

from __future__ import annotations

import argparse
import json
import os
import uuid

from crashpoint import probe

STEPS = ["fetch", "summarise", "send_email"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--state", required=True)
    state = ap.parse_args().state
    os.makedirs(state, exist_ok=True)
    path = os.path.join(state, "progress.json")
    done: list[str] = []
    if os.path.exists(path):
        with open(path) as f:
            done = json.load(f)
    for step in STEPS:
        if step in done:
            continue
        probe.step_started(step)
        if step == "send_email":
            probe.effect("email", {"to": "team@example.com"}, key=uuid.uuid4().hex)  # bug
        probe.step_completed(step)  # bug: said before the step is saved
        done.append(step)
        with open(path, "w") as f:
            json.dump(done, f)
    print(json.dumps({"done": done}))


if __name__ == "__main__":
    main()
