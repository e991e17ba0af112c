"""The ledger: the outside world and the kill switch, living in the harness process.

One ledger per trial. It listens on a Unix socket (the probe's wire protocol, in a 0700 folder)
and, optionally, on a loopback HTTP port (``http://127.0.0.1:PORT``): effects as
``POST <base>/effects/<kind>`` with an ``Idempotency-Key`` header, step events as
``POST <base>/events/<op>``, and the stand-in services (``<base>/http/...``, the LLM's
``<base>/v1/...``; see :mod:`._http`). Every front goes through :meth:`Ledger.handle`, so
attribution, history and kills are the same.

**Who may speak.** A loopback port is open to every local user, and a URL is no secret (it is
in the agent's command line, which ``/proc`` shows to all). So a connection is admitted by
where it comes from (:mod:`._peer`): a process of the trial's attempts (their sessions and
process groups, and their children) is served as is; a standalone ledger (not bound to a trial:
:attr:`Ledger.bound`) also serves its own user's processes. Anyone else must present the
trial's token (``CRASHPOINT_TOKEN``, carried in the environment only, never in argv or a
report): as an ``X-Crashpoint-Token`` or ``Authorization: Bearer`` header, or as the first
path segment. A request without it gets 403 and is logged, never recorded as an event.

**Fair limits.** The trial's own connections have ``max_connections`` slots that nobody else
can take; any other connection (a guest) has one of ``max_guests`` slots, at most
``GUESTS_PER_USER`` of them per user, and must send its request within ``guest_timeout``
seconds, so idle or half-sent outside connections cannot starve the agent. See
``docs/reference/wire-protocol.md``.

It records every event in a history (memory and JSONL), applies each effect key at most once (a
duplicate is acknowledged but not applied again), and can kill the agent's process group at an
exact event: before the event is acted on, or, for an effect, after it was applied
and before the agent hears so (the in-doubt window).

Its resources are bounded (see ``docs/how-it-works.md``, "The ledger's limits"): at most
``max_connections`` connections at once over both fronts (the excess gets an error and is
closed), a request (a socket line, an HTTP body) of at most ``max_request_bytes``, a request
must arrive whole within ``idle_timeout`` seconds of its first byte (a quiet connection between
requests may stay open: the probe keeps one for the agent's whole life), and the history file
stops at ``max_history_bytes``. Running out of file descriptors never stops the server.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import json
import os
import secrets
import selectors
import shlex
import signal
import socket
import socketserver
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import IO, TYPE_CHECKING, Any

from crashpoint._proc import LIVE, shielded, socket_folder
from crashpoint.errors import InvalidArgument, StandInError
from crashpoint.harness._spec import (
    ENV_HTTP,
    ENV_LEDGER_HTTP,
    ENV_LLM,
    OPS,
    SMTP_USER,
    KillAt,
    NetFault,
    ServicesSpec,
    agent_message,
    canonical,
    event_name,
    pick,
    size_text,
)
from crashpoint.harness._standins._anthropic import ENV_ANTHROPIC_KEY, ENV_ANTHROPIC_URL
from crashpoint.harness._standins._http import ServiceHandler
from crashpoint.harness._standins._llm import LLMStandIn
from crashpoint.harness._standins._mcp import ENV_MCP, ENV_MCP_STDIO, MCPStandIn
from crashpoint.harness._standins._peer import Peer, identify
from crashpoint.probe import ENV_LEDGER

if TYPE_CHECKING:
    from crashpoint.harness._standins._smtp import SmtpSink

__all__ = ["Ledger"]

#: The ledger's socket in its private folder (``cp-ledger-XXXXXXXX``).
SOCKET_NAME = "ledger.sock"
#: At most this many refused (forbidden) requests are kept in :attr:`Ledger.forbidden`.
MAX_FORBIDDEN = 100
#: Defaults of the limits (see :class:`Ledger`).
MAX_CONNECTIONS = 256
MAX_REQUEST_BYTES = 1 << 20
IDLE_TIMEOUT = 120.0
MAX_HISTORY_BYTES = 16 << 20
#: Connections from outside the trial (which must present the token) served at once, and
#: how long one may take to send its request.
MAX_GUESTS = 16
GUEST_TIMEOUT = 5.0
#: Of the guest slots, at most this many go to one user (or to the clients nothing can name):
#: one outsider cannot fill them all and keep a token-carrying helper of the trial waiting.
GUESTS_PER_USER = 4
#: The variable that carries the trial's token to its processes (never argv).
ENV_TOKEN = "CRASHPOINT_TOKEN"  # noqa: S105 (a variable name, not a secret)
#: accept() failing for want of descriptors or memory: wait a little instead of spinning
_ACCEPT_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
#: The stdio face of the MCP stand-in: a relay to its HTTP endpoint, run as a script.
MCP_STDIO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_mcp_stdio.py")
_POLL = 1.0  # how often a quiet connection's thread looks up (limits, close)


def default_max_connections() -> int:
    """A quarter of this process's file-descriptor limit (each connection holds one), between
    8 and :data:`MAX_CONNECTIONS`: the harness keeps descriptors for its own work."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return MAX_CONNECTIONS
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, (soft - 64) // 4))


@dataclass(slots=True)
class _Effect:
    kind: str
    payload: Any
    applied: int = 0
    duplicates: int = 0


@dataclass
class Ledger:
    """The outside world and the kill switch of a trial, in the harness process: it answers the
    probe (and, with ``http``, the stand-in services), records every event in order, applies
    each effect key at most once, and kills the agent at a planned event (:attr:`kills`).

    Start with :meth:`start`, stop with :meth:`close` (or use as a context manager).

    Limits: ``max_connections`` (None: :func:`default_max_connections`), ``max_request_bytes``,
    ``idle_timeout`` (seconds a started request may take to arrive whole), and
    ``max_history_bytes`` (the JSONL history stops there, saying so). What they refused is
    counted in :attr:`refused`.
    """

    history_path: str | None = None
    http: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)
    effects: dict[str, _Effect] = field(default_factory=dict)
    attempt: int = 0
    pgids: dict[int, int] = field(default_factory=dict)
    kills: list[KillAt] = field(default_factory=list)
    on_kill: Callable[[dict[str, Any]], None] | None = None
    max_connections: int | None = None
    max_request_bytes: int = MAX_REQUEST_BYTES
    idle_timeout: float = IDLE_TIMEOUT
    max_history_bytes: int = MAX_HISTORY_BYTES
    max_guests: int = MAX_GUESTS
    guest_timeout: float = GUEST_TIMEOUT
    #: bound to a trial: only its attempts' processes (:meth:`begin_attempt`) are served
    #: without the token. Unbound (a standalone ledger), this user's processes are too.
    bound: bool = False
    #: the network faults of the trial under way (the ``network`` family fills it; the
    #: stand-in services ask :func:`crashpoint.harness._standins._network.pick`)
    net_faults: list[NetFault] = field(default_factory=list)
    #: the scripted replies of the stand-in services
    services: ServicesSpec = field(default_factory=ServicesSpec)

    def __post_init__(self) -> None:
        self._init_limits()  # a bad limit is refused before anything is made on disk
        self._lock = threading.Lock()
        self._attempt_index: dict[int, int] = {}
        self._seen: Counter[tuple[int, str, str]] = Counter()  # (attempt, op, name) -> count
        self._keyless = 0
        with shielded():  # registered at once: removed by cleanup_all if we are stopped
            try:  # in the temp folder, or a short one where TMPDIR is too long for a socket
                self._dir = socket_folder("cp-ledger-", SOCKET_NAME)
            except OSError as exc:
                raise StandInError(f"the ledger cannot start: {exc.strerror}") from None
            LIVE.add_folder(self._dir)
        self.address = os.path.join(self._dir, SOCKET_NAME)
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        self._http: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._log: IO[str] | None = None
        self.killed: list[dict[str, Any]] = []
        #: attempt -> when it went away (its probe connection closed, or the runner reaped it)
        self.ended: dict[int, float] = {}
        #: attempt -> time.monotonic() of its first event
        self.first_event: dict[int, float] = {}
        #: called (outside the lock) with the attempt number when an attempt sends its first
        #: event: what starts a kill at an instant "after the first event"
        self.on_first_event: Callable[[int], None] | None = None
        #: asked (under the lock) about each event not planned for a kill: True (or a label,
        #: what ``killed`` names) kills the agent before it (e.g. its first event after the
        #: disk refused a write)
        self.kill_when: Callable[[dict[str, Any]], bool | str] | None = None
        #: called (outside the lock) with each recorded event the agent is about to be
        #: answered (not killed), and may block: a backing-service outage put in place
        #: before the agent goes on
        self.before_reply: Callable[[dict[str, Any]], None] | None = None
        #: called (outside the lock, before it is recorded) with the attempt number of an
        #: attempt's first event, and may block: the barrier that releases two resumers
        #: together once each has reached its first boundary
        self.hold_first: Callable[[int], None] | None = None
        #: two attempts run at once (``resumers``): an HTTP request without an attempt header
        #: is attributed by the process that holds its connection (``_peer``)
        self.together = False
        #: the HTTP front's base URL (no secret in it: it may go in a command line)
        self.http_url = ""
        #: the trial's secret (new at each reset): what a process outside the trial must
        #: present; given to the agent in the environment only (``CRASHPOINT_TOKEN``)
        self.token = secrets.token_hex(16)
        #: bumped at each reset: a reply held for a past trial is dropped
        self.generation = 0
        #: requests refused for want of the token (at most MAX_FORBIDDEN kept)
        self.forbidden: list[dict[str, Any]] = []
        self._calls: Counter[tuple[int, str]] = Counter()  # (attempt, call) -> requests
        self._llm: LLMStandIn | None = None
        self._mcp: MCPStandIn | None = None
        self.smtp: SmtpSink | None = None

    def _init_limits(self) -> None:
        if self.max_connections is None:
            self.max_connections = default_max_connections()
        if (
            self.max_connections < 1
            or self.max_request_bytes < 1
            or self.idle_timeout <= 0
            or self.max_guests < 1
            or self.guest_timeout <= 0
        ):
            raise InvalidArgument(
                "ledger limits must be positive: max_connections "
                f"{self.max_connections}, max_request_bytes "
                f"{self.max_request_bytes}, idle_timeout {self.idle_timeout}, max_guests "
                f"{self.max_guests}, guest_timeout {self.guest_timeout}"
            )
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._guests = threading.BoundedSemaphore(self.max_guests)
        self._guest_users: Counter[int] = Counter()  # uid (-1: unknown) -> guest slots held
        self._guest_lock = threading.Lock()
        self._closing = threading.Event()
        self._log_bytes = 0
        self._log_full = False
        #: what the limits refused: connections, request_size, body_size, idle, accept_errors
        self.refused: Counter[str] = Counter()
        self.server_errors: list[str] = []  # the last few errors a connection's thread hit

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Ledger:
        self._closing.clear()
        if self.history_path:
            self._log = self._open_log(self.history_path)

        self._server = _SocketServer(self.address, _SocketHandler)
        self._server.ledger = self
        t = threading.Thread(target=self._server.serve_forever, name="ledger", daemon=True)
        t.start()
        self._threads.append(t)
        if self.http:
            self._start_http()
        return self

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def close(self) -> None:
        self._closing.set()  # quiet connections' threads end within a poll
        if self.smtp is not None:
            with contextlib.suppress(Exception):
                self.smtp.close()
            self.smtp = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        for t in self._threads:
            t.join(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None
        with contextlib.suppress(OSError):
            os.unlink(self.address)
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)
        if not os.path.lexists(self._dir):
            LIVE.drop_folder(self._dir)

    def __enter__(self) -> Ledger:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def env(self) -> dict[str, str]:
        """Environment variables that point an agent's probe at this ledger, and (with the
        HTTP front) its SDKs at the stand-in services."""
        env = {ENV_LEDGER: self.address}
        if self.http_url or self.smtp is not None:
            env[ENV_TOKEN] = self.token
        if self.http_url:
            env[ENV_LEDGER_HTTP] = self.http_url
            urls = self.urls()
            env.update({ENV_HTTP: urls["http"], ENV_LLM: urls["llm"]})
            # the Anthropic SDK's base URL, and its key: the trial's token (sent as x-api-key)
            env.update({ENV_ANTHROPIC_URL: urls["anthropic"], ENV_ANTHROPIC_KEY: self.token})
            env.update({ENV_MCP: urls["mcp"], ENV_MCP_STDIO: urls["mcp_stdio"]})
        if self.smtp is not None:
            env.update(
                {
                    "CRASHPOINT_SMTP_HOST": self.smtp.host,
                    "CRASHPOINT_SMTP_PORT": str(self.smtp.port),
                    "CRASHPOINT_SMTP_USER": SMTP_USER,
                    "CRASHPOINT_SMTP_PASSWORD": self.token,
                }
            )
        return env

    def urls(self) -> dict[str, str]:
        """The stand-ins' addresses, as the agent's placeholders give them: ``http`` (the HTTP
        stand-in's base URL), ``llm`` (the OpenAI base URL, ending in /v1), ``anthropic`` (the
        Anthropic base URL: the SDK adds /v1/messages), ``smtp`` (host:port, "" without the
        sink), ``mcp`` (the MCP stand-in's streamable-HTTP endpoint), ``mcp_stdio`` (a command
        line that serves it on stdio: split it with ``shlex.split``). None carries a secret."""
        if not self.http_url:
            return {"http": "", "llm": "", "anthropic": "", "smtp": "", "mcp": "", "mcp_stdio": ""}
        return {
            "http": self.http_url + "/http",
            "llm": self.http_url + "/v1",
            "anthropic": self.http_url,
            "mcp": self.http_url + "/mcp",
            # the relay runs isolated (-I) by its path: it needs only the standard library,
            # whatever Python and environment the agent's MCP client starts it with
            "mcp_stdio": shlex.join([sys.executable, "-I", MCP_STDIO, self.http_url + "/mcp"]),
            "smtp": f"{self.smtp.host}:{self.smtp.port}" if self.smtp is not None else "",
        }

    def start_smtp(self) -> SmtpSink:
        """Start the SMTP sink (once; it follows the token across resets)."""
        if self.smtp is None:  # aiosmtpd costs more to import than the rest of the harness
            from crashpoint.harness._standins._smtp import SmtpSink

            self.smtp = SmtpSink(
                self._handle_mail,
                self.token,
                self._mail_refused,
                admits=self.admits_port,
                max_guests=self.max_guests,
                guest_timeout=self.guest_timeout,
            ).start()
        return self.smtp

    def _handle_mail(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """The SMTP sink's :meth:`handle`: a planned network fault of call ``mail`` fails the
        message (recorded with ``failed``, not applied): None for reset/timeout (the sink
        drops the connection), an error reply for a status."""
        attempt = int(msg.get("attempt") or self.attempt)
        failure = pick(self.net_faults, "mail", self.count_call(attempt, "mail"), attempt)
        if failure is None:
            return self._safe_handle(msg)
        how = f"status {failure.status}" if failure.how == "status" else failure.how
        lost = {"reply_lost": True} if failure.applied else {}  # accepted, reply lost
        reply = self._safe_handle({**msg, "failed": how, **lost})
        if reply is None or failure.how != "status":
            return None
        return {
            **reply,
            "ok": False,
            "status": failure.status,
            "error": f"the mail service failed this message ({how})",
        }

    # -- who may speak -------------------------------------------------------------------------

    def identify(self, client_port: int, server_port: int, *, ancestry: bool = False) -> Peer:
        """Who holds the client end of a loopback connection (see :mod:`._peer`)."""
        return identify(client_port, server_port, dict(self.pgids), ancestry=ancestry)

    def admits(self, peer: Peer) -> bool:
        """A connection from ``peer`` is served without the token: a process of one of the
        trial's attempts, or (a ledger not :attr:`bound` to a trial) of this user."""
        if peer.attempt is not None:
            return True
        return not self.bound and peer.known and not peer.other_user

    def admits_port(self, client_port: int, server_port: int, thorough: bool = False) -> bool:
        """:meth:`admits` of the connection from ``client_port`` to ``server_port``.
        ``thorough``: also follow the parent chain of this user's processes, retrying a little
        (a process started a moment ago may not be registered yet)."""
        if self.admits(self.identify(client_port, server_port)):
            return True
        if not thorough:
            return False
        for delay in (0.0, 0.05, 0.15):
            time.sleep(delay)
            peer = self.identify(client_port, server_port, ancestry=True)
            if self.admits(peer):
                return True
            if not peer.known or peer.other_user:
                return False
        return False

    def token_ok(self, given: str) -> bool:
        """``given`` is the trial's token (compared in constant time)."""
        return bool(self.token) and hmac.compare_digest(given.encode(), self.token.encode())

    def _mail_refused(self, description: str) -> None:
        self.refused["token"] += 1
        self.log_forbidden({"via": "smtp", "what": description[:200]})

    def llm(self) -> LLMStandIn:
        """The LLM stand-in of the trial under way (its script from :attr:`services`)."""
        if self._llm is None:
            self._llm = LLMStandIn(self.services.llm)
        return self._llm

    def mcp(self) -> MCPStandIn:
        """The MCP stand-in of the trial under way (its tools from :attr:`services`)."""
        with self._lock:
            if self._mcp is None:
                self._mcp = MCPStandIn(self.services.mcp)
            return self._mcp

    def count_call(self, attempt: int, call: str) -> int:
        """Count one more request of ``call`` in ``attempt``; its number (from 1)."""
        with self._lock:
            self._calls[(attempt, call)] += 1
            return self._calls[(attempt, call)]

    def log_forbidden(self, what: dict[str, Any]) -> None:
        """A request refused (from outside the trial, without the trial's token): counted,
        kept (the first MAX_FORBIDDEN), and logged in the history file as a ``forbidden``
        line. Never an event: the checks and the boundaries do not see it."""
        entry = {
            "op": "forbidden",
            **what,
            "attempt": self.attempt,
            "wall": time.time(),
            "note": "refused: not from the trial's processes and no trial token "
            "(not the agent's request; not judged)",
        }
        with self._lock:
            if len(self.forbidden) < MAX_FORBIDDEN:
                self.forbidden.append(entry)
            self._write(entry)

    def reset(self, history_path: str | None = None) -> Ledger:
        """Forget everything (history, effects, kills) and log to ``history_path``: a fresh
        ledger on the same sockets, for the next trial (its agents are all gone by then).
        Starting and stopping the servers costs more than a short trial."""
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None
            self.history_path = history_path
            if history_path:
                self._log = self._open_log(history_path)
            self.refused = Counter()
            self.events = []
            self.effects = {}
            self.attempt = 0
            self.pgids = {}
            self.kills = []
            self.killed = []
            self.ended = {}
            self._attempt_index = {}
            self._seen = Counter()
            self._keyless = 0
            self.first_event = {}
            self.kill_when = None
            self.before_reply = None
            self.hold_first = None
            self.together = False
            self.net_faults = []
            self.forbidden = []
            self._calls = Counter()
            self._llm = None
            self._mcp = None
            self.generation += 1
            self.token = secrets.token_hex(16)  # a past trial's token gets 403
            if self.smtp is not None:
                self.smtp.token = self.token
        return self

    def begin_attempt(self, attempt: int, pgid: int | None) -> None:
        """Attempt ``attempt`` runs in process group ``pgid`` (what a kill at its events hits)."""
        with self._lock:
            self.attempt = attempt
            if pgid is not None:
                self.pgids[attempt] = pgid

    # -- the outside world ---------------------------------------------------------------------

    def applied_counts(self) -> dict[tuple[str, str], int]:
        """How many times the outside world applied each (kind, canonical payload)."""
        out: dict[tuple[str, str], int] = {}
        for eff in self.effects.values():
            k = (eff.kind, canonical(eff.payload))
            out[k] = out.get(k, 0) + eff.applied
        return out

    def _record(self, ev: dict[str, Any], attempt: int) -> dict[str, Any]:
        ev["attempt"] = attempt
        ev["i"] = len(self.events)
        ev["ai"] = self._attempt_index.get(attempt, 0)  # index within the attempt
        self._attempt_index[attempt] = ev["ai"] + 1
        ident = (attempt, str(ev.get("op")), event_name(ev))
        self._seen[ident] += 1
        ev["nth"] = self._seen[ident]  # its occurrence among the attempt's (op, name) events
        ev["t"] = time.monotonic()
        ev["wall"] = time.time()  # the clock of strace -ttt: places it among file operations
        self.first_event.setdefault(attempt, ev["t"])
        self.events.append(ev)
        return ev

    def _open_log(self, path: str) -> IO[str]:
        """The history file: appended to, 0600, never through a symlink."""
        fd = os.open(
            path,
            os.O_WRONLY
            | os.O_APPEND
            | os.O_CREAT
            | getattr(os, "O_NOFOLLOW", 0)
            | getattr(os, "O_CLOEXEC", 0),
            0o600,
        )
        self._log_bytes = os.fstat(fd).st_size
        self._log_full = False
        return open(fd, "a", encoding="utf-8")

    def _write(self, ev: dict[str, Any]) -> None:
        """Append ``ev`` to the JSONL history once it is final (an effect's ``applied`` known,
        a kill marked), and always before the kill lands. At ``max_history_bytes`` one last
        line says the history stops there (the events stay in memory for the checks)."""
        if self._log is None or self._log_full:
            return
        line = json.dumps(ev, sort_keys=True, default=str) + "\n"
        if self._log_bytes + len(line) > self.max_history_bytes:
            self._log_full = True
            self.refused["history"] += 1
            line = (
                json.dumps(
                    {
                        "op": "history_truncated",
                        "i": ev.get("i"),
                        "note": f"history.jsonl stops here: it reached its limit of "
                        f"{size_text(self.max_history_bytes)}; later events "
                        "were not written",
                    }
                )
                + "\n"
            )
        self._log.write(line)
        self._log.flush()
        self._log_bytes += len(line)

    def _kill_for(self, ev: dict[str, Any], phase: str) -> KillAt | None:
        for k in self.kills:
            if k.phase == phase and k.matches(ev, int(ev["nth"])):
                return k
        return None

    def _kill(self, ev: dict[str, Any], phase: str, k: KillAt | str | None = None) -> None:
        pgid = self.pgids.get(int(ev["attempt"]))
        self.killed.append(
            {
                "event": ev["i"],
                "attempt": ev["attempt"],
                "phase": phase,
                "op": ev["op"],
                "name": event_name(ev),
                "nth": ev.get("nth", 1),
                "ai": ev.get("ai"),
                "kill": k,
                "pgid": pgid,
            }
        )
        if isinstance(k, KillAt) and k.code:  # an exit fault: the agent exits on its own
            self.killed[-1]["exit"] = k.code
            return
        if self.on_kill is not None:
            self.on_kill(ev)
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)

    def handle(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """Act on one probe message; return the reply, or None if the agent was killed.

        A malformed message gets ``{"ok": false, "error": ...}`` and is not recorded.
        """
        op = msg.get("op")
        if op == "hello":
            return {"ok": True}
        if op not in OPS:
            return {"ok": False, "error": f"unknown op {op!r}; use one of hello, {', '.join(OPS)}"}
        try:
            attempt = int(msg.get("attempt") or self.attempt)
        except (TypeError, ValueError):
            return {"ok": False, "error": f"attempt must be an integer, got {msg.get('attempt')!r}"}
        if op == "effect":
            key = msg.get("key")
            if key in ("", None):  # Contract 1: the key is optional (judged by content)
                msg = {k: v for k, v in msg.items() if k != "key"}
            elif not isinstance(key, str):
                return {
                    "ok": False,
                    "error": f"an effect's key must be a string, got {type(key).__name__}",
                }
        hold = self.hold_first
        if hold is not None and attempt not in self.first_event:
            hold(attempt)  # the resumers' barrier: it has reached its first boundary
        first = False
        with self._lock:
            ev = {k: v for k, v in msg.items() if k != "payload"}
            if op == "effect":
                ev["payload"] = msg.get("payload")
            first = attempt not in self.first_event
            ev = self._record(ev, attempt)
            reply = self._act(ev, op, msg)
        if first and self.on_first_event is not None:
            self.on_first_event(attempt)
        if reply is not None and self.before_reply is not None:
            self.before_reply(ev)
        return reply

    def _act(self, ev: dict[str, Any], op: str, msg: dict[str, Any]) -> dict[str, Any] | None:
        """Apply a recorded event (under the lock): kill before it, apply an effect, kill in
        its in-doubt window. None: the agent was killed."""
        k: KillAt | str | None = self._kill_for(ev, "before")
        if k is None and self.kill_when is not None:
            label = self.kill_when(ev)
            if label:
                k = label if isinstance(label, str) else "disk_full"
        if k is not None:
            ev["killed"] = "before"
            if isinstance(k, KillAt) and k.code:  # an exit fault: the reply says exit
                ev["exit"] = k.code
            self._write(ev)
            self._kill(ev, "before", k)
            if isinstance(k, KillAt) and k.code:
                return {"ok": True, "exit": k.code}
            return None
        reply: dict[str, Any] = {"ok": True}
        # it reached the service, which failed it: nothing applied; unless the reply is what
        # was lost (a network fault's timeout: crashpoint.harness._standins._network)
        if msg.get("failed") and not msg.get("reply_lost"):
            if op == "effect":
                ev["applied"] = reply["applied"] = False
            self._write(ev)
            return reply
        if op == "llm_call" and self._killed_in_doubt(ev):  # billed, its reply not sent
            return None
        if op == "effect":
            key = msg.get("key")
            if key is None:  # keyless: nothing to deduplicate by; each call applies
                self._keyless += 1
                key = f"\0keyless:{self._keyless}"
                ev["keyless"] = True
            eff = self.effects.get(key)
            if eff is None:
                eff = self.effects[key] = _Effect(str(msg.get("kind")), msg.get("payload"))
            if eff.applied:
                eff.duplicates += 1
                reply["applied"] = False
            else:
                eff.applied += 1
                reply["applied"] = True
            ev["applied"] = reply["applied"]
            if self._killed_in_doubt(ev):
                code = ev.get("exit")  # an exit fault: applied, and told to exit at once
                return {**reply, "exit": code} if code else None
        self._write(ev)
        return reply

    def _killed_in_doubt(self, ev: dict[str, Any]) -> bool:
        """Kill the agent in ``ev``'s in-doubt window (applied, the reply not yet sent) if a
        kill is planned there; True if it was."""
        k = self._kill_for(ev, "in_doubt")
        if k is None:
            return False
        ev["killed"] = "in_doubt"
        if k.code:
            ev["exit"] = k.code
        self._write(ev)
        self._kill(ev, "in_doubt", k)
        return True

    def _safe_handle(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """:meth:`handle`, but a bug or an odd message never takes the server down."""
        try:
            return self.handle(msg)
        except Exception as exc:  # the reply carries it to the agent
            if isinstance(exc, OverflowError) and isinstance(msg.get("attempt"), float):
                # "attempt": 1e400 is inf to the decoder, and int(inf) overflows
                return {
                    "ok": False,
                    "error": f"attempt must be an integer, got {msg.get('attempt')!r}",
                }
            return {
                "ok": False,
                "error": f"the ledger failed on this request: {type(exc).__name__}: {exc}",
            }

    def end_attempt(self, attempt: int, when: float | None = None, *, reaped: bool = False) -> None:
        """Attempt ``attempt`` went away at ``when``. A closed probe connection says so
        precisely (the latest close of the attempt counts); ``reaped`` (the runner waited for
        it) only fills in for an attempt that had no connection, e.g. an HTTP-only agent."""
        t = time.monotonic() if when is None else when
        with self._lock:
            if reaped:
                self.ended.setdefault(attempt, t)
            else:
                self.ended[attempt] = max(self.ended.get(attempt, t), t)

    def _serve_socket(self, sock: socket.socket) -> None:
        """One probe connection: newline-delimited requests, one reply each, within limits.

        A request is bounded in size (``max_request_bytes``) and, once its first byte has
        arrived, in time (``idle_timeout``); either way the agent gets an error line and the
        connection is closed. A connection with no request under way may stay quiet for good
        (the probe keeps one open for the agent's life; the connection limit bounds them).
        """
        conn_attempt = 0  # from the connection's hello: which attempt is speaking
        buf = bytearray()
        scanned = 0  # bytes of buf known to hold no newline
        started = 0.0  # when the first byte of the request under way arrived
        limit = self.max_request_bytes
        sock.settimeout(min(_POLL, self.idle_timeout))
        try:
            while not self._closing.is_set():
                nl = buf.find(b"\n", scanned)
                if nl > limit or (nl < 0 and len(buf) > limit):
                    self.refused["request_size"] += 1
                    self._send_line(
                        sock,
                        {
                            "ok": False,
                            "error": (
                                f"request line over {size_text(limit)}: the ledger reads at most "
                                f"{size_text(limit)} per request; the connection is closed"
                            ),
                        },
                    )
                    return
                if nl < 0:
                    scanned = len(buf)
                    if buf and time.monotonic() - started > self.idle_timeout:
                        self.refused["idle"] += 1
                        self._send_line(
                            sock,
                            {
                                "ok": False,
                                "error": (
                                    f"request not completed within {self.idle_timeout:g} s of its "
                                    "first byte (no newline): the connection is closed"
                                ),
                            },
                        )
                        return
                    try:
                        chunk = sock.recv(65536)
                    except TimeoutError:
                        continue
                    except OSError:
                        return
                    if not chunk:  # the agent closed its side (or died)
                        if buf.strip():  # a last request without its newline: served as before
                            reply, conn_attempt = self._answer(bytes(buf), conn_attempt)
                            if reply is not None:
                                self._send_line(sock, reply)
                        return
                    if not buf:
                        started = time.monotonic()
                    buf += chunk
                    continue
                line = bytes(buf[:nl])
                del buf[: nl + 1]
                scanned = 0
                started = time.monotonic()
                reply, conn_attempt = self._answer(line, conn_attempt)
                if reply is None:
                    return  # killed: the agent never hears back
                if not self._send_line(sock, reply):
                    return
        finally:
            if conn_attempt:  # the agent's process closed its connection: it is gone
                self.end_attempt(conn_attempt)

    def _answer(self, line: bytes, conn_attempt: int) -> tuple[dict[str, Any] | None, int]:
        """The reply to one request line (None: the agent was killed) and the connection's
        attempt. Whatever the line holds (not JSON, JSON nested too deeply to decode, a
        number too large for an integer), the agent gets an error line: never a dropped
        connection without a word."""
        try:
            msg = json.loads(line)
            if not isinstance(msg, dict):
                raise ValueError("not an object")
        except RecursionError:
            return {"ok": False, "error": "bad request: JSON nested too deeply"}, conn_attempt
        except ValueError as exc:  # UnicodeDecodeError too
            return {"ok": False, "error": f"bad request: {exc}"}, conn_attempt
        if msg.get("op") == "hello":
            # 1e400 is inf: int() raises OverflowError; such a hello names no attempt
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                conn_attempt = int(msg.get("attempt") or 0)
        elif conn_attempt and "attempt" not in msg:
            msg["attempt"] = conn_attempt
        return self._safe_handle(agent_message(msg)), conn_attempt

    def _send_line(self, sock: socket.socket, reply: dict[str, Any]) -> bool:
        """Send one reply line; False if the agent is gone or does not read (``idle_timeout``
        to take it)."""
        try:
            sock.settimeout(self.idle_timeout)
            sock.sendall(json.dumps(reply).encode() + b"\n")
            sock.settimeout(min(_POLL, self.idle_timeout))
        except OSError:
            return False
        return True

    def _take_guest(self, uid: int | None) -> bool:
        """A guest slot for a connection of ``uid`` (None: unknown), within both the pool and
        the user's share of it (:data:`GUESTS_PER_USER`)."""
        who = -1 if uid is None else uid
        with self._guest_lock:
            if self._guest_users[who] >= min(GUESTS_PER_USER, self.max_guests):
                return False
            if not self._guests.acquire(blocking=False):
                return False
            self._guest_users[who] += 1
        return True

    def _give_guest(self, uid: int | None) -> None:
        who = -1 if uid is None else uid
        with self._guest_lock:
            self._guest_users[who] -= 1
            if self._guest_users[who] <= 0:
                del self._guest_users[who]
            self._guests.release()

    def _refuse_connection(self, sock: socket.socket, http: bool, guest: bool = False) -> None:
        """Answer a connection over the limit without a thread, then close it."""
        if guest:
            self.refused["guests"] += 1
            error = (
                f"the ledger already serves {self.max_guests} connections from outside the "
                f"trial, or {GUESTS_PER_USER} from this user (their limits); the trial's own "
                "processes are served apart"
            )
        else:
            self.refused["connections"] += 1
            error = (
                f"the ledger already serves {self.max_connections} connections (its limit); "
                "close one before opening another (one connection per process is enough)"
            )
        body = json.dumps({"ok": False, "error": error}).encode()
        data = body + b"\n"
        if http:
            data = (
                b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
        with contextlib.suppress(OSError):
            sock.setblocking(False)  # never wait on an agent that does not read
            sock.send(data)

    # -- HTTP front ----------------------------------------------------------------------------

    def _start_http(self) -> None:
        self._http = _HttpServer(("127.0.0.1", 0), ServiceHandler)
        self._http.ledger = self
        self.http_url = f"http://127.0.0.1:{self._http.server_address[1]}"
        t = threading.Thread(target=self._http.serve_forever, name="ledger-http", daemon=True)
        t.start()
        self._threads.append(t)


class _Bounded(socketserver.ThreadingMixIn):
    """A threading server that serves at most the ledger's ``max_connections`` at once (both
    fronts share the count), answers the excess without a thread, survives accept() failing
    for want of descriptors, and keeps a connection's errors out of stderr."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64  # a burst of agents connecting at once waits in the backlog
    http = False
    ledger: Ledger
    #: id(connection) -> (who is on the other end, served as a guest): for its handler
    peers: dict[int, tuple[Peer, bool]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.peers = {}
        # shutdown() wakes the loop through this pipe: no poll interval to wait out (a
        # 20 ms poll cost every ledger's close up to 20 ms per front)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        try:
            super().__init__(*args, **kwargs)
        except BaseException:  # (socketserver may have called server_close already)
            self._close_wake()
            raise

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """socketserver's loop (one request at a time is accepted, each served in a thread of
        its own), asleep until a connection comes or :meth:`shutdown` wakes it: it never
        polls (``poll_interval`` is ignored)."""
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.fileno(), selectors.EVENT_READ)  # type: ignore[attr-defined]
                sel.register(self._wake_r, selectors.EVENT_READ)
                while not self._stop.is_set():
                    ready = sel.select()
                    if self._stop.is_set():
                        break
                    if any(key.fd != self._wake_r for key, _ in ready):
                        self._handle_request_noblock()  # type: ignore[attr-defined]
                    self.service_actions()  # type: ignore[attr-defined]
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait until it has (it must run, or have run, in
        another thread)."""
        self._stop.set()
        with contextlib.suppress(OSError):  # full: it is being woken already
            os.write(self._wake_w, b"x")
        self._stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        self._close_wake()

    def _close_wake(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wake_r = self._wake_w = -1

    def get_request(self) -> Any:
        try:
            return super().get_request()  # type: ignore[misc]
        except OSError as exc:
            if exc.errno in _ACCEPT_ERRNOS:
                self.ledger.refused["accept_errors"] += 1
                time.sleep(0.05)  # the pending connection stays readable: do not spin on it
            raise  # socketserver drops this one request and goes on serving

    def process_request(self, request: Any, client_address: Any) -> None:
        ledger = self.ledger
        guest, peer = False, Peer()
        if self.http:  # loopback TCP: the trial's processes apart from everyone else
            port = int(self.server_address[1])  # type: ignore[attr-defined]
            peer = ledger.identify(int(client_address[1]), port)
            guest = not ledger.admits(peer)
            self.peers[id(request)] = (peer, guest)
        taken = ledger._take_guest(peer.uid) if guest else ledger._slots.acquire(blocking=False)
        if not taken:
            self.peers.pop(id(request), None)
            ledger._refuse_connection(request, self.http, guest)
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread was started (e.g. out of threads): free the slot
            self.peers.pop(id(request), None)
            self._free(peer, guest)
            raise

    def _free(self, peer: Peer | None, guest: bool) -> None:
        if guest:
            self.ledger._give_guest(peer.uid if peer is not None else None)
        else:
            self.ledger._slots.release()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            peer, guest = self.peers.pop(id(request), (None, False))
            self._free(peer, guest)

    def handle_error(self, request: Any, client_address: Any) -> None:

        exc = sys.exc_info()[1]
        errors = self.ledger.server_errors
        errors.append(f"{type(exc).__name__}: {exc}")
        del errors[:-20]


class _HttpServer(_Bounded, ThreadingHTTPServer):
    """The ledger's loopback HTTP front: :class:`ServiceHandler` per connection."""

    http = True


class _SocketHandler(socketserver.BaseRequestHandler):
    """One connection of the probe's Unix socket (newline-delimited JSON)."""

    server: _SocketServer

    def handle(self) -> None:
        # an agent killed with a reply unread resets the connection: nothing to serve
        with contextlib.suppress(ConnectionError):
            self.server.ledger._serve_socket(self.request)


class _SocketServer(_Bounded, socketserver.ThreadingUnixStreamServer):
    """The ledger's probe socket: :class:`_SocketHandler` per connection."""
