"""A research agent that keeps its progress in a database: SQLite, or PostgreSQL through psql.

    python agent.py --sqlite PATH [--fixed]
    python agent.py --postgres DSN [--fixed]     # the password in $PGPASSWORD, never in argv

The standard library only (``sqlite3``; for PostgreSQL the ``psql`` client that comes with the
server, found on PATH or beside the server's programs), and crashpoint's probe. Five steps:
each reports ``step_started``, works a little, writes its result (one row) and commits, then
reports ``step_completed``. A restart reads the rows back and goes on after the last one. At
the end it prints one line per step.

Its database can go away for a while: another writer holds SQLite's write lock, the PostgreSQL
server restarts, the network to it is cut.

* As written (no ``--fixed``), a write that fails is printed and ignored: SQLite's
  "database is locked" (no busy timeout), psql's "connection refused". The step is reported
  completed anyway, and its row is missing: after the next crash the agent runs that step again,
  though it had said it was done. The sessions reported dying with ``SQLITE_BUSY`` and exiting 0
  did just this.
* ``--fixed`` waits the outage out: SQLite with a busy timeout (30 s), PostgreSQL by running the
  write again, backing off, for up to 30 s; a write that still fails ends the attempt with exit 1,
  and the restart resumes the step. A step is reported completed only once its row committed.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sqlite3
import subprocess
import sys
import time

from crashpoint import probe

STEPS = ("search", "read", "compare", "draft", "cite")


class Failed(Exception):
    """A write did not commit."""


class Sqlite:
    def __init__(self, path: str, fixed: bool) -> None:
        # without a busy timeout a locked database fails at once (SQLITE_BUSY)
        self.db = sqlite3.connect(path, timeout=30.0 if fixed else 0.0)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS done (step TEXT PRIMARY KEY, result TEXT)")
        self.db.commit()

    def rows(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT step, result FROM done").fetchall())

    def write(self, step: str, result: str) -> None:
        try:
            with self.db:  # commits, or rolls back on an error
                self.db.execute("INSERT INTO done VALUES (?, ?)", (step, result))
        except sqlite3.OperationalError as exc:
            raise Failed(str(exc)) from None


def _psql() -> str:
    found = shutil.which("psql") or shutil.which("postgres")
    if found and os.path.basename(found) == "postgres":
        beside = os.path.join(os.path.dirname(found), "psql")
        found = beside if os.path.exists(beside) else None
    found = found or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"))), None)
    if not found:
        sys.exit("agent: psql not found on PATH or beside the PostgreSQL server's programs")
    return found


class Postgres:
    def __init__(self, dsn: str, fixed: bool) -> None:
        self.dsn, self.fixed, self.psql = dsn, fixed, _psql()
        self.run("CREATE TABLE IF NOT EXISTS done (step TEXT PRIMARY KEY, result TEXT)")

    def run(self, sql: str) -> str:
        """One statement in its own connection and transaction; its rows, tab-separated."""
        deadline = time.monotonic() + (30.0 if self.fixed else 0.0)
        delay = 0.1
        while True:
            done = subprocess.run(
                [self.psql, "-X", "-q", "-At", "-F", "\t", "-v", "ON_ERROR_STOP=1",
                 "-d", self.dsn, "-c", sql],
                capture_output=True, text=True, check=False,
                env={**os.environ, "PGCONNECT_TIMEOUT": "3"},
            )  # fmt: skip
            if done.returncode == 0:
                return done.stdout
            error = (done.stderr.strip().splitlines() or ["psql failed"])[-1]
            if time.monotonic() >= deadline:
                raise Failed(error)
            print(f"agent: {error}; trying again", file=sys.stderr)
            time.sleep(delay)
            delay = min(2 * delay, 1.0)

    def rows(self) -> dict[str, str]:
        out = self.run("SELECT step, result FROM done")
        return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)

    def write(self, step: str, result: str) -> None:
        self.run(f"INSERT INTO done VALUES ('{step}', '{result}')")  # noqa: S608 - our names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--sqlite", metavar="PATH")
    where.add_argument("--postgres", metavar="DSN")
    ap.add_argument("--fixed", action="store_true")
    a = ap.parse_args()
    try:
        db = Sqlite(a.sqlite, a.fixed) if a.sqlite else Postgres(a.postgres, a.fixed)
        results = db.rows()
    except (Failed, sqlite3.Error) as exc:
        print(f"agent: cannot open the database: {exc}", file=sys.stderr)
        return 1
    for n, step in enumerate(STEPS):
        if step in results:
            continue
        probe.step_started(step)
        time.sleep(0.02)  # the step's work
        result = f"{step}-{n * n + 3}"
        try:
            db.write(step, result)
        except Failed as exc:
            if a.fixed:
                print(f"agent: step {step} not saved: {exc}", file=sys.stderr)
                return 1  # the restart resumes this step
            print(f"agent: step {step}: {exc}", file=sys.stderr)  # BUG: ignored
        probe.step_completed(step)
        results[step] = result
    for step in STEPS:
        print(f"{step}: {results[step]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
