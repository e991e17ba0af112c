"""The same five-step agent as naive_json.py, with its state saved the careful way.

    python durable_json.py STATE_DIR

Each save writes a temp file in the same folder, flushes and fsyncs it, renames it over
``state.json`` with ``os.replace`` and then fsyncs the folder, so the rename itself is on disk
before the step is reported completed. Survives a kill -9 and a power cut at any point: the
power-loss tests' agent that must pass.
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
    folder = os.path.dirname(path)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
