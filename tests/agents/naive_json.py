"""A typical hand-written agent: five steps, one effect each, progress kept in a JSON file.

    python naive_json.py STATE_DIR

After each step the whole state is rewritten in place with ``open(path, "w")`` + ``json.dump``:
no temp file, no fsync. A kill -9 cannot hurt it (the page cache survives a killed process), but
a power cut can leave ``state.json`` empty, torn or gone, and on resume ``json.load`` raises, as
it would in the wild. Used by the power-loss tests as the agent that must fail.
"""

import hashlib
import json
import os
import sys

from crashpoint import probe

STEPS = ["collect", "clean", "analyse", "draft", "send"]
RUN_ID = os.environ.get("CRASHPOINT_RUN_ID", "local")


def load_state(path):
    if not os.path.exists(path):
        return {"done": [], "notes": {}}
    with open(path) as f:
        return json.load(f)


def save_state(path, state):
    with open(path, "w") as f:
        json.dump(state, f)


def do_step(name):
    return f"{name}: " + " ".join(f"{name}-{i:03d}" for i in range(40))  # ~500 bytes of "work"


def main():
    folder = sys.argv[1]
    path = os.path.join(folder, "state.json")
    state = load_state(path)
    for name in STEPS:
        if name in state["done"]:
            continue
        probe.step_started(name)
        state["notes"][name] = do_step(name)
        probe.effect("send", {"step": name}, key=f"{RUN_ID}:{name}")
        state["done"].append(name)
        save_state(path, state)
        probe.step_completed(name)
    digest = hashlib.sha256(json.dumps(state["notes"], sort_keys=True).encode()).hexdigest()
    print(json.dumps({"done": state["done"], "notes": digest[:16]}))


if __name__ == "__main__":
    main()
