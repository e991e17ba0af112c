"""The SMTP stand-in: a mail sink on loopback, each message an effect.

INTERFACE (scaffolding for issue 12; the ``smtp`` helper implements it, the ``svc`` helper
wires it into the trial: ``{smtp}`` placeholder = ``host:port``, variables
``CRASHPOINT_SMTP_HOST``/``_PORT``/``_USER``/``_PASSWORD``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["SmtpSink"]


class SmtpSink:
    """``handle``: the ledger's :meth:`Ledger.handle`; each accepted message becomes
    ``{"op": "effect", "kind": "mail", "key": <Message-ID or absent>, "payload": {...}}``;
    a None reply (the agent was killed) drops the connection without a reply. ``token``: the
    trial's secret, required as the AUTH password; a session without it is refused (530) and
    reported through ``on_refused(description)``."""

    def __init__(self, handle: Callable[[dict[str, Any]], dict[str, Any] | None], token: str,
                 on_refused: Callable[[str], None] | None = None) -> None:
        self.handle, self.token, self.on_refused = handle, token, on_refused
        self.host, self.port = "127.0.0.1", 0

    def start(self) -> SmtpSink:
        raise NotImplementedError("issue 12: the smtp helper implements this")

    def close(self) -> None:
        raise NotImplementedError("issue 12: the smtp helper implements this")
