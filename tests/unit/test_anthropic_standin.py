"""The Anthropic-compatible face of the LLM stand-in (``POST /v1/messages``), as the real
``anthropic`` SDK sees it on the ledger's own HTTP front: the same script as the OpenAI routes,
text and ``tool_use`` replies, streamed with the real event sequence, billed like the OpenAI
calls (one ``llm_call`` event, the same fingerprint however it is streamed), cut mid-stream by
a planned stream fault, Anthropic-shaped errors, and the key the SDK sends admitted as the
trial's token. The end-to-end test with an agent is tests/crash/test_anthropic_agent.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _lazy import LazyModule, needs
from crashpoint.harness import Ledger
from crashpoint.harness._spec import Failure, NetFault, parse_services
from crashpoint.harness._standins import LLMStandIn
from crashpoint.harness._standins._llm import streamed_text

pytestmark = needs(
    "anthropic", reason="the anthropic SDK is a test-only dependency (pip install anthropic)"
)
anthropic = LazyModule("anthropic")

ANSWER = "Crash recovery resumes from the last durable step and never repeats an effect."
SCRIPT = {
    "replies": [
        {
            "match": "weather",
            "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
        },
        {"match": "weather", "reply": "Sunny, 21C."},
        {"reply": ANSWER},
    ]
}
TOOLS = [
    {
        "name": "get_weather",
        "description": "the weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    spec = parse_services({"llm": SCRIPT})
    with Ledger(
        history_path=str(tmp_path / "history.jsonl"), http=True, services=spec, idle_timeout=30
    ) as led:
        led.begin_attempt(1, None)
        yield led


def client(ledger: Ledger, key: str | None = None) -> Any:
    return anthropic.Anthropic(
        base_url=ledger.urls()["anthropic"],
        api_key=key if key is not None else ledger.env()["ANTHROPIC_API_KEY"],
        max_retries=0,
        timeout=10,
    )


def ask(c: Any, text: str = "Summarise crash recovery.", **kw: Any) -> Any:
    return c.messages.create(
        model="stand-in-claude",
        max_tokens=256,
        messages=[{"role": "user", "content": text}],
        **kw,
    )


def test_the_sdk_gets_the_scripted_text_and_the_call_is_billed(ledger: Ledger) -> None:
    msg = ask(client(ledger))
    assert msg.type == "message"
    assert msg.role == "assistant"
    assert msg.content[0].type == "text"
    assert msg.content[0].text == ANSWER
    assert msg.stop_reason == "end_turn"
    (ev,) = ledger.events
    assert ev["op"] == "llm_call"
    assert ev["name"] == "stand-in-claude"
    assert ev["path"] == "/messages"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (
        ev["prompt_tokens"],
        ev["completion_tokens"],
    )
    assert ev["completion_tokens"] == -(-len(ANSWER.encode()) // 4)


def test_a_tool_round_trip_with_tool_use_blocks(ledger: Ledger) -> None:
    c = client(ledger)
    first = ask(c, "What is the weather in Paris?", tools=TOOLS)
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
    assert use.id.startswith("toolu_")
    second = c.messages.create(
        model="stand-in-claude",
        max_tokens=256,
        tools=TOOLS,
        messages=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "21C"}],
            },
        ],
    )
    assert second.content[0].text == "Sunny, 21C."  # the tool turn: the text rule answers
    assert second.stop_reason == "end_turn"


def test_a_stream_has_the_real_event_sequence_and_the_same_fingerprint(ledger: Ledger) -> None:
    c = client(ledger)
    with c.messages.stream(
        model="stand-in-claude",
        max_tokens=256,
        messages=[{"role": "user", "content": "Summarise crash recovery."}],
    ) as stream:
        kinds = [ev.type for ev in stream]
        final = stream.get_final_message()
    assert final.content[0].text == ANSWER
    assert final.stop_reason == "end_turn"
    raw = [k for k in kinds if k in {
        "message_start", "content_block_start", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop",
    }]  # fmt: skip
    assert raw[0] == "message_start"
    assert raw[1] == "content_block_start"
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert raw.count("content_block_delta") == len(ANSWER.split())
    ask(c)  # the same question, not streamed: the same fingerprint
    streamed, plain = ledger.events
    assert streamed["fingerprint"] == plain["fingerprint"]
    assert streamed["completion_tokens"] == plain["completion_tokens"]


def test_a_streamed_tool_call_arrives_whole(ledger: Ledger) -> None:
    with client(ledger).messages.stream(
        model="m",
        max_tokens=64,
        tools=TOOLS,
        messages=[{"role": "user", "content": "weather in Paris?"}],
    ) as stream:
        final = stream.get_final_message()
    (use,) = final.content
    assert (use.type, use.name, use.input) == ("tool_use", "get_weather", {"city": "Paris"})
    assert final.stop_reason == "tool_use"


def test_a_cut_stream_is_recorded_partial_and_the_sdk_sees_no_message_stop(
    ledger: Ledger,
) -> None:
    nf = NetFault("llm", Failure("cut", after=4))
    ledger.net_faults = [nf]
    got: list[str] = []
    kinds: list[str] = []
    # the SDK ends the iteration without an error when the body just ends: an agent that
    # keeps what it got has a truncated answer, one that waits for message_stop knows
    with client(ledger).messages.stream(
        model="m", max_tokens=64, messages=[{"role": "user", "content": "Summarise"}]
    ) as stream:
        for ev in stream:
            kinds.append(ev.type)
            if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                got.append(ev.delta.text)
    assert "message_stop" not in kinds
    assert nf.fired == 1
    (ev,) = ledger.events
    part = ev["partial_reply"]
    assert (part["how"], part["chunks_sent"], part["complete"]) == ("cut", 4, False)
    # message_start, content_block_start, then two word pieces
    assert part["text"] == "".join(got) == "Crash recovery "
    assert ev["failed"].startswith("cut after 4 event(s): 4 of ")
    assert 0 < ev["completion_tokens"] < part["completion_tokens"]


def test_streamed_text_reads_the_messages_events() -> None:
    r = LLMStandIn(SCRIPT).handle(
        "POST",
        "/messages",
        json.dumps(
            {
                "model": "m",
                "max_tokens": 9,
                "stream": True,
                "messages": [{"role": "user", "content": "weather?"}],
            }
        ).encode(),
    )
    assert r.content_type == "text/event-stream"
    assert streamed_text(r.chunks) == 'get_weather{"city": "Paris"}'


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens: Field"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model: Field"),
        ({"model": "m", "max_tokens": 5, "messages": []}, "messages: must be a non-empty"),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]},
            "messages.0.role: must be one of user, assistant",
        ),
    ],
)
def test_a_bad_request_gets_an_anthropic_error(body: dict[str, Any], says: str) -> None:
    r = LLMStandIn(None).handle("POST", "/messages", json.dumps(body).encode())
    assert r.status == 400
    assert not r.is_call
    err = json.loads(r.body)
    assert err["type"] == "error"
    assert err["error"]["type"] == "invalid_request_error"
    assert says in err["error"]["message"]


def test_the_sdk_raises_its_own_error_for_a_refused_request(ledger: Ledger) -> None:
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.0\.role"):
        client(ledger).messages.create(
            model="m", max_tokens=5, messages=[{"role": "system", "content": "x"}]
        )
    assert ledger.events == []  # not billed


def test_the_sdk_key_is_the_trial_token_and_a_wrong_one_is_refused(tmp_path: Path) -> None:
    spec = parse_services({"llm": SCRIPT})
    with Ledger(
        history_path=str(tmp_path / "h.jsonl"), http=True, services=spec, bound=True
    ) as led:
        led.begin_attempt(1, None)
        env = led.env()
        assert env["ANTHROPIC_BASE_URL"] == led.urls()["anthropic"]
        assert env["ANTHROPIC_API_KEY"] == env["CRASHPOINT_TOKEN"] == led.token
        assert led.token not in led.urls()["anthropic"]  # no secret in a URL or an argv
        # this test's process is outside the trial: its key is what admits it
        assert ask(client(led)).content[0].text == ANSWER
        with pytest.raises(anthropic.PermissionDeniedError, match="forbidden"):
            ask(client(led, key="not-the-token"))
        assert led.refused["token"] == 1
        assert len(led.events) == 1


def test_an_anthropic_client_pointed_at_the_openai_base_url_is_told_which_to_use() -> None:
    r = LLMStandIn(None).handle("POST", "/v1/messages", b"{}")  # {llm}/v1/messages
    assert r.status == 404
    assert "an Anthropic client's base URL is {anthropic}, without /v1" in r.body.decode()
