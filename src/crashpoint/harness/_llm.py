"""The LLM stand-in: an OpenAI-compatible endpoint with deterministic replies.

INTERFACE (scaffolding for issue 12; the ``llm`` helper implements it, the ``svc`` helper's
HTTP front calls it). The front serves ``<base>/<token>/v1/...``, strips the prefix and hands
the rest here; it records one ledger event ``{"op": "llm_call", "name": result.model,
"fingerprint": ..., "prompt_tokens": ..., "completion_tokens": ...}`` per call (a boundary:
kill before it is answered, or after it is "billed" and before the reply) and sends
``result.chunks`` (one body, or server-sent events when ``stream`` was asked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LLMResult", "LLMStandIn"]


@dataclass(frozen=True)
class LLMResult:
    status: int                 # 200, or 400/404 with an OpenAI-style error body
    content_type: str           # application/json, or text/event-stream
    chunks: tuple[bytes, ...]   # the body: one chunk, or SSE events in order
    model: str
    prompt_tokens: int
    completion_tokens: int
    fingerprint: str            # sha256 of the request, canonical, without stream options:
    #                             the same question asked twice has the same fingerprint


class LLMStandIn:
    """``script``: None (deterministic echo), or the scenario's ``services.llm`` mapping."""

    def __init__(self, script: dict[str, Any] | None = None) -> None:
        self.script = script

    def handle(self, method: str, path: str, body: bytes) -> LLMResult:
        """Answer ``method path`` (``path`` relative to ``/v1``: ``/chat/completions``,
        ``/responses``, ``/models``) with request ``body``."""
        raise NotImplementedError("issue 12: the llm helper implements this")
