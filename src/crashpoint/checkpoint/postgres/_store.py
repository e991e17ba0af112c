"""A checkpoint store in PostgreSQL: the file store's interface, one writer per run across machines.

Tables (in schema ``crashpoint`` unless told otherwise), created idempotently under an advisory
lock::

    runs       run_id PK, meta (canonical JSON), status, size, created/updated, attempts,
               last_error, dead (dead-letter reason or NULL)
    records    (run_id, seq) PK, generation, frame: one framed, checksummed journal record
               (the file journal's bytes: header + {"s","g","d"} payload), appended, never
               rewritten
    snapshots  (run_id, seq) PK, frame: the state after record ``seq`` (kind 1); a snapshot
               deletes the records and older snapshots it covers, in the same transaction
    leases     run_id PK, holder (NULL: released), generation, expires_at (the SERVER's clock),
               local (the holder's boot id, pid namespace, pid and start time), instance (the
               process instance bound to the lease: pid, start time, a random nonce per store;
               NULL for a claim no process has adopted yet)
    commits    (run_id, generation) PK, token: the token of the last write each generation
               committed, written in the write's own transaction (in-doubt commits)
    damaged    rows a rollback past damage moved aside (never deleted): run_id, seq, kind,
               generation, frame, moved_at, reason

Fencing: every write runs in one transaction that first reads the run's lease row ``FOR
SHARE`` and compares its generation and process instance with the writer's; a writer whose
lease was taken over (generation bumped) gets :class:`~crashpoint.errors.LeaseLost` and its
write never lands. A heartbeat thread renews the lease while a journal is open; a holder that
stops (kill -9, partition) lets it expire after ``lease_seconds`` and any worker may take the
run. A lease held under a worker id is adopted by at most one process at a time (it binds its
instance), so two processes given one worker id never both write.

Never blocked: every connection has a connect timeout, TCP keepalives and ``tcp_user_timeout``,
and server-side statement and idle-in-transaction timeouts; a watchdog thread cuts the socket
of any call that waits longer than ``statement_timeout`` (a blackholed server answers nothing,
and no server-side timeout can fire), so a call fails with
:class:`~crashpoint.errors.StoreTimeout` instead of hanging. A commit whose acknowledgement is
lost is resolved on a new connection: the old backend is ended, its row locks waited for, and
the write's commit token read back; the write is then reported done, or not stored, never
guessed.

Reads are total: a row whose checksum, framing or envelope does not hold raises
:class:`~crashpoint.errors.CheckpointCorrupt` naming the run and the record's sequence number.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any, Literal

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from crashpoint._failpoints import failpoint
from crashpoint.checkpoint._journal import (
    _STATE_CHECKS,
    MAX_SEQ,
    Damage,
    Loaded,
    Reducer,
    _envelope,
    records_reducer,
)
from crashpoint.checkpoint._notify import Notify
from crashpoint.checkpoint._record import (
    KIND_RECORD,
    KIND_SNAPSHOT,
    PayloadError,
    decode_json,
    encode,
    encode_json,
    scan,
)
from crashpoint.checkpoint._redact import DEFAULT_SECRET_NAMES, Redactor
from crashpoint.checkpoint._store import (
    PRUNABLE_STATUSES,
    Durability,
    Recovery,
    Retention,
    RunInfo,
    SnapshotPolicy,
    pick_for_retention,
    validate_run_id,
)
from crashpoint.errors import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointWriteError,
    DiskBudgetExceeded,
    InvalidArgument,
    LeaseLost,
    RunLocked,
    RunNotFound,
    RunStateError,
    StoreTimeout,
)

__all__ = ["WORKER_ENV", "Lease", "PgJournal", "PostgresStore", "default_worker", "redact_dsn"]

#: The environment variable naming this process's worker id (a fleet worker sets it for the
#: agent processes it starts, so they adopt the lease it claimed).
WORKER_ENV = "CRASHPOINT_WORKER"
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_LOCK_KEY = 0x63727368  # "crsh": the advisory lock around creating the schema
_BUDGET_KEY = 0x62756467  # "budg": writers of a store with a budget check and write as one step
_CLAIMABLE = ("created", "running", "failed")
_TABLES = ("runs", "records", "snapshots", "leases", "commits", "damaged")
_open_here: set[tuple[str, str, str]] = set()  # (store root, run_id, instance): open journals
_open_mutex = threading.Lock()


def default_worker() -> str:
    """``$CRASHPOINT_WORKER`` or ``"<hostname>:<pid>"``."""
    return os.environ.get(WORKER_ENV) or f"{socket.gethostname()}:{os.getpid()}"


def redact_dsn(dsn: str) -> str:
    """``dsn`` as ``postgresql://user@host:port/db`` with no password (for errors, repr, logs)."""
    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        return "postgresql://<unparsable DSN>"
    user = parts.get("user")
    host = parts.get("host") or "localhost"
    port = parts.get("port")
    db = parts.get("dbname") or ""
    return f"postgresql://{f'{user}@' if user else ''}{host}{f':{port}' if port else ''}/{db}"


def _secrets_of(dsn: str) -> list[str]:
    out = []
    try:
        pw = conninfo_to_dict(dsn).get("password")
    except Exception:
        pw = None
    if pw:
        out.append(str(pw))
    m = re.match(r"^[a-z]+://[^:/@]*:([^@]*)@", dsn)
    if m and m.group(1):
        out.append(m.group(1))
    return out


def _start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot, from ``/proc``): with the pid, it
    names one process even after the pid is reused. ``""`` where ``/proc`` cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2 :].split()[19].decode()
    except (OSError, ValueError, IndexError):
        return ""


class _Watchdog:
    """One daemon thread that cuts the socket of a database call that waited too long.

    A blackholed server (a pulled cable, a dead NAT entry, a frozen proxy) answers nothing, so
    no server-side timeout fires and keepalives may never fail (a middlebox answers them); the
    driver would wait forever. Each call arms a deadline (:meth:`arm`); past it the socket is
    shut down, the driver's wait ends with a connection error, and the caller turns that into a
    :class:`~crashpoint.errors.StoreTimeout`. The socket is named by its fd and checked by
    inode first, so a reused fd is never touched."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Fresh state (at import, and in a forked child: no thread, no lock held)."""
        self._init = threading.Lock()
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, int, tuple[int, int], _Conn]] = {}
        self._seq = 0
        self._wake = math.inf  # when the thread looks next
        self._floor = math.inf  # the shortest limit armed so far
        self._started = False

    def arm(self, fd: int, seconds: float, conn: _Conn) -> int:
        st = os.fstat(fd)
        deadline = time.monotonic() + seconds
        if not self._started:
            with self._init:
                if not self._started:
                    threading.Thread(
                        target=self._loop, daemon=True, name="crashpoint-pg-watchdog"
                    ).start()
                    self._started = True
        with self._cond:
            self._seq += 1
            self._due[self._seq] = (deadline, fd, (st.st_dev, st.st_ino), conn)
            self._floor = min(self._floor, seconds)
            if deadline < self._wake:  # sooner than the thread means to look: wake it
                self._wake = deadline
                self._cond.notify()
            return self._seq

    def disarm(self, key: int) -> None:
        with self._cond:
            self._due.pop(key, None)

    def _loop(self) -> None:
        cond = self._cond
        with cond:
            while True:
                now = time.monotonic()
                for key, (deadline, fd, ident, conn) in list(self._due.items()):
                    if deadline <= now:
                        del self._due[key]
                        conn._cp_fired = True
                        _cut(fd, ident)
                # idle, it still looks every `floor` seconds: a call armed meanwhile has a
                # deadline at least that far off, so arming never has to wake the thread (no
                # context switch per query)
                self._wake = min((d[0] for d in self._due.values()), default=now + self._floor)
                cond.wait(None if self._wake == math.inf else max(0.0, self._wake - now))


def _cut(fd: int, ident: tuple[int, int]) -> None:
    """Shut the socket ``fd`` down (both ways) if it is still the one with inode ``ident``."""
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != ident:
            return
        dup = os.dup(fd)
    except OSError:
        return
    try:
        st = os.fstat(dup)
        if (st.st_dev, st.st_ino) == ident:
            sock = socket.socket(fileno=dup)
            dup = -1
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            finally:
                sock.close()
    except OSError:
        pass
    finally:
        if dup >= 0:
            os.close(dup)


_WATCHDOG = _Watchdog()
os.register_at_fork(after_in_child=_WATCHDOG._reset)


class _Conn(psycopg.Connection[Any]):
    """A connection whose every wait on the server (a query, a fetch, a commit) is bounded by
    ``_cp_limit`` seconds through the watchdog; ``_cp_fired`` says the watchdog cut it."""

    _cp_limit: float
    _cp_fired: bool

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        limit = getattr(self, "_cp_limit", 0.0)
        if limit <= 0 or self.closed:
            return super().wait(*args, **kwargs)
        try:
            fd = self.pgconn.socket
        except psycopg.Error:
            return super().wait(*args, **kwargs)
        key = _WATCHDOG.arm(fd, limit, self)
        try:
            return super().wait(*args, **kwargs)
        finally:
            _WATCHDOG.disarm(key)


def _timed_out(exc: BaseException, conn: Any) -> bool:
    """True if ``exc`` ended a call because a limit passed (the watchdog, or the server's
    ``statement_timeout``), not because the server refused or the link reset."""
    if getattr(conn, "_cp_fired", False):
        return True
    return isinstance(exc, psycopg.errors.QueryCanceled) and "timeout" in str(exc)


@dataclass(frozen=True, slots=True)
class Lease:
    """A run's lease as the database holds it. ``expires_at`` is epoch seconds (server clock);
    ``holder`` is ``""`` once released."""

    run_id: str
    holder: str
    generation: int
    expires_at: float
    expired: bool
    #: the process instance bound to the lease (``pid:start:nonce``), ``""`` if none is (a
    #: claim not yet adopted, or a released lease)
    instance: str = ""


class PostgresStore:
    """Runs in PostgreSQL, behind the same interface as :class:`~crashpoint.checkpoint.Store`.

    >>> store = PostgresStore("postgresql://app@db/agents")      # doctest: +SKIP
    >>> with open_run(store, "report-42", steps=[...]) as run:   # doctest: +SKIP
    ...     ...

    Limits (seconds; a call past one raises :class:`~crashpoint.errors.StoreTimeout` naming
    it): ``connect_timeout`` for a new connection (whole seconds, at least 2: libpq's rule);
    ``statement_timeout`` for any one wait on the server (a query, a fetch, a commit),
    enforced on the server and, for a server that answers nothing, by cutting the socket;
    ``idle_in_transaction_timeout`` (default: ``statement_timeout``) after which the server
    ends a transaction its client left open (a vanished writer's row locks are freed);
    ``keepalive_seconds``: TCP keepalive probes every so often on an idle connection.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "crashpoint",
        worker: str | None = None,
        lease_seconds: float = 30.0,
        heartbeat_seconds: float | None = None,
        lock_timeout: float = 0.0,
        durability: str | Durability = "always",
        budget_bytes: int | None = None,
        retention: Retention | None = None,
        on_corrupt: Literal["raise", "rollback"] = "raise",
        snapshots: SnapshotPolicy | None = None,
        secret_names: Iterable[str] = DEFAULT_SECRET_NAMES,
        notify: Notify = None,
        connect_timeout: float = 10.0,
        statement_timeout: float = 30.0,
        idle_in_transaction_timeout: float | None = None,
        keepalive_seconds: float = 10.0,
    ) -> None:
        if not _SCHEMA_RE.match(schema):
            raise InvalidArgument(
                f"schema {schema!r} is not a plain lower-case SQL name "
                "([a-z_][a-z0-9_]*, at most 63 characters)"
            )
        if on_corrupt not in ("raise", "rollback"):
            raise InvalidArgument(f"on_corrupt must be 'raise' or 'rollback', not {on_corrupt!r}")
        if budget_bytes is not None and budget_bytes <= 0:
            raise InvalidArgument(f"budget_bytes must be positive, got {budget_bytes}")
        if lease_seconds <= 0:
            raise InvalidArgument(f"lease_seconds must be positive, got {lease_seconds}")
        hb = lease_seconds / 3 if heartbeat_seconds is None else heartbeat_seconds
        if not 0 < hb < lease_seconds:
            raise InvalidArgument(
                f"heartbeat_seconds must be between 0 and lease_seconds ({lease_seconds}), got {hb}"
            )
        idle = (
            statement_timeout
            if idle_in_transaction_timeout is None
            else idle_in_transaction_timeout
        )
        for name, value in (
            ("connect_timeout", connect_timeout),
            ("statement_timeout", statement_timeout),
            ("idle_in_transaction_timeout", idle),
            ("keepalive_seconds", keepalive_seconds),
        ):
            if not (isinstance(value, int | float) and 0 < value < math.inf):
                raise InvalidArgument(f"{name} must be a positive number of seconds, got {value!r}")
        self._dsn = dsn
        self._secrets = _secrets_of(dsn)
        self.label = redact_dsn(dsn)
        self.schema = schema
        self.root = f"{self.label}#{schema}"  # where runs live, for messages and events
        self.worker = worker or default_worker()
        self.lease_seconds = float(lease_seconds)
        self.heartbeat_seconds = float(hb)
        self.lock_timeout = lock_timeout
        self.durability = Durability.parse(durability)
        self.budget_bytes = budget_bytes
        self.retention = retention or Retention()
        self.on_corrupt = on_corrupt
        self.snapshots = snapshots or SnapshotPolicy()
        self.redactor = Redactor(secret_names)
        self.notify = notify
        self.connect_timeout = float(connect_timeout)
        self.statement_timeout = float(statement_timeout)
        self.idle_in_transaction_timeout = float(idle)
        self.keepalive_seconds = float(keepalive_seconds)
        self._conn_kw = self._connection_options()
        self.bytes_written = 0
        self._mutex = threading.RLock()
        self._conn: _Conn | None = None
        self._conn_pid = 0
        self._schema_ready = False
        self._instance = ("", 0)  # (instance, pid it was made in)

    def __repr__(self) -> str:
        return f"PostgresStore({self.label!r}, schema={self.schema!r}, worker={self.worker!r})"

    @property
    def instance(self) -> str:
        """This store's process instance, ``pid:start:nonce`` (the pid, the process's start
        time, a random nonce per store object; a new one after a fork): what a lease is bound
        to, so that two processes (or two stores) with one worker id never both hold a run."""
        inst, pid = self._instance
        if pid != os.getpid():
            pid = os.getpid()
            inst = f"{pid}:{_start_time(pid) or '?'}:{secrets.token_hex(6)}"
            self._instance = (inst, pid)
        return inst

    # -- connections ---------------------------------------------------------------------------

    def _connection_options(self) -> dict[str, Any]:
        """libpq parameters: the limits above, client side (connect timeout, keepalives,
        ``tcp_user_timeout``) and server side (``options``: statement and idle-in-transaction
        timeouts, the server's keepalives), after any ``options`` the DSN already carries."""
        keep = max(1, round(self.keepalive_seconds))
        ms_statement = max(1, round(self.statement_timeout * 1000))
        ms_idle = max(1, round(self.idle_in_transaction_timeout * 1000))
        ours = (
            f"-c statement_timeout={ms_statement} "
            f"-c idle_in_transaction_session_timeout={ms_idle} "
            f"-c tcp_keepalives_idle={keep} -c tcp_keepalives_interval={keep} "
            "-c tcp_keepalives_count=3"
        )
        try:
            theirs = str(conninfo_to_dict(self._dsn).get("options") or "")
        except Exception:  # an unparsable DSN: connecting says so, naming it
            theirs = ""
        kw: dict[str, Any] = {
            "connect_timeout": max(2, math.ceil(self.connect_timeout)),
            "application_name": "crashpoint",
            "keepalives": 1,
            "keepalives_idle": keep,
            "keepalives_interval": keep,
            "keepalives_count": 3,
            "options": f"{ours} {theirs}".strip(),
        }
        if psycopg.pq.version() >= 120000:  # libpq 12 added tcp_user_timeout
            kw["tcp_user_timeout"] = ms_statement
        return kw

    def _redact(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "***")
        return text

    def _error(self, exc: BaseException, what: str) -> CheckpointError:
        return CheckpointError(
            f"{self.label} (schema {self.schema}): {what}: {self._redact(str(exc).strip())}"
        )

    def _fail(
        self, exc: BaseException, conn: Any, what: str, *, outcome: str = ""
    ) -> CheckpointError:
        """The error for a psycopg failure of ``what`` on ``conn``: a
        :class:`~crashpoint.errors.StoreTimeout` when a limit passed, else a
        :class:`~crashpoint.errors.CheckpointError` with the driver's message (no password)."""
        if _timed_out(exc, conn):
            return StoreTimeout(
                self.root, what, self.statement_timeout, "statement_timeout", outcome
            )
        if outcome:
            what = f"{what} ({outcome})"
        return self._error(exc, what)

    def _raw_connect(self, *, autocommit: bool = False) -> _Conn:
        """A new connection with the store's limits, no schema check."""
        try:
            conn = _Conn.connect(self._dsn, autocommit=autocommit, **self._conn_kw)
        except psycopg.errors.ConnectionTimeout:
            raise StoreTimeout(
                self.root,
                "connecting",
                self._conn_kw["connect_timeout"],
                "connect_timeout",
            ) from None
        except psycopg.Error as exc:
            if "timeout expired" in str(exc):  # psycopg before ConnectionTimeout
                raise StoreTimeout(
                    self.root, "connecting", self._conn_kw["connect_timeout"], "connect_timeout"
                ) from None
            raise self._error(exc, "cannot connect") from None
        conn._cp_limit = self.statement_timeout
        conn._cp_fired = False
        return conn

    def connect(self) -> psycopg.Connection[Any]:
        """A new connection to the store's database (the schema created if missing), with
        the store's limits."""
        conn = self._raw_connect()
        try:
            if not self._schema_ready:
                self._create_schema(conn)
                self._schema_ready = True
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def _tx(self, what: str = "a query") -> Iterator[psycopg.Cursor[Any]]:
        """A transaction on the store's shared connection (reconnected after a fork or a
        broken connection)."""
        with self._mutex:
            if (
                self._conn is None
                or self._conn.closed
                or self._conn_pid != os.getpid()
                or self._conn.broken
            ):
                self._conn = self.connect()  # type: ignore[assignment]
                self._conn_pid = os.getpid()
            conn = self._conn
            assert conn is not None
            try:
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            except psycopg.OperationalError as exc:
                err = self._fail(exc, conn, what)
                conn.close()
                if isinstance(err, StoreTimeout):
                    raise err from None
                raise self._error(exc, "the database connection failed") from None
            except psycopg.Error as exc:
                raise self._error(exc, f"{what} failed") from None

    def close(self) -> None:
        """Close the store's shared connection (it reconnects when used again)."""
        with self._mutex:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __del__(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None and getattr(self, "_conn_pid", 0) == os.getpid():
            with suppress(Exception):  # interpreter shutdown: nothing to report to
                conn.close()

    def _t(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    def _q(self, text: str) -> sql.Composed:
        """``text`` with ``{runs}``, ``{records}``, ``{snapshots}``, ``{leases}``, ``{commits}``,
        ``{damaged}`` filled in."""
        return sql.SQL(text).format(**{n: self._t(n) for n in _TABLES})

    def _create_schema(self, conn: psycopg.Connection[Any]) -> None:
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                cur.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
                for ddl in _DDL:
                    cur.execute(self._q(ddl))
        except psycopg.Error as exc:
            raise self._fail(exc, conn, "creating the schema") from None

    # -- paths and names ---------------------------------------------------------------------

    def path(self, run_id: str) -> str:
        """Where a run lives, for messages (no password)."""
        return f"{self.root}/{validate_run_id(run_id)}"

    def exists(self, run_id: str) -> bool:
        validate_run_id(run_id)
        with self._tx() as cur:
            cur.execute(self._q("SELECT 1 FROM {runs} WHERE run_id = %s"), (run_id,))
            return cur.fetchone() is not None

    def run_ids(self) -> list[str]:
        with self._tx() as cur:
            cur.execute(self._q("SELECT run_id FROM {runs} ORDER BY run_id"))
            return [r[0] for r in cur.fetchall()]

    def rows(self, run_id: str) -> int:
        """How many rows (records and snapshots) the run has: what ``verify`` checks."""
        with self._tx() as cur:
            cur.execute(
                self._q(
                    "SELECT (SELECT count(*) FROM {records} WHERE run_id = %s) + "
                    "(SELECT count(*) FROM {snapshots} WHERE run_id = %s)"
                ),
                (run_id, run_id),
            )
            return int(cur.fetchone()[0])  # type: ignore[index]

    # -- leases --------------------------------------------------------------------------------

    def lease(self, run_id: str) -> Lease | None:
        with self._tx("reading the lease") as cur:
            cur.execute(
                self._q(
                    "SELECT holder, generation, extract(epoch FROM expires_at)::float8, "
                    "holder IS NULL OR expires_at <= now(), instance FROM {leases} "
                    "WHERE run_id = %s"
                ),
                (run_id,),
            )
            row = cur.fetchone()
        if row is None:
            return None
        return Lease(
            run_id, row[0] or "", int(row[1]), float(row[2]), bool(row[3]), str(row[4] or "")
        )

    def _take(
        self,
        cur: psycopg.Cursor[Any],
        run_id: str,
        worker: str,
        *,
        force: bool = False,
        adopt: bool = True,
        local: str | None = None,
        instance: str | None = None,
    ) -> tuple[int, str, bool] | None:
        """Take the run's lease for ``worker`` in the caller's transaction: (generation, previous
        holder, adopted) or None if another holder's lease is live. New runs start at generation
        1. ``local``: this process's :func:`_local_key`, recorded with the lease, so that a
        process of this machine (same boot, same pid namespace) may take the lease of a dead
        holder at once instead of waiting for it to expire (a restart after kill -9).

        ``instance`` (:attr:`instance`) binds the lease to one process instance. A live lease
        of ``worker`` is *adopted* (same generation) only if no instance is bound to it (a
        fleet worker's claim, an operator's take-over), it is this instance's, or the bound
        one is a dead process of this machine; a lease bound to another live instance is
        refused like another worker's, even under the same worker id."""
        ttl = self.lease_seconds
        cur.execute(
            self._q(
                "INSERT INTO {leases} (run_id, holder, generation, expires_at, local, instance) "
                "VALUES (%s, %s, 1, now() + make_interval(secs => %s), %s, %s) "
                "ON CONFLICT (run_id) DO NOTHING RETURNING generation"
            ),
            (run_id, worker, ttl, local, instance),
        )
        row = cur.fetchone()
        if row is not None:
            return int(row[0]), "", False
        cur.execute(
            self._q(
                "SELECT holder, generation, holder IS NULL OR expires_at <= now(), local, "
                "instance FROM {leases} WHERE run_id = %s FOR UPDATE"
            ),
            (run_id,),
        )
        holder, gen, free, their_local, their_instance = cur.fetchone()  # type: ignore[misc]
        if not force and not free:
            dead = _local_dead(their_local)
            if (
                adopt
                and holder == worker
                and (their_instance is None or their_instance == instance or dead)
            ):  # a fleet worker's claim, or our own lease: bind it to this instance
                cur.execute(
                    self._q(
                        "UPDATE {leases} SET expires_at = now() + make_interval(secs => %s), "
                        "local = %s, instance = %s WHERE run_id = %s"
                    ),
                    (ttl, local, instance, run_id),
                )
                return int(gen), holder, True
            if not dead:
                return None
        cur.execute(
            self._q(
                "UPDATE {leases} SET holder = %s, generation = generation + 1, "
                "expires_at = now() + make_interval(secs => %s), local = %s, instance = %s "
                "WHERE run_id = %s RETURNING generation"
            ),
            (worker, ttl, local, instance, run_id),
        )
        return int(cur.fetchone()[0]), holder or "", False  # type: ignore[index]

    def take_over(self, run_id: str, worker: str) -> int:
        """Take the run's lease by force (a new generation, no process instance bound: the
        first process of ``worker`` to open the run adopts it): the old holder's next write
        gets :class:`LeaseLost`. For operators, and tests of a stolen lease."""
        validate_run_id(run_id)
        with self._tx("taking the lease over") as cur:
            got = self._take(cur, run_id, worker, force=True)
        assert got is not None
        return got[0]

    def renew(self, run_id: str, worker: str, generation: int) -> bool:
        """Extend the lease (a heartbeat); False if ``worker`` no longer holds ``generation``."""
        with self._tx("renewing the lease") as cur:
            cur.execute(
                self._q(
                    "UPDATE {leases} SET expires_at = now() + make_interval(secs => %s) "
                    "WHERE run_id = %s AND holder = %s AND generation = %s RETURNING 1"
                ),
                (self.lease_seconds, run_id, worker, generation),
            )
            return cur.fetchone() is not None

    def release(self, run_id: str, worker: str, generation: int) -> None:
        """Give the lease up (if ``worker`` still holds ``generation``): any worker may take the
        run at once."""
        with self._tx("releasing the lease") as cur:
            cur.execute(
                self._q(
                    "UPDATE {leases} SET holder = NULL, expires_at = now(), instance = NULL "
                    "WHERE run_id = %s AND holder = %s AND generation = %s"
                ),
                (run_id, worker, generation),
            )

    def _unbind(self, run_id: str, generation: int) -> None:
        """Hand an adopted lease back to its worker: this instance no longer holds it, the
        worker's next process may adopt it (the worker still renews and releases it)."""
        with self._tx("handing the lease back") as cur:
            cur.execute(
                self._q(
                    "UPDATE {leases} SET instance = NULL, local = NULL WHERE run_id = %s "
                    "AND holder = %s AND generation = %s AND instance = %s"
                ),
                (run_id, self.worker, generation, self.instance),
            )

    def claim(
        self, worker: str, *, limit: int = 1, auto_resume_hitl: bool = False
    ) -> list[tuple[str, int]]:
        """Take the leases of up to ``limit`` unfinished, not dead-lettered runs no live worker
        holds (``FOR UPDATE SKIP LOCKED``: concurrent claimers get disjoint runs); return
        ``[(run_id, generation)]``."""
        statuses = list(_CLAIMABLE) + (["decided"] if auto_resume_hitl else [])
        out: list[tuple[str, int]] = []
        with self._tx("claiming runs") as cur:
            cur.execute(
                self._q(
                    "SELECT r.run_id FROM {runs} r LEFT JOIN {leases} l ON l.run_id = r.run_id "
                    "WHERE r.status = ANY(%s) AND r.dead IS NULL "
                    "AND (l.run_id IS NULL OR l.holder IS NULL OR l.expires_at <= now()) "
                    "ORDER BY r.updated LIMIT %s FOR UPDATE OF r SKIP LOCKED"
                ),
                (statuses, limit),
            )
            for (rid,) in cur.fetchall():
                cur.execute(
                    self._q(
                        "INSERT INTO {leases} (run_id, holder, generation, expires_at) "
                        "VALUES (%s, %s, 1, now() + make_interval(secs => %s)) "
                        "ON CONFLICT (run_id) DO UPDATE SET holder = EXCLUDED.holder, "
                        "generation = {leases}.generation + 1, expires_at = EXCLUDED.expires_at, "
                        "local = NULL, instance = NULL "
                        "WHERE {leases}.holder IS NULL OR {leases}.expires_at <= now() "
                        "RETURNING generation"
                    ),
                    (rid, worker, self.lease_seconds),
                )
                row = cur.fetchone()
                if row is not None:
                    out.append((rid, int(row[0])))
        return out

    # -- dead letters --------------------------------------------------------------------------

    def record_attempt(self, run_id: str, error: str | None) -> int:
        """Count one more attempt at the run (``error``: why it failed); return the count."""
        with self._tx("counting an attempt") as cur:
            cur.execute(
                self._q(
                    "UPDATE {runs} SET attempts = attempts + 1, last_error = %s "
                    "WHERE run_id = %s RETURNING attempts"
                ),
                (None if error is None else self._redact(error)[:4000], run_id),
            )
            row = cur.fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.root}")
        return int(row[0])

    def dead_letter(self, run_id: str, reason: str) -> None:
        """Never claim the run again (until an operator retries or clears it:
        :meth:`retry_dead_letter`, :meth:`clear_dead_letter`)."""
        with self._tx("dead-lettering a run") as cur:
            cur.execute(
                self._q("UPDATE {runs} SET dead = %s WHERE run_id = %s RETURNING 1"),
                (self._redact(reason)[:4000] or "dead-lettered", run_id),
            )
            if cur.fetchone() is None:
                raise RunNotFound(f"no run {run_id!r} in {self.root}")

    def dead_lettered(self) -> list[tuple[str, int, str]]:
        """The runs a fleet dead-lettered: ``[(run_id, attempts, reason)]``, by run id."""
        with self._tx("listing dead letters") as cur:
            cur.execute(
                self._q(
                    "SELECT run_id, attempts, dead FROM {runs} "
                    "WHERE dead IS NOT NULL ORDER BY run_id"
                )
            )
            return [(r[0], int(r[1]), str(r[2])) for r in cur.fetchall()]

    def retry_dead_letter(self, run_id: str) -> int:
        """Give a dead-lettered run another chance: its dead-letter mark is cleared and its
        attempt count starts again at 0, so the next free fleet worker claims it and resumes it
        from its last completed step (its journal is not touched). Returns the attempts it had.

        Raises :class:`RunNotFound` for an unknown run and :class:`RunStateError` for one that
        is not dead-lettered (nothing changes)."""
        validate_run_id(run_id)
        with self._tx("retrying a dead letter") as cur:
            cur.execute(
                self._q("SELECT dead, attempts FROM {runs} WHERE run_id = %s FOR UPDATE"),
                (run_id,),
            )
            row = cur.fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id!r} in {self.root}")
            if row[0] is None:
                raise RunStateError(self._not_dead(run_id))
            cur.execute(
                self._q(
                    "UPDATE {runs} SET dead = NULL, attempts = 0, updated = now() WHERE run_id = %s"
                ),
                (run_id,),
            )
            return int(row[1])

    def clear_dead_letter(self, run_id: str) -> int:
        """Give a dead-lettered run up: delete it (its rows, its lease, its moved-aside
        damage), in one transaction; return the bytes it held. Raises :class:`RunNotFound`,
        :class:`RunStateError` for a run that is not dead-lettered and :class:`RunLocked` for
        one a live lease holds (nothing changes)."""
        return self._remove(run_id, finished_only=False, dead_only=True)

    def _not_dead(self, run_id: str) -> str:
        return (
            f"run {run_id!r} in {self.root} is not dead-lettered (nothing changed); "
            "`crashpoint checkpoints dead --store URL` lists the runs that are"
        )

    # -- opening -------------------------------------------------------------------------------

    def open(
        self,
        run_id: str,
        *,
        reducer: Reducer = records_reducer,
        create: bool = True,
        lock_timeout: float | None = None,
    ) -> PgJournal:
        """Open a run for writing: take (or adopt) its lease, load its state. Raises
        :class:`RunLocked` if another worker's lease is live after ``lock_timeout`` seconds."""
        validate_run_id(run_id)
        timeout = self.lock_timeout if lock_timeout is None else lock_timeout
        key = (self.root, run_id, self.instance)  # this store may open a run once at a time
        with _open_mutex:
            if key in _open_here:
                raise RunLocked(run_id, self.path(run_id), f"this process ({self.worker})")
            _open_here.add(key)
        try:
            conn = self.connect()
        except BaseException:
            with _open_mutex:
                _open_here.discard(key)
            raise
        try:
            deadline = time.monotonic() + timeout
            holder = ""
            while True:
                try:
                    with conn.transaction(), conn.cursor() as cur:
                        cur.execute(self._q("SELECT 1 FROM {runs} WHERE run_id = %s"), (run_id,))
                        if cur.fetchone() is None:
                            if not create:
                                raise RunNotFound(f"no run {run_id!r} in {self.root}")
                            cur.execute(
                                self._q(
                                    "INSERT INTO {runs} (run_id) VALUES (%s) ON CONFLICT DO NOTHING"
                                ),
                                (run_id,),
                            )
                        got = self._take(
                            cur, run_id, self.worker, local=_local_key(), instance=self.instance
                        )
                        if got is None:
                            cur.execute(
                                self._q("SELECT holder, instance FROM {leases} WHERE run_id = %s"),
                                (run_id,),
                            )
                            who, inst = cur.fetchone() or ("", "")
                            holder = f"worker {who or ''}"
                            if who == self.worker and inst:  # one id, two processes
                                holder += f" in another process or store (instance {inst})"
                except psycopg.Error as exc:
                    raise self._fail(exc, conn, f"opening run {run_id!r}") from None
                if got is not None:
                    break
                if time.monotonic() >= deadline:
                    raise RunLocked(run_id, self.path(run_id), holder, timeout)
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            gen, _prev, adopted = got
            try:
                return PgJournal(self, run_id, reducer, conn, gen, adopted, key)
            except BaseException:  # e.g. CheckpointCorrupt: give the lease back at once
                with suppress(CheckpointError):
                    if adopted:
                        self._unbind(run_id, gen)
                    else:
                        self.release(run_id, self.worker, gen)
                raise
        except BaseException:
            conn.close()
            with _open_mutex:
                _open_here.discard(key)
            raise

    # -- reading -------------------------------------------------------------------------------

    def _load(
        self, cur: psycopg.Cursor[Any], run_id: str, reducer: Reducer, *, stop_on_damage: bool
    ) -> Loaded:
        """Rebuild the run's state from its newest snapshot and the records after it."""
        where = self.path(run_id)
        out = Loaded(state={})

        def hit(seq: int, reason: str) -> None:
            d = Damage(where, seq, f"record #{seq}: {reason}")
            if stop_on_damage:
                raise d.error()
            out.damage.append(d)

        cur.execute(
            self._q("SELECT seq, frame FROM {snapshots} WHERE run_id = %s ORDER BY seq DESC"),
            (run_id,),
        )
        for sseq, frame in cur.fetchall():
            got = _snapshot_of(bytes(frame), int(sseq), _STATE_CHECKS.get(reducer))
            if isinstance(got, str):
                d = Damage(where, int(sseq), f"snapshot at record #{sseq}: {got}")
                if stop_on_damage:
                    raise d.error()
                out.damage.append(d)
                continue
            out.state, out.generation, out.snapshot_bytes = got
            out.seq = out.snapshot_seq = int(sseq)
            break
        cur.execute(
            self._q(
                "SELECT seq, generation, frame FROM {records} "
                "WHERE run_id = %s AND seq > %s ORDER BY seq"
            ),
            (run_id, out.seq),
        )
        for seq, _gen, frame in cur:
            seq = int(seq)
            raw = bytes(frame)
            res = scan(raw)
            if res.stop != "end" or len(res.records) != 1:
                hit(seq, res.reason or "a row must hold exactly one framed record")
                break
            _off, kind, payload = res.records[0]
            if kind != KIND_RECORD:
                hit(seq, f"record kind {kind} in the journal")
                break
            try:
                s, g, d = _envelope(payload)
            except PayloadError as exc:
                hit(seq, f"record does not decode: {exc}")
                break
            if s != seq:
                hit(seq, f"its payload says record #{s}")
                break
            if s != out.seq + 1:
                hit(seq, f"records #{out.seq + 1}..#{s - 1} are missing")
                break
            if g < out.generation:
                hit(
                    seq,
                    f"written by generation {g} after generation {out.generation} "
                    "(a fenced-out writer)",
                )
                break
            try:
                reducer(out.state, d)
            except PayloadError as exc:
                hit(seq, f"does not fit the run: {exc}")
                break
            out.seq, out.generation = s, g
            out.bytes_since_snapshot += len(raw)
        if out.damage:
            out.lost_from_seq = out.seq + 1
        return out

    def read(self, run_id: str, *, reducer: Reducer = records_reducer) -> Loaded:
        """Load a run's state without taking its lease (for inspection)."""
        validate_run_id(run_id)
        with self._tx() as cur:
            cur.execute(self._q("SELECT 1 FROM {runs} WHERE run_id = %s"), (run_id,))
            if cur.fetchone() is None:
                raise RunNotFound(f"no run {run_id!r} in {self.root}")
            return self._load(cur, run_id, reducer, stop_on_damage=self.on_corrupt == "raise")

    def meta(self, run_id: str) -> dict[str, Any]:
        validate_run_id(run_id)
        with self._tx() as cur:
            cur.execute(self._q("SELECT meta FROM {runs} WHERE run_id = %s"), (run_id,))
            row = cur.fetchone()
        return _meta_of(row[0] if row else None)

    # -- listing, verifying, pruning -------------------------------------------------------------

    def runs(self) -> list[RunInfo]:
        with self._tx() as cur:
            cur.execute(
                self._q(
                    "SELECT r.run_id, r.status, r.size, extract(epoch FROM r.updated)::float8, "
                    "r.meta, coalesce(l.generation, 0), "
                    "coalesce(l.holder IS NOT NULL AND l.expires_at > now(), false) "
                    "FROM {runs} r LEFT JOIN {leases} l ON l.run_id = r.run_id ORDER BY r.run_id"
                )
            )
            rows = cur.fetchall()
        return [
            RunInfo(
                rid,
                self.path(rid),
                str(status),
                int(size),
                float(upd),
                int(gen),
                bool(locked),
                _meta_of(meta),
            )
            for rid, status, size, upd, meta, gen, locked in rows
        ]

    def verify(
        self, run_id: str | None = None, *, reducer: Reducer = records_reducer
    ) -> dict[str, tuple[list[Damage], list[Any]]]:
        """Check every row's checksum and envelope of one run or all: ``{run_id: (damage, [])}``
        (a database has no torn tails)."""
        ids = [run_id] if run_id is not None else self.run_ids()
        out: dict[str, tuple[list[Damage], list[Any]]] = {}
        with self._tx() as cur:
            for rid in ids:
                cur.execute(self._q("SELECT 1 FROM {runs} WHERE run_id = %s"), (rid,))
                if cur.fetchone() is None:
                    raise RunNotFound(f"no run {rid!r} in {self.root}")
                damage = self._load(cur, rid, reducer, stop_on_damage=False).damage
                where = self.path(rid)
                cur.execute(
                    self._q("SELECT seq, frame FROM {records} WHERE run_id = %s ORDER BY seq"),
                    (rid,),
                )
                for seq, frame in cur.fetchall():
                    res = scan(bytes(frame))
                    why = None
                    if res.stop != "end" or len(res.records) != 1:
                        why = res.reason or "a row must hold exactly one framed record"
                    else:
                        try:
                            _envelope(res.records[0][2])
                        except PayloadError as exc:
                            why = f"record does not decode: {exc}"
                    if why is not None:
                        d = Damage(where, int(seq), f"record #{seq}: {why}")
                        if d not in damage:
                            damage.append(d)
                out[rid] = (damage, [])
        return out

    def usage(self, *, refresh: bool = False) -> int:
        """Bytes the store's runs hold (records, snapshots, meta), for all writers together."""
        with self._tx() as cur:
            if refresh:
                cur.execute(
                    self._q(
                        "UPDATE {runs} r SET size = octet_length(coalesce(r.meta, ''::bytea)) "
                        "+ coalesce((SELECT sum(octet_length(frame)) FROM {records} x "
                        "WHERE x.run_id = r.run_id), 0) "
                        "+ coalesce((SELECT sum(octet_length(frame)) FROM {snapshots} x "
                        "WHERE x.run_id = r.run_id), 0)"
                    )
                )
            cur.execute(self._q("SELECT coalesce(sum(size), 0) FROM {runs}"))
            return int(cur.fetchone()[0])  # type: ignore[index]

    def remove(self, run_id: str) -> None:
        """Delete a run (its rows, its lease), in one transaction. Refuses a run whose lease is
        live."""
        self._remove(run_id, finished_only=False)

    def _remove(self, run_id: str, *, finished_only: bool, dead_only: bool = False) -> int:
        validate_run_id(run_id)
        with self._tx("removing a run") as cur:
            cur.execute(
                self._q("SELECT size, dead FROM {runs} WHERE run_id = %s FOR UPDATE"), (run_id,)
            )
            row = cur.fetchone()
            if row is None:
                raise RunNotFound(f"no run {run_id!r} in {self.root}")
            if dead_only and row[1] is None:
                raise RunStateError(self._not_dead(run_id))
            cur.execute(
                self._q(
                    "SELECT holder FROM {leases} WHERE run_id = %s "
                    "AND holder IS NOT NULL AND expires_at > now() FOR UPDATE"
                ),
                (run_id,),
            )
            live = cur.fetchone()
            if live is not None:
                raise RunLocked(run_id, self.path(run_id), f"worker {live[0]}")
            if finished_only and self._finished(cur, run_id) not in PRUNABLE_STATUSES:
                raise CheckpointError(f"run {run_id!r} is not finished (by its journal)")
            for t in ("records", "snapshots", "leases", "commits", "damaged", "runs"):
                cur.execute(
                    sql.SQL("DELETE FROM {} WHERE run_id = %s").format(self._t(t)), (run_id,)
                )
            return int(row[0])

    def _finished(self, cur: psycopg.Cursor[Any], run_id: str) -> str | None:
        def last_word(state: dict[str, Any], rec: Any) -> None:
            state["__finish__"] = (
                rec.get("status") if isinstance(rec, dict) and rec.get("t") == "finish" else None
            )

        try:
            loaded = self._load(cur, run_id, last_word, stop_on_damage=True)
        except CheckpointCorrupt:
            return None
        if loaded.seq == 0:
            return None
        st = loaded.state
        got = (
            st.get("__finish__")
            if "__finish__" in st
            else st.get("status")
            if "effects" in st
            else None
        )
        return got if isinstance(got, str) else None

    def prunable(self, *, now: float | None = None, need: int = 0) -> list[RunInfo]:
        """Finished runs (by their journal) that retention or a need for ``need`` bytes allows
        removing, oldest first; never one whose lease is live."""
        now = time.time() if now is None else now
        done = []
        candidates = [r for r in self.runs() if not r.locked]
        with self._tx() as cur:
            for r in candidates:
                status = self._finished(cur, r.run_id)
                if status in PRUNABLE_STATUSES:
                    done.append(replace(r, status=status))
        return pick_for_retention(done, self.retention, now, need)

    def prune(
        self, *, now: float | None = None, need: int = 0, dry_run: bool = False
    ) -> list[RunInfo]:
        removed = []
        for r in self.prunable(now=now, need=need):
            if not dry_run:
                try:
                    self._remove(r.run_id, finished_only=True)
                except (CheckpointError, OSError):
                    continue
            removed.append(r)
        return removed

    def _budget_check(self, cur: psycopg.Cursor[Any], n: int, where: str) -> int:
        """In a writer's transaction: 0 if ``n`` more bytes fit the budget, else the
        shortfall (the advisory lock makes the check and the write one step)."""
        if self.budget_bytes is None:
            return 0
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_BUDGET_KEY,))
        cur.execute(self._q("SELECT coalesce(sum(size), 0) FROM {runs}"))
        used = int(cur.fetchone()[0])  # type: ignore[index]
        return max(0, used + n - self.budget_bytes)

    def _budget_error(self, where: str, n: int) -> DiskBudgetExceeded:
        return DiskBudgetExceeded(
            where,
            n,
            f"the store's budget of {self.budget_bytes} bytes "
            f"(in use by all its writers: {self.usage()})",
        )


def _failpoint(name: str, where: str) -> None:
    """The file journal's failpoints at the same points of a row write (``journal.write``
    before, ``journal.after_write`` inside the transaction, ``journal.after_sync`` after the
    commit; ``atomic.*`` around meta's commit); an injected OSError is a write error."""
    try:
        failpoint(name, where)
    except OSError as exc:
        raise CheckpointWriteError(exc.errno or 5, where, f"at failpoint {name}") from None


_BOOT: list[str] = []


def _here() -> str | None:
    """``<boot id>:<pid namespace>``: this running kernel and pid namespace; None where /proc
    cannot tell."""
    try:
        if not _BOOT:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _BOOT.append(f.read().strip())
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{_BOOT[0]}:{ns}"


def _local_key(pid: int | None = None) -> str | None:
    """``<boot id>:<pid namespace>:<pid>@<start time>``: names one process on one running
    kernel (the start time tells a reused pid apart); None where /proc cannot tell (then a
    dead holder's lease is only taken once it expires)."""
    here = _here()
    if here is None:
        return None
    pid = os.getpid() if pid is None else pid
    start = _start_time(pid)
    return f"{here}:{pid}" + (f"@{start}" if start else "")


def _local_dead(key: str | None) -> bool:
    """True only if ``key`` names a process of this kernel boot and pid namespace that no longer
    exists, or whose pid now belongs to a process started at another time (never for another
    machine's or another container's process)."""
    if not key:
        return False
    where, _, rest = key.rpartition(":")
    pid_text, _, start = rest.partition("@")
    if where != _here():
        return False
    try:
        pid = int(pid_text)
        if pid != os.getpid():
            os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError):
        return False
    now = _start_time(pid)
    return bool(start and now and now != start)  # alive with another start: a reused pid


def _backend_of(cur: psycopg.Cursor[Any]) -> tuple[int, Any] | None:
    """This connection's server process: (pid, backend_start), to end it safely later (a
    reused pid has another start)."""
    cur.execute("SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()")
    row = cur.fetchone()
    return None if row is None else (int(row[0]), row[1])


def _meta_of(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        obj = decode_json(bytes(raw), max_depth=64)
    except PayloadError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _snapshot_of(frame: bytes, seq: int, check: Any) -> tuple[dict[str, Any], int, int] | str:
    res = scan(frame)
    if res.stop != "end" or len(res.records) != 1:
        return res.reason or "a snapshot must hold exactly one record"
    _off, kind, payload = res.records[0]
    if kind != KIND_SNAPSHOT:
        return f"record kind {kind} is not a snapshot"
    try:
        obj = decode_json(payload)
        if type(obj) is not dict or set(obj) != {"seq", "gen", "state"}:
            raise PayloadError("a snapshot is an object of exactly seq, gen and state")
        state, sseq, gen = obj["state"], obj["seq"], obj["gen"]
        if (
            type(sseq) is not int
            or type(gen) is not int
            or type(state) is not dict
            or not 0 <= gen <= MAX_SEQ
        ):
            raise PayloadError("its seq and gen must be integers and its state an object")
        if sseq != seq:
            raise PayloadError(f"it says seq {sseq}, its row says {seq}")
        if check is not None:
            check(state)
    except PayloadError as exc:
        return f"snapshot payload does not decode: {exc}"
    return state, gen, len(frame)


_DDL = (
    "CREATE TABLE IF NOT EXISTS {runs} ("
    " run_id text PRIMARY KEY,"
    " meta bytea,"
    " status text NOT NULL DEFAULT 'created',"
    " size bigint NOT NULL DEFAULT 0,"
    " created timestamptz NOT NULL DEFAULT now(),"
    " updated timestamptz NOT NULL DEFAULT now(),"
    " attempts integer NOT NULL DEFAULT 0,"
    " last_error text,"
    " dead text)",
    "CREATE TABLE IF NOT EXISTS {records} ("
    " run_id text NOT NULL,"
    " seq bigint NOT NULL,"
    " generation bigint NOT NULL,"
    " frame bytea NOT NULL,"
    " PRIMARY KEY (run_id, seq))",
    "CREATE TABLE IF NOT EXISTS {snapshots} ("
    " run_id text NOT NULL,"
    " seq bigint NOT NULL,"
    " generation bigint NOT NULL,"
    " frame bytea NOT NULL,"
    " PRIMARY KEY (run_id, seq))",
    "CREATE TABLE IF NOT EXISTS {leases} ("
    " run_id text PRIMARY KEY,"
    " holder text,"
    " generation bigint NOT NULL,"
    " expires_at timestamptz NOT NULL,"
    " local text)",
    "ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS local text",
    "ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS instance text",
    "CREATE TABLE IF NOT EXISTS {commits} ("
    " run_id text NOT NULL,"
    " generation bigint NOT NULL,"
    " token text NOT NULL,"
    " PRIMARY KEY (run_id, generation))",
    "CREATE TABLE IF NOT EXISTS {damaged} ("
    " run_id text NOT NULL,"
    " seq bigint NOT NULL,"
    " kind text NOT NULL,"
    " generation bigint NOT NULL,"
    " frame bytea NOT NULL,"
    " moved_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
    " reason text NOT NULL)",
    "CREATE INDEX IF NOT EXISTS damaged_run ON {damaged} (run_id, seq)",
)


class PgJournal:
    """An open run in a :class:`PostgresStore`: the lease held (and renewed by a heartbeat
    thread), records appended as rows, each write fenced by the lease's generation."""

    def __init__(
        self,
        store: PostgresStore,
        run_id: str,
        reducer: Reducer,
        conn: psycopg.Connection[Any],
        generation: int,
        adopted: bool,
        key: tuple[str, str, str],
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.folder = store.path(run_id)  # for messages, like the file journal's folder
        self.generation = generation
        self.adopted = adopted
        self.snapshot_error: BaseException | None = None
        self._broken: BaseException | None = None
        self._reducer = reducer
        self._conn: psycopg.Connection[Any] | None = conn
        self._key = key
        self._unsynced = 0
        self._lost = threading.Event()
        self._stop = threading.Event()
        dur = store.durability
        self._sync_every = {"always": 1, "batch": dur.every}.get(dur.mode, 0)
        self._backend: tuple[int, Any] | None = None  # (pid, backend_start) of the connection
        try:
            with conn.transaction(), conn.cursor() as cur:
                loaded = store._load(
                    cur, run_id, reducer, stop_on_damage=store.on_corrupt == "raise"
                )
                self._backend = _backend_of(cur)
        except psycopg.Error as exc:
            raise store._fail(exc, conn, f"loading run {run_id!r}") from None
        self.state: dict[str, Any] = loaded.state
        self.seq = loaded.seq
        self._since_snapshot = loaded.bytes_since_snapshot
        self._snapshot_size = loaded.snapshot_bytes
        self._snapshot_due = self._due()
        self.recovery = Recovery(None, tuple(loaded.damage), loaded.lost_from_seq, ())
        if loaded.damage:  # rollback: the valid prefix becomes a snapshot, the rest moves aside
            moved = self._write_snapshot(drop_after=True, reason=str(loaded.damage[0]))
            self.recovery = replace(
                self.recovery,
                moved_aside=tuple(
                    f"{self.folder} {kind} #{seq} (to table {store.schema}.damaged)"
                    for kind, seq in moved
                ),
            )
        self._heart = threading.Thread(
            target=self._heartbeat, daemon=True, name=f"crashpoint-lease-{run_id}"
        )
        self._heart.start()

    # -- the lease -------------------------------------------------------------------------------

    def _heartbeat(self) -> None:
        store = self.store
        instance = store.instance
        conn: _Conn | None = None
        while not self._stop.wait(store.heartbeat_seconds):
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = store._raw_connect(autocommit=True)
                cur = conn.execute(
                    store._q(
                        "UPDATE {leases} SET expires_at = now() + make_interval(secs => %s) "
                        "WHERE run_id = %s AND holder = %s AND generation = %s "
                        "AND instance = %s RETURNING 1"
                    ),
                    (store.lease_seconds, self.run_id, store.worker, self.generation, instance),
                )
                if cur.fetchone() is None:
                    self._lost.set()
                    break
            except (psycopg.Error, CheckpointError):
                if conn is not None:
                    conn.close()
                conn = None  # try again next beat; the writes' fencing is what protects
        if conn is not None:
            conn.close()

    def _fenced(self, cur: psycopg.Cursor[Any], token: str) -> None:
        """In the write's transaction: hold the lease row (FOR SHARE: a take-over waits for
        this write) and check that its generation and process instance are still ours, else
        LeaseLost; and record ``token`` as this generation's last commit (read back if the
        commit's acknowledgement is lost)."""
        store = self.store
        instance = store.instance
        cur.execute(
            store._q(
                "WITH l AS (SELECT holder, generation, instance FROM {leases} "
                "WHERE run_id = %(r)s FOR SHARE), "
                "t AS (INSERT INTO {commits} (run_id, generation, token) "
                "SELECT %(r)s, %(g)s, %(t)s FROM l WHERE l.generation = %(g)s "
                "AND l.holder = %(w)s AND l.instance = %(i)s "
                "ON CONFLICT (run_id, generation) DO UPDATE SET token = EXCLUDED.token) "
                "SELECT holder, generation, instance FROM l"
            ),
            {"r": self.run_id, "g": self.generation, "t": token, "w": store.worker, "i": instance},
        )
        row = cur.fetchone()
        if (
            row is None
            or int(row[1]) != self.generation
            or row[0] != store.worker
            or row[2] != instance
        ):
            holder = "" if row is None else str(row[0] or "")
            current = 0 if row is None else int(row[1])
            if row is not None and current == self.generation and holder == store.worker:
                holder = (
                    f"worker {holder} in another process or store (instance {row[2] or 'none'})"
                )
            raise LeaseLost(
                self.run_id,
                self.folder,
                holder and (holder if holder.startswith("worker ") else f"worker {holder}"),
                0.0,
                self.generation,
                current,
            )

    def _resolve(self, token: str) -> bool | None:
        """After a commit whose acknowledgement was lost: on a new connection, end the old
        backend (if it still runs: a commit not yet received is then rolled back), wait for its
        row locks, and read this generation's commit token. True: the write committed; False:
        it did not (either way the new connection replaces the old: the journal goes on, or at
        least releases its lease, on it); None: the database cannot be reached to tell."""
        store = self.store
        try:
            conn = store._raw_connect()
        except CheckpointError:
            return None
        try:
            if self._backend is not None:
                try:  # the same role may end its own backends; if not, the wait below does it
                    with conn.transaction(), conn.cursor() as cur:
                        cur.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE pid = %s AND backend_start = %s",
                            self._backend,
                        )
                except psycopg.OperationalError:
                    raise
                except psycopg.Error:
                    pass
            with conn.transaction(), conn.cursor() as cur:
                # the old transaction held this row FOR SHARE: this waits until it is over (ended
                # above, or by the server's idle-in-transaction timeout)
                cur.execute(
                    store._q("SELECT 1 FROM {leases} WHERE run_id = %s FOR UPDATE"),
                    (self.run_id,),
                )
                cur.execute(
                    store._q("SELECT token FROM {commits} WHERE run_id = %s AND generation = %s"),
                    (self.run_id, self.generation),
                )
                row = cur.fetchone()
                backend = _backend_of(cur)
        except psycopg.Error:
            conn.close()
            return None
        old, self._conn, self._backend = self._conn, conn, backend  # the journal goes on here
        if old is not None:
            old.close()
        return row is not None and row[0] == token

    @contextmanager
    def _write(self, what: str, *, durable: bool | None = None) -> Iterator[psycopg.Cursor[Any]]:
        if self._broken is not None:
            if isinstance(self._broken, LeaseLost):
                raise self._broken
            raise CheckpointError(
                f"run {self.run_id!r}: the journal stopped at an earlier "
                f"error ({self._broken}); reopen"
            )
        if self._conn is None:
            raise CheckpointError(f"run {self.run_id!r} is closed")
        conn = self._conn
        token = secrets.token_hex(8)
        committing = False
        try:
            with conn.transaction(), conn.cursor() as cur:
                if not (self.store.durability.mode == "always" if durable is None else durable):
                    cur.execute("SET LOCAL synchronous_commit = off")
                self._fenced(cur, token)
                yield cur
                committing = True  # what fails from here on is the commit itself
        except LeaseLost as exc:
            self._broken = exc
            raise
        except psycopg.errors.UniqueViolation:
            err = LeaseLost(self.run_id, self.folder, "another writer", 0.0, self.generation, 0)
            self._broken = err
            raise err from None
        except psycopg.OperationalError as exc:
            outcome = "it was not stored"
            if committing and (conn.broken or conn.closed):
                # the commit was sent and its answer lost: whether it landed is unknown until
                # its token is read back; never guess
                got = self._resolve(token)
                if got:
                    return  # it landed: the write is done, on a new connection
                outcome = (
                    "it was not stored (checked after reconnecting: its commit token is absent)"
                    if got is False
                    else "whether it was stored is unknown (the database could not be reached "
                    "to check); reopen the run to see"
                )
            self._broken = exc
            failed = self.store._fail(exc, conn, f"{what} in run {self.run_id!r}", outcome=outcome)
            if isinstance(failed, StoreTimeout):
                raise failed from None
            raise CheckpointWriteError(
                5,
                self.folder,
                f"{what}: the database connection failed, {outcome}: "
                f"{self.store._redact(str(exc).strip())}",
            ) from None
        except psycopg.Error as exc:
            self._broken = exc
            raise self.store._error(exc, f"{what} in run {self.run_id!r}") from None

    def append(self, data: Any, *, redact: bool = True, sync: bool | None = None) -> int:
        """Append one record (a row), fenced by the lease; return its sequence number once
        committed (with durability other than ``always``, committed asynchronously)."""
        store = self.store
        if redact:
            data = store.redactor.redact(data)
        seq = self.seq + 1
        payload = b'{"d":%b,"g":%d,"s":%d}' % (encode_json(data), self.generation, seq)
        frame = encode(payload)
        n = len(frame)
        self._room(n)
        _failpoint("journal.write", self.folder)
        with self._write("appending a record") as cur:
            if store._budget_check(cur, n, self.folder):
                raise store._budget_error(self.folder, n)
            cur.execute(  # the row and the run's size in one round trip
                store._q(
                    "WITH i AS (INSERT INTO {records} (run_id, seq, generation, frame) "
                    "VALUES (%(r)s, %(s)s, %(g)s, %(f)s)) "
                    "UPDATE {runs} SET size = size + %(n)s, updated = now() WHERE run_id = %(r)s"
                ),
                {"r": self.run_id, "s": seq, "g": self.generation, "f": frame, "n": n},
            )
            _failpoint("journal.after_write", self.folder)  # in the transaction, uncommitted
        store.bytes_written += n
        _failpoint("journal.after_sync", self.folder)  # committed
        if sync is None:
            every = self._sync_every
            sync = every == 1 or (every > 1 and self._unsynced + 1 >= every)
        self._unsynced = 0 if sync and store.durability.mode == "always" else self._unsynced + 1
        if sync and store.durability.mode != "always":
            self.sync()
        self.seq = seq
        self._since_snapshot += n
        self._reducer(self.state, data)
        if self._since_snapshot >= self._snapshot_due:
            self.snapshot(required=False)
        return seq

    def _room(self, n: int) -> None:
        """With a budget: prune finished runs first if ``n`` bytes would not fit."""
        store = self.store
        if store.budget_bytes is None:
            return
        short = store.usage() + n - store.budget_bytes
        if short > 0:
            store.prune(need=short)

    def sync(self) -> None:
        """Make every appended record durable now: a synchronous commit flushes the WAL up to
        it, and with it every earlier asynchronous commit."""
        if self._conn is None or self._broken is not None or not self._unsynced:
            return
        with self._write("syncing", durable=True) as cur:
            cur.execute(
                self.store._q("UPDATE {runs} SET updated = now() WHERE run_id = %s"), (self.run_id,)
            )
        self._unsynced = 0

    @property
    def unsynced(self) -> int:
        return self._unsynced

    def _due(self) -> float:
        pol = self.store.snapshots
        if not pol.enabled:
            return float("inf")
        return max(pol.min_bytes, int(pol.ratio * self._snapshot_size))

    def snapshot(self, *, required: bool = True) -> None:
        """Write the state as a snapshot row and delete the records and snapshots it covers."""
        try:
            self._write_snapshot()
            self.snapshot_error = None
        except (DiskBudgetExceeded, CheckpointWriteError) as exc:
            if required:
                raise
            self.snapshot_error = exc

    def _write_snapshot(
        self, *, drop_after: bool = False, reason: str = ""
    ) -> list[tuple[str, int]]:
        """Write the state as a snapshot row; delete the records and older snapshots it covers.

        ``drop_after`` (a rollback past damage, ``on_corrupt="rollback"``): the records and
        snapshots past the valid prefix are not deleted but moved, bytes intact, to the
        ``damaged`` table (with ``reason``), in the same transaction; return them as
        ``[(kind, seq)]``. Nothing a writer was told is stored is ever deleted."""
        store = self.store
        frame = encode(
            encode_json({"seq": self.seq, "gen": self.generation, "state": self.state}),
            KIND_SNAPSHOT,
        )
        moved: list[tuple[str, int]] = []
        with self._write("writing a snapshot") as cur:
            if store._budget_check(cur, len(frame), self.folder) and not drop_after:
                raise store._budget_error(self.folder, len(frame))
            freed = 0
            if drop_after:
                cur.execute(
                    store._q(
                        "WITH m AS (DELETE FROM {records} WHERE run_id = %(r)s AND seq > %(s)s "
                        "RETURNING seq, generation, frame), "
                        "n AS (DELETE FROM {snapshots} WHERE run_id = %(r)s AND seq >= %(s)s "
                        "AND frame <> %(f)s RETURNING seq, generation, frame), "
                        "i AS (INSERT INTO {damaged} (run_id, seq, kind, generation, frame, "
                        "reason) SELECT %(r)s, seq, 'record', generation, frame, %(why)s FROM m "
                        "UNION ALL SELECT %(r)s, seq, 'snapshot', generation, frame, %(why)s "
                        "FROM n RETURNING kind, seq, octet_length(frame) AS n) "
                        "SELECT kind, seq, n FROM i ORDER BY seq, kind"
                    ),
                    {
                        "r": self.run_id,
                        "s": self.seq,
                        "f": frame,
                        "why": reason or "rolled back past damage",
                    },
                )
                for kind, seq, n in cur.fetchall():
                    moved.append((str(kind), int(seq)))
                    freed += int(n)
            cur.execute(
                store._q(
                    "INSERT INTO {snapshots} (run_id, seq, generation, frame) VALUES "
                    "(%s, %s, %s, %s) ON CONFLICT (run_id, seq) DO UPDATE SET "
                    "generation = EXCLUDED.generation, frame = EXCLUDED.frame"
                ),
                (self.run_id, self.seq, self.generation, frame),
            )
            cur.execute(
                store._q(
                    "WITH a AS (DELETE FROM {records} WHERE run_id = %s AND "
                    "NOT %s AND seq <= %s RETURNING octet_length(frame) AS n), "
                    "b AS (DELETE FROM {snapshots} WHERE run_id = %s AND seq < %s "
                    "RETURNING octet_length(frame) AS n) "
                    "SELECT coalesce((SELECT sum(n) FROM a), 0) "
                    "+ coalesce((SELECT sum(n) FROM b), 0)"
                ),
                (self.run_id, drop_after, self.seq, self.run_id, self.seq),
            )
            freed += int(cur.fetchone()[0])  # type: ignore[index]
            cur.execute(
                store._q(
                    "UPDATE {runs} SET size = greatest(0, size + %s - %s), "
                    "updated = now() WHERE run_id = %s"
                ),
                (len(frame), freed, self.run_id),
            )
        store.bytes_written += len(frame)
        self._snapshot_size = len(frame)
        self._since_snapshot = 0
        self._snapshot_due = self._due()
        return moved

    # -- meta and lifecycle ----------------------------------------------------------------------

    def set_meta(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into the run's meta (its ``status`` also becomes the row's status,
        which :meth:`PostgresStore.claim` reads). Fenced like a record."""
        store = self.store
        with self._write("writing meta") as cur:
            cur.execute(store._q("SELECT meta FROM {runs} WHERE run_id = %s"), (self.run_id,))
            row = cur.fetchone()
            old = bytes(row[0]) if row and row[0] is not None else b""
            meta = _meta_of(old or None)
            meta.update(fields)
            meta.setdefault("run_id", self.run_id)
            meta.setdefault("created", time.time())
            meta["updated"] = time.time()
            data = encode_json(store.redactor.redact(meta))
            if store._budget_check(cur, len(data) - len(old), self.folder) and len(data) > len(old):
                raise store._budget_error(self.folder, len(data))
            cur.execute(
                store._q(
                    "UPDATE {runs} SET meta = %s, status = coalesce(%s, status), "
                    "size = greatest(0, size + %s), updated = now() WHERE run_id = %s"
                ),
                (
                    data,
                    str(meta["status"]) if "status" in meta else None,
                    len(data) - len(old),
                    self.run_id,
                ),
            )
            _failpoint("atomic.after_temp", self.folder)  # written, not committed
        _failpoint("atomic.after_rename", self.folder)  # committed
        store.bytes_written += len(data)
        return meta

    @property
    def meta(self) -> dict[str, Any]:
        return self.store.meta(self.run_id)

    @property
    def closed(self) -> bool:
        return self._conn is None

    @property
    def lease_lost(self) -> bool:
        """True once a heartbeat found the lease taken by someone else."""
        return self._lost.is_set() or isinstance(self._broken, LeaseLost)

    def close(self) -> None:
        """Sync a pending batch, stop the heartbeat, release the lease (one adopted from a
        fleet worker's claim is handed back instead: that worker releases it), close the
        connection."""
        if self._conn is None:
            return
        try:
            if self._broken is None and self.store.durability.mode == "batch":
                self.sync()
        finally:
            self._stop.set()
            conn, self._conn = self._conn, None
            store = self.store
            try:
                if not self.lease_lost and not conn.broken:
                    with conn.transaction():
                        conn.execute(
                            store._q(
                                # adopted: hand it back to the worker that claimed it (it renews
                                # and releases it); else release it
                                "UPDATE {leases} SET instance = NULL, local = NULL, "
                                "holder = CASE WHEN %s THEN holder END, "
                                "expires_at = CASE WHEN %s THEN expires_at ELSE now() END "
                                "WHERE run_id = %s AND holder = %s AND generation = %s "
                                "AND instance = %s"
                            ),
                            (
                                self.adopted,
                                self.adopted,
                                self.run_id,
                                store.worker,
                                self.generation,
                                store.instance,
                            ),
                        )
            except psycopg.Error:
                pass  # the lease expires on its own (or, adopted, its worker releases it)
            finally:
                conn.close()
                with _open_mutex:
                    _open_here.discard(self._key)
                self._heart.join(timeout=5)

    def __enter__(self) -> PgJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<PgJournal {self.run_id!r} seq={self.seq} gen={self.generation}>"
