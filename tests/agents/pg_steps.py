"""An agent that keeps its progress in PostgreSQL with psycopg, one row per step.

    python pg_steps.py DSN [--retry | --swallow | --bail]

Its database is DSN (the harness's, through its proxy: ``{postgres}``), the password in
``$PGPASSWORD``. It opens one connection and keeps it. Five steps; each reports
``step_started``, works a little, inserts its result and commits, then reports
``step_completed``. A restart reads the rows back and goes on after the last one. It prints
the results, one line per step.

When the server restarts or the network is cut under it (``psycopg.OperationalError``):

- default: the error ends the attempt with exit 1 (a fail-stop; the restart resumes). Correct.
- ``--retry``: reconnect (backing off 0.1 s, 0.2 s, ... for up to 20 s) and run the step's
  transaction again. Correct.
- ``--swallow`` (the bug): the error is printed and ignored, the step reported completed
  anyway, and the run goes on to exit 0. The step's row was never written.
- ``--bail`` (the bug): the error is printed and the agent returns normally: exit 0 with the
  run half done.
"""

from __future__ import annotations

import argparse
import sys
import time

import psycopg

from crashpoint import probe

STEPS = ("fetch", "parse", "rank", "summarise", "publish")


class Db:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn: psycopg.Connection | None = None

    def connect(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(self.dsn, connect_timeout=3)
        return self.conn

    def drop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error:
                pass
        self.conn = None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dsn")
    ap.add_argument("--retry", action="store_true")
    ap.add_argument("--swallow", action="store_true")
    ap.add_argument("--bail", action="store_true")
    a = ap.parse_args()
    db = Db(a.dsn)
    with db.connect().transaction():
        db.connect().execute(
            "CREATE TABLE IF NOT EXISTS done (step TEXT PRIMARY KEY, result INTEGER)"
        )
    results = dict(db.connect().execute("SELECT step, result FROM done").fetchall())
    db.connect().commit()
    for n, step in enumerate(STEPS):
        if step in results:
            continue
        probe.step_started(step)
        time.sleep(0.02)  # the step's work
        result = (n + 1) * 7
        delay, deadline = 0.1, time.monotonic() + 20
        while True:
            try:
                conn = db.connect()
                with conn.transaction():
                    conn.execute("INSERT INTO done VALUES (%s, %s)", (step, result))
                break
            except psycopg.OperationalError as exc:
                db.drop()
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                print(f"step {step}: {first}", file=sys.stderr)
                if a.retry and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                if a.bail:
                    return 0  # BUG: exit 0 with the run half done
                if not a.swallow:
                    raise  # exit 1: the restart resumes this step
                break  # BUG (--swallow): not written, reported done all the same
        probe.step_completed(step)
        results[step] = result
    for step in STEPS:
        print(f"{step}: {results[step]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
