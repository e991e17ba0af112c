"""Stream faults end to end: real agents stream a model reply from the LLM stand-in, which cuts,
stalls or resets the stream part-way.

- ``tests/agents/llm_stream.py`` (the OpenAI SDK, no crashpoint import) with ``--keep-partial``
  takes whatever the stream delivered for the answer: a cut stream (the SDK ends the iteration
  without an error) becomes a truncated answer, and ``same_output`` fails naming the cut
  stream. Without it the agent checks ``finish_reason`` (or ``response.completed``) and asks
  again: it passes, and ``no_repeated_llm_calls`` (set to fail) does not count the retry.
- A stream fault on a call that was not streamed did not fire: the trial is not exercised.
- ``scenarios/stream-cut.scenario.yaml``, the shipped one, runs its stdlib agent
  (examples/llm-stream/agent.py) in the gate, and fails without ``--fixed``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from _forked import run_forked
from _lazy import LazyModule, needs
from crashpoint.harness import AgentSpec, CampaignResult, Expect, family_from_spec

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tests" / "agents" / "llm_stream.py"
SCENARIO = ROOT / "scenarios" / "stream-cut.scenario.yaml"
ANSWER = "Crash recovery resumes from the last durable step and never repeats an effect."
SERVICES = {"llm": {"replies": [{"match": "Summarise", "reply": ANSWER}]}}

pytestmark = needs(
    "openai", reason="the agent streams with the openai SDK (pip install -e '.[dev]')"
)
openai = LazyModule("openai")


def agent(*flags: str) -> AgentSpec:
    return AgentSpec(
        command=(sys.executable, str(AGENT), "{state_dir}", *flags),
        timeout=30,
        services=SERVICES,
    )


def campaign(spec: AgentSpec, fault: dict[str, object], tmp_path: Path) -> CampaignResult:
    # forked from a zygote that imported openai once: these tests are about the cut stream
    return run_forked(
        spec,
        [family_from_spec(fault)],
        str(tmp_path / "report"),
        name="stream",
        seed=5,
        restarts=2,
        expect=Expect(no_repeated_llm_calls="fail"),
    )


CUT = {"network": {"fail": {"cut": 4}}}


def test_an_agent_that_keeps_the_partial_reply_is_caught(tmp_path: Path) -> None:
    result = campaign(agent("--keep-partial"), CUT, tmp_path)
    (t,) = result.trials
    assert t.exercised, t.landed()
    assert "cut after 4 event(s) for llm #1 in attempt 1" in t.landed()
    assert t.status == "failed"
    assert t.root_cause is not None
    assert t.root_cause.name == "same_output", [str(c) for c in t.failed]
    msg = t.root_cause.message
    assert "the LLM stand-in cut a streamed reply" in msg
    assert "kept the partial reply as the answer" in msg
    assert "Crash recovery resumes" in msg  # the truncated answer it printed
    assert "finish_reason" in t.root_cause.hint
    assert t.attempts[0].returncode == 0  # no crash at all: the answer was just wrong
    assert not result.ok


@pytest.mark.parametrize(
    "api",
    [
        "chat",
        # slow: fast cover: the chat case; test_a_cut_responses_stream_ends_without_response_...
        pytest.param("responses", marks=pytest.mark.slow),
    ],
)
def test_an_agent_that_asks_again_after_a_cut_passes(tmp_path: Path, api: str) -> None:
    result = campaign(agent("--api", api), CUT, tmp_path)
    (t,) = result.trials
    assert t.exercised, t.landed()
    assert t.status == "passed", [str(c) for c in t.failed] + [t.landed()]
    llm = next(c for c in t.checks if c.name == "no_repeated_llm_calls")
    assert "asking again after a cut is a retry" in llm.message
    assert not llm.warning
    assert b"try 1: the stream ended without" in t.attempts[0].stderr


# slow: fast cover: tests/unit/test_stream_faults.py (a reset and a stall on real sockets)
@pytest.mark.slow
def test_a_reset_and_a_stall_are_retried_too(tmp_path: Path) -> None:
    fault = {"network": {"fail": [{"reset_after": 3}, {"stall": "5s", "after": 2}]}}
    spec = agent("--timeout", "0.5")  # its read timeout ends the stall before the harness does
    result = campaign(spec, fault, tmp_path)
    assert [t.plan.describe() for t in result.trials] == [
        "reset_after 3 for llm #1 in attempt 1",
        "stall 5s after 2 for llm #1 in attempt 1",
    ]
    for t in result.trials:
        assert t.exercised, t.landed()
        assert t.status == "passed", [str(c) for c in t.failed]
    reset, stall = (t.attempts[0].stderr for t in result.trials)
    assert b"try 1: Connection error" in reset
    assert b"try 1: Request timed out" in stall  # its read timeout ended the stall


def test_a_stream_fault_on_a_call_not_streamed_is_not_exercised(tmp_path: Path) -> None:
    plain = tmp_path / "plain.py"  # the standard library: a non-streamed chat completion
    plain.write_text(
        "import json, os, urllib.request\n"
        "body = {'model': 'm', 'messages': [{'role': 'user', 'content': 'Summarise'}]}\n"
        "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', "
        "data=json.dumps(body).encode(), headers={'Content-Type': 'application/json'})\n"
        "print(json.load(urllib.request.urlopen(req))['choices'][0]['message']['content'])\n"
    )
    spec = AgentSpec(command=(sys.executable, str(plain)), timeout=30, services=SERVICES)
    result = campaign(spec, CUT, tmp_path)
    (t,) = result.trials
    assert not t.exercised
    assert "was not streamed" in t.landed()
    assert not result.ok


def _gate(path: Path, report: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crashpoint", "run", str(path), "--report", str(report), "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        start_new_session=True,
    )


# slow: fast cover: test_an_agent_that_keeps_the_partial_reply_is_caught (and the gate runs the
# shipped scenario itself)
@pytest.mark.slow
def test_the_shipped_stream_scenario_passes_and_fails_without_the_fix(tmp_path: Path) -> None:
    ok = _gate(SCENARIO, tmp_path / "ok")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    assert "network@llm:cut 3|stall 1s after 4|reset_after 2" in ok.stdout
    broken = tmp_path / "examples" / "llm-stream"
    broken.mkdir(parents=True)
    (broken / "agent.py").write_text((ROOT / "examples/llm-stream/agent.py").read_text())
    bad = tmp_path / "scenarios" / "broken.scenario.yaml"
    bad.parent.mkdir()
    bad.write_text(SCENARIO.read_text().replace(', "--fixed"', ""))
    res = _gate(bad, tmp_path / "bad")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    gate = (tmp_path / "bad" / "gate.json").read_text()
    assert "same_output" in gate
    assert "kept the partial reply as the answer" in gate
