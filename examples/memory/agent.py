"""An agent whose ``load`` step needs a lot of memory: what a memory limit bites on.

    python agent.py STATE_DIR [--alloc MiB] [--max-attempts K]

Under the gate: scenarios/memory.scenario.yaml (a memory limit from the start, once and on
every attempt).

Steps ``prepare``, ``load`` (allocates ``--alloc`` MiB, default 96, touching every page) and
``report``, each reported through the probe and recorded done in ``STATE_DIR/done.json``
(temp file, fsync, rename) before ``step_completed``; a restart skips what is done. Prints
``{"loaded": MiB}``. ``--max-attempts K``: it counts its starts durably (before any step) and,
started more than K times with the run unfinished, gives up: a line on stderr, exit 69, no
step (a cap on a crash loop); without it, it starts the load again every time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from crashpoint import probe

STEPS = ("prepare", "load", "report")


def save(path: str, data: dict[str, object]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("state")
    ap.add_argument("--alloc", type=int, default=96)
    ap.add_argument("--max-attempts", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.state, exist_ok=True)
    path = os.path.join(args.state, "done.json")
    done: list[str] = []
    starts = 0
    if os.path.exists(path):
        with open(path) as f:
            state = json.load(f)
        done, starts = list(state["done"]), int(state["starts"])
    starts += 1
    if args.max_attempts and len(done) < len(STEPS) and starts > args.max_attempts:
        print(
            f"agent.py: gave up after {starts - 1} attempts: step load runs out of memory "
            "every time",
            file=sys.stderr,
        )
        return 69
    save(path, {"done": done, "starts": starts})
    for step in STEPS:
        if step in done:
            continue
        probe.step_started(step)
        if step == "load":  # every page touched, so the memory is really charged
            block = bytearray(args.alloc << 20)
            block[::4096] = b"x" * len(block[::4096])
            del block
        done.append(step)
        save(path, {"done": done, "starts": starts})
        probe.step_completed(step)
    print(json.dumps({"loaded": args.alloc}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
