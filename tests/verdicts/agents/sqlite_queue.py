"""A job queue in plain Python on SQLite: each pending job is POSTed to a service, then marked
done in the same database. Reports each job as a step through ``crashpoint.probe``.

The database is opened in WAL mode with ``synchronous=FULL`` (a commit is durable when it
returns); a job's step is reported completed only after its commit. The run holds an
exclusive lock on the state folder, so a second process started on the same queue waits.

Planted bugs (``--bug``):

* ``completed_before_commit``: the step is reported completed before the row is committed;
* ``wal_normal``: ``synchronous=NORMAL`` in WAL mode (commits not durable on power loss);
* ``no_lock``: no lock: two processes work the same queue at the same time;
* ``secret_in_db``: the service's API key is kept in a settings table.

    python sqlite_queue.py --state DIR --http URL [--bug NAME]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sqlite3
import sys
import urllib.request

from crashpoint import probe

JOBS = ["resize:cat.png", "resize:dog.png", "transcode:talk.mp4"]
BUGS = ("completed_before_commit", "wal_normal", "no_lock", "secret_in_db")


def post(url: str, body: dict[str, str], key: str) -> None:
    req = urllib.request.Request(  # noqa: S310 (http URL)
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )
    with urllib.request.urlopen(req, timeout=10):  # noqa: S310
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--bug", choices=BUGS, default=None)
    args = ap.parse_args()
    run = os.environ.get("CRASHPOINT_RUN_ID", "queue-1")
    lock = open(os.path.join(args.state, "queue.lock"), "w")  # noqa: SIM115 (held till exit)
    if args.bug != "no_lock":
        fcntl.flock(lock, fcntl.LOCK_EX)
    db = sqlite3.connect(os.path.join(args.state, "queue.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={'NORMAL' if args.bug == 'wal_normal' else 'FULL'}")
    db.execute("BEGIN IMMEDIATE")
    db.execute("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, done INTEGER)")
    db.execute("CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT)")
    db.executemany("INSERT OR IGNORE INTO jobs VALUES (?, 0)", [(j,) for j in JOBS])
    if args.bug == "secret_in_db":
        key = os.environ.get("OPENAI_API_KEY", "")
        db.execute("INSERT OR REPLACE INTO settings VALUES ('api_key', ?)", (key,))
    db.execute("COMMIT")
    for (job,) in db.execute("SELECT id FROM jobs WHERE done = 0 ORDER BY id").fetchall():
        probe.step_started(job)
        post(f"{args.http}/jobs", {"job": job}, key=f"{run}:{job}")
        if args.bug == "completed_before_commit":
            probe.step_completed(job)
        db.execute("UPDATE jobs SET done = 1 WHERE id = ?", (job,))
        if args.bug != "completed_before_commit":
            probe.step_completed(job)
    done = [j for (j,) in db.execute("SELECT id FROM jobs WHERE done = 1 ORDER BY id")]
    print("done:", ", ".join(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
