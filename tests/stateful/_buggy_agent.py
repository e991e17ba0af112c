"""A home-grown agent with one seeded bug, chosen by ``--bug``, for the Hypothesis tests.

    python _buggy_agent.py --state DIR [--bug repair-fresh-key|resend-on-resume|none]

Steps notify (one effect: "run started") -> fetch -> archive. The checkpoint is one JSON file
behind a SHA-256 line, written atomically; a step is reported completed only once durable; the
effect's key is ``run:notify:<generation>``, and the generation lives in the checkpoint.

- ``none``: correct. A damaged checkpoint is repaired by starting over in the same generation,
  so a re-sent notification carries the same key and the outside world deduplicates it.
- ``repair-fresh-key`` (the default): starting over after a damaged checkpoint bumps the
  generation, so the notification goes out again under a fresh key: DUPLICATED. It takes two
  faults: a kill once the notify step is checkpointed, then a corruption that breaks the
  checksum (truncate, bitflip, zero, append-garbage). One fault alone never triggers it.
- ``resend-on-resume``: on resuming a run whose notification was already sent, it sends it
  again "to be safe" under a fresh key. One kill after the notification is recorded triggers it.
"""

import hashlib
import json
import os
import sys

from crashpoint import probe

STEPS = ("notify", "fetch", "archive")


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def load(path):
    """(state, damaged): a fresh state if there is no checkpoint or it fails its checksum."""
    fresh = {"done": [], "results": {}, "generation": 0}
    try:
        with open(path, "rb") as f:
            digest, _, body = f.read().partition(b"\n")
    except FileNotFoundError:
        return fresh, False
    if hashlib.sha256(body).hexdigest().encode() != digest:
        print(f"repairing: {path} fails its checksum, starting over", file=sys.stderr)
        return fresh, True
    return json.loads(body), False


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


def notify(state):
    probe.effect(
        "notify", {"to": "ops", "text": "run started"}, key=f"run:notify:{state['generation']}"
    )
    return "sent"


def main():
    folder = arg("--state", ".")
    bug = arg("--bug", "repair-fresh-key")
    path = os.path.join(folder, "state.json")
    state, damaged = load(path)
    if damaged and bug == "repair-fresh-key":
        state["generation"] = 1  # BUG: a repaired run is a "new generation", so new keys
    if bug == "resend-on-resume" and "notify" in state["done"]:
        state["generation"] += 1  # BUG: "to be safe", re-send under a fresh key
        notify(state)
    for step in STEPS[len(state["done"]) :]:
        probe.step_started(step)
        if step == "notify":
            result = notify(state)
        elif step == "fetch":
            result = "three new facts about crash recovery"
        else:
            result = hashlib.sha256(state["results"]["fetch"].encode()).hexdigest()[:16]
        state["results"][step] = result
        state["done"].append(step)
        save(path, state)
        probe.step_completed(step)
    print(json.dumps(state["results"], sort_keys=True))


if __name__ == "__main__":
    main()
