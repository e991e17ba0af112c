"""The SMTP stand-in: a mail sink on loopback, each message an effect.

The ``svc`` helper wires it into the trial: ``{smtp}`` placeholder = ``host:port``, variables
``CRASHPOINT_SMTP_HOST``/``_PORT``/``_USER``/``_PASSWORD``.

**Who may send.** A session from the trial's own processes (``admits(client_port,
server_port)``, the ledger's peer check: see :mod:`._peer`) sends with or without a login, and
any credentials it gives are accepted: an agent written for a real mail server works as is.
Any other session (another user, another job: a guest) must authenticate (AUTH PLAIN or LOGIN,
in plain text: it is loopback only) with the trial's secret token as the password
(``CRASHPOINT_SMTP_PASSWORD``), any user name, within ``guest_timeout`` seconds, and at most
``max_guests`` guests are served at once, at most ``GUESTS_PER_USER`` of one user: outside
sessions can neither act as the agent nor starve it. MAIL, RCPT or DATA from an unadmitted
guest gets ``530``, a wrong password ``535``; both are reported through ``on_refused`` and
never become effects. Without ``admits`` every session is a guest. Each message accepted (the
end of DATA) is one call

    handle({"op": "effect", "kind": "mail", "key": <Message-ID>, "message_id": <Message-ID>,
            "payload": {"from": ..., "to": [sorted recipients], "subject": ..., "body": ...}})

made *before* the ``250`` reply, so a message is a boundary like a probe effect: a kill before
it means the message was not accepted; a kill in its in-doubt window means it was accepted and
the agent never heard so. Either way ``handle`` returns None and the connection is closed
without a reply (``smtplib`` raises ``SMTPServerDisconnected``). A duplicate key is accepted
with ``250`` (a real mail service would take it and deduplicate).

The Message-ID is the key, not part of the payload: a message re-sent under a fresh random
Message-ID (``email.utils.make_msgid()``, the usual case) has the same payload and so counts as
a second application of the same content (``exactly_once`` reports it duplicated), while one
re-sent under a Message-ID the agent derived from its own state is deduplicated by key. The
payload is what the recipients read: envelope sender and recipients, the decoded subject, the
text body (line endings normalised), and, if any, the attachments by name, type and SHA-256.

Bounded: at most ``max_message_bytes`` per message (``552``), ``max_recipients`` per message
(``452``), ``max_connections`` sessions of the trial at once and ``max_guests`` others (the
excess gets ``421``), and a session quiet for ``idle_timeout`` seconds (or a DATA not whole
within it) is closed; a guest that has not logged in with the token within ``guest_timeout``
seconds too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import email
import email.policy
import hashlib
import hmac
import logging
import socket
import threading
from collections.abc import Callable
from email.message import EmailMessage
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from crashpoint.errors import InvalidArgument, StandInError
from crashpoint.harness._standins._peer import socket_owner

__all__ = ["SmtpSink", "mail_payload"]

#: Defaults of the limits (see :class:`SmtpSink`).
MAX_MESSAGE_BYTES = 10 << 20
MAX_RECIPIENTS = 100
MAX_CONNECTIONS = 64
IDLE_TIMEOUT = 120.0
MAX_GUESTS = 16
GUEST_TIMEOUT = 5.0
#: Of the guest sessions, at most this many from one user (or from clients nothing can name).
GUESTS_PER_USER = 4


class _QuietKnownNoise(logging.Filter):
    """Drops aiosmtpd's warnings about choices made on purpose here (AUTH in plain text on
    loopback; its own deprecated ``login_data`` it sets on every AUTH) from the harness's
    stderr. Everything else it logs goes through."""

    NOISE = ("auth_require_tls == False", "Session.login_data is deprecated")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(n in str(record.msg) for n in self.NOISE)


logging.getLogger("mail.log").addFilter(_QuietKnownNoise())


def mail_payload(
    data: bytes, mail_from: str, rcpt_tos: list[str]
) -> tuple[dict[str, Any], str | None]:
    """The effect payload of one message (``data`` as received after DATA) and its Message-ID
    (None if it has none). The payload leaves out what a client makes up afresh on each send
    (Message-ID, Date, the MIME boundary), so the same mail sent twice has the same payload."""
    try:
        return _parsed(data, mail_from, rcpt_tos)
    except Exception:  # a message email cannot take apart is still a message: its raw text
        text = data.decode("utf-8", "replace").replace("\r\n", "\n")
        return {"from": mail_from, "to": sorted(rcpt_tos), "subject": "", "body": text}, None


def _parsed(data: bytes, mail_from: str, rcpt_tos: list[str]) -> tuple[dict[str, Any], str | None]:
    msg = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)  # what policy.default builds
    mid = str(msg.get("Message-ID") or "").strip() or None
    payload: dict[str, Any] = {
        "from": mail_from,
        "to": sorted(rcpt_tos),
        "subject": str(msg.get("Subject") or ""),
        "body": _text(msg.get_body(preferencelist=("plain", "html"))),
    }
    attachments = []
    for part in msg.iter_attachments():
        raw = part.get_payload(decode=True)
        blob = raw if isinstance(raw, bytes) else b""
        attachments.append(
            {
                "filename": part.get_filename() or "",
                "content_type": part.get_content_type(),
                "sha256": hashlib.sha256(blob).hexdigest(),
            }
        )
    if attachments:
        payload["attachments"] = attachments
    return payload, mid


def _text(part: Any) -> str:
    """The decoded text of a MIME part ("" if none), with CRLF line endings made LF."""
    if part is None:
        return ""
    try:
        text = part.get_content()
    except (LookupError, ValueError, AssertionError):  # unknown charset, odd encoding
        raw = part.get_payload(decode=True)
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text).replace("\r\n", "\n")


class SmtpSink:
    """``handle``: the ledger's :meth:`Ledger.handle`; each accepted message becomes
    ``{"op": "effect", "kind": "mail", "key": <Message-ID or absent>, "payload": {...}}``;
    a None reply (the agent was killed) drops the connection without a reply. ``token``: the
    trial's secret, required as the AUTH password of a session ``admits`` does not vouch for
    (``admits(client_port, server_port, thorough)``: True for the trial's own processes); such a
    session without it is refused (530) and reported through ``on_refused(description)``.

    :meth:`start` binds ``127.0.0.1`` on a free port (:attr:`host`, :attr:`port`) and serves
    from a thread of its own; :meth:`close` closes every session, stops the thread and frees
    the port. Usable as a context manager."""

    def __init__(
        self,
        handle: Callable[[dict[str, Any]], dict[str, Any] | None],
        token: str,
        on_refused: Callable[[str], None] | None = None,
        *,
        admits: Callable[[int, int, bool], bool] | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_recipients: int = MAX_RECIPIENTS,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout: float = IDLE_TIMEOUT,
        max_guests: int = MAX_GUESTS,
        guest_timeout: float = GUEST_TIMEOUT,
    ) -> None:
        if not token:
            raise InvalidArgument(
                "the SMTP sink needs the trial's secret token (the AUTH password)"
            )
        if (
            min(max_message_bytes, max_recipients, max_connections, max_guests) < 1
            or idle_timeout <= 0
            or guest_timeout <= 0
        ):
            raise InvalidArgument(
                "SMTP sink limits must be positive: max_message_bytes "
                f"{max_message_bytes}, max_recipients {max_recipients}, "
                f"max_connections {max_connections}, idle_timeout {idle_timeout}, "
                f"max_guests {max_guests}, guest_timeout {guest_timeout}"
            )
        self.handle, self.token, self.on_refused = handle, token, on_refused
        self.admits = admits
        self.max_guests, self.guest_timeout = max_guests, guest_timeout
        self.host, self.port = "127.0.0.1", 0
        self.max_message_bytes, self.max_recipients = max_message_bytes, max_recipients
        self.max_connections, self.idle_timeout = max_connections, idle_timeout
        #: what was refused, by reason (auth, size, recipients, connections, harness)
        self.refused: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._sessions: set[_Session] = set()
        self._guests: set[_Session] = set()
        self._open: set[_Session] = set()  # every connection not yet lost (refused ones too)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> SmtpSink:
        if self._thread is not None:
            raise StandInError("this SMTP sink is already started")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, 0))
            sock.listen(64)
            self.port = sock.getsockname()[1]
        except BaseException:
            sock.close()
            raise
        loop = asyncio.new_event_loop()
        # ledger calls run off the event loop: a kill (and what the trial does on it) never
        # stalls the other sessions' timers
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="smtp-sink-handle"
        )
        try:
            self._server = loop.run_until_complete(
                loop.create_server(lambda: _Session(self), sock=sock)
            )
        except BaseException:
            sock.close()
            loop.close()
            self._pool.shutdown()
            raise
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="smtp-sink", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Close every session, stop the server's thread and free its port (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        with contextlib.suppress(Exception):
            fut.result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._loop = self._thread = self._server = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for s in [*self._open, *self._sessions, *self._guests]:
            if isinstance(s.transport, asyncio.WriteTransport):
                s.transport.abort()
        for _ in range(3):  # let each aborted transport close its socket before the loop stops
            await asyncio.sleep(0)
        if self._server is not None:
            await self._server.wait_closed()
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> SmtpSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what a session reports ----------------------------------------------------------------

    def _refuse(self, reason: str, description: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        if self.on_refused is not None:
            with contextlib.suppress(Exception):  # a logging bug never takes the sink down
                self.on_refused(description)

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        if isinstance(server, _Session) and server.trusted:
            return AuthResult(success=True)  # the trial's own process: any credentials
        ok = isinstance(auth_data, LoginPassword) and hmac.compare_digest(
            auth_data.password, self.token.encode()
        )
        if ok:
            return AuthResult(success=True)
        login = (
            auth_data.login.decode("utf-8", "replace")
            if isinstance(auth_data, LoginPassword)
            else "?"
        )
        self._refuse(
            "auth",
            f"SMTP from {_peer(session)}: AUTH {mechanism} as {login!r} "
            "refused (535): the password is not the trial's token",
        )
        return AuthResult(success=False, handled=False)

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if len(envelope.rcpt_tos) >= self.max_recipients:
            self._refuse(
                "recipients",
                f"SMTP from {_peer(session)}: recipient {address!r} "
                f"refused (452): over {self.max_recipients} recipients",
            )
            return f"452 4.5.3 Too many recipients (at most {self.max_recipients})"
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        data = envelope.original_content or b""
        payload, mid = mail_payload(
            data, str(envelope.mail_from or ""), [str(r) for r in envelope.rcpt_tos]
        )
        msg: dict[str, Any] = {"op": "effect", "kind": "mail", "via": "smtp", "payload": payload}
        if mid is not None:
            msg["key"] = msg["message_id"] = mid
        loop = asyncio.get_running_loop()
        try:
            reply = await loop.run_in_executor(self._pool, self.handle, msg)
        except Exception as exc:
            self._refuse(
                "harness",
                f"SMTP from {_peer(session)}: the harness failed on a "
                f"message: {type(exc).__name__}: {exc}",
            )
            return f"451 4.3.0 the harness failed on this message: {type(exc).__name__}"
        if reply is None:  # the agent was killed at this message: it never hears back
            assert isinstance(server, _Session)
            server.drop()
            return "250 OK"  # never sent: the session is dropped
        if not reply.get("ok", True):
            return f"451 4.3.0 {str(reply.get('error') or 'refused')[:200]}"
        return "250 OK"


def _peer(session: Session | None) -> str:
    peer: Any = session.peer if session is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def _uid_of(session: Session | None, server_port: int) -> int:
    """The user whose process holds the client end of ``session`` (-1: unknown)."""
    peer: Any = session.peer if session is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        with contextlib.suppress(Exception):
            owner = socket_owner(int(peer[1]), server_port)
            if owner is not None:
                return owner[1]
    return -1


class _Session(SMTP):
    """One SMTP session of the sink: aiosmtpd's with the sink's limits, refusals reported,
    and a way to drop the connection without a reply."""

    def __init__(self, sink: SmtpSink) -> None:
        super().__init__(
            sink,
            hostname="crashpoint-smtp-sink",
            ident="crashpoint SMTP sink",
            data_size_limit=sink.max_message_bytes,
            timeout=sink.idle_timeout,
            enable_SMTPUTF8=True,
            auth_required=False,
            auth_require_tls=False,
            authenticator=sink._authenticate,
            loop=asyncio.get_running_loop(),
        )
        # AUTH is required, in plain text (loopback only); set after __init__, which warns
        # (UserWarning) about that combination on every session
        self._auth_required = True
        self.sink = sink
        self._dropped = False
        self._refused_unauth = False
        #: a session of the trial's own processes (no login needed, any login accepted)
        self.trusted = False
        self.uid = -1  # the user whose process opened it (-1: unknown)
        self._guest_timer: asyncio.TimerHandle | None = None

    def _vouched(self, thorough: bool) -> bool:
        peer: Any = self.session.peer if self.session is not None else None
        if self.sink.admits is None or not (isinstance(peer, tuple) and len(peer) >= 2):
            return False
        with contextlib.suppress(Exception):  # a failure to look is "not vouched for"
            return self.sink.admits(int(peer[1]), self.sink.port, thorough)
        return False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.sink._open.add(self)
        self.trusted = self._vouched(False)
        pool = self.sink._sessions if self.trusted else self.sink._guests
        limit = self.sink.max_connections if self.trusted else self.sink.max_guests
        over = len(pool) >= limit
        what = "sessions" if self.trusted else "sessions from outside the trial"
        if not self.trusted:  # a guest: within its user's share too
            self.uid = _uid_of(self.session, self.sink.port)
            mine = sum(1 for g in pool if g.uid == self.uid)
            if not over and mine >= min(GUESTS_PER_USER, limit):
                over, limit = True, min(GUESTS_PER_USER, limit)
                what = "sessions from outside the trial by one user"
        if over:
            self.sink._refuse(
                "connections" if self.trusted else "guests",
                f"SMTP from {_peer(self.session)}: refused (421): over {limit} {what}",
            )
            self._dropped = True  # nothing else is said on it
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(b"421 4.7.0 Too many connections, try again later\r\n")
            transport.close()
            return
        pool.add(self)
        if not self.trusted:
            self._guest_timer = asyncio.get_running_loop().call_later(
                self.sink.guest_timeout, self._guest_expired
            )

    def _guest_expired(self) -> None:
        """A guest that has not logged in with the token in time is closed."""
        if self.trusted or (self.session is not None and self.session.authenticated):
            return
        if self.transport is not None and not self._dropped:
            self.sink._refuse(
                "idle",
                f"SMTP from {_peer(self.session)}: closed (421): no login with the trial's "
                f"token within {self.sink.guest_timeout:g} s",
            )
            self._dropped = True
            assert isinstance(self.transport, asyncio.WriteTransport)
            self.transport.write(b"421 4.7.0 Login timeout, closing connection\r\n")
            self.transport.close()

    def connection_lost(self, error: Exception | None) -> None:
        self.sink._open.discard(self)
        self.sink._sessions.discard(self)
        self.sink._guests.discard(self)
        if self._guest_timer is not None:
            self._guest_timer.cancel()
        super().connection_lost(error)

    def drop(self) -> None:
        """Close the connection without another word."""
        self._dropped = True
        if self.transport is not None:
            self.transport.close()

    async def push(self, status: Any) -> None:
        if self._dropped:
            return
        if isinstance(status, str) and status.startswith("552"):
            self.sink._refuse(
                "size",
                f"SMTP from {_peer(self.session)}: message refused "
                f"(552): over {self.sink.max_message_bytes} bytes",
            )
        await super().push(status)

    async def check_auth_needed(self, caller_method: str) -> bool:
        """MAIL, RCPT and DATA ask this: the sink says so itself rather than trust a private
        flag of aiosmtpd's to keep meaning "AUTH required"."""
        if self.trusted or (self.session is not None and self.session.authenticated):
            return False
        if not self._refused_unauth and self.sink.admits is not None:
            # a process the harness started a moment ago may not have been registered yet
            loop = asyncio.get_running_loop()
            if await loop.run_in_executor(self.sink._pool, self._vouched, True):
                self.trusted = True
                self.sink._guests.discard(self)
                self.sink._sessions.add(self)
                return False
        if not self._refused_unauth:
            self._refused_unauth = True  # once per session
            self.sink._refuse(
                "auth",
                f"SMTP from {_peer(self.session)}: {caller_method} "
                "without AUTH refused (530): not the trial's process, and "
                "no login with the trial's token (CRASHPOINT_SMTP_PASSWORD)",
            )
        await self.push("530 5.7.0 Authentication required")
        return True
