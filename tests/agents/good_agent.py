"""A correct home-grown agent: every broken agent in this folder is this one with ONE bug.

Steps fetch -> summarise -> notify (one effect). The checkpoint is one JSON file behind a
SHA-256 line, written atomically (temp file, fsync, os.replace, fsync the folder); a step is
reported completed only once durable; the effect has a stable idempotency key; an flock keeps
one writer; a damaged checkpoint is refused with exit 65. Passes every check.

Each method is a seam: a broken agent subclasses ``Agent`` and overrides the one method that
carries its bug, so the bug is all that differs (run as ``python AGENT.py --state DIR``).
"""

import fcntl
import hashlib
import json
import os
import sys
import time

from crashpoint import probe

STEPS = ("fetch", "summarise", "notify")
PACE = float(os.environ.get("AGENT_STEP_SECONDS", "0"))  # a slow API, when a test asks for one


class Agent:
    def __init__(self, folder):
        self.folder = folder
        self.path = os.path.join(folder, "state.json")

    # -- one writer ----------------------------------------------------------------------------

    def lock(self):
        handle = open(os.path.join(self.folder, "lock"), "a")  # noqa: SIM115 - held until exit
        fcntl.flock(handle, fcntl.LOCK_EX)  # a second resumer waits; the kernel frees it on death
        return handle

    def unlock(self, handle):
        """Nothing to do: the kernel releases an flock when the process ends, however it ends."""

    # -- the checkpoint --------------------------------------------------------------------------

    def encode(self, state):
        body = json.dumps(state, sort_keys=True).encode()
        return hashlib.sha256(body).hexdigest().encode() + b"\n" + body

    def decode(self, data):
        digest, _, body = data.partition(b"\n")
        if hashlib.sha256(body).hexdigest().encode() != digest:
            print(f"refusing to resume: checksum mismatch in {self.path}", file=sys.stderr)
            sys.exit(65)
        return json.loads(body)

    def load(self):
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return {"done": [], "results": {}}
        return self.decode(data)

    def write(self, data):
        with open(self.path + ".tmp", "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(self.path + ".tmp", self.path)
        fd = os.open(self.folder, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)

    def save(self, state):
        self.write(self.encode(state))

    # -- the work ------------------------------------------------------------------------------

    def start(self, state):
        """Called once the checkpoint is loaded, before the first step."""

    def todo(self, state):
        return STEPS[len(state["done"]) :]

    def work(self, step, results):
        time.sleep(PACE)
        if step == "fetch":  # ~3 KB of "documents"
            return " ".join(f"fact-{i:04d}" for i in range(300))
        if step == "summarise":
            return results["fetch"][:1500].upper()
        return self.notify(results)

    def effect_key(self):
        return "run:notify"

    def notify(self, results):
        probe.effect(
            "notify", {"to": "ops", "text": results["summarise"][:40]}, key=self.effect_key()
        )
        return "sent"

    def complete(self, step, state):
        self.save(state)
        probe.step_completed(step)  # only once the step is durable

    def run(self):
        handle = self.lock()
        state = self.load()
        self.start(state)
        for step in self.todo(state):
            probe.step_started(step)
            state["results"][step] = self.work(step, state["results"])
            state["done"].append(step)
            self.complete(step, state)
        digest = hashlib.sha256(json.dumps(state["results"], sort_keys=True).encode()).hexdigest()
        print(json.dumps({"summary": state["results"]["summarise"][:40], "report": digest[:16]}))
        self.unlock(handle)

    @classmethod
    def main(cls):
        cls(sys.argv[sys.argv.index("--state") + 1]).run()


if __name__ == "__main__":
    Agent.main()
