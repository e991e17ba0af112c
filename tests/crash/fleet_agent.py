"""A small fleet agent: 3 steps over a PostgresStore, one effect in each (through the probe, so
the test's FakeTarget, outside the workers, sees and deduplicates every delivery).

    fleet_agent.py DSN RUN_ID      ($CRASHPOINT_WORKER: adopt the fleet worker's lease;
                                    $FLEET_LEASE: lease seconds; $FLEET_THINK: seconds per step)
"""

from __future__ import annotations

import os
import sys
import time

from crashpoint.checkpoint import PostgresStore, open_run, run_main

STEPS = ["fetch", "write", "publish"]


def main() -> None:
    dsn, run_id = sys.argv[1], sys.argv[2]
    think = float(os.environ.get("FLEET_THINK", "0"))
    lease = float(os.environ.get("FLEET_LEASE", "2"))
    store = PostgresStore(dsn, lease_seconds=lease)
    with open_run(store, run_id, steps=STEPS) as run:
        for name in STEPS:

            def body(name: str = name) -> str:
                time.sleep(think)
                run.effect("put", {"run": run_id, "step": name})
                return f"{name} done"

            run.step(name, body)
        run.finish([f"{s} done" for s in STEPS])
    store.close()


if __name__ == "__main__":
    run_main(main)
