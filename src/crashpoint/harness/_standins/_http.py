"""The stand-in services' front: one loopback HTTP server per runner, serving the trial's
processes.

``http://127.0.0.1:PORT/...`` routes:

- ``effects/<kind>``, ``events/<op>``: the ledger's HTTP front (POST; see
  ``docs/reference/wire-protocol.md``);
- ``http/<path>``: the HTTP stand-in. Any method; a POST/PUT/PATCH/DELETE is an effect of kind
  ``"METHOD /path"`` (the body its payload; ``Idempotency-Key`` honoured, else keyless and
  judged by content), a GET/HEAD/OPTIONS is an ``event`` of that name (no effect);
- ``v1/<path>``: the LLM stand-in
  (:class:`crashpoint.harness._standins._llm.LLMStandIn`; ``v1/messages``: its
  Anthropic-compatible face), each billed call an ``llm_call`` event;
- ``mcp``: the MCP tool-server stand-in's streamable-HTTP endpoint
  (:class:`crashpoint.harness._standins._mcp.MCPStandIn`), each ``tools/call`` an effect.

Every request is recorded through :meth:`Ledger.handle`, so it is a boundary like a probe
event: killed before it is handled, or (an effect, an LLM call) after it was applied and
before the reply; either way the connection is dropped without a reply.

A connection is served as is when a process of the trial holds its client end (see
:mod:`._peer` and :class:`~._ledger.Ledger`); from anywhere else (another user, another job)
the request must carry the trial's token (``CRASHPOINT_TOKEN``: an ``X-Crashpoint-Token``,
``Authorization: Bearer`` or ``x-api-key`` (the Anthropic SDK's) header, or the first path
segment) and arrive within the ledger's
``guest_timeout``. Without it: 403, counted (``refused["token"]``) and logged in the history as
a ``forbidden`` line, never as an event: another local process cannot act as the agent.

Scripted replies (``services.http.routes`` of a scenario) and planned network faults
(``Ledger.net_faults``, asked through :func:`crashpoint.harness._standins._network.pick`; a planned
failure wins) answer with a status, a body, a latency, or a failure: ``reset`` (the socket is
closed with an RST, no reply), ``timeout`` (no reply until the client gives up, at most the
ledger's ``idle_timeout``), ``status`` (4xx/5xx). A failed request reached the service, so it
is recorded (with ``failed``), but it is not an applied effect: the service did not act on it.
A scripted reply with a 4xx/5xx status is such a failure too (the service refused the request).

A planned *stream failure* (``cut``, ``stall``, ``reset`` after some events; see
:mod:`crashpoint.harness._spec._network`) lets a streamed model reply start and fails it
part-way. Its ``llm_call`` event is recorded ``failed`` with ``partial_reply`` (``how``,
``chunks_sent``, ``chunks``, ``complete: false``, the full reply's ``completion_tokens`` and the
delivered ``text``), billed the prompt and the completion tokens delivered. A reply that was
not streamed, or too short to cut, is served whole and the fault says why it did not fire.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from crashpoint.harness._spec import (
    EVENT_METHODS,
    HTTP_EVENT_OPS,
    Failure,
    agent_message,
    pick,
    planned,
    size_text,
)
from crashpoint.harness._standins._llm import count_tokens, streamed_text
from crashpoint.harness._standins._mcp import SESSION_HEADER, MCPAnswer
from crashpoint.harness._standins._peer import Peer, attempt_of

if TYPE_CHECKING:
    from crashpoint.harness._standins._ledger import Ledger

__all__ = ["ServiceHandler"]

#: A cut stream's delivered text kept in its ``llm_call`` event (characters).
_PARTIAL_TEXT = 500
#: Seconds between a reset stream's last event and its RST (the client reads the events).
_RESET_DRAIN = 0.05


def _payload(raw: bytes) -> Any:
    """A request body as an effect's payload: JSON if it parses, else text; empty is None."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


class ServiceHandler(BaseHTTPRequestHandler):
    """The request handler of a ledger's HTTP front (see the module's docstring): one instance
    per connection, made by the ledger's HTTP server, whose ``ledger`` it serves."""

    ledger: Ledger

    def setup(self) -> None:
        self.ledger = self.server.ledger  # type: ignore[attr-defined]
        peers: dict[int, tuple[Peer, bool]] = getattr(self.server, "peers", {})
        self.peer, self.guest = peers.get(id(self.request), (Peer(), True))
        super().setup()
        # every read of a request waits; a guest (not the trial's process) not for long
        self.connection.settimeout(
            self.ledger.guest_timeout if self.guest else self.ledger.idle_timeout
        )

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # http.server's naming
        self._dispatch()

    do_HEAD = do_OPTIONS = do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    # -- routing ---------------------------------------------------------------------------

    def _dispatch(self) -> None:
        self.generation = self.ledger.generation
        split = urlsplit(self.path)
        raw_parts = split.path.split("/")
        first = unquote(raw_parts[1]) if len(raw_parts) > 1 else ""
        if first and self.ledger.token_ok(first):  # the token as the first segment
            raw_parts = raw_parts[1:]
        elif not self._admitted():
            self._forbidden()
            return
        rest = "/" + "/".join(raw_parts[1:])
        head, _, tail = rest[1:].partition("/")
        if head in ("effects", "events"):
            self._ledger_front(head, tail)
        elif head == "http":
            self._http("/" + tail, split.query)
        elif head == "v1":
            self._llm("/" + tail)
        elif head == "mcp" and not tail:
            self._mcp()
        else:
            self._send_json(
                404,
                {
                    "ok": False,
                    "error": (
                        f"no route {self.command} {rest}; the routes: effects/<kind>, "
                        "events/<op>, http/<path> (the HTTP stand-in), v1/... "
                        "(the LLM stand-in), mcp (the MCP stand-in)"
                    ),
                },
            )

    def _admitted(self) -> bool:
        """The request may be served without the token in its path: the trial's process
        holds the connection (looked at again, more thoroughly, for a guest: a process the
        harness started a moment ago), or a header carries the token."""
        for name in ("X-Crashpoint-Token", "Authorization", "X-Api-Key"):
            value = (self.headers.get(name) or "").strip()
            if name == "Authorization":
                scheme, _, value = value.partition(" ")
                if scheme.lower() != "bearer":
                    continue
            if value and self.ledger.token_ok(value.strip()):
                return True
        if not self.guest:
            return True
        return self.ledger.admits_port(
            int(self.client_address[1]),
            int(self.server.server_address[1]),  # type: ignore[index]
            thorough=True,
        )

    def _forbidden(self) -> None:
        self.ledger.refused["token"] += 1
        self.ledger.log_forbidden(
            {
                "via": "http",
                "method": self.command,
                "path": urlsplit(self.path).path[:200],
                "peer": self.peer.describe(),
            }
        )
        self.close_connection = True
        self._send_json(
            403,
            {
                "ok": False,
                "error": (
                    "forbidden: the stand-in services serve the trial's own processes (this "
                    "connection comes from " + self.peer.describe() + "); a process outside "
                    "the trial must send the trial's token (the CRASHPOINT_TOKEN variable) in "
                    "an X-Crashpoint-Token or Authorization: Bearer header"
                ),
            },
        )

    def _who(self) -> dict[str, Any]:
        pid_h = self.headers.get("X-Crashpoint-Pid", "").strip()
        return {
            "via": "http",
            "attempt": self.headers.get("X-Crashpoint-Attempt") or self._peer() or 0,
            "pid": int(pid_h) if pid_h.isdigit() else None,
        }

    def _attempt(self) -> int:
        try:
            said = int(self.headers.get("X-Crashpoint-Attempt") or 0)
        except ValueError:
            said = 0
        return said or self._peer() or self.ledger.attempt

    def _peer(self) -> int:
        """While attempts run at once (``Ledger.together``), the attempt whose process holds
        the client end of this connection (no header needed); else 0."""
        if not self.ledger.together:
            return 0
        if self.peer.attempt is not None:  # found when the connection was accepted
            return self.peer.attempt
        if not hasattr(self, "_peer_attempt"):
            self._peer_attempt = (
                attempt_of(
                    int(self.client_address[1]),
                    int(self.server.server_address[1]),  # type: ignore[index]
                    dict(self.ledger.pgids),
                )
                or 0
            )
        return self._peer_attempt

    # -- the ledger's front ----------------------------------------------------------------

    def _ledger_front(self, route: str, name: str) -> None:
        if self.command != "POST":
            self._send_json(405, {"ok": False, "error": f"{route}/ takes POST only"})
            return
        if not name or "/" in name or (route == "events" and name not in HTTP_EVENT_OPS):
            self._send_json(
                404,
                {
                    "ok": False,
                    "error": (
                        f"no route POST {route}/{name}; use POST <base>/effects/<kind> "
                        "(Idempotency-Key header) or POST <base>/events/"
                        f"<{'|'.join(HTTP_EVENT_OPS)}>"
                    ),
                },
            )
            return
        raw = self._read_body()
        if raw is None:
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            self._send_json(400, {"ok": False, "error": "body is not JSON"})
            return
        name = unquote(name)
        if route == "effects":
            # no Idempotency-Key: a keyless effect (applied each time, judged by content)
            key = self.headers.get("Idempotency-Key", "")
            msg = {**self._who(), "op": "effect", "kind": name, "payload": body}
            if key:
                msg["key"] = key
        else:
            if body is None:
                body = {}
            if not isinstance(body, dict):
                self._send_json(
                    400,
                    {
                        "ok": False,
                        "error": ('an event body is a JSON object such as {"step": "fetch"}'),
                    },
                )
                return
            msg = {**self._who(), **body, "op": name}  # the body's attempt/pid win
        reply = self.ledger._safe_handle(agent_message(msg))
        if reply is None:
            self._drop()
            return
        self._send_json(
            200 if reply.get("ok") else 400, reply, replayed=reply.get("applied") is False
        )

    # -- the HTTP stand-in -----------------------------------------------------------------

    def _http(self, path: str, query: str) -> None:
        raw = self._read_body()
        if raw is None:
            return
        method = self.command
        path = unquote(path)
        call = f"{method} {path}"
        attempt = self._attempt()
        route = self.ledger.services.route(method, path)
        failure = (
            pick(self.ledger.net_faults, call, self.ledger.count_call(attempt, call), attempt)
            or route.failure
        )
        payload = _payload(raw)
        msg: dict[str, Any] = {
            **self._who(),
            "attempt": self._attempt(),
            "method": method,
            "path": path,
        }
        if query:
            msg["query"] = query
            payload = {"body": payload, "query": query}
        if method in EVENT_METHODS:
            msg.update(op="event", name=call)
        else:
            msg.update(op="effect", kind=call, payload=payload)
            key = self.headers.get("Idempotency-Key", "")
            if key:
                msg["key"] = key
        if failure is not None:
            msg["failed"] = _describe(failure)
            if failure.applied:  # applied, then the reply is lost (_network)
                msg["reply_lost"] = True
        elif route.status >= 400:  # a scripted error reply: the service refused it, did nothing
            msg["failed"] = f"status {route.status}"
        reply = self.ledger._safe_handle(msg)
        if reply is None:
            self._drop()
            return
        if not reply.get("ok"):
            self._send_json(400, reply)
            return
        if failure is not None:
            self._fail(failure)
            return
        if route.latency and not self._hold(route.latency):
            return
        self._send(route.status, route.body, route.headers, replayed=reply.get("applied") is False)

    # -- the LLM stand-in ------------------------------------------------------------------

    def _llm(self, path: str) -> None:
        raw = self._read_body()
        if raw is None:
            return
        attempt = self._attempt()
        nth = self.ledger.count_call(attempt, "llm") if self.command == "POST" else 0
        fault = planned(self.ledger.net_faults, "llm", nth, attempt) if nth else None
        failure = fault.failure if fault is not None else None
        try:
            result = self.ledger.llm().handle(self.command, path, raw)
        except Exception as exc:  # a bug of the stand-in: the agent hears it
            self._send_json(
                500,
                {
                    "error": {
                        "message": (f"the LLM stand-in failed: {type(exc).__name__}: {exc}"),
                        "type": "server_error",
                    }
                },
            )
            return
        streamed = result.status == 200 and result.content_type.startswith("text/event-stream")
        sent = 0  # a stream failure: the events sent before it
        if fault is not None and failure is not None and failure.mid_stream:
            sent = failure.sent(len(result.chunks))
            if not streamed:
                fault.miss(
                    f"LLM call #{nth} was not streamed (the request had no stream: true, or "
                    f"was answered {result.status}): a {failure.describe()} cuts only a "
                    "streamed reply; have the agent stream, or fail a call it streams (nth)"
                )
                failure = None
            elif sent >= len(result.chunks):
                fault.miss(
                    f"the streamed reply of LLM call #{nth} had only {len(result.chunks)} "
                    f"event(s), all sent: nothing left to cut after {sent}; cut after fewer "
                    "events, or script a longer reply (services.llm)"
                )
                failure = None
        if fault is not None and failure is not None:
            fault.fire()
        billed = self.command == "POST" and result.status == 200
        if billed or failure is not None:
            full = failure is None or failure.applied or failure.mid_stream
            msg = {
                **self._who(),
                "attempt": attempt,
                "op": "llm_call",
                "name": result.model,
                "path": path,
                "fingerprint": result.fingerprint,
                "prompt_tokens": result.prompt_tokens if full else 0,
                "completion_tokens": result.completion_tokens if full else 0,
            }
            if failure is not None and failure.mid_stream:
                # billed the prompt and what was delivered; failed: the agent never had the
                # whole reply, so asking again is a retry, not a re-billed duplicate
                text = streamed_text(result.chunks[:sent])
                msg["completion_tokens"] = count_tokens(text) if text else 0
                msg["failed"] = f"{failure.describe()}: {sent} of {len(result.chunks)} events sent"
                msg["partial_reply"] = {
                    "how": failure.how,
                    "chunks_sent": sent,
                    "chunks": len(result.chunks),
                    "complete": False,
                    "completion_tokens": result.completion_tokens,
                    "text": text[:_PARTIAL_TEXT],
                }
            elif failure is not None:
                msg["failed"] = _describe(failure)
                if failure.applied:  # billed, then the reply is lost (_network)
                    msg["reply_lost"] = True
            reply = self.ledger._safe_handle(msg)
            if reply is None:
                self._drop()
                return
            if not reply.get("ok"):
                self._send_json(
                    400,
                    {
                        "error": {
                            "message": str(reply.get("error")),
                            "type": "invalid_request_error",
                        }
                    },
                )
                return
        if failure is not None and not failure.mid_stream:
            self._fail(failure)
            return
        headers = (("Content-Type", result.content_type),)
        if failure is not None:
            self._stream_cut(result.status, result.chunks[:sent], headers, failure)
        elif streamed:
            self._stream(result.status, result.chunks, headers)
        else:
            self._send(result.status, b"".join(result.chunks), headers)

    # -- the MCP stand-in ------------------------------------------------------------------

    def _mcp(self) -> None:
        """The MCP stand-in's streamable-HTTP endpoint (:mod:`._mcp`): a ``tools/call`` is
        recorded in the ledger (a boundary; a planned ``network`` fault of call ``mcp TOOL``
        fails it) before it is answered."""
        stand_in = self.ledger.mcp()
        sid = self.headers.get(SESSION_HEADER, "").strip()
        if self.command == "DELETE":
            self._answer(stand_in.delete(sid))
            return
        if self.command != "POST":
            self._send(
                405,
                b'{"error": "the MCP stand-in takes POST (and DELETE to end a session); it '
                b'sends no server-initiated messages (no GET stream)"}',
                (("Content-Type", "application/json"), ("Allow", "POST, DELETE")),
            )
            return
        raw = self._read_body()
        if raw is None:
            return
        got = stand_in.receive(raw, sid)
        if isinstance(got, MCPAnswer):
            self._answer(got)
            return
        attempt = self._attempt()
        failure = pick(
            self.ledger.net_faults, got.call, self.ledger.count_call(attempt, got.call), attempt
        )
        msg = {**self._who(), "attempt": attempt, **stand_in.tool_event(got)}
        if failure is not None:
            msg["failed"] = _describe(failure)
            if failure.applied:  # applied, then the reply is lost (_network)
                msg["reply_lost"] = True
        reply = self.ledger._safe_handle(msg)
        if reply is None:
            self._drop()
            return
        if failure is not None and reply.get("ok"):
            self._fail(failure)
            return
        self._answer(stand_in.tool_result(got, reply))

    def _answer(self, a: MCPAnswer) -> None:
        self._send(a.status, a.body, a.headers)

    # -- replies ---------------------------------------------------------------------------

    def _read_body(self) -> bytes | None:
        """The body the request announces (Content-Length), within the ledger's limits;
        None (after an error reply) if it is too big or does not come."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        try:
            n = int(self.headers.get("Content-Length") or 0)
            if n < 0:
                raise ValueError("negative")
        except ValueError:
            self._send_json(400, {"ok": False, "error": "bad Content-Length header"})
            return None
        if n > self.ledger.max_request_bytes:  # refused before reading a byte of it
            self.ledger.refused["body_size"] += 1
            self.close_connection = True
            self._send_json(
                413,
                {
                    "ok": False,
                    "error": (
                        f"body of {n} bytes is over the ledger's limit of "
                        f"{size_text(self.ledger.max_request_bytes)} per request"
                    ),
                },
            )
            return None
        return self._read_exact(n)

    def _read_exact(self, n: int) -> bytes | None:
        deadline = time.monotonic() + self.ledger.idle_timeout
        parts: list[bytes] = []
        got = 0
        while got < n:
            try:
                chunk = (
                    self.rfile.read1(min(65536, n - got)) if time.monotonic() < deadline else None
                )
            except (TimeoutError, OSError):
                chunk = None
            if chunk is None:
                self.ledger.refused["idle"] += 1
                self.close_connection = True
                self._send_json(
                    408,
                    {
                        "ok": False,
                        "error": (
                            f"the body announced {n} bytes and sent {got} within "
                            f"{self.ledger.idle_timeout:g} s; the connection is closed"
                        ),
                    },
                )
                return None
            if not chunk:
                self.close_connection = True
                self._send_json(
                    400,
                    {
                        "ok": False,
                        "error": (
                            f"the body announced {n} bytes and the connection closed after {got}"
                        ),
                    },
                )
                return None
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def _read_chunked(self) -> bytes | None:
        """A chunked body (what some clients send for a stream), within the limits."""
        out = bytearray()
        try:
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"x", 16)
                if size == 0:
                    while self.rfile.readline(1024).strip():
                        pass
                    return bytes(out)
                if len(out) + size > self.ledger.max_request_bytes:
                    self.ledger.refused["body_size"] += 1
                    self.close_connection = True
                    self._send_json(
                        413,
                        {
                            "ok": False,
                            "error": (
                                "chunked body over the ledger's limit of "
                                f"{size_text(self.ledger.max_request_bytes)} per request"
                            ),
                        },
                    )
                    return None
                chunk = self._read_exact(size)
                if chunk is None:
                    return None
                out += chunk
                self.rfile.readline(8)
        except (ValueError, OSError):
            self.close_connection = True
            self._send_json(400, {"ok": False, "error": "bad chunked body"})
            return None

    def _send(
        self,
        code: int,
        body: bytes,
        headers: tuple[tuple[str, str], ...] = (),
        *,
        replayed: bool = False,
    ) -> None:
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        if replayed:
            self.send_header("Idempotent-Replayed", "true")
        self.end_headers()
        if self.command != "HEAD":
            with contextlib.suppress(OSError):
                self.wfile.write(body)

    def _send_json(self, code: int, body: dict[str, Any], *, replayed: bool = False) -> None:
        self._send(
            code,
            json.dumps(body).encode(),
            (("Content-Type", "application/json"),),
            replayed=replayed,
        )

    def _stream(
        self, code: int, chunks: tuple[bytes, ...], headers: tuple[tuple[str, str], ...]
    ) -> None:
        """Server-sent events, chunk by chunk; the body ends when the connection closes
        (HTTP/1.0)."""
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with contextlib.suppress(OSError):
            for c in chunks:
                self.wfile.write(c)
                self.wfile.flush()

    def _stream_cut(
        self,
        code: int,
        chunks: tuple[bytes, ...],
        headers: tuple[tuple[str, str], ...],
        failure: Failure,
    ) -> None:
        """The first events of a stream, then the failure: a ``cut`` closes the connection
        (FIN: the body just ends), a ``stall`` waits ``pause`` seconds and then closes, a
        ``reset`` sends an RST (a moment after the events, so that they are read first)."""
        self._stream(code, chunks, headers)
        if failure.how == "stall":
            self._hold(failure.pause)  # False: the client gave up first, or the trial ended
        elif failure.how == "reset":
            self._hold(_RESET_DRAIN)
            self._reset()

    def _drop(self) -> None:
        """The agent was killed at this request: close without a reply."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _fail(self, failure: Failure) -> None:
        if failure.latency and not self._hold(failure.latency):
            return
        if failure.how == "status":
            self._send(failure.status, failure.body, failure.headers)
            return
        if failure.how == "timeout":
            self._hold(self.ledger.idle_timeout)
        self._reset()

    def _reset(self) -> None:
        """Close the connection with an RST (SO_LINGER 0): the client sees a reset."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()

    def _hold(self, seconds: float) -> bool:
        """Wait ``seconds`` before answering; False (the connection is to be left) if the
        client went away, the ledger closed, or the trial ended meanwhile."""
        end = time.monotonic() + seconds
        sock = self.connection
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return True
            if self.ledger.closing or self.ledger.generation != self.generation:
                self._reset()
                return False
            try:
                ready, _w, _x = select.select([sock], [], [], min(left, 0.1))
                if ready:
                    if not sock.recv(1, socket.MSG_PEEK):
                        self.close_connection = True
                        return False  # the client closed its side (gave up, or died)
                    time.sleep(min(left, 0.1))  # it sent more: not an answer to wait on
            except (OSError, ValueError):
                self.close_connection = True
                return False


def _describe(f: Failure) -> str:
    return f"status {f.status}" if f.how == "status" else f.how
