"""Stream faults of the ``network`` family: a streamed model reply cut, stalled or reset
part-way. The options are parsed into one canonical text (errors name file, line and key); the
LLM stand-in, on real loopback sockets, sends the first events and fails the stream; the
``llm_call`` event records what was delivered (``partial_reply``) and is billed that much; a
reply that was not streamed, or too short to cut, is served whole and the fault did not fire;
``no_repeated_llm_calls`` takes the retry of a cut stream for a retry, and ``same_output``
names the cut stream when the partial reply became the answer. The end-to-end tests with real
agents (the OpenAI SDK) are in tests/crash/test_stream_agents.py."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from crashpoint.errors import FaultSpecError, InvalidArgument
from crashpoint.harness import (
    Attempt,
    Expect,
    Fault,
    Golden,
    Ledger,
    Plan,
    ScenarioError,
    family_from_spec,
    load_scenario,
)
from crashpoint.harness._checker._checks import (
    TrialFacts,
    check_no_repeated_llm_calls,
    check_same_output,
    run_checks,
)
from crashpoint.harness._engine import account, net_fault
from crashpoint.harness._spec import (
    HALF,
    Failure,
    NetFault,
    parse_services,
    pick,
    plan_for,
    stream_fail,
    stream_failure,
)
from crashpoint.harness._standins._llm import streamed_text

ANSWER = "The capital of France is Paris, a city on the Seine."


# -- the options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "canon"),
    [
        ({"cut": 3}, "cut 3"),
        ("cut", "cut"),
        ("cut 0", "cut 0"),
        ({"reset_after": 2}, "reset_after 2"),
        ("reset_after", "reset_after"),
        ({"stall": "5s"}, "stall 5s"),
        ({"stall": 1.5, "after": 4}, "stall 1.5s after 4"),
        ({"stall": "250ms"}, "stall 0.25s"),
        ("stall", "stall 2s"),
        ("stall 5 after 3", "stall 5s after 3"),
        ("stall 5s after 3", "stall 5s after 3"),
        ("timeout", None),
        (503, None),
        ({"other": 1}, None),
    ],
)
def test_stream_failures_have_one_canonical_text(given: Any, canon: str | None) -> None:
    assert stream_fail(given) == canon
    if canon is not None:
        assert stream_fail(canon) == canon  # the text form reads back as itself


def test_the_canonical_text_becomes_the_failure() -> None:
    assert stream_failure("cut 3") == Failure("cut", after=3)
    assert stream_failure("cut") == Failure("cut", after=HALF)
    assert stream_failure("reset_after 2") == Failure("reset", after=2)
    assert stream_failure("stall 1.5s after 4") == Failure("stall", after=4, pause=1.5)
    assert stream_failure("stall 5s").after == HALF
    assert Failure("cut", after=HALF).sent(9) == 4
    assert Failure("cut", after=3).sent(9) == 3
    assert Failure("stall", after=2, pause=5).describe() == (
        "stall of 5 s after 2 event(s), then cut"
    )
    assert Failure("reset", after=HALF).describe() == "reset after half the events"
    assert not Failure("reset").mid_stream  # a reset before any reply, as before
    for bad in (
        lambda: Failure("cut"),
        lambda: Failure("status", 503, after=2),
        lambda: Failure("stall", after=2),
        lambda: Failure("cut", after=2, pause=1),
        lambda: Failure("cut", after=-5),
    ):
        with pytest.raises(InvalidArgument):
            bad()


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"cut": -1}, "from 0 to 10000"),
        ({"cut": "three"}, "from 0 to 10000"),
        ({"stall": "soon"}, "stall"),
        ({"stall": "20m"}, "at most 600 s"),
        ({"cut": 3, "after": 2}, "cut takes no after"),
        ({"cut": 3, "stall": 1}, "one stream failure per item"),
        ("cut three", "write cut N"),
    ],
)
def test_a_badly_given_stream_failure_says_how_to_write_it(given: Any, says: str) -> None:
    with pytest.raises(FaultSpecError, match=r"network\.fail") as info:
        family_from_spec({"network": {"call": "llm", "fail": [given]}})
    assert says in str(info.value)


def test_stream_failures_fail_the_llm_call_only() -> None:
    fam = family_from_spec({"network": {"fail": [{"cut": 3}, 503, {"stall": "1s"}]}})
    ((_kind, opts),) = fam.chain
    assert dict(opts) == {"call": "llm", "fail": ("cut 3", 503, "stall 1s")}
    assert fam.name == "network@llm:cut 3|503|stall 1s"
    with pytest.raises(FaultSpecError, match="give call: llm") as info:
        family_from_spec({"network": {"call": "POST /hook", "fail": {"cut": 2}}})
    assert info.value.option == "call"
    with pytest.raises(FaultSpecError, match="give call: llm"):
        family_from_spec({"network": {"call": "any", "fail": ["cut"]}})


def test_a_bad_stream_failure_in_a_file_names_its_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "s.scenario.yaml"
    path.write_text(
        'name: x\nagent:\n  command: ["{python}", "-c", "pass"]\nfaults:\n'
        "  - network: {call: llm, fail: [{cut: 2}, {stall: 1s, after: -3}]}\n"
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert (info.value.line, info.value.key) == (5, "faults[0].network.fail"), str(info.value)
    path.write_text(path.read_text().replace("after: -3", "after: 3"))
    sc = load_scenario(path)
    ((_, opts),) = sc.families[0].family.chain
    assert dict(opts)["fail"] == ("cut 2", "stall 1s after 3")


def test_the_plan_sweeps_each_stream_failure_and_round_trips() -> None:
    g = Golden(
        [], [{"op": "llm_call", "name": "m", "fingerprint": "f", "attempt": 1}], Counter(), b"", 0.1
    )
    fam = family_from_spec({"network": {"fail": [{"cut": 3}, {"reset_after": 1}]}})
    assert fam.systematic
    assert fam.points(g) == 2
    plans = [plan_for(fam, g, 7, k, boundary=k) for k in range(2)]
    fails = [p.faults[0].arg("fail") for p in plans]
    assert fails == ["cut 3", "reset_after 1"]
    f = plans[0].faults[0]
    assert Fault.from_json(json.loads(json.dumps(f.to_json()))) == f
    nf = net_fault(f)
    assert (nf.call, nf.failure) == ("llm", Failure("cut", after=3))
    # the other services never take a stream failure (only the LLM stand-in's streams)
    assert pick([nf], "llm", 1, 1) is None
    assert nf.fired == 0


# -- the stand-in, on real sockets -------------------------------------------------------------


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    spec = parse_services({"llm": {"replies": [{"reply": ANSWER}]}})
    with Ledger(
        history_path=str(tmp_path / "history.jsonl"), http=True, services=spec, idle_timeout=30
    ) as led:
        led.begin_attempt(1, None)
        yield led


def ask(
    ledger: Ledger, *, stream: bool = True, endpoint: str = "chat/completions", timeout: float = 10
) -> tuple[int, bytes, str]:
    """POST a question; the status, the body as far as it came, and how it ended: ``eof``
    (the connection closed), or the error's name (a reset)."""
    u = urlsplit(ledger.urls()["llm"])
    conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=timeout)
    body: dict[str, Any] = {"model": "gpt-4o-mini", "stream": stream}
    if endpoint == "responses":
        body["input"] = "capital?"
    else:
        body["messages"] = [{"role": "user", "content": "capital?"}]
    try:
        conn.request("POST", f"{u.path}/{endpoint}", json.dumps(body))
        resp = conn.getresponse()
        got = b""
        end = "eof"
        try:
            while chunk := resp.read1(65536):
                got += chunk
        except (ConnectionError, http.client.IncompleteRead, OSError) as exc:
            end = type(exc).__name__
        return resp.status, got, end
    finally:
        conn.close()


def events_of(body: bytes) -> list[str]:
    return [e for e in body.decode().split("\n\n") if e.strip()]


def test_a_cut_stream_sends_n_events_and_records_what_it_delivered(ledger: Ledger) -> None:
    nf = NetFault("llm", Failure("cut", after=3))
    ledger.net_faults = [nf]
    code, body, end = ask(ledger)
    assert (code, end) == (200, "eof")
    sent = events_of(body)
    assert len(sent) == 3
    assert "[DONE]" not in body.decode()
    assert '"finish_reason":"stop"' not in body.decode()
    (ev,) = ledger.events
    part = ev["partial_reply"]
    total = part["chunks"]
    assert (part["how"], part["chunks_sent"], part["complete"]) == ("cut", 3, False)
    assert part["text"] == "The capital "  # role chunk, then two word pieces
    assert ANSWER.startswith(part["text"])
    assert ev["failed"] == f"cut after 3 event(s): 3 of {total} events sent"
    assert 0 < ev["completion_tokens"] < part["completion_tokens"]  # billed what was delivered
    assert ev["prompt_tokens"] > 0
    assert nf.fired == 1
    assert not nf.missed
    # the retry is served whole
    code, body, end = ask(ledger)
    assert body.decode().endswith("data: [DONE]\n\n")
    assert len(events_of(body)) == total
    assert "partial_reply" not in ledger.events[1]
    assert nf.fired == 1


def test_a_cut_responses_stream_ends_without_response_completed(ledger: Ledger) -> None:
    ledger.net_faults = [NetFault("llm", Failure("cut", after=HALF))]
    code, body, _end = ask(ledger, endpoint="responses")
    assert code == 200
    assert "response.completed" not in body.decode()
    part = ledger.events[0]["partial_reply"]
    assert part["chunks_sent"] == part["chunks"] // 2
    assert part["text"] == streamed_text(events_of_bytes(body))


def events_of_bytes(body: bytes) -> list[bytes]:
    return [e.encode() + b"\n\n" for e in events_of(body)]


def test_a_reset_stream_ends_in_an_rst_after_its_events(ledger: Ledger) -> None:
    ledger.net_faults = [NetFault("llm", Failure("reset", after=2))]
    code, body, end = ask(ledger)
    assert code == 200
    assert end in ("ConnectionResetError", "IncompleteRead"), end
    assert len(events_of(body)) <= 2
    assert ledger.events[0]["partial_reply"]["how"] == "reset"


def test_a_stall_holds_the_stream_then_cuts_it(ledger: Ledger) -> None:
    ledger.net_faults = [NetFault("llm", Failure("stall", after=2, pause=0.6))]
    t0 = time.monotonic()
    code, body, end = ask(ledger)
    took = time.monotonic() - t0
    assert (code, end, len(events_of(body))) == (200, "eof", 2)
    assert took >= 0.55, took
    assert ledger.events[0]["partial_reply"]["how"] == "stall"
    # a client whose read timeout is shorter gives up first: the same partial reply
    ledger.net_faults = [NetFault("llm", Failure("stall", after=2, pause=5), nth=2)]
    t0 = time.monotonic()
    code, body, end = ask(ledger, timeout=0.3)
    assert end in ("TimeoutError", "timeout"), end
    assert time.monotonic() - t0 < 4  # the server let go when the client went away
    assert len(events_of(body)) == 2


def test_a_stream_failure_on_a_reply_not_streamed_does_not_fire(ledger: Ledger) -> None:
    nf = NetFault("llm", Failure("cut", after=1))
    ledger.net_faults = [nf]
    code, body, _end = ask(ledger, stream=False)
    assert code == 200
    assert json.loads(body)["choices"][0]["message"]["content"] == ANSWER
    assert nf.fired == 0
    assert "was not streamed" in nf.missed
    (ev,) = ledger.events
    assert "failed" not in ev
    assert "partial_reply" not in ev


def test_a_stream_too_short_to_cut_does_not_fire(ledger: Ledger) -> None:
    nf = NetFault("llm", Failure("cut", after=500))
    ledger.net_faults = [nf]
    _code, body, _end = ask(ledger)
    assert body.decode().endswith("data: [DONE]\n\n")
    assert nf.fired == 0
    assert "nothing left to cut after 500" in nf.missed


def test_an_agent_cannot_mark_its_own_call_a_cut_stream(ledger: Ledger) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(ledger.address)
        msg = {"op": "step_started", "step": "s", "partial_reply": {"how": "cut"}, "attempt": 1}
        s.sendall(json.dumps(msg).encode() + b"\n")
        assert json.loads(s.makefile().readline())["ok"]
    assert ledger.events[-1]["step"] == "s"
    assert "partial_reply" not in ledger.events[-1]


# -- accounting and the checks ------------------------------------------------------------------


def cut_event(i: int = 1, text: str = "The capital ") -> dict[str, Any]:
    return {
        "op": "llm_call",
        "i": i,
        "attempt": 1,
        "name": "gpt",
        "fingerprint": "f1",
        "prompt_tokens": 5,
        "completion_tokens": 3,
        "failed": "cut after 3 event(s): 3 of 15 events sent",
        "partial_reply": {
            "how": "cut",
            "chunks_sent": 3,
            "chunks": 15,
            "complete": False,
            "completion_tokens": 13,
            "text": text,
        },
    }


def golden() -> Golden:
    ev = {"op": "llm_call", "i": 0, "attempt": 1, "name": "gpt", "fingerprint": "f1"}
    return Golden(
        [],
        [dict(ev, prompt_tokens=5, completion_tokens=13)],
        Counter(),
        (ANSWER + "\n").encode(),
        0.1,
    )


def facts(events: list[dict[str, Any]], out: bytes) -> TrialFacts:
    plan = Plan((Fault.make("network", 1, call="llm", fail="cut 3"),))
    att = Attempt(1, ["x"], 0, None, False, 0.1, out, b"")
    return TrialFacts(
        golden(), plan, Expect(no_repeated_llm_calls="fail"), [att], events, Counter(), "c", [], 0
    )


def retried() -> list[dict[str, Any]]:
    full = {"op": "llm_call", "i": 2, "attempt": 1, "name": "gpt", "fingerprint": "f1"}
    return [cut_event(), dict(full, prompt_tokens=5, completion_tokens=13)]


def test_the_retry_of_a_cut_stream_is_no_rebilled_call() -> None:
    r = check_no_repeated_llm_calls(facts(retried(), (ANSWER + "\n").encode()))
    assert r.ok, r.message
    assert not r.warning, r.message
    assert "1 streamed reply(ies) cut part-way" in r.message
    assert "3 completion token(s) delivered" in r.message
    # two full replies are still a repeat
    twice = [retried()[1], dict(retried()[1], i=3)]
    assert not check_no_repeated_llm_calls(facts(twice, b"")).ok


def test_keeping_the_partial_reply_fails_same_output_naming_the_cut() -> None:
    f = facts([cut_event()], b"The capital\n")
    r = check_same_output(f)
    assert not r.ok
    assert "the LLM stand-in cut a streamed reply" in r.message
    assert "kept the partial reply as the answer" in r.message
    assert "cut after 3 event(s)" in r.message
    (checked,) = [c for c in run_checks(f) if c.name == "same_output"]
    assert "finish_reason" in checked.hint
    # retried: the whole answer, the same output
    assert check_same_output(facts(retried(), (ANSWER + "\n").encode())).ok
    # a different output with a cut that is not in it: the cut is named, as a question
    other = check_same_output(facts([cut_event()], b"something else\n"))
    assert "was a partial reply kept?" in other.message


def test_a_stream_fault_fires_only_where_the_stand_in_cut() -> None:
    plan = Plan((Fault.make("network", 1, call="llm", fail="cut 3"),))
    att = Attempt(1, ["x"], 0, None, False, 0.1, b"", b"")
    (out,) = account(plan, [att], [cut_event()], [], {0: {"net_fired": 1}}, golden())
    assert out.fired
    assert out.where == (
        "cut after 3 event(s) for llm #1 in attempt 1 (3 of 15 events sent, no end of stream)"
    )
    why = "LLM call #1 was not streamed (the request had no stream: true, or was answered 200)"
    (out,) = account(plan, [att], [], [], {0: {"net_fired": 0, "net_missed": why}}, golden())
    assert not out.fired
    assert out.why_not == f"attempt 1 exited 0; {why}"


def test_the_readme_example_is_the_shipped_scenarios_faults() -> None:
    root = Path(__file__).resolve().parents[2]
    readme = (root / "scenarios" / "README.md").read_text()
    section = readme.split("#### Stream failures", 1)[1]
    block = section.split("```yaml", 1)[1].split("```", 1)[0]
    shipped = (root / "scenarios" / "stream-cut.scenario.yaml").read_text()
    assert block.strip() in shipped  # the example shown is the one the gate runs
    sc = load_scenario(root / "scenarios" / "stream-cut.scenario.yaml")
    assert [f.family.name for f in sc.families] == [
        "network@llm:cut 3|stall 1s after 4|reset_after 2",
        "network@llm:cut",
        "kill@every-boundary",
    ]
