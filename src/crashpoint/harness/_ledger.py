"""The ledger: the outside world and the kill switch, living in the harness process.

One ledger per trial. It listens on a Unix socket (the probe's wire protocol) and, optionally,
on a loopback HTTP port (effects as ``POST /effects/<kind>`` with an ``Idempotency-Key``
header; step events as ``POST /events/<op>`` with a JSON body, for agents that have an HTTP
client but no Unix-socket one). Both fronts go through :meth:`Ledger.handle`, so attribution,
history and kills are the same; see ``docs/reference/wire-protocol.md``.

It records every event in a history (memory and JSONL), applies each effect key at most once (a
duplicate is acknowledged but not applied again), and can kill the agent's process group at an
exact event: before the event is acted on, or, for an effect, after it was applied
and before the agent hears so (the in-doubt window).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socketserver
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from crashpoint.faults._cleanup import LIVE, shielded

__all__ = ["ENV_HTTP", "ENV_LEDGER", "HTTP_EVENT_OPS", "OPS", "KillAt", "Ledger", "canonical"]

ENV_LEDGER = "CRASHPOINT_LEDGER"
ENV_HTTP = "CRASHPOINT_LEDGER_HTTP"
#: The ops that are recorded in the history (``hello`` only opens a connection).
OPS = ("step_started", "step_completed", "effect", "event")
#: The ops the HTTP front takes as ``POST /events/<op>`` (effects go to ``/effects/<kind>``).
HTTP_EVENT_OPS = ("step_started", "step_completed", "event")


def canonical(payload: Any) -> str:
    """The canonical form of an effect payload (how effects are compared with the golden run)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class KillAt:
    """Kill the agent at the ``index``-th event (0-based) of attempt ``attempt``.

    ``phase``: ``"before"`` — the event is recorded, the agent is killed before it is acted on
    (an effect is not applied); ``"in_doubt"`` — only for effects: applied, then killed before
    the agent learns it.
    """

    attempt: int
    index: int
    phase: str = "before"


@dataclass(slots=True)
class _Effect:
    kind: str
    payload: Any
    applied: int = 0
    duplicates: int = 0


@dataclass
class Ledger:
    """Start with :meth:`start`, stop with :meth:`close` (or use as a context manager)."""

    history_path: str | None = None
    http: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)
    effects: dict[str, _Effect] = field(default_factory=dict)
    attempt: int = 0
    pgids: dict[int, int] = field(default_factory=dict)
    kills: list[KillAt] = field(default_factory=list)
    on_kill: Callable[[dict[str, Any]], None] | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._attempt_index: dict[int, int] = {}
        with shielded():  # registered at once: removed by cleanup_all if we are stopped
            self._dir = tempfile.mkdtemp(prefix="cp-ledger-")
            LIVE.add_folder(self._dir)
        self.address = os.path.join(self._dir, "ledger.sock")
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        self._http: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._log: IO[str] | None = None
        self.killed: list[dict[str, Any]] = []
        #: attempt -> when it went away (its probe connection closed, or the runner reaped it)
        self.ended: dict[int, float] = {}
        self.http_url = ""

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Ledger:
        ledger = self
        if self.history_path:
            self._log = open(self.history_path, "a", encoding="utf-8")  # noqa: SIM115

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                # an agent killed with a reply unread resets the connection: nothing to serve
                with contextlib.suppress(ConnectionError):
                    ledger._serve(self.rfile, self.wfile)

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True

        self._server = Server(self.address, Handler)
        t = threading.Thread(target=self._server.serve_forever, args=(0.02,), name="ledger",
                             daemon=True)
        t.start()
        self._threads.append(t)
        if self.http:
            self._start_http()
        return self

    def close(self) -> None:
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
        """Environment variables that point an agent's probe at this ledger."""
        env = {ENV_LEDGER: self.address}
        if self.http_url:
            env[ENV_HTTP] = self.http_url
        return env

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
                self._log = open(history_path, "a", encoding="utf-8")  # noqa: SIM115
            self.events = []
            self.effects = {}
            self.attempt = 0
            self.pgids = {}
            self.kills = []
            self.killed = []
            self.ended = {}
            self._attempt_index = {}
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
        ev["t"] = time.monotonic()
        self.events.append(ev)
        return ev

    def _write(self, ev: dict[str, Any]) -> None:
        """Append ``ev`` to the JSONL history once it is final (an effect's ``applied`` known,
        a kill marked), and always before the kill lands."""
        if self._log is not None:
            self._log.write(json.dumps(ev, sort_keys=True, default=str) + "\n")
            self._log.flush()

    def _kill_for(self, ev: dict[str, Any], phase: str) -> bool:
        for k in self.kills:
            if k.attempt == ev["attempt"] and k.index == ev["ai"] and k.phase == phase:
                return True
        return False

    def _kill(self, ev: dict[str, Any], phase: str) -> None:
        pgid = self.pgids.get(int(ev["attempt"]))
        self.killed.append({"event": ev["i"], "attempt": ev["attempt"], "phase": phase,
                            "op": ev["op"]})
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
            return {"ok": False, "error": f"unknown op {op!r}; use one of hello, "
                                          f"{', '.join(OPS)}"}
        try:
            attempt = int(msg.get("attempt") or self.attempt)
        except (TypeError, ValueError):
            return {"ok": False, "error": f"attempt must be an integer, got "
                                          f"{msg.get('attempt')!r}"}
        if op == "effect":
            key = msg.get("key")
            if not isinstance(key, str) or not key:
                return {"ok": False, "error": "an effect needs a non-empty string key"}
        with self._lock:
            ev = {k: v for k, v in msg.items() if k != "payload"}
            if op == "effect":
                ev["payload"] = msg.get("payload")
            ev = self._record(ev, attempt)
            if self._kill_for(ev, "before"):
                ev["killed"] = "before"
                self._write(ev)
                self._kill(ev, "before")
                return None
            reply: dict[str, Any] = {"ok": True}
            if op == "effect":
                key = msg["key"]
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
                if self._kill_for(ev, "in_doubt"):
                    ev["killed"] = "in_doubt"
                    self._write(ev)
                    self._kill(ev, "in_doubt")
                    return None
            self._write(ev)
            return reply

    def _safe_handle(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """:meth:`handle`, but a bug or an odd message never takes the server down."""
        try:
            return self.handle(msg)
        except Exception as exc:  # the reply carries it to the agent
            return {"ok": False, "error": f"the ledger failed on this request: "
                                          f"{type(exc).__name__}: {exc}"}

    def end_attempt(self, attempt: int, when: float | None = None, *,
                    reaped: bool = False) -> None:
        """Attempt ``attempt`` went away at ``when``. A closed probe connection says so
        precisely (the latest close of the attempt counts); ``reaped`` (the runner waited for
        it) only fills in for an attempt that had no connection, e.g. an HTTP-only agent."""
        t = time.monotonic() if when is None else when
        with self._lock:
            if reaped:
                self.ended.setdefault(attempt, t)
            else:
                self.ended[attempt] = max(self.ended.get(attempt, t), t)

    def _serve(self, rfile: Any, wfile: Any) -> None:
        conn_attempt = 0  # from the connection's hello: which attempt is speaking
        try:
            for line in rfile:
                try:
                    msg = json.loads(line)
                    if not isinstance(msg, dict):
                        raise ValueError("not an object")
                except ValueError as exc:
                    reply: dict[str, Any] | None = {"ok": False, "error": f"bad request: {exc}"}
                else:
                    if msg.get("op") == "hello":
                        with contextlib.suppress(TypeError, ValueError):
                            conn_attempt = int(msg.get("attempt") or 0)
                    elif conn_attempt and "attempt" not in msg:
                        msg["attempt"] = conn_attempt
                    reply = self._safe_handle(msg)
                if reply is None:
                    return  # killed: the agent never hears back
                try:
                    wfile.write(json.dumps(reply).encode() + b"\n")
                    wfile.flush()
                except OSError:
                    return
        finally:
            if conn_attempt:  # the agent's process closed its connection: it is gone
                self.end_attempt(conn_attempt)

    # -- HTTP front ----------------------------------------------------------------------------

    def _start_http(self) -> None:
        ledger = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # http.server's naming
                parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
                route, name = (parts[0], parts[1]) if len(parts) == 2 and parts[1] else ("", "")
                if route not in ("effects", "events") or \
                        (route == "events" and name not in HTTP_EVENT_OPS):
                    self._send(404, {"ok": False, "error": f"no route POST {self.path}; use "
                                     "POST /effects/<kind> (Idempotency-Key header) or POST "
                                     f"/events/<{'|'.join(HTTP_EVENT_OPS)}>"})
                    return
                try:
                    n = int(self.headers.get("Content-Length") or 0)
                    if n < 0:
                        raise ValueError("negative")
                except ValueError:
                    self._send(400, {"ok": False, "error": "bad Content-Length header"})
                    return
                try:
                    body = json.loads(self.rfile.read(n) or b"null")
                except ValueError:
                    self._send(400, {"ok": False, "error": "body is not JSON"})
                    return
                pid_h = self.headers.get("X-Crashpoint-Pid", "").strip()
                who = {"via": "http", "attempt": self.headers.get("X-Crashpoint-Attempt") or 0,
                       "pid": int(pid_h) if pid_h.isdigit() else None}
                if route == "effects":
                    key = self.headers.get("Idempotency-Key", "")
                    if not key:
                        self._send(400, {"ok": False, "error": "POST /effects/<kind> needs an "
                                                               "Idempotency-Key header"})
                        return
                    msg = {**who, "op": "effect", "kind": name, "payload": body, "key": key}
                else:
                    if body is None:
                        body = {}
                    if not isinstance(body, dict):
                        self._send(400, {"ok": False, "error": "an event body is a JSON object "
                                                               "such as {\"step\": \"fetch\"}"})
                        return
                    msg = {**who, **body, "op": name}  # the body's attempt/pid win, as on
                    #                                    the socket a message's win over hello
                reply = ledger._safe_handle(msg)
                if reply is None:
                    self.close_connection = True
                    return
                self._send(200 if reply.get("ok") else 400, reply)

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if body.get("applied") is False:
                    self.send_header("Idempotent-Replayed", "true")
                self.end_headers()
                self.wfile.write(data)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self._http.daemon_threads = True
        self.http_url = f"http://127.0.0.1:{self._http.server_address[1]}"
        t = threading.Thread(target=self._http.serve_forever, args=(0.02,), name="ledger-http",
                             daemon=True)
        t.start()
        self._threads.append(t)


