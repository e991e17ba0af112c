"""An agent as people write them, with no crashpoint import: its state in one JSON file.

For each of 4 items it POSTs ``{"item": i}`` to ``$CRASHPOINT_HTTP/hook`` with an
``Idempotency-Key`` (the run id and the item, as our hints recommend), then records the item
done by rewriting ``STATE_DIR/state.json`` in place. A restarted run skips the items done.

Two processes on one state folder: without ``--lock`` nothing keeps the second off it (the
bug ``single_writer`` must see, though every POST is deduplicated and no step is named);
``--lock wait`` holds an ``fcntl.flock`` on ``STATE_DIR/lock`` for the whole run, so the second
waits; ``--lock refuse`` takes it without waiting and exits 75 ("busy") if it is held.
``--idle`` does nothing observable (no request, no file under the state folder) and exits 0.

Knobs (environment): ``PLAIN_STEP_SECONDS`` (the pause after each item, default 0.1),
``PLAIN_STARTUP_SECONDS`` (a slow start-up before anything else), ``PLAIN_STAGGER_SECONDS``
(added to the start-up of even attempts, so two resumers start to work at different times).

Usage: plain_writer.py STATE_DIR [--lock wait|refuse] [--idle]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
import urllib.request

ITEMS = 4


def post(url: str, body: dict[str, object], key: str) -> None:
    req = urllib.request.Request(  # noqa: S310 - loopback
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - loopback
        resp.read()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("state")
    ap.add_argument("--lock", choices=("wait", "refuse"))
    ap.add_argument("--idle", action="store_true")
    a = ap.parse_args()
    startup = float(os.environ.get("PLAIN_STARTUP_SECONDS", "0"))
    if int(os.environ.get("CRASHPOINT_ATTEMPT", "1")) % 2 == 0:
        startup += float(os.environ.get("PLAIN_STAGGER_SECONDS", "0"))
    time.sleep(startup)
    if a.idle:
        print("nothing to do")
        return 0
    pace = float(os.environ.get("PLAIN_STEP_SECONDS", "0.1"))
    base = os.environ["CRASHPOINT_HTTP"]
    run_id = os.environ.get("CRASHPOINT_RUN_ID", "local")
    os.makedirs(a.state, exist_ok=True)
    if a.lock:
        handle = open(os.path.join(a.state, "lock"), "a")  # noqa: SIM115 - held until exit
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (fcntl.LOCK_NB if a.lock == "refuse" else 0))
        except BlockingIOError:
            print("another process holds this run: busy, refusing to start", file=sys.stderr)
            return 75
    path = os.path.join(a.state, "state.json")
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {"done": []}
    for i in range(ITEMS):
        if i in state["done"]:
            continue
        post(f"{base}/hook", {"item": i}, key=f"{run_id}:hook:{i}")
        state["done"].append(i)
        with open(path, "w") as f:  # rewritten in place: what a second writer clobbers
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        time.sleep(pace)
    print(json.dumps({"items": ITEMS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
