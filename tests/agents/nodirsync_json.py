"""The same five-step agent as naive_json.py, saving through a synced temp file but forgetting
the folder.

    python nodirsync_json.py STATE_DIR

Each save writes a temp file, flushes and fsyncs it, and renames it over ``state.json`` with
``os.replace``; the folder is never fsynced. The data is durable, the rename is not: after a
power cut the folder may still hold the previous ``state.json`` (or none), so a step reported
completed can be lost. A kill -9 cannot show it; ``power_loss`` under ``model: posix`` must.
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
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # the folder is not fsynced: the rename may not survive a power cut


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
