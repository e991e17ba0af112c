"""An agent that keeps its progress in SQLite, one row per step (the standard library only).

    python sqlite_steps.py STATE_DIR [--busy-timeout S] [--swallow | --bail] [--wal] [--aux]

Five steps; each reports ``step_started``, works a little, inserts its result into
``STATE_DIR/progress.db`` and commits, then reports ``step_completed``. A restart reads the
rows back and goes on after the last one. It prints the results, one line per step.

How it meets a write lock another connection holds (a second writer, or the harness):

- default: no busy timeout (``timeout=0``), and the ``database is locked`` error ends the
  attempt with exit 1: a clear fail-stop, the restart resumes the step. Correct.
- ``--busy-timeout S``: SQLite waits up to S seconds for the lock, then writes. Correct.
- ``--swallow`` (the bug): the error is printed and ignored; the step is reported completed
  anyway and the run goes on to exit 0. The step's row was never written.
- ``--bail`` (the bug reported of agent sessions): the error is printed, and the agent returns
  normally: exit 0 with the run half done.

``--aux`` also creates ``STATE_DIR/aux.db`` at the start and never writes it again: a lock held
on it meets no write (the fault does not fire).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time

from crashpoint import probe

STEPS = ("fetch", "parse", "rank", "summarise", "publish")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("state")
    ap.add_argument("--busy-timeout", type=float, default=0.0)
    ap.add_argument("--swallow", action="store_true")
    ap.add_argument("--bail", action="store_true")
    ap.add_argument("--wal", action="store_true")
    ap.add_argument("--aux", action="store_true")
    ap.add_argument("--work", type=float, default=0.02, help="seconds of work per step")
    a = ap.parse_args()
    if a.aux:
        aux = sqlite3.connect(os.path.join(a.state, "aux.db"))
        aux.execute("CREATE TABLE IF NOT EXISTS settings (k TEXT, v TEXT)")
        aux.commit()
        aux.close()
    db = sqlite3.connect(os.path.join(a.state, "progress.db"), timeout=a.busy_timeout)
    if a.wal:
        db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS done (step TEXT PRIMARY KEY, result INTEGER)")
    db.commit()
    results = dict(db.execute("SELECT step, result FROM done").fetchall())
    for n, step in enumerate(STEPS):
        if step in results:
            continue
        probe.step_started(step)
        time.sleep(a.work)  # the step's work
        result = (n + 1) * 7
        try:
            db.execute("INSERT INTO done VALUES (?, ?)", (step, result))
            db.commit()
        except sqlite3.OperationalError as exc:
            if not (a.swallow or a.bail):
                raise  # exit 1: the restart resumes this step
            print(f"step {step}: {exc}", file=sys.stderr)
            if a.bail:
                return 0  # BUG: exit 0 with the run half done
            # BUG (--swallow): the row was not written, the step is reported done anyway
        probe.step_completed(step)
        results[step] = result
    for step in STEPS:
        print(f"{step}: {results[step]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
