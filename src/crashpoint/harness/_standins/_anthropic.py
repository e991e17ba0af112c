"""The Anthropic-compatible face of the LLM stand-in: ``POST /v1/messages``.

The same scripted replies as the OpenAI-compatible routes (:mod:`._llm`), so one
``services.llm`` script answers an agent whichever SDK it uses; the same billing (an
``llm_call`` event per answered call, the same token counts), the same fingerprint (of the
route ``messages`` and the body without ``stream``) and the same stream faults (``cut``,
``stall``, ``reset_after``: the events of a streamed reply are cut like the OpenAI ones).

This module turns a Messages request into the request view the script sees
(:func:`messages_view`), checks it (:func:`check_messages`, raising :class:`MessagesError`
with the Anthropic error type), and renders a reply as a Messages body or as its server-sent
events (:func:`render_messages`): ``message_start``, then per content block
``content_block_start`` / ``content_block_delta`` (``text_delta``, or ``input_json_delta`` for
a ``tool_use`` block) / ``content_block_stop``, then ``message_delta`` (the ``stop_reason``
and the output tokens) and ``message_stop``. Errors are Anthropic-shaped: ``{"type": "error",
"error": {"type": ..., "message": ...}}``.

The agent's SDK finds the stand-in with ``anthropic.Anthropic(base_url=...)`` or the
``ANTHROPIC_BASE_URL`` variable (``{anthropic}``: the front's base URL, the SDK adds
``/v1/messages``); its key (``ANTHROPIC_API_KEY``) is the trial's token, sent in the
``x-api-key`` header. Layer 5: imports the specification only.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from crashpoint.harness._spec import Reply, canonical

__all__ = [
    "ENV_ANTHROPIC_KEY",
    "ENV_ANTHROPIC_URL",
    "MessagesError",
    "check_messages",
    "messages_error",
    "messages_view",
    "render_messages",
]

#: Where the Anthropic SDK finds the stand-in (``{anthropic}``) and its key (the trial's token).
ENV_ANTHROPIC_URL = "ANTHROPIC_BASE_URL"
ENV_ANTHROPIC_KEY = "ANTHROPIC_API_KEY"

#: The roles a Messages request's ``messages`` may have.
ROLES = ("user", "assistant")


class MessagesError(Exception):
    """A request the Messages API refuses: ``status`` and the Anthropic error ``kind``."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.status, self.kind = message, status, kind


def messages_error(status: int, message: str, kind: str = "invalid_request_error") -> bytes:
    """An Anthropic error body."""
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type", "text") == "text"
        )
    return "" if content is None else canonical(content)


def check_messages(body: Any) -> dict[str, Any]:
    """``body`` (parsed JSON) if it is a Messages request the stand-in can answer; else
    :class:`MessagesError` naming the field, as the real API does."""
    if not isinstance(body, dict):
        raise MessagesError("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise MessagesError("model: Field required" if model is None else "model: must be a string")
    mt = body.get("max_tokens")
    if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
        raise MessagesError(
            "max_tokens: Field required" if mt is None else "max_tokens: must be an integer >= 1"
        )
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise MessagesError("messages: must be a non-empty list of {role, content}")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise MessagesError(f"messages.{i}.role: must be one of {', '.join(ROLES)}")
        if not isinstance(m.get("content"), (str, list)):
            raise MessagesError(f"messages.{i}.content: must be a string or a list of blocks")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise MessagesError("tools: must be a list")
    if not isinstance(body.get("stream", False), bool):
        raise MessagesError("stream: must be a boolean")
    return body


def messages_view(body: dict[str, Any]) -> dict[str, Any]:
    """The request view a reply rule or function sees (as :func:`._llm.request_view`):
    ``endpoint`` ``messages``; a user message's ``tool_result`` blocks are messages of role
    ``tool`` after its text, and the last user message is the last one with text."""
    msgs: list[dict[str, str]] = []
    if body.get("system"):
        msgs.append({"role": "system", "content": _text(body["system"])})
    for m in body["messages"]:
        content = m["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        text = "".join(
            str(b.get("text", ""))
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "text"
        )
        if m["role"] == "assistant":
            calls = [
                {"name": b.get("name"), "input": b.get("input")}
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "tool_use"
            ]
            msgs.append(
                {"role": "assistant", "content": text + (canonical(calls) if calls else "")}
            )
            continue
        if text or not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
            msgs.append({"role": "user", "content": text})
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                msgs.append({"role": "tool", "content": _text(b.get("content"))})
    last = max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=-1)
    tools = [str(t.get("name", "")) for t in body.get("tools") or [] if isinstance(t, dict)]
    return {
        "endpoint": "messages",
        "model": str(body.get("model", "")),
        "messages": msgs,
        "last_user": msgs[last]["content"] if last >= 0 else "",
        "tool_results": [m["content"] for m in msgs[last + 1 :] if m["role"] == "tool"],
        "tools": tools,
        "body": body,
    }


def _sse(event: str, obj: dict[str, Any]) -> bytes:
    data = json.dumps({"type": event, **obj}, separators=(",", ":"))
    return f"event: {event}\ndata: {data}\n\n".encode()


def _pieces(text: str) -> list[str]:
    return re.findall(r"\s*\S+\s*|\s+", text) if text else []


def _input(arguments: str) -> dict[str, Any]:
    try:
        got = json.loads(arguments) if arguments else {}
    except ValueError:
        got = {"arguments": arguments}
    return got if isinstance(got, dict) else {"arguments": got}


def _tool_id(fp: str, i: int) -> str:
    return "toolu_" + hashlib.sha256(f"{fp}:{i}".encode()).hexdigest()[:24]


def render_messages(
    model: str, fp: str, reply: Reply, ptok: int, ctok: int, stream: bool
) -> tuple[bytes, ...]:
    """The Messages reply to a call: one JSON body, or its server-sent events in order."""
    blocks: list[dict[str, Any]] = []
    if reply.text or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.text or ""})
    for i, (name, args) in enumerate(reply.tool_calls):
        blocks.append(
            {"type": "tool_use", "id": _tool_id(fp, i), "name": name, "input": _input(args)}
        )
    stop = "tool_use" if reply.tool_calls else "end_turn"
    message: dict[str, Any] = {
        "id": "msg_" + fp[:24],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": ptok, "output_tokens": ctok},
    }
    if not stream:
        return (json.dumps(message).encode(),)
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": ptok, "output_tokens": 1},
    }
    out = [_sse("message_start", {"message": start})]
    for k, block in enumerate(blocks):
        if block["type"] == "text":
            out.append(
                _sse("content_block_start", {"index": k, "content_block": {**block, "text": ""}})
            )
            out += [
                _sse(
                    "content_block_delta", {"index": k, "delta": {"type": "text_delta", "text": p}}
                )
                for p in _pieces(block["text"])
            ]
        else:
            out.append(
                _sse("content_block_start", {"index": k, "content_block": {**block, "input": {}}})
            )
            out.append(
                _sse(
                    "content_block_delta",
                    {
                        "index": k,
                        "delta": {
                            "type": "input_json_delta",
                            "partial_json": json.dumps(block["input"], sort_keys=True),
                        },
                    },
                )
            )
        out.append(_sse("content_block_stop", {"index": k}))
    out.append(
        _sse(
            "message_delta",
            {
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": ctok},
            },
        )
    )
    out.append(_sse("message_stop", {}))
    return tuple(out)
