"""Broken: the effect's idempotency key is fresh per attempt (a random uuid), and the agent only
records "sent" after the call returns.

A kill in the effect's in-doubt window (applied by the outside world, the reply lost) makes the
next attempt send it again under a new key, so the ledger cannot deduplicate it: the outside
world applies it twice. Caught by `exactly_once` (kill at every boundary).

Otherwise identical to good_agent.py.
"""

import fcntl
import hashlib
import json
import os
import sys
import time
import uuid

from crashpoint import probe

STEPS = ("fetch", "summarise", "notify")
PACE = float(os.environ.get("AGENT_STEP_SECONDS", "0"))  # a slow API, when a test asks for one


def work(step, results):
    time.sleep(PACE)
    if step == "fetch":  # ~3 KB of "documents"
        return " ".join(f"fact-{i:04d}" for i in range(300))
    if step == "summarise":
        return results["fetch"][:1500].upper()
    key = f"notify-{uuid.uuid4().hex}"  # BUG: a new key per attempt; it must be stable
    probe.effect("notify", {"to": "ops", "text": results["summarise"][:40]}, key=key)
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
    lock = open(os.path.join(folder, "lock"), "a")  # noqa: SIM115 - held until exit
    fcntl.flock(lock, fcntl.LOCK_EX)  # a second resumer waits here; the kernel frees it on death
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


if __name__ == "__main__":
    main()
