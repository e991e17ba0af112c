"""A mail side effect for :meth:`Run.effect`: the effect's key becomes the Message-ID.

``smtp_effect(host, port)`` makes the ``fn`` of ``run.effect(kind, payload, fn)``: it sends the
payload as one message over SMTP (``smtplib``) with a Message-ID derived from the effect's
deterministic key. A crash between the send and the journal record re-sends the *same*
Message-ID on resume, which a receiver (the harness's SMTP stand-in, a mail service, a mail
client's threading) can deduplicate; a fresh random Message-ID cannot be told from a new mail.
"""

from __future__ import annotations

import hashlib
import re
import smtplib
import ssl
from collections.abc import Callable, Sequence
from email.message import EmailMessage
from typing import Any

from crashpoint.errors import InvalidArgument, MailEffectError

__all__ = ["MailEffectError", "message_id_for", "smtp_effect"]

_NOT_ATEXT = re.compile(r"[^A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+")


def message_id_for(key: str, domain: str = "crashpoint.invalid") -> str:
    """The Message-ID of the effect keyed ``key``: the same for the same key in every attempt,
    different for different keys (a digest of the key, after a readable part of it)."""
    readable = _NOT_ATEXT.sub(".", key).strip(".")[:60].strip(".") or "effect"
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"<{readable}.{digest}@{domain}>"


def _addresses(value: Any, what: str) -> list[str]:
    got = [value] if isinstance(value, str) else value
    if not isinstance(got, Sequence) or not got or not all(isinstance(a, str) and a for a in got):
        raise InvalidArgument(
            f"smtp_effect: the payload's {what!r} must be an address or a "
            f"non-empty list of addresses, got {value!r}"
        )
    return list(got)


def smtp_effect(
    host: str,
    port: int = 25,
    *,
    user: str | None = None,
    password: str | None = None,
    sender: str | None = None,
    starttls: bool = False,
    timeout: float = 30.0,
    domain: str = "crashpoint.invalid",
) -> Callable[[Any, str], dict[str, Any]]:
    """The ``fn`` of :meth:`Run.effect` for an email: ``fn(payload, key)`` sends one message
    built from ``payload`` — ``{"to": address or list, "subject": ..., "body": ...}``, plus
    ``"from"`` and ``"cc"`` if wanted (``sender`` is the default ``from``) — with the Message-ID
    :func:`message_id_for` ``(key)``, logging in with ``user``/``password`` if given (after
    STARTTLS if ``starttls``). Returns ``{"message_id": ..., "refused": {address: [code,
    text]}}`` (recipients the server refused while taking the others), which the run records.

    A server that refuses the message, or goes away before its reply (``timeout`` seconds),
    raises :class:`MailEffectError`; the effect is not recorded."""
    if not host or not 0 < int(port) < 65536:
        raise InvalidArgument(f"smtp_effect: {host!r}:{port!r} is not a host and a port")
    if (user is None) != (password is None):
        raise InvalidArgument("smtp_effect: give both user and password, or neither")

    def send(payload: Any, key: str) -> dict[str, Any]:
        if not isinstance(payload, dict):
            raise InvalidArgument(
                f"smtp_effect: the payload must be a dict with 'to', 'subject' "
                f"and 'body', got {type(payload).__name__}"
            )
        from_ = payload.get("from") or sender
        if not from_:
            raise InvalidArgument(
                "smtp_effect: no sender: give the payload a 'from' or smtp_effect(sender=...)"
            )
        to = _addresses(payload.get("to"), "to")
        cc = _addresses(payload["cc"], "cc") if payload.get("cc") else []
        mid = message_id_for(key, domain)
        msg = EmailMessage()
        msg["From"] = str(from_)
        msg["To"] = ", ".join(to)
        if cc:
            msg["Cc"] = ", ".join(cc)
        msg["Subject"] = str(payload.get("subject") or "")
        msg["Message-ID"] = mid
        msg.set_content(str(payload.get("body") or ""))
        try:
            with smtplib.SMTP(host, int(port), timeout=timeout) as client:
                if starttls:
                    client.starttls(context=ssl.create_default_context())
                if user is not None and password is not None:
                    client.login(user, password)
                refused = client.send_message(msg, from_addr=str(from_), to_addrs=to + cc)
        except (smtplib.SMTPException, OSError) as exc:
            raise MailEffectError(host, int(port), mid, f"{type(exc).__name__}: {exc}") from exc
        return {
            "message_id": mid,
            "refused": {
                a: [c, t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t)]
                for a, (c, t) in refused.items()
            },
        }

    return send
