"""The benchmark's agent for the power-loss row: five steps, one effect each, and its progress
rewritten in place after every step with ``open(path, "w")`` + ``json.dump``, no fsync (the way
most agents persist state). The same script is given to both tools; it is correct against a
kill -9 and not against a power cut, so both should report the torn ``state.json``.

    python benchmarks/naive_agent.py STATE_DIR [STEPS]

``STEPS`` (a number) runs that many steps instead (``s0``, ``s1``, ...): one unsynced rewrite of
``state.json`` each (benchmarks/power_planning.py's campaign at 1,000 writes).

Outside crashpoint's harness (under ckpt-chaos) the probe calls are no-ops. Prints one line of
JSON, the same with or without crashes. ``run(ARGS)`` is the same program as a function, for
crashpoint's fork mode (``entry: naive_agent:run``).
"""

import json
import os
import sys

from crashpoint import probe

STEPS = ("fetch", "summarise", "draft", "review", "send")


def main(state_dir, steps=STEPS):
    path = os.path.join(state_dir, "state.json")
    state = {"done": [], "notes": []}
    if os.path.exists(path):
        with open(path) as f:
            state = json.load(f)  # a torn or empty file raises, as it would in the wild
    run_id = os.environ.get("CRASHPOINT_RUN_ID", "local")
    for step in steps:
        if step in state["done"]:
            continue
        probe.step_started(step)
        probe.effect("send", {"step": step}, key=f"{run_id}:{step}")
        state["done"].append(step)
        state["notes"].append(f"{step} ok")
        with open(path, "w") as f:
            json.dump(state, f)
        probe.step_completed(step)
    print(json.dumps({"done": state["done"]}))


def run(args):
    """The command line as a function: crashpoint's fork mode calls ``naive_agent:run``."""
    os.makedirs(args[0], exist_ok=True)
    main(args[0], tuple(f"s{i}" for i in range(int(args[1]))) if len(args) > 1 else STEPS)


if __name__ == "__main__":
    run(sys.argv[1:])
