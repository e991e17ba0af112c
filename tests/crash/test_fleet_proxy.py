"""The partition proxy against a real PostgreSQL: it forwards, a partition cuts live
connections (reset) or freezes them (blackhole) and refuses new ones, heal restores, and stop
leaves no thread or socket behind."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from crashpoint.faults import TcpProxy

psycopg = pytest.importorskip(
    "psycopg",
    reason="psycopg (PostgreSQL driver) is not installed: pip install 'crashpoint[postgres]'",
)


def _one(dsn: str) -> int:
    with psycopg.connect(dsn, connect_timeout=3) as conn:
        row = conn.execute("SELECT 1").fetchone()
        assert row is not None
        return int(row[0])


def test_forwards_partitions_and_heals(pg_server: Any, pg_dsn: str) -> None:
    before = threading.active_count()
    with TcpProxy("127.0.0.1", pg_server.port) as proxy:
        dsn = proxy.dsn(pg_dsn)
        assert str(proxy.port) in dsn
        assert dsn.endswith(pg_dsn.rsplit("/", 1)[1])
        assert _one(dsn) == 1
        conn = psycopg.connect(dsn, autocommit=True)
        try:
            assert conn.execute("SELECT 2").fetchone() == (2,)
            assert proxy.live == 1
            proxy.partition()
            with pytest.raises(psycopg.OperationalError):  # the live connection is gone
                conn.execute("SELECT 3")
        finally:
            conn.close()
        with pytest.raises(psycopg.OperationalError):  # new ones are refused
            _one(dsn)
        assert proxy.dropped >= 2
        proxy.heal()
        assert _one(dsn) == 1
    assert threading.active_count() == before


def test_blackhole_freezes_and_heal_resets(pg_server: Any, pg_dsn: str) -> None:
    with TcpProxy("127.0.0.1", pg_server.port) as proxy:
        dsn = proxy.dsn(pg_dsn)
        conn = psycopg.connect(dsn, autocommit=True)
        errors: list[BaseException] = []

        def query() -> None:
            try:
                conn.execute("SELECT 1")
            except BaseException as exc:
                errors.append(exc)

        try:
            proxy.partition("blackhole")
            assert proxy.live == 0
            t = threading.Thread(target=query)
            t.start()  # the query's bytes go nowhere and no reply comes: it waits
            with pytest.raises(psycopg.OperationalError):  # accepted, never answered
                _one(dsn)
            assert t.is_alive()
            assert not errors
            proxy.heal()  # the frozen connection is reset: the waiting query fails
            t.join(30)
            assert not t.is_alive()
            assert errors
            assert isinstance(errors[0], psycopg.OperationalError)
        finally:
            conn.close()
        assert _one(dsn) == 1


def test_stop_is_idempotent_and_bad_mode_is_refused(pg_server: Any) -> None:
    proxy = TcpProxy("127.0.0.1", pg_server.port)
    with pytest.raises(ValueError, match="partition mode"):
        proxy.partition("cable")  # type: ignore[arg-type]
    proxy.stop()
    proxy.stop()
