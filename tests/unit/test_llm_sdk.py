"""The LLM stand-in as the real OpenAI SDK sees it, over real HTTP (a test-only front)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from _lazy import LazyModule, needs
from crashpoint.harness._standins import LLMResult, LLMStandIn

pytestmark = needs("openai", reason="the openai SDK is a test dependency (pip install -e '.[dev]')")
openai = LazyModule("openai")

SCRIPT = {
    "replies": [
        {
            "match": "weather",
            "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
        },
        {"match": "weather", "reply": "Sunny, 21C."},
        {"regex": r"^capital of \w+", "reply": "Paris is the capital."},
    ]
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


class _Front:
    """A tiny HTTP server that forwards ``/v1/...`` to the stand-in and keeps its results."""

    def __init__(self, stand_in: LLMStandIn) -> None:
        self.results: list[LLMResult] = []
        front = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                path = self.path.split("?", 1)[0]
                assert path.startswith("/v1/"), path
                r = stand_in.handle(self.command, path[3:], body)
                front.results.append(r)
                self.send_response(r.status)
                self.send_header("Content-Type", r.content_type)
                self.send_header("Content-Length", str(len(r.body)))
                self.end_headers()
                for c in r.chunks:
                    self.wfile.write(c)
                    self.wfile.flush()

            do_GET = do_POST = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def front() -> Iterator[_Front]:
    f = _Front(LLMStandIn(SCRIPT))
    yield f
    f.close()


@pytest.fixture
def client(front: _Front) -> Iterator[Any]:
    with openai.OpenAI(base_url=front.url, api_key="canary", max_retries=0) as c:
        yield c


def test_chat_non_streaming_with_usage(client: Any, front: _Front) -> None:
    r = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "capital of France?"}]
    )
    assert r.choices[0].message.content == "Paris is the capital."
    assert r.model == "gpt-test"
    assert r.choices[0].finish_reason == "stop"
    got = front.results[-1]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (
        got.prompt_tokens,
        got.completion_tokens,
    )
    assert got.prompt_tokens > 0
    assert r.usage.total_tokens == got.prompt_tokens + got.completion_tokens


def test_chat_streaming_matches_non_streaming(client: Any, front: _Front) -> None:
    msgs = [{"role": "user", "content": "say the words one two three"}]
    whole = client.chat.completions.create(model="m", messages=msgs)
    stream = client.chat.completions.create(
        model="m", messages=msgs, stream=True, stream_options={"include_usage": True}
    )
    parts, usage, finish = [], None, None
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
            finish = ch.finish_reason or finish
    assert "".join(parts) == whole.choices[0].message.content == "echo: say the words one two three"
    assert len([p for p in parts if p]) > 1  # really streamed in pieces
    assert finish == "stop"
    assert usage is not None
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert front.results[-1].fingerprint == front.results[-2].fingerprint


def test_chat_tool_call_round_trip(client: Any, front: _Front) -> None:
    msgs: list[Any] = [{"role": "user", "content": "what is the weather in Paris?"}]
    r = client.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    msgs += [
        r.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21"},
    ]
    r2 = client.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
    assert r2.choices[0].message.content == "Sunny, 21C."
    assert not r2.choices[0].message.tool_calls


def test_chat_streaming_tool_call(client: Any) -> None:
    stream = client.chat.completions.create(
        model="m", tools=TOOLS, stream=True, messages=[{"role": "user", "content": "weather?"}]
    )
    name, args, ident = "", "", ""
    for chunk in stream:
        for ch in chunk.choices:
            for tc in ch.delta.tool_calls or []:
                ident = tc.id or ident
                name += tc.function.name or "" if tc.function else ""
                args += tc.function.arguments or "" if tc.function else ""
    assert name == "get_weather"
    assert json.loads(args) == {"city": "Paris"}
    assert ident.startswith("call_")


def test_responses_non_streaming_and_streaming(client: Any, front: _Front) -> None:
    r = client.responses.create(model="m", input="capital of Spain?")
    assert r.output_text == "Paris is the capital."  # scripted, not clever
    assert r.status == "completed"
    assert r.usage.input_tokens == front.results[-1].prompt_tokens
    assert r.usage.output_tokens == front.results[-1].completion_tokens
    kinds, text, final = [], "", None
    for ev in client.responses.create(model="m", input="hello stream", stream=True):
        kinds.append(ev.type)
        if ev.type == "response.output_text.delta":
            text += ev.delta
        if ev.type == "response.completed":
            final = ev.response
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert text == "echo: hello stream"
    assert final is not None
    assert final.output_text == text
    assert final.usage.output_tokens > 0


def test_responses_stream_helper_and_tool_round_trip(client: Any) -> None:
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    with client.responses.stream(model="m", input="weather in Paris", tools=tools) as s:
        for _ in s:
            pass
        first = s.get_final_response()
    call = next(o for o in first.output if o.type == "function_call")
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    r = client.responses.create(
        model="m",
        tools=tools,
        input=[
            {"role": "user", "content": "weather in Paris"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ],
    )
    assert r.output_text == "Sunny, 21C."


def test_models_list(client: Any) -> None:
    assert [m.id for m in client.models.list()] == ["crashpoint-stand-in"]


def test_bad_request_is_a_bad_request_error(client: Any, front: _Front) -> None:
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="m", messages=[])
    assert ei.value.status_code == 400
    assert ei.value.param == "messages"
    assert ei.value.type == "invalid_request_error"
    assert not front.results[-1].is_call
