"""The LLM stand-in: an OpenAI-compatible endpoint with deterministic replies.

The ``svc`` front serves ``<base>/<token>/v1/...``, strips the prefix and hands the rest to
:meth:`LLMStandIn.handle`; it records one ledger event ``{"op": "llm_call", "name":
result.model, "fingerprint": ..., "prompt_tokens": ..., "completion_tokens": ...}`` per model
call (:attr:`LLMResult.is_call`; a boundary: kill before it is answered, or after it is
"billed" and before the reply) and sends ``result.chunks`` (one body, or server-sent events
when ``stream`` was asked).

Routes (``path`` relative to ``/v1``): ``POST /chat/completions``, ``POST /responses`` (each
streaming or not, with tool calls), ``POST /messages`` (Anthropic-compatible, see
:mod:`._anthropic`: the same script, billing and fingerprint) and ``GET /models``
(``GET /models/<id>``). Anything else
gets an OpenAI-style error body (``{"error": {"message", "type", "param", "code"}}``), never a
traceback.

**Replies are a pure function of the request**, so the golden run and a resumed run get the
same answer to the same question, whatever was asked before (a list consumed in call order
would hand a resumed run the golden run's *next* reply). In order:

1. ``function: "module:attr"``: called with a request dict (see :func:`request_view`); it
   returns a reply (below) or None to fall through.
2. ``replies``: a list of rules ``{match: <substring> | regex: <pattern>, reply: <reply>}``
   tried in order against the text of the last user message; a rule with neither ``match``
   nor ``regex`` matches anything (a fallback). A tool-call rule is not used again once the
   turn holds tool results (the agent sent them back after the last user message), so the
   next matching text rule answers the tool results: a round trip needs no state.
3. A deterministic echo: ``echo: <last user message>`` (`` [tool results: ...]`` added when
   the turn holds some).

A reply is a string (the assistant's text), ``{content: <text>}``, or ``{tool_calls: [{name,
arguments}]}`` (``arguments`` a mapping, sent as JSON with sorted keys, or a JSON string).

**Token counts** (``usage`` in every reply, and what the ledger records): one token per 4
UTF-8 bytes, rounded up, at least 1. Prompt: the text of every message (or input item),
the instructions, and the tool definitions as canonical JSON. Completion: the reply's text,
or its tool calls' names and arguments.

**Fingerprint**: sha256 of the canonical JSON (sorted keys, compact) of the route and the
request body without ``stream`` and ``stream_options``: the same question asked again has
the same fingerprint however it is streamed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crashpoint.errors import LLMScriptError
from crashpoint.harness._spec import Reply, Rule, canonical, parse_llm_script, parse_reply
from crashpoint.harness._standins._anthropic import (
    MessagesError,
    check_messages,
    messages_error,
    messages_view,
    render_messages,
)

__all__ = [
    "LLMResult",
    "LLMStandIn",
    "count_tokens",
    "request_view",
    "streamed_text",
]

#: Every reply's ``created``: a constant, so outputs built from a reply are the same in every
#: run (the golden run and a resumed one).
CREATED = 1_700_000_000
#: Keys left out of the fingerprint: how a reply is delivered, not what is asked.
UNFINGERPRINTED = ("stream", "stream_options")
_MAX_ECHO = 2000  # characters of the last user message an echo repeats


@dataclass(frozen=True)
class LLMResult:
    status: int  # 200, or 400/404/405/500 with an OpenAI-style error body
    content_type: str  # application/json, or text/event-stream
    chunks: tuple[bytes, ...]  # the body: one chunk, or SSE events in order
    model: str
    prompt_tokens: int
    completion_tokens: int
    fingerprint: str  # sha256 of the request, canonical, without stream options:
    #                             the same question asked twice has the same fingerprint;
    #                             "" when the request was not a model call (error, /models)

    @property
    def is_call(self) -> bool:
        """A model call that was answered (and billed): what the front records as an
        ``llm_call`` event. Errors and ``GET /models`` are not."""
        return self.status == 200 and bool(self.fingerprint)

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


class _BadRequest(Exception):
    def __init__(
        self,
        message: str,
        param: str | None = None,
        *,
        status: int = 400,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.code, self.kind = (
            message,
            param,
            status,
            code,
            kind,
        )


def count_tokens(text: str) -> int:
    """The stand-in's token count of ``text``: one per 4 UTF-8 bytes, rounded up, at least 1."""
    return max(1, -(-len(text.encode("utf-8")) // 4))


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
        return "".join(out)
    return canonical(content)


def request_view(endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    """What a reply function is called with: ``endpoint`` (``chat.completions`` or
    ``responses``), ``model``, ``messages`` (each ``{"role", "content"}`` with the text;
    tool results have role ``tool``), ``last_user`` (the last user message's text),
    ``tool_results`` (texts of the tool results after it), ``tools`` (the function names
    offered) and ``body`` (the request as sent)."""
    msgs: list[dict[str, str]] = []
    if endpoint == "responses":
        if body.get("instructions"):
            msgs.append({"role": "system", "content": _text_of(body["instructions"])})
        inp = body.get("input")
        if isinstance(inp, str):
            msgs.append({"role": "user", "content": inp})
        else:
            for item in inp or []:
                if not isinstance(item, dict):
                    continue
                kind = item.get("type", "message")
                if kind == "function_call_output":
                    msgs.append({"role": "tool", "content": _text_of(item.get("output"))})
                elif kind == "function_call":
                    msgs.append(
                        {
                            "role": "assistant",
                            "content": canonical(
                                {"name": item.get("name"), "arguments": item.get("arguments")}
                            ),
                        }
                    )
                elif kind == "message" or "role" in item:
                    msgs.append(
                        {
                            "role": str(item.get("role", "user")),
                            "content": _text_of(item.get("content")),
                        }
                    )
    else:
        for m in body.get("messages") or []:
            if not isinstance(m, dict):
                continue
            text = _text_of(m.get("content"))
            if m.get("tool_calls"):
                text += canonical(m["tool_calls"])
            msgs.append({"role": str(m.get("role", "")), "content": text})
    last = max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=-1)
    tools = []
    for t in body.get("tools") or []:
        if isinstance(t, dict):
            fn: dict[str, Any] = t["function"] if isinstance(t.get("function"), dict) else t
            tools.append(str(fn.get("name", "")))
    return {
        "endpoint": endpoint,
        "model": str(body.get("model", "")),
        "messages": msgs,
        "last_user": msgs[last]["content"] if last >= 0 else "",
        "tool_results": [m["content"] for m in msgs[last + 1 :] if m["role"] == "tool"],
        "tools": tools,
        "body": body,
    }


def _error(
    status: int,
    message: str,
    param: str | None = None,
    code: str | None = None,
    kind: str = "invalid_request_error",
    model: str = "",
) -> LLMResult:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return LLMResult(status, "application/json", (json.dumps(body).encode(),), model, 0, 0, "")


def _sse(obj: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


def streamed_text(chunks: tuple[bytes, ...] | list[bytes]) -> str:
    """The text a client has from these server-sent events of a streamed reply: the content
    deltas (``/chat/completions``; ``/responses``: ``output_text`` deltas; ``/messages``:
    ``text_delta``), then the tool
    calls' names and argument deltas, as the stand-in's token count sees a reply. What a
    cut stream delivered, and is billed for."""
    text: list[str] = []
    calls: list[str] = []
    for raw in chunks:
        for line in raw.decode("utf-8", "replace").splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            try:
                ev = json.loads(line[6:])
            except ValueError:
                continue
            if not isinstance(ev, dict):
                continue
            kind = ev.get("type")
            if kind == "response.output_text.delta":
                text.append(str(ev.get("delta", "")))
            elif kind == "response.output_item.added" and ev.get("item", {}).get("name"):
                calls.append(str(ev["item"]["name"]))
            elif kind == "response.function_call_arguments.delta":
                calls.append(str(ev.get("delta", "")))
            elif kind == "content_block_delta":  # Anthropic's /v1/messages
                delta = ev.get("delta") or {}
                if delta.get("type") == "text_delta":
                    text.append(str(delta.get("text", "")))
                elif delta.get("type") == "input_json_delta":
                    calls.append(str(delta.get("partial_json", "")))
            elif kind == "content_block_start" and (ev.get("content_block") or {}).get("name"):
                calls.append(str(ev["content_block"]["name"]))
            for choice in ev.get("choices") or []:
                delta = (choice.get("delta") or {}) if isinstance(choice, dict) else {}
                if isinstance(delta.get("content"), str):
                    text.append(delta["content"])
                for tc in delta.get("tool_calls") or []:
                    fn = (tc.get("function") or {}) if isinstance(tc, dict) else {}
                    calls += [str(fn[k]) for k in ("name", "arguments") if fn.get(k)]
    return "".join(text) + "".join(calls)


def _pieces(text: str) -> list[str]:
    """``text`` cut into word-sized deltas (joined, they are ``text``)."""
    return re.findall(r"\s*\S+\s*|\s+", text) if text else []


class LLMStandIn:
    """``script``: None (deterministic echo), or the scenario's ``services.llm`` mapping
    (``replies``, ``function``, ``models``; see the module docstring). A bad script raises
    :class:`LLMScriptError` here, naming the key. :meth:`handle` is thread-safe (it keeps no
    state between calls)."""

    def __init__(self, script: dict[str, Any] | None = None) -> None:
        self.script = script
        parsed = parse_llm_script(script)  # LLMScriptError names a bad key
        self.rules: tuple[Rule, ...] = parsed.rules
        self.function: Callable[[dict[str, Any]], Any] | None = parsed.function
        self.models: tuple[str, ...] = parsed.models

    # -- routing -------------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: bytes) -> LLMResult:
        """Answer ``method path`` (``path`` relative to ``/v1``: ``/chat/completions``,
        ``/responses``, ``/models``) with request ``body``."""
        route = "/" + path.split("?", 1)[0].strip("/")
        method = method.upper()
        if route == "/messages":  # the Anthropic-compatible route (._anthropic)
            return self._messages(method, body)
        endpoints = {"/chat/completions": "chat.completions", "/responses": "responses"}
        if route in endpoints:
            if method != "POST":
                return _error(
                    405,
                    f"Method {method} not allowed for /v1{route}: use POST",
                    code="method_not_allowed",
                )
            try:
                return self._call(endpoints[route], body)
            except _BadRequest as exc:
                return _error(exc.status, exc.message, exc.param, exc.code, exc.kind)
        if route == "/models" or route.startswith("/models/"):
            if method != "GET":
                return _error(
                    405,
                    f"Method {method} not allowed for /v1{route}: use GET",
                    code="method_not_allowed",
                )
            return self._models(route[len("/models/") :] if route != "/models" else "")
        hint = (
            " (an Anthropic client's base URL is {anthropic}, without /v1)"
            if route.endswith("/messages")
            else ""
        )
        return _error(
            404,
            f"Unknown request URL: {method} /v1{route}{hint}. The stand-in serves "
            "POST /v1/chat/completions, POST /v1/responses, POST /v1/messages (Anthropic) "
            "and GET /v1/models",
            code="unknown_url",
        )

    def _models(self, wanted: str) -> LLMResult:
        def card(m: str) -> dict[str, Any]:
            return {"id": m, "object": "model", "created": CREATED, "owned_by": "crashpoint"}

        if wanted:
            if wanted not in self.models:
                return _error(
                    404,
                    f"The model {wanted!r} does not exist (the stand-in lists "
                    f"{', '.join(self.models)})",
                    "model",
                    "model_not_found",
                )
            out: Any = card(wanted)
        else:
            out = {"object": "list", "data": [card(m) for m in self.models]}
        return LLMResult(200, "application/json", (json.dumps(out).encode(),), "", 0, 0, "")

    # -- a model call --------------------------------------------------------------------------

    def _messages(self, method: str, raw: bytes) -> LLMResult:
        """``POST /v1/messages``: the Anthropic Messages API from the same script."""

        def error(status: int, message: str, kind: str = "invalid_request_error") -> LLMResult:
            body = messages_error(status, message, kind)
            return LLMResult(status, "application/json", (body,), "", 0, 0, "")

        if method != "POST":
            return error(405, f"Method {method} not allowed for /v1/messages: use POST")
        try:
            body = check_messages(json.loads(raw or b""))
            view = messages_view(body)
            reply = self._reply(view)
        except (ValueError, UnicodeDecodeError):
            return error(
                400, "The request body is not valid JSON (the stand-in expects an object)."
            )
        except MessagesError as exc:
            return error(exc.status, exc.message, exc.kind)
        except _BadRequest as exc:  # the script's reply function failed
            return error(exc.status, exc.message, "api_error")
        fp = _fingerprint("messages", body)
        prompt = "".join(m["content"] for m in view["messages"])
        if body.get("tools"):
            prompt += canonical(body["tools"])
        ptok = count_tokens(prompt)
        ctok = count_tokens((reply.text or "") + "".join(n + a for n, a in reply.tool_calls))
        stream = bool(body.get("stream", False))
        chunks = render_messages(body["model"], fp, reply, ptok, ctok, stream)
        ctype = "text/event-stream" if stream else "application/json"
        return LLMResult(200, ctype, chunks, body["model"], ptok, ctok, fp)

    def _call(self, endpoint: str, raw: bytes) -> LLMResult:
        try:
            body = json.loads(raw or b"")
        except (ValueError, UnicodeDecodeError):
            raise _BadRequest(
                "We could not parse the JSON body of your request. (The "
                "stand-in expects a JSON object.)"
            ) from None
        if not isinstance(body, dict):
            raise _BadRequest("The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _BadRequest(
                "you must provide a model parameter",
                "model",
                code="missing_required_parameter" if model is None else "invalid_type",
            )
        if endpoint == "chat.completions":
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise _BadRequest(
                    "'messages' must be a non-empty array of messages",
                    "messages",
                    code="invalid_type" if msgs is not None else "missing_required_parameter",
                )
            for i, m in enumerate(msgs):
                if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                    raise _BadRequest(
                        f"Invalid value for 'messages[{i}]': each message is an "
                        "object with a 'role'",
                        f"messages[{i}]",
                        code="invalid_value",
                    )
        else:
            inp = body.get("input")
            if not isinstance(inp, (str, list)) or not inp:
                raise _BadRequest(
                    "'input' must be a non-empty string or array of input items",
                    "input",
                    code="invalid_type" if inp is not None else "missing_required_parameter",
                )
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise _BadRequest("'tools' must be an array", "tools", code="invalid_type")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise _BadRequest("'stream' must be a boolean", "stream", code="invalid_type")
        view = request_view(endpoint, body)
        reply = self._reply(view)
        fp = _fingerprint(endpoint, body)
        prompt = "".join(m["content"] for m in view["messages"])
        if tools:
            prompt += canonical(tools)
        ptok = count_tokens(prompt)
        ctok = count_tokens((reply.text or "") + "".join(n + a for n, a in reply.tool_calls))
        if endpoint == "chat.completions":
            include = isinstance(body.get("stream_options"), dict) and bool(
                body["stream_options"].get("include_usage")
            )
            chunks = _chat(model, fp, reply, ptok, ctok, stream, include)
        else:
            chunks = _responses(model, fp, reply, ptok, ctok, stream, body)
        ctype = "text/event-stream" if stream else "application/json"
        return LLMResult(200, ctype, chunks, model, ptok, ctok, fp)

    def _reply(self, view: dict[str, Any]) -> Reply:
        if self.function is not None:
            try:
                got = self.function(view)
            except Exception as exc:  # the agent gets a 500 body, the harness no traceback
                raise _BadRequest(
                    f"the scenario's reply function "
                    f"{self.script.get('function') if self.script else ''} "
                    f"raised {type(exc).__name__}: {exc}",
                    status=500,
                    kind="server_error",
                ) from None
            if got is not None:
                try:
                    return parse_reply(got, "function's reply")
                except LLMScriptError as exc:
                    raise _BadRequest(
                        f"the scenario's reply function returned a bad reply: {exc}",
                        status=500,
                        kind="server_error",
                    ) from None
        in_tool_turn = bool(view["tool_results"])
        for rule in self.rules:
            if rule.reply.tool_calls and in_tool_turn:
                continue  # the tools were called this turn: answer their results
            if rule.fits(view["last_user"]):
                return rule.reply
        text = f"echo: {view['last_user'][:_MAX_ECHO]}"
        if in_tool_turn:
            text += f" [tool results: {'; '.join(view['tool_results'])[:_MAX_ECHO]}]"
        return Reply(text)


def _fingerprint(endpoint: str, body: dict[str, Any]) -> str:
    return hashlib.sha256(
        canonical(
            {"route": endpoint, **{k: v for k, v in body.items() if k not in UNFINGERPRINTED}}
        ).encode()
    ).hexdigest()


def _call_id(fp: str, i: int) -> str:
    return "call_" + hashlib.sha256(f"{fp}:{i}".encode()).hexdigest()[:24]


def _chat(
    model: str, fp: str, reply: Reply, ptok: int, ctok: int, stream: bool, include_usage: bool
) -> tuple[bytes, ...]:
    cid = "chatcmpl-" + fp[:24]
    usage = {"prompt_tokens": ptok, "completion_tokens": ctok, "total_tokens": ptok + ctok}
    finish = "tool_calls" if reply.tool_calls else "stop"
    calls: list[dict[str, Any]] = [
        {"id": _call_id(fp, i), "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(reply.tool_calls)
    ]
    head = {
        "id": cid,
        "created": CREATED,
        "model": model,
        "system_fingerprint": "crashpoint-stand-in",
    }
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        return (
            json.dumps(
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [
                        {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                    ],
                    "usage": usage,
                }
            ).encode(),
        )

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return _sse(
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
                ],
            }
        )

    out = [chunk({"role": "assistant", "content": "" if reply.text is not None else None})]
    out += [chunk({"content": p}) for p in _pieces(reply.text or "")]
    for i, c in enumerate(calls):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": i, "function": {"arguments": c["function"]["arguments"]}}
                    ]
                }
            )
        )
    out.append(chunk({}, finish))
    if include_usage:
        out.append(_sse({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}))
    out.append(b"data: [DONE]\n\n")
    return tuple(out)


def _responses(
    model: str, fp: str, reply: Reply, ptok: int, ctok: int, stream: bool, body: dict[str, Any]
) -> tuple[bytes, ...]:
    rid = "resp_" + fp[:24]
    items: list[dict[str, Any]] = []
    if reply.text is not None:
        items.append(
            {
                "type": "message",
                "id": "msg_" + fp[:24],
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for i, (n, a) in enumerate(reply.tool_calls):
        items.append(
            {
                "type": "function_call",
                "id": "fc_" + _call_id(fp, i)[5:],
                "call_id": _call_id(fp, i),
                "name": n,
                "arguments": a,
                "status": "completed",
            }
        )

    def response(status: str, output: list[dict[str, Any]], usage: bool) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "model": model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "metadata": {},
            "temperature": body.get("temperature", 1.0),
            "top_p": body.get("top_p", 1.0),
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "usage": {
                "input_tokens": ptok,
                "output_tokens": ctok,
                "total_tokens": ptok + ctok,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            }
            if usage
            else None,
        }

    if not stream:
        return (json.dumps(response("completed", items, True)).encode(),)
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": response("in_progress", [], False)}),
        ("response.in_progress", {"response": response("in_progress", [], False)}),
    ]
    for k, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            base = {"item_id": item["id"], "output_index": k, "content_index": 0}
            events.append(
                (
                    "response.output_item.added",
                    {"output_index": k, "item": {**item, "status": "in_progress", "content": []}},
                )
            )
            events.append(
                (
                    "response.content_part.added",
                    {**base, "part": {"type": "output_text", "text": "", "annotations": []}},
                )
            )
            events += [
                ("response.output_text.delta", {**base, "delta": p, "logprobs": []})
                for p in _pieces(text)
            ]
            events.append(("response.output_text.done", {**base, "text": text, "logprobs": []}))
            events.append(("response.content_part.done", {**base, "part": item["content"][0]}))
        else:
            events.append(
                (
                    "response.output_item.added",
                    {"output_index": k, "item": {**item, "status": "in_progress", "arguments": ""}},
                )
            )
            events.append(
                (
                    "response.function_call_arguments.delta",
                    {"item_id": item["id"], "output_index": k, "delta": item["arguments"]},
                )
            )
            events.append(
                (
                    "response.function_call_arguments.done",
                    {
                        "item_id": item["id"],
                        "output_index": k,
                        "name": item["name"],
                        "arguments": item["arguments"],
                    },
                )
            )
        events.append(("response.output_item.done", {"output_index": k, "item": item}))
    events.append(("response.completed", {"response": response("completed", items, True)}))
    return tuple(_sse({"type": t, "sequence_number": n, **d}, t) for n, (t, d) in enumerate(events))
