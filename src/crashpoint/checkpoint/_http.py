"""An HTTP side effect for :meth:`Run.effect`: the effect's key goes out as ``Idempotency-Key``.

``http_effect(url)`` makes the ``fn`` of ``run.effect(kind, payload, fn)``: it sends the payload
as a JSON body with the effect's deterministic key in the ``Idempotency-Key`` header, and
returns ``{"status": ..., "body": ...}``, which the run records as the effect's result. A crash
between the request and that record re-sends the *same* key on resume (policy ``retry``), so a
service that deduplicates by key applies it once. Point ``url`` at the harness's HTTP stand-in
(``{http}`` / ``CRASHPOINT_HTTP``, or the ledger's ``POST /effects/<kind>`` front) and the
harness sees and judges every request; in production, at the real service.

Standard library only (``urllib``), as the rest of the reference library.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from email.message import Message
from typing import Any
from urllib.parse import quote, urlsplit

from crashpoint.errors import HttpEffectError, InvalidArgument

__all__ = ["HttpEffectError", "http_effect"]

#: At most this much of a reply body is read and recorded as the effect's result.
MAX_REPLY_BYTES = 1 << 20
#: Replies worth another try with the same key (with ``retries``), besides no reply at all.
RETRY_STATUSES = (408, 425, 429, 500, 502, 503, 504)
_MAX_BACKOFF = 30.0


def _header_value(key: str) -> str:
    """The key as a header value: as is when it is printable ASCII, else percent-encoded
    (deterministic, so every attempt sends the same value)."""
    if key.isascii() and key.isprintable():
        return key
    return quote(key, safe="")


def http_effect(
    url: str,
    *,
    method: str = "POST",
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    retries: int = 0,
    opener: urllib.request.OpenerDirector | None = None,
) -> Callable[[Any, str], dict[str, Any]]:
    """The ``fn`` of :meth:`Run.effect` for an HTTP request: ``fn(payload, key)`` sends
    ``method url`` with ``payload`` as a JSON body (none if ``payload`` is None) and the header
    ``Idempotency-Key: key``, plus ``headers`` (kept out of the journal: a good place for an
    ``Authorization``). A 2xx reply returns ``{"status": code, "body": <JSON if the reply is
    JSON, else text>}`` (plus ``"truncated": True`` past 1 MiB), which the run records.

    Anything else raises :class:`HttpEffectError` and the effect is not recorded: a non-2xx
    reply (with its status and body), or no reply (connection refused or reset, a timeout
    after ``timeout`` seconds). ``retries`` more tries, with the same key, are made first on no
    reply and on 408, 425, 429, 500, 502, 503 and 504 (after ``Retry-After`` when the reply
    gives one, up to 30 s, else 0.5 s doubling).

    >>> run.effect("webhook", {"text": "done"}, http_effect(base + "/hooks/done"))  # doctest: +SKIP
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(f"http_effect: {url!r} is not an http:// or https:// URL with a host")
    method = method.upper()
    if not method.isalpha():
        raise InvalidArgument(f"http_effect: {method!r} is not an HTTP method")
    if retries < 0 or timeout <= 0:
        raise InvalidArgument(
            f"http_effect: retries must be >= 0 and timeout > 0, got retries "
            f"{retries}, timeout {timeout}"
        )
    extra = dict(headers or {})
    if opener is None:  # a loopback stand-in is never reached through an environment's proxy
        loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")
        opener = urllib.request.build_opener(
            *([urllib.request.ProxyHandler({})] if loopback else [])
        )
    open_ = opener.open

    def send(payload: Any, key: str) -> dict[str, Any]:
        data = (
            None
            if payload is None
            else json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        )
        hdrs = {**extra, "Idempotency-Key": _header_value(key)}
        if data is not None:
            hdrs.setdefault("Content-Type", "application/json")
        for attempt in range(retries + 1):
            req = urllib.request.Request(  # noqa: S310 (the scheme is checked: http or https)
                url, data=data, method=method, headers=hdrs
            )
            try:
                with open_(req, timeout=timeout) as resp:
                    return _result(resp.status, resp.headers, resp.read(MAX_REPLY_BYTES + 1))
            except urllib.error.HTTPError as exc:  # a reply, but not a 2xx one
                with exc:
                    raw = exc.read(MAX_REPLY_BYTES)
                err = HttpEffectError(
                    method,
                    url,
                    key,
                    exc.code,
                    raw.decode("utf-8", "replace"),
                    str(exc.reason or ""),
                )
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
                if exc.code not in RETRY_STATUSES or attempt == retries:
                    raise err from None
            except (urllib.error.URLError, OSError) as exc:  # no reply at all
                reason = getattr(exc, "reason", None) or exc
                err = HttpEffectError(method, url, key, None, reason=f"{reason}")
                retry_after = None
                if attempt == retries:
                    raise err from exc
            time.sleep(_backoff(attempt, retry_after))
        raise AssertionError("unreachable")  # the loop returns or raises

    return send


def _backoff(attempt: int, retry_after: str | None) -> float:
    if retry_after and retry_after.strip().isdigit():
        return min(float(retry_after.strip()), _MAX_BACKOFF)
    return min(0.5 * 2.0**attempt, _MAX_BACKOFF)


def _result(status: int, headers: Message, raw: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status}
    if len(raw) > MAX_REPLY_BYTES:
        raw = raw[:MAX_REPLY_BYTES]
        out["truncated"] = True
    text = raw.decode(headers.get_content_charset() or "utf-8", "replace")
    body: Any = text
    if headers.get_content_type().endswith(("/json", "+json")) and not out.get("truncated"):
        try:
            body = json.loads(text) if text.strip() else None
        except ValueError:
            body = text
    out["body"] = body
    return out
