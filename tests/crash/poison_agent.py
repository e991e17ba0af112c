"""An agent that fails on every attempt, for the supervisor's dead-letter tests.

    python tests/crash/poison_agent.py --state DIR --run-id ID --mode {exit,raise,hang}

It opens its run (so the run is registered as in flight), counts the attempt in
``DIR/attempts-ID``, then dies: ``exit`` with ``os._exit(3)`` after a line on stderr, ``raise``
with an uncaught exception, ``hang`` by sleeping until it is killed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from crashpoint.checkpoint import Store, open_run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--state", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--mode", choices=["exit", "raise", "hang"], required=True)
    args = ap.parse_args()
    with open(os.path.join(args.state, f"attempts-{args.run_id}"), "a") as f:
        f.write("x")
    with open_run(
        Store(os.path.join(args.state, "checkpoints")), args.run_id, steps=["load", "parse"]
    ) as run:
        run.step("load", lambda: "the poison input")
        if args.mode == "exit":
            print("poison: cannot parse the input", file=sys.stderr, flush=True)
            os._exit(3)
        if args.mode == "raise":
            raise ValueError("poison: the input is malformed")
        time.sleep(60)


if __name__ == "__main__":
    main()
