"""One database per test module instead of one per test, emptied before each test.

``CREATE DATABASE`` and ``DROP DATABASE ... WITH (FORCE)`` (each a ``psql`` process, the first
copying the template with fsync on) cost ~0.15 s a test; emptying a database the module shares
costs one connection and a few statements. A module opts in with::

    from _pgdb import pg_dsn, pg_module_database  # noqa: F401 - fixtures

and its tests (and ``store_factory``'s postgres side, which asks for ``pg_dsn``) get a DSN of a
database that, as before, holds nothing a previous test made: every other session on it is
ended (a lease holder, a heartbeat, an idle connection) and every schema but the system ones is
dropped, ``public`` made anew. Nothing else in a database is created by these tests (roles and
settings are the server's, left alone).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

RESET = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid();
DO $$
DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace
            WHERE nspname !~ '^pg_' AND nspname <> 'information_schema'
  LOOP
    EXECUTE format('DROP SCHEMA %I CASCADE', s);
  END LOOP;
  CREATE SCHEMA public;
END $$;
"""


@pytest.fixture(scope="module")
def pg_module_database(pg_server: Any) -> Iterator[str]:
    """A database of this module's own on the session's server, dropped after its last test."""
    pytest.importorskip(
        "psycopg",
        reason="psycopg (PostgreSQL driver) is not installed: pip install 'crashpoint[postgres]'",
    )
    name = "m_" + secrets.token_hex(6)
    dsn: str = pg_server.create_database(name)
    yield dsn
    with contextlib.suppress(RuntimeError):
        pg_server.drop_database(name)


def empty(dsn: str) -> None:
    """End every other session on ``dsn``'s database and drop every schema but the system
    ones (``public`` made anew)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RESET)


@pytest.fixture
def pg_dsn(pg_module_database: str) -> str:
    """The DSN of the module's database, emptied: no schema, table or session of an earlier
    test is left (replaces the suite's one-database-per-test ``pg_dsn`` in this module)."""
    empty(pg_module_database)
    return pg_module_database
