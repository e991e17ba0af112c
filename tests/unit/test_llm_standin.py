"""The LLM stand-in's pure logic (no SDK): routes, replies, tokens, fingerprints, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crashpoint.harness._standins._llm import LLMScriptError, LLMStandIn, count_tokens


def _post(s: LLMStandIn, path: str, body: Any) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = s.handle("POST", path, raw)
    return r.status, json.loads(r.body) if r.content_type == "application/json" else r.body


def _chat(text: str, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **kw}


def test_echo_is_deterministic_and_counts_tokens() -> None:
    s = LLMStandIn()
    r1 = s.handle("POST", "/chat/completions", json.dumps(_chat("hello there")).encode())
    r2 = s.handle("POST", "/chat/completions", json.dumps(_chat("hello there")).encode())
    assert r1 == r2
    body = json.loads(r1.body)
    assert body["choices"][0]["message"]["content"] == "echo: hello there"
    assert body["usage"] == {
        "prompt_tokens": count_tokens("hello there"),
        "completion_tokens": count_tokens("echo: hello there"),
        "total_tokens": r1.prompt_tokens + r1.completion_tokens,
    }
    assert (r1.prompt_tokens, r1.completion_tokens) == (3, 5)  # 11 and 17 bytes, /4 rounded up
    assert r1.is_call
    assert r1.model == "m"


def test_fingerprint_ignores_stream_options_only() -> None:
    s = LLMStandIn()
    plain = s.handle("POST", "/chat/completions", json.dumps(_chat("q")).encode())
    streamed = s.handle(
        "POST",
        "/chat/completions",
        json.dumps(_chat("q", stream=True, stream_options={"include_usage": True})).encode(),
    )
    other = s.handle("POST", "/chat/completions", json.dumps(_chat("q", temperature=0)).encode())
    resp = s.handle("POST", "/responses", json.dumps({"model": "m", "input": "q"}).encode())
    assert plain.fingerprint == streamed.fingerprint
    assert len({plain.fingerprint, other.fingerprint, resp.fingerprint}) == 3
    assert streamed.content_type == "text/event-stream"
    assert streamed.chunks[-1] == b"data: [DONE]\n\n"


def test_rules_match_substring_regex_and_fallback() -> None:
    s = LLMStandIn(
        {
            "replies": [
                {"match": "weather", "reply": "sunny"},
                {"regex": r"^sum \d+", "reply": {"content": "42"}},
                {"reply": "fallback"},
            ]
        }
    )

    def ask(t: str) -> str:
        return str(_post(s, "/chat/completions", _chat(t))[1]["choices"][0]["message"]["content"])

    assert ask("what weather today") == "sunny"
    assert ask("sum 1 2") == "42"
    assert ask("x sum 1") == "fallback"


def test_tool_call_then_answer_without_state() -> None:
    s = LLMStandIn(
        {
            "replies": [
                {
                    "match": "Paris",
                    "reply": {"tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]},
                },
                {"match": "Paris", "reply": "It is sunny in Paris."},
            ]
        }
    )
    st, body = _post(s, "/chat/completions", _chat("weather in Paris?"))
    msg = body["choices"][0]["message"]
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    call = msg["tool_calls"][0]
    assert call["function"] == {"name": "weather", "arguments": '{"city":"Paris"}'}
    follow = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "weather in Paris?"},
            msg,
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        ],
    }
    st, body = _post(s, "/chat/completions", follow)
    assert st == 200
    assert body["choices"][0]["message"]["content"] == "It is sunny in Paris."
    # the same question asked again, e.g. by a resumed run: the same call id
    assert (
        _post(s, "/chat/completions", _chat("weather in Paris?"))[1]["choices"][0]["message"][
            "tool_calls"
        ][0]["id"]
        == call["id"]
    )


def test_echo_after_tool_results_and_responses_input_items() -> None:
    s = LLMStandIn()
    st, body = _post(
        s,
        "/responses",
        {
            "model": "m",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ],
        },
    )
    assert st == 200
    assert body["output"][0]["content"][0]["text"] == "echo: hi [tool results: 42]"


def test_function_reply(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "llm_script_mod.py").write_text(
        "def reply(req):\n"
        "    if 'none' in req['last_user']:\n        return None\n"
        "    if 'boom' in req['last_user']:\n        raise RuntimeError('nope')\n"
        "    return req['endpoint'] + ':' + req['last_user'].upper()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    s = LLMStandIn({"function": "llm_script_mod:reply", "replies": [{"reply": "rule"}]})
    assert (
        _post(s, "/chat/completions", _chat("abc"))[1]["choices"][0]["message"]["content"]
        == "chat.completions:ABC"
    )
    assert (
        _post(s, "/chat/completions", _chat("none"))[1]["choices"][0]["message"]["content"]
        == "rule"
    )
    st, body = _post(s, "/chat/completions", _chat("boom"))
    assert st == 500
    assert "RuntimeError: nope" in body["error"]["message"]
    assert body["error"]["type"] == "server_error"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/chat/completions", b"{not json", None),
        ("/chat/completions", [], None),
        ("/chat/completions", {"messages": [{"role": "user", "content": "x"}]}, "model"),
        ("/chat/completions", {"model": "m"}, "messages"),
        ("/chat/completions", {"model": "m", "messages": ["x"]}, "messages[0]"),
        ("/chat/completions", _chat("x", stream="yes"), "stream"),
        ("/responses", {"model": "m"}, "input"),
        ("/responses", {"model": "m", "input": "x", "tools": {}}, "tools"),
    ],
)
def test_bad_requests_get_openai_error_bodies(path: str, body: Any, param: str | None) -> None:
    r = LLMStandIn().handle(
        "POST", path, body if isinstance(body, bytes) else json.dumps(body).encode()
    )
    err = json.loads(r.body)["error"]
    assert r.status == 400
    assert not r.is_call
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    assert "Traceback" not in err["message"]


def test_routes_models_and_unknown() -> None:
    s = LLMStandIn({"models": ["a", "b"]})
    r = s.handle("GET", "/models", b"")
    assert r.status == 200
    assert not r.is_call
    assert [m["id"] for m in json.loads(r.body)["data"]] == ["a", "b"]
    assert json.loads(s.handle("GET", "/models/b", b"").body)["id"] == "b"
    assert s.handle("GET", "/models/zz", b"").status == 404
    assert s.handle("POST", "/embeddings", b"{}").status == 404
    assert s.handle("GET", "/chat/completions", b"").status == 405


@pytest.mark.parametrize(
    ("script", "key"),
    [
        ([], ""),
        ({"reply": []}, "reply"),
        ({"replies": {}}, "replies"),
        ({"replies": [{"mach": "x", "reply": "y"}]}, "replies[0].mach"),
        ({"replies": [{"match": "x"}]}, "replies[0]"),
        ({"replies": [{"regex": "(", "reply": "y"}]}, "replies[0].regex"),
        (
            {"replies": [{"reply": {"tool_calls": [{"name": "f", "arguments": "{x"}]}}]},
            "replies[0].reply.tool_calls[0].arguments",
        ),
        ({"replies": [{"reply": 3}]}, "replies[0].reply"),
        ({"function": "no_such_module_xyz:f"}, "function"),
        ({"function": "json"}, "function"),
        ({"models": []}, "models"),
    ],
)
def test_bad_script_names_the_key(script: Any, key: str) -> None:
    with pytest.raises(LLMScriptError) as ei:
        LLMStandIn(script)
    assert ei.value.key == key
