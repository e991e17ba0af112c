"""Backing services: the PostgreSQL an agent gets as ``{postgres}``, and the ``backing`` faults.

:class:`PostgresService` is the runner's throw-away PostgreSQL (when the agent uses
``{postgres}``) behind a :class:`~crashpoint.faults.TcpProxy` of its own: each trial (and the
golden run) gets a database of its own, named by its ``{trial_id}`` and owned by an
unprivileged role; the agent gets the DSN through the proxy without a password (``{postgres}``,
``$CRASHPOINT_POSTGRES``) and the password in its environment only (``$PGPASSWORD``, which
libpq and psycopg read). The server is started at the runner's first golden run (``initdb``: a few
seconds) and stopped, its folder removed, when the runner closes; or it is a
:class:`SharedPostgres` that several runners share (the pytest plugin's, one per scenario file),
stopped by its owner, and the runner closes only its proxy and drops its last database.

:class:`Outage` is one ``backing`` fault of an attempt: at the planned boundary (the ledger
calls :meth:`Outage.before_reply` before it answers the agent's event, so the outage is in place
before the agent goes on) or instant, it takes the SQLite write lock, shuts PostgreSQL down, or
partitions the proxy, for ``for`` seconds or until the attempt ends; with ``then: kill`` the
agent is killed at its first step report after that (:meth:`Outage.kill_when`), so the next
attempt shows whether the step it reported completed was durable. :meth:`Outage.verdict` says
whether the outage took effect: in place while the agent was inside a step, and met by it (a
refused SQLite lock request in its trace; a connection cut, refused or left hanging).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from crashpoint._placeholders import fill
from crashpoint.errors import StandInError
from crashpoint.faults import (
    SqliteLock,
    TcpProxy,
    find_sqlite_database,
    sqlite_lock_refusals,
)
from crashpoint.harness._spec import Fault, event_name
from crashpoint.harness._standins import PostgresServer, postgres_unavailable

__all__ = ["AGENT_ROLE", "Outage", "PostgresService", "SharedPostgres"]

#: The role an agent logs in as on the harness's PostgreSQL (no superuser, owns its database).
AGENT_ROLE = "crashpoint_agent"
#: How long the harness waits to take an SQLite write lock the agent holds itself.
LOCK_WAIT = 1.0


class SharedPostgres:
    """One throw-away PostgreSQL server with the agent's role, which the runners of several
    campaigns share (the pytest plugin makes one per scenario file): ``initdb`` once, not once
    per family. Each runner keeps its own proxy (:class:`PostgresService`) and each trial its
    own database, so what one trial does to its data or its connections touches no other. The
    server starts at the first runner's first golden run; :meth:`close` stops it and removes
    its folder (the owner calls it: a runner never does)."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.server: PostgresServer | None = None
        self.password = secrets.token_urlsafe(24)  # the agent role's; URL- and SQL-safe
        self.lock = threading.Lock()  # held to restart the server after an outage
        self.starts = 0  # how many servers it started (1, unless it was closed and reused)
        # an owner that never closes it: stopped when it is collected, or at exit
        weakref.finalize(self, self._stack.close)

    def start(self) -> PostgresServer:
        """The server, started once (StandInError saying why it cannot be)."""
        with self.lock:
            if self.server is not None:
                return self.server
            reason = postgres_unavailable()
            if reason:
                raise StandInError(f"the agent uses {{postgres}}, but {reason}")
            try:
                # fsync off (the server's host never crashes here: a shutdown loses nothing the
                # OS holds), commits synchronous: an acknowledged commit is in the WAL the
                # restart replays, so a write the agent saw committed is never lost by the harness
                server = self._stack.enter_context(
                    PostgresServer.start(fsync=False, settings={"synchronous_commit": "on"})
                )
                server.psql(
                    f"CREATE ROLE {AGENT_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
                    f"PASSWORD '{self.password}'",
                    secret=True,
                )
            except BaseException:
                self._stack.close()
                raise
            self.server = server
            self.starts += 1
            return server

    def close(self) -> None:
        """Stop the server (its folder removed): nothing is left running."""
        with self.lock:
            self._stack.close()
            self.server = None

    def __enter__(self) -> SharedPostgres:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PostgresService:
    """The runner's PostgreSQL for agents that use ``{postgres}`` (see the module doc): a
    server (its own, or a :class:`SharedPostgres` given) behind a proxy of the runner's."""

    def __init__(self, shared: SharedPostgres | None = None) -> None:
        self._own = shared is None
        self.shared = shared if shared is not None else SharedPostgres()
        self._stack = contextlib.ExitStack()
        self.proxy: TcpProxy | None = None
        self.database = ""

    @property
    def server(self) -> PostgresServer | None:
        return self.shared.server if self.proxy is not None else None

    @property
    def password(self) -> str:
        return self.shared.password

    def start(self) -> PostgresService:
        """Start the server (once) and this runner's proxy; StandInError saying why it cannot."""
        if self.proxy is not None:
            return self
        try:
            server = self.shared.start()
            self.proxy = self._stack.enter_context(TcpProxy("127.0.0.1", server.port))
        except BaseException:
            self.close()
            raise
        return self

    def open_database(self, name: str) -> str:
        """A fresh database ``name`` (a trial's id) for the agent, the one before dropped;
        its DSN through the proxy, without the password."""
        self.ensure_up()
        server = self.server
        assert server is not None
        self.drop_database()
        server.psql(f'CREATE DATABASE "{name}" OWNER {AGENT_ROLE}')
        self.database = name
        return self.dsn()

    def drop_database(self) -> None:
        server = self.server
        if server is None or not self.database:
            return
        name, self.database = self.database, ""
        self.ensure_up()
        with contextlib.suppress(StandInError):
            server.drop_database(name)

    def dsn(self) -> str:
        """``{postgres}``: the agent's database through the proxy; no password in it."""
        if self.proxy is None or not self.database:
            return ""
        return f"postgresql://{AGENT_ROLE}@127.0.0.1:{self.proxy.port}/{self.database}"

    def env(self) -> dict[str, str]:
        """What an attempt's environment gets: the DSN and the password (never argv)."""
        if not self.database:
            return {}
        return {"CRASHPOINT_POSTGRES": self.dsn(), "PGPASSWORD": self.password}

    def ensure_up(self) -> None:
        """After an outage: the server running (restarted if it is down) and the proxy healed,
        forwarding to it."""
        with self.shared.lock:
            server, proxy = self.shared.server, self.proxy
            if server is None or proxy is None:
                return
            if not server.running:
                server.relaunch()
            proxy.retarget("127.0.0.1", server.port)
            if proxy.partitioned:
                proxy.heal()

    def close(self) -> None:
        """Drop the runner's last database and stop its proxy; the server too if it is the
        runner's own (a shared one is its owner's to stop)."""
        if not self._own:
            with contextlib.suppress(StandInError, OSError):
                self.drop_database()  # a shared server keeps no trial's data
        self._stack.close()
        self.proxy = None
        if self._own:
            self.shared.close()


def _secs(v: Any, default: float) -> float:
    return float(v) if v is not None else default


@dataclass
class Outage:
    """One ``backing`` fault of attempt ``attempt`` (see the module doc). ``roots``: the
    trial's folders (an SQLite path's placeholders); ``service``: the runner's PostgreSQL
    (None if the agent does not use it); ``trace``: where the attempt's lock requests are
    traced (SQLite; None with ``untraced`` saying why)."""

    index: int
    fault: Fault
    attempt: int
    roots: dict[str, str]
    service: PostgresService | None
    trace: str | None = None
    untraced: str = ""
    began: float = 0.0  # time.time() when the outage was in place (0: never)
    began_mono: float = 0.0
    ended: float = 0.0
    where: str = ""
    why_not: str = ""
    database: str = ""  # SQLite: the file locked
    contact: dict[str, int] = field(default_factory=dict)  # PostgreSQL: cut, refused, hung
    killed: str = ""  # then: kill: the event it was killed at
    trouble: str = ""  # the service did not come back after the outage
    _lock: SqliteLock | None = None
    _timer: threading.Timer | None = None
    _base: dict[str, int] = field(default_factory=dict)
    _mutex: threading.Lock = field(default_factory=threading.Lock)
    _done: bool = False

    @property
    def service_name(self) -> str:
        return str(self.fault.arg("service", "sqlite"))

    @property
    def action(self) -> str:
        return str(self.fault.arg("do", "lock" if self.service_name == "sqlite" else "restart"))

    @property
    def seconds(self) -> float:
        return _secs(self.fault.arg("for"), 1.0)

    # -- when: called by the ledger (before it answers an event) ----------------------------

    def before_reply(self, ev: dict[str, Any]) -> None:
        """The ledger is about to answer ``ev``: begin here if it is the planned event (the
        agent goes on only once the outage is in place); at the attempt's first event, start
        the clock of an outage planned at an instant."""
        if int(ev.get("attempt", 0)) != self.attempt or self.began or self._done:
            return
        f = self.fault
        if f.arg("op"):
            if (
                ev.get("op") == f.arg("op")
                and event_name(ev) == f.arg("name")
                and int(ev.get("nth", 1)) == int(f.arg("nth", 1))
            ):
                nth = int(f.arg("nth", 1))
                self.begin(
                    f"attempt {self.attempt} event #{ev.get('i')} {ev['op']}:{event_name(ev)}"
                    + (f" #{nth}" if nth > 1 else "")
                )
        elif int(ev.get("ai", 0)) == 0 and self._timer is None:
            at = _secs(f.arg("seconds"), 0.0)
            self._timer = threading.Timer(
                at, self.begin, (f"{at:.3f}s after the first event of attempt {self.attempt}",)
            )
            self._timer.daemon = True
            self._timer.start()

    def kill_when(self, ev: dict[str, Any]) -> str:
        """For the ledger (under its lock): with ``then: kill``, kill before the attempt's first
        step report after the outage began ("backing"), else ""."""
        if (
            self.fault.arg("then", "kill") != "kill"
            or not self.began
            or self.killed
            or int(ev.get("attempt", 0)) != self.attempt
            or ev.get("op") != "step_completed"
        ):
            return ""
        self.killed = f"event #{ev.get('i')} step_completed:{event_name(ev)}"
        return "backing"

    # -- the outage ---------------------------------------------------------------------------

    def begin(self, where: str) -> None:
        """Put the outage in place (synchronously), and end it ``for`` seconds later."""
        with self._mutex:
            if self.began or self._done:
                return
            why = self._start()
            if why:
                self.why_not = f"at {where}: {why}"
                self._done = True
                return
            self.began, self.began_mono, self.where = time.time(), time.monotonic(), where
            self._timer = threading.Timer(self.seconds, self.end)
            self._timer.daemon = True
            self._timer.start()

    def _start(self) -> str:
        """Start the outage; "" once it is in place, else why it could not be."""
        if self.service_name == "sqlite":
            pattern = fill(str(self.fault.arg("path", "{state_dir}/**")), self.roots)
            db = find_sqlite_database(pattern, list(self.roots.values()))
            if db is None:
                return (
                    f"no SQLite database matched {self.fault.arg('path', '{state_dir}/**')} "
                    "(the agent had not created it yet, or it is elsewhere: set `path`)"
                )
            self.database = db
            self._lock = SqliteLock(db, str(self.fault.arg("lock", "immediate")))
            return self._lock.acquire(LOCK_WAIT)
        svc = self.service
        if svc is None or svc.server is None or svc.proxy is None:
            return (
                "the agent does not use {postgres} (the harness's PostgreSQL, the only one "
                "it can restart or partition): give it {postgres} or $CRASHPOINT_POSTGRES"
            )
        proxy = svc.proxy
        self._base = {"dropped": proxy.dropped, "cut": proxy.cut, "hung": proxy.hung}
        if self.action == "partition":
            proxy.partition(str(self.fault.arg("how", "reset")))  # type: ignore[arg-type]
        else:
            self._base["live"] = proxy.live
            svc.server.shutdown(str(self.fault.arg("shutdown", "immediate")))
        return ""

    def end(self) -> None:
        """End the outage (idempotent): release the lock, heal the proxy, start the server."""
        timer = self._timer
        if timer is not None and threading.current_thread() is not timer:
            timer.cancel()
        with self._mutex:
            if self._done:
                return
            self._done = True
            if not self.began:
                return
            if self._lock is not None:
                self._lock.release()
            svc = self.service
            if svc is not None and svc.proxy is not None:
                p = svc.proxy
                cut = p.cut - self._base.get("cut", 0)  # by a partition (a reset one counts
                dropped = p.dropped - self._base.get("dropped", 0)  # them as dropped too)
                self.contact = {
                    "cut": self._base.get("live", 0) + cut,
                    "refused": dropped - (cut if self.fault.arg("how", "reset") == "reset" else 0)
                    if self.action == "partition"
                    else dropped,
                    "hung": p.hung - self._base.get("hung", 0),
                }
                try:  # (a restart: the server accepts again when this returns)
                    svc.ensure_up()
                except StandInError as exc:  # (in a timer's thread: said, never raised)
                    self.trouble = f"PostgreSQL did not come back: {exc}"
            self.ended = time.time()

    # -- did it take effect ------------------------------------------------------------------

    def _in_step(self, events: list[dict[str, Any]], attempt_end: float) -> str:
        """The step the agent was inside while the outage was in place ("" if none): one
        started before the outage ended and not completed before it began."""
        t0 = self.began_mono
        t1 = t0 + (self.ended - self.began)
        open_: dict[str, list[float]] = {}
        spans: list[tuple[str, float, float]] = []
        for e in events:
            if int(e.get("attempt", 0)) != self.attempt or "t" not in e:
                continue
            name = event_name(e)
            if e["op"] == "step_started":
                open_.setdefault(name, []).append(float(e["t"]))
            elif e["op"] == "step_completed" and open_.get(name):
                spans.append((name, open_[name].pop(), float(e["t"])))
        spans += [(n, s, attempt_end) for n, starts in open_.items() for s in starts]
        for name, s, c in sorted(spans, key=lambda x: x[1]):
            if s <= t1 and c >= t0:
                return repr(name)
        named = any(
            e["op"] == "step_started" for e in events if int(e.get("attempt", 0)) == self.attempt
        )
        if not named and attempt_end >= t0:  # an agent that names no step: its whole run
            return "none named: the attempt was at work"
        return ""

    def verdict(self, events: list[dict[str, Any]], attempt_end: float) -> tuple[bool, str, str]:
        """(fired, where, why not): the outage was in place while the agent was inside a step
        and the agent met it (see the module doc)."""
        what = self._what()
        if not self.began:
            if self.why_not:
                return False, "", f"the {what} could not begin {self.why_not}"
            f = self.fault
            nth = int(f.arg("nth", 1))
            planned = (
                f"{f.arg('op')}:{f.arg('name')}" + (f" #{nth}" if nth > 1 else "")
                if f.arg("op")
                else f"{_secs(f.arg('seconds'), 0.0):.3f}s after its first event"
            )
            mine = [e for e in events if int(e.get("attempt", 0)) == self.attempt]
            return (
                False,
                "",
                f"attempt {self.attempt} ended after {len(mine)} event(s) before the {what} was "
                f"planned to begin ({planned})"
                + ("" if f.arg("op") else ": lower `within` to about how long the agent works"),
            )
        held = max(0.0, self.ended - self.began)
        short = " (cut short: the attempt ended)" if held < 0.9 * self.seconds else ""
        where = f"{what} at {self.where}, for {held:.2f}s{short}"
        if self.trouble:
            where += f" ({self.trouble})"
        step = self._in_step(events, attempt_end)
        if not step:
            return (
                False,
                where,
                f"{where}, but attempt {self.attempt} was inside no step meanwhile (it had "
                "ended, or was between steps)",
            )
        where += f", inside step {step}"
        if self.service_name == "sqlite":
            name = os.path.basename(self.database)
            if self.trace is None:  # no evidence either way: a write then could not succeed
                return True, f"{where} (its lock requests not traced: {self.untraced})", ""
            refused = sqlite_lock_refusals(self.trace, self.database, self.began, self.ended)
            if not refused:
                return (
                    False,
                    where,
                    f"{where}, but the agent made no write to {name} meanwhile (no refused "
                    "lock request in its trace): lock the database it writes in each step "
                    "(`path`), or make the outage longer (`for`)",
                )
            n = len(refused)
            return True, f"{where}: {n} lock request(s) of the agent on {name} refused", ""
        c = self.contact
        met = [
            f"{n} connection(s) {how}"
            for n, how in (
                (c.get("cut", 0), "cut"),
                (c.get("refused", 0), "refused"),
                (c.get("hung", 0), "left hanging"),
            )
            if n
        ]
        if not met:
            return (
                False,
                where,
                f"{where}, but the agent had no connection open and opened none meanwhile",
            )
        return True, f"{where}: {', '.join(met)}", ""

    def _what(self) -> str:
        if self.service_name == "sqlite":
            return f"SQLite {self.fault.arg('lock', 'immediate')} lock"
        if self.action == "partition":
            return f"PostgreSQL partition ({self.fault.arg('how', 'reset')})"
        return f"PostgreSQL restart ({self.fault.arg('shutdown', 'immediate')} shutdown)"

    def note(self) -> dict[str, Any]:
        """What a check and the report keep of it (``facts.extra['backing']``)."""
        return {
            "attempt": self.attempt,
            "service": self.service_name,
            "do": self.action,
            "what": self._what(),
            "where": self.where,
            "seconds": round(max(0.0, self.ended - self.began), 3) if self.began else 0.0,
            "database": os.path.basename(self.database),
            "killed": self.killed,
        }
