"""A newsletter job in plain Python: four steps, progress in one JSON file, effects through
``crashpoint.probe.effect`` with keys from the run id and the step.

After each step the whole state is saved durably (temp file in the same folder, fsync,
``os.replace``, fsync of the folder), and only then reported completed. The run holds an
exclusive lock on its folder, so a second process started on the same run waits.

Planted bugs (``--bug``):

* ``in_place``: the state file is rewritten in place (a kill mid-write leaves it torn);
* ``no_fsync``: renamed without an fsync (a power cut may leave the new name empty);
* ``time_key``: the effect's key holds the time, so a re-run step sends a new key;
* ``completed_before_save``: the step is reported completed before its state is saved;
* ``no_lock``: no lock: two processes run the same steps at once.

    python json_steps.py --state DIR [--bug NAME]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from typing import Any

from crashpoint import probe

BUGS = ("in_place", "no_fsync", "time_key", "completed_before_save", "no_lock")
STEPS = ["collect", "draft", "send", "archive"]


def save(path: str, state: dict[str, Any], bug: str | None) -> None:
    data = json.dumps(state, sort_keys=True)
    if bug == "in_place":
        with open(path, "w", encoding="utf-8") as f:
            f.write(data)
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        if bug != "no_fsync":
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if bug != "no_fsync":
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def do_step(name: str, state: dict[str, Any], run: str, bug: str | None) -> Any:
    if name == "collect":
        return ["item-1", "item-2", "item-3"]
    if name == "draft":
        return f"{len(state['collect'])} items this week"
    key = f"{run}:{name}" if bug != "time_key" else f"{run}:{name}:{time.time_ns()}"
    if name == "send":
        probe.effect("send_newsletter", {"text": state["draft"]}, key=key)
        return "sent"
    probe.effect("archive", {"items": state["collect"]}, key=key)
    return "archived"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True)
    ap.add_argument("--bug", choices=BUGS, default=None)
    args = ap.parse_args()
    run = os.environ.get("CRASHPOINT_RUN_ID", "news-1")
    path = os.path.join(os.path.abspath(args.state), "state.json")
    lock = open(os.path.join(args.state, "run.lock"), "w")  # noqa: SIM115 (held till exit)
    if args.bug != "no_lock":
        fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        state = {}
    for name in STEPS:
        if name in state:
            continue
        probe.step_started(name)
        state[name] = do_step(name, state, run, args.bug)
        if args.bug == "completed_before_save":
            probe.step_completed(name)
        save(path, state, args.bug)
        if args.bug != "completed_before_save":
            probe.step_completed(name)
    print(state["draft"], state["send"], state["archive"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
