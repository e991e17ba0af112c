"""The kill-safe twin of ``naive_agent.py`` for the file-operation sweep row: the same five
steps and effects, but ``state.json`` is replaced whole (written to ``state.json.tmp``, then
``os.replace``), still without fsync. A kill -9 at any file operation leaves either the old or
the new state, so it is correct under kill -9 (and not under a power cut): both tools should
pass it, which makes its sweep a like-for-like measure of cost per crash point (no retries of a
failing trial on either side).

    python benchmarks/naive_agent_atomic.py STATE_DIR

``run(ARGS)`` is the same program as a function (``entry: naive_agent_atomic:run``).
"""

import json
import os
import sys

from crashpoint import probe

STEPS = ("fetch", "summarise", "draft", "review", "send")


def main(state_dir):
    path = os.path.join(state_dir, "state.json")
    state = {"done": [], "notes": []}
    if os.path.exists(path):
        with open(path) as f:
            state = json.load(f)
    run_id = os.environ.get("CRASHPOINT_RUN_ID", "local")
    for step in STEPS:
        if step in state["done"]:
            continue
        probe.step_started(step)
        probe.effect("send", {"step": step}, key=f"{run_id}:{step}")
        state["done"].append(step)
        state["notes"].append(f"{step} ok")
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)
        probe.step_completed(step)
    print(json.dumps({"done": state["done"]}))


def run(args):
    """The command line as a function: crashpoint's fork mode calls ``naive_agent_atomic:run``."""
    os.makedirs(args[0], exist_ok=True)
    main(args[0])


if __name__ == "__main__":
    run(sys.argv[1:])
