"""Broken: at start it launches a background "telemetry uploader" and never stops or waits for
it, so the child outlives every attempt that exits.

Caught by `no_orphans` (the harness kills the survivor and names it). With
``LEAVE_CHILD_DETACHED=1`` the child starts a session of its own (``setsid``), so once the agent
is gone it is neither a descendant nor a session member: the harness finds it by the attempt's
``CRASHPOINT_REAP_TOKEN`` instead. Its pid goes to stderr.

Otherwise identical to good_agent.py.
"""

import fcntl
import hashlib
import json
import os
import subprocess
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
    lock = open(os.path.join(folder, "lock"), "a")  # noqa: SIM115 - held until exit
    fcntl.flock(lock, fcntl.LOCK_EX)  # a second resumer waits here; the kernel frees it on death
    path = os.path.join(folder, "state.json")
    state = load(path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],  # BUG: never
                             start_new_session=os.environ.get("LEAVE_CHILD_DETACHED") == "1")
    print(f"child {child.pid}", file=sys.stderr)  # reaped
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
