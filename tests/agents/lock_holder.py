"""A resumer that keeps the run to itself with an ``flock``, and a second one that tries it at
a chosen moment: the accounting must call a refusal by the lock a race, and a second attempt
that only came after the first let go not one.

Each attempt takes an exclusive non-blocking ``flock`` on ``STATE_DIR/lock`` (refused: it says
so on stderr and exits 75), rewrites ``STATE_DIR/state.json`` three times, writes
``STATE_DIR/ready``, lets go of the lock and writes ``STATE_DIR/released``, and exits. With
``LOCK_HOLDER_LINGER=S`` the first attempt of a trial holds the lock S seconds more after
``ready`` instead, and writes nothing more (``ready`` is its last change to a file). An even
attempt (the second of two resumers) first waits (up to 10 s) for the file named by
``LOCK_HOLDER_AFTER``: ``ready`` (the first has done its work and still holds the lock:
refused) or ``released`` (the first has let go: it takes the lock and does its work after the
first's).

In trials it sends no probe event, so the barrier never holds it: only its files and its
``flock`` calls show what it did (the golden run reports one event: a campaign needs a
boundary). Standard library only, but for that one event.

Usage: lock_holder.py STATE_DIR
"""

from __future__ import annotations

import fcntl
import os
import sys
import time


def wait_for(path: str) -> None:
    deadline = time.monotonic() + 10
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def main() -> int:
    state = sys.argv[1]
    os.makedirs(state, exist_ok=True)
    attempt = int(os.environ.get("CRASHPOINT_ATTEMPT", "1"))
    first = attempt == 1 and os.environ.get("CRASHPOINT_TRIAL") != "golden"
    linger = float(os.environ.get("LOCK_HOLDER_LINGER", "0")) if first else 0.0
    if attempt % 2 == 0:
        wait_for(os.path.join(state, os.environ.get("LOCK_HOLDER_AFTER", "ready")))
    handle = open(os.path.join(state, "lock"), "a")  # noqa: SIM115 - held until let go
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("another process holds this run: busy, refusing to start", file=sys.stderr)
        return 75
    for i in range(3):
        write(os.path.join(state, "state.json"), f'{{"done": {i + 1}}}')
    write(os.path.join(state, "ready"), "")
    if linger:
        time.sleep(linger)  # holding the lock, its work done
    else:
        fcntl.flock(handle, fcntl.LOCK_UN)
        write(os.path.join(state, "released"), "")
    if os.environ.get("CRASHPOINT_TRIAL") == "golden":
        from crashpoint import probe

        probe.event("event", name="done")
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
