"""The test PostgreSQL server itself: it starts as an unprivileged account, serves a database
of its own per test, and stops with nothing left behind."""

from __future__ import annotations

import os
from typing import Any

import psutil


def test_the_server_runs_unprivileged_and_serves_a_database(pg_server: Any, pg_dsn: str) -> None:
    proc = psutil.Process(pg_server.process.pid)
    assert proc.uids().effective != 0  # PostgreSQL refuses root; CI is root
    dbname = pg_dsn.rsplit("/", 1)[1]
    assert pg_server.psql("SELECT current_database()", dbname).strip() == dbname
    assert oct(os.stat(pg_server.folder).st_mode & 0o777) == "0o700"
