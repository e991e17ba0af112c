"""PostgresStore fails fast and never doubles (issue 25), against a real PostgreSQL server:

- a blackholed connection (the partition proxy freezes it: bytes go nowhere, nobody is told)
  gives a clear :class:`StoreTimeout` within the configured limit, for a write, a read and a
  new connection, instead of blocking;
- a commit whose acknowledgement is lost (a proxy forwards the client's COMMIT and drops every
  byte the server sends back) is resolved on reconnect by reading its commit token back: the
  append is reported done; a commit that never reached the server is reported not stored;
- two real processes given one worker id run each step body once (one waits for the other).

Each test runs its blocking call in a thread with a bound, so the code before this issue (no
client-side limit) fails the test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

psycopg = pytest.importorskip(
    "psycopg",
    reason="psycopg (PostgreSQL driver) is not installed: pip install 'crashpoint[postgres]'",
)

import _pgdb  # noqa: E402
from crashpoint.checkpoint import PostgresStore, run_reducer  # noqa: E402
from crashpoint.errors import CheckpointError, StoreTimeout  # noqa: E402
from crashpoint.faults import TcpProxy  # noqa: E402

# one database for the module, emptied before each test (not one created and dropped per test)
pg_module_database, pg_dsn = _pgdb.pg_module_database, _pgdb.pg_dsn

if TYPE_CHECKING:
    from conftest import Children

#: Seconds of slack on a limit: 2 shared cores, other test runs beside this one.
SLACK = 4.0


def bounded(call: Callable[[], Any], limit: float) -> tuple[Any, float]:
    """``call()`` in a thread: (its result or the exception it raised, seconds it took); fails
    the test if it is still blocked after ``limit`` seconds."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    t.start()
    t.join(limit)
    took = time.monotonic() - start
    assert not t.is_alive(), f"still blocked after {limit:g}s: no client-side limit"
    return out[0], took


def records(dsn: str, run_id: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        got = conn.execute(
            "SELECT seq FROM crashpoint.records WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()
    return [int(r[0]) for r in got]


# -- a blackhole: no answer, ever ----------------------------------------------------------------


def test_a_blackholed_connection_fails_within_the_statement_timeout(
    pg_server: Any, pg_dsn: str
) -> None:
    """Before: an append on a silently dropped connection blocked for more than 45 s (no
    client-side timeout, no keepalive). Now: StoreTimeout within statement_timeout, naming it,
    saying the record was not stored; a new connection fails within connect_timeout."""
    with TcpProxy("127.0.0.1", pg_server.port) as proxy:
        store = PostgresStore(proxy.dsn(pg_dsn), statement_timeout=1.0, connect_timeout=2.0)
        j = store.open("r")
        assert j.append({"n": 1}) == 1
        store.runs()  # the store's own connection is open too
        proxy.partition("blackhole")
        try:
            got, took = bounded(lambda: j.append({"n": 2}), 30)
            assert isinstance(got, StoreTimeout), got
            assert took < 1.0 + SLACK, took
            msg = str(got)
            assert "statement_timeout" in msg
            assert "1s" in msg
            assert "it was not stored" in msg
            assert "PostgresStore(..., statement_timeout=SECONDS)" in msg
            assert got.option == "statement_timeout"
            # a read on the store's own (blackholed) connection: the same limit
            got, took = bounded(store.runs, 30)
            assert isinstance(got, StoreTimeout), got
            assert took < 1.0 + SLACK, took
            # a new connection: accepted by the blackhole, never answered
            got, took = bounded(lambda: store.open("r2"), 30)
            assert isinstance(got, StoreTimeout), got
            assert got.option == "connect_timeout"
            assert took < 2.0 + SLACK, took
            assert "connect_timeout" in str(got)
            with pytest.raises(CheckpointError, match="reopen"):  # the journal stopped
                j.append({"n": 3})
        finally:
            proxy.heal()
            j.close()
        store.close()
    assert records(pg_dsn, "r") == [1]


def test_the_limits_are_checked_and_reach_the_server(pg_dsn: str) -> None:
    with pytest.raises(ValueError, match="statement_timeout must be a positive number"):
        PostgresStore(pg_dsn, statement_timeout=0)
    with pytest.raises(ValueError, match="connect_timeout"):
        PostgresStore(pg_dsn, connect_timeout=float("inf"))
    store = PostgresStore(pg_dsn, statement_timeout=2.5, idle_in_transaction_timeout=7)
    conn = store.connect()
    try:
        got = conn.execute(
            "SELECT current_setting('statement_timeout'), "
            "current_setting('idle_in_transaction_session_timeout')"
        ).fetchone()
        assert got == ("2500ms", "7s")
        # a statement the server runs past the limit: cancelled by the server, a clear error
        with pytest.raises(StoreTimeout, match="statement_timeout"), store._tx() as cur:
            cur.execute("SELECT pg_sleep(4)")
    finally:
        conn.close()
        store.close()


# -- a lost acknowledgement: the commit token read back -------------------------------------------


class CommitCutter:
    """A loopback proxy to PostgreSQL that, once armed, cuts one commit of the next connection
    that sends one. ``"ack"``: the client's COMMIT goes through, every byte the server sends
    back from then on is dropped (the commit lands, its acknowledgement is lost). ``"commit"``:
    the COMMIT itself and everything after it are dropped (the transaction stays open on the
    server, never committed). The server's side is never told (as in a real partition) until
    :meth:`close`."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.mode: str | None = None
        self.fired = threading.Event()
        self.lock = threading.Lock()
        self.socks: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def dsn(self, dsn: str) -> str:
        parts = urlsplit(dsn)
        user = parts.netloc.rpartition("@")[0]
        return parts._replace(netloc=f"{user}@127.0.0.1:{self.port}").geturl()

    def arm(self, mode: str) -> None:
        self.mode = mode

    def _spawn(self, fn: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        self.threads.append(t)
        t.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.socks += [client, server]
            cut = {"up": False, "down": False}
            self._spawn(self._up, client, server, cut)
            self._spawn(self._down, server, client, cut)

    def _up(self, client: socket.socket, server: socket.socket, cut: dict[str, bool]) -> None:
        while True:
            try:
                data = client.recv(65536)
            except OSError:
                return
            if not data:
                return  # the client gave up; the server is not told
            if self.mode and not cut["down"] and b"COMMIT\x00" in data:
                with self.lock:
                    mode, self.mode = self.mode, None
                if mode is not None:
                    cut["down"] = True
                    cut["up"] = mode == "commit"
                    self.fired.set()
            if cut["up"]:
                continue
            with contextlib.suppress(OSError):
                server.sendall(data)

    def _down(self, server: socket.socket, client: socket.socket, cut: dict[str, bool]) -> None:
        while True:
            try:
                data = server.recv(65536)
            except OSError:
                return
            if not data:
                return
            if cut["down"]:
                continue
            with contextlib.suppress(OSError):
                client.sendall(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        with contextlib.suppress(OSError):
            self.listener.close()
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in self.threads:
            t.join(5)


@pytest.fixture
def cutter(pg_server: Any) -> Any:
    c = CommitCutter(pg_server.port)
    yield c
    c.close()


def test_a_lost_commit_acknowledgement_is_resolved_as_done(cutter: Any, pg_dsn: str) -> None:
    """The server committed the append and its answer never came back: after the statement
    timeout the store reconnects, reads the commit token back and reports the append done;
    the journal goes on, on the new connection."""
    store = PostgresStore(cutter.dsn(pg_dsn), statement_timeout=1.0)
    j = store.open("r")
    try:
        assert j.append({"n": 1}) == 1
        cutter.arm("ack")
        got, took = bounded(lambda: j.append({"n": 2}), 30)
        assert cutter.fired.is_set()
        assert got == 2, got  # done: not an error, not a guess
        assert took < 1.0 + SLACK, took
        assert records(pg_dsn, "r") == [1, 2]
        assert j.append({"n": 3}) == 3
    finally:
        j.close()
    assert store.read("r").state == {"records": [{"n": 1}, {"n": 2}, {"n": 3}]}
    store.close()


def test_a_commit_that_never_arrived_is_resolved_as_not_stored(cutter: Any, pg_dsn: str) -> None:
    """The COMMIT never reached the server (its transaction left open there, holding the lease
    row): the store ends the old backend, reads no token, and says the record was not
    stored. Reopening finds the run without it."""
    # the server would end the open transaction only after a minute: the store ends it
    store = PostgresStore(cutter.dsn(pg_dsn), statement_timeout=1.0, idle_in_transaction_timeout=60)
    j = store.open("r")
    try:
        assert j.append({"n": 1}) == 1
        cutter.arm("commit")
        got, took = bounded(lambda: j.append({"n": 2}), 30)
        assert cutter.fired.is_set()
        assert isinstance(got, StoreTimeout), got
        assert "it was not stored (checked after reconnecting" in str(got)
        assert took < 1.0 + SLACK, took
    finally:
        j.close()
    assert records(pg_dsn, "r") == [1]
    again = PostgresStore(pg_dsn)
    with again.open("r") as j2:  # released on the new connection; the old transaction is gone
        assert j2.seq == 1
        assert j2.append({"n": "2 again"}) == 2
    again.close()
    store.close()


# -- one worker id, two processes ------------------------------------------------------------------

AGENT = """
import os, sys, time
from crashpoint.checkpoint import PostgresStore, open_run, run_main

STEPS = ["a", "b", "c"]


def main() -> None:
    run_id, log = sys.argv[1], sys.argv[2]
    store = PostgresStore(os.environ["TEST_DSN"], lock_timeout=60, lease_seconds=30)
    with open_run(store, run_id, steps=STEPS) as run:
        for name in STEPS:

            def body(name: str = name) -> str:
                fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                os.write(fd, f"{name} {os.getpid()}\\n".encode())
                os.close(fd)
                time.sleep(0.4)
                hold = os.environ.get("HOLD_UNTIL")  # the test says when this body may end
                while hold and not os.path.exists(hold):
                    time.sleep(0.05)
                return name

            run.step(name, body)
        run.finish("ok")
    store.close()
    print("done", flush=True)


run_main(main)
"""


@pytest.mark.parametrize("lease", ["claimed", "fresh"])
def test_two_processes_with_one_worker_id_run_each_step_body_once(
    children: Children, tmp_path: Path, pg_dsn: str, lease: str
) -> None:
    """Before: the second process adopted the lease by name alone and ran the step bodies too.
    Now the lease is bound to one process instance: the second waits until the first is done,
    then finds every step completed. ``claimed``: a fleet worker's claim both would adopt;
    ``fresh``: no lease yet."""
    run_id = "one-id"
    if lease == "claimed":
        from crashpoint.checkpoint import submit

        s = PostgresStore(pg_dsn)
        submit(s, run_id)
        assert s.claim("w-same") == [(run_id, 2)]
        s.close()
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    log = tmp_path / "bodies.log"
    env = {"TEST_DSN": pg_dsn, "CRASHPOINT_WORKER": "w-same"}
    procs = [children.python(script, run_id, log, env=env) for _ in range(2)]
    codes = [p.wait(90) for p in procs]
    ran = log.read_text().split("\n")[:-1]
    assert sorted(line.split()[0] for line in ran) == ["a", "b", "c"], ran  # each body once
    assert len({line.split()[1] for line in ran}) == 1, ran  # all in one process
    for p, code in zip(procs, codes, strict=True):  # the other waited, then found it done
        assert code == 0, p.stderr_text()
        assert p.read_line(timeout=5) == "done"
    s = PostgresStore(pg_dsn)
    st = s.read(run_id, reducer=run_reducer).state
    assert st["status"] == "completed"
    assert st["order"] == ["a", "b", "c"]
    s.close()


def test_a_worker_id_from_the_environment_is_refused_while_another_process_holds_it(
    children: Children, tmp_path: Path, pg_dsn: str
) -> None:
    """Without waiting (lock_timeout 0): the second process of one worker id exits 73
    (locked), naming the other process's instance, and runs no step body."""
    script = tmp_path / "agent.py"
    script.write_text(AGENT.replace("lock_timeout=60", "lock_timeout=0"))
    log = tmp_path / "bodies.log"
    env = {"TEST_DSN": pg_dsn, "CRASHPOINT_WORKER": "w-same"}
    hold = tmp_path / "go-on"
    first = children.python(script, "r", log, env={**env, "HOLD_UNTIL": str(hold)})
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text()):  # the first is inside step a's body
        assert time.monotonic() < deadline, first.stderr_text()
        time.sleep(0.05)
    second = children.python(script, "r", log, env=env)
    assert second.wait(60) == 73, second.stderr_text()
    assert "w-same in another process or store (instance " in second.stderr_text()
    hold.touch()
    assert first.wait(60) == 0, first.stderr_text()
    assert sorted(ln.split()[0] for ln in log.read_text().splitlines()) == ["a", "b", "c"]
