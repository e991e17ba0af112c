"""Broken: one writer is enforced by a lock FILE (O_CREAT | O_EXCL) that is removed only on a
clean exit. A killed process leaves it behind forever, and every later attempt refuses to start
(exit 1: "another run is in progress").

Caught by `completes`.

Otherwise identical to good_agent.py.
"""

import hashlib
import json
import os
import sys
import time

from crashpoint import probe

STEPS = ("fetch", "summarise", "notify")
PACE = float(os.environ.get("AGENT_STEP_SECONDS", "0"))  # a slow API, when a test asks for one


def work(step, results):
    time.sleep(PACE)
    if step == "fetch":  # ~3 KB of "documents"
        return " ".join(f"fact-{i:04d}" for i in range(300))
    if step == "summarise":
        return results["fetch"][:1500].upper()
    probe.effect("notify", {"to": "ops", "text": results["summarise"][:40]}, key="run:notify")
    return "sent"


def load(path):
    try:
        with open(path, "rb") as f:
            digest, _, body = f.read().partition(b"\n")
    except FileNotFoundError:
        return {"done": [], "results": {}}
    if hashlib.sha256(body).hexdigest().encode() != digest:
        print(f"refusing to resume: checksum mismatch in {path}", file=sys.stderr)
        sys.exit(65)
    return json.loads(body)


def save(path, state):
    body = json.dumps(state, sort_keys=True).encode()
    with open(path + ".tmp", "wb") as f:
        f.write(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def main():
    folder = sys.argv[sys.argv.index("--state") + 1]
    lock = os.path.join(folder, "run.lock")
    try:  # BUG: a lock file outlives a killed owner (an flock would not)
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        sys.exit(f"another run is in progress, refusing to start ({lock} exists)")
    path = os.path.join(folder, "state.json")
    state = load(path)
    for step in STEPS[len(state["done"]):]:
        probe.step_started(step)
        state["results"][step] = work(step, state["results"])
        state["done"].append(step)
        save(path, state)
        probe.step_completed(step)
    digest = hashlib.sha256(json.dumps(state["results"], sort_keys=True).encode()).hexdigest()
    print(json.dumps({"summary": state["results"]["summarise"][:40], "report": digest[:16]}))
    os.remove(lock)  # only reached on a clean exit


if __name__ == "__main__":
    main()
