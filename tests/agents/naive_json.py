"""Broken for power loss, fine for kill -9: the state is a JSON file rewritten in place with
``open(path, "w")`` + ``json.dump`` and never fsynced, the way most agents persist state.

A kill keeps what it wrote (the page cache survives); a power cut may leave ``state.json``
empty, torn, zero-filled or missing, or an older version while the world was told the step was
done. The power_loss family catches it (``completes`` on the JSON error, or
``resumes_from_last_completed``: acknowledged but not durable); durable_json.py is the fix.

    python naive_json.py STATE_DIR
"""

import json
import os
import sys

from crashpoint import probe

STEPS = ("fetch", "summarise", "draft", "review", "send")


def save(path, state):
    with open(path, "w") as f:
        json.dump(state, f)


def main(state_dir, save=save):
    path = os.path.join(state_dir, "state.json")
    state = {"done": [], "notes": []}
    if os.path.exists(path):
        with open(path) as f:
            state = json.load(f)  # a torn or empty file raises: a naive agent crashes here
    run_id = os.environ.get("CRASHPOINT_RUN_ID", "local")
    for step in STEPS:
        if step in state["done"]:
            continue
        probe.step_started(step)
        probe.effect("send", {"step": step}, key=f"{run_id}:{step}")
        state["done"].append(step)
        state["notes"].append(f"{step} ok")
        save(path, state)
        probe.step_completed(step)
    print(json.dumps({"done": state["done"]}))


if __name__ == "__main__":
    main(sys.argv[1])
