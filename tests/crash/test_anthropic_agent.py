"""The Anthropic-compatible model endpoint end to end: a real agent streams its reply with the
``anthropic`` SDK (``tests/agents/anthropic_stream.py``, no crashpoint import) from the LLM
stand-in, which cuts the stream part-way, as it cuts an OpenAI one
(tests/crash/test_stream_agents.py). The agent that keeps the partial reply is caught by
``same_output`` naming the cut stream; the one that waits for ``message_stop`` and asks again
passes, and the retry is no re-billed call."""

from __future__ import annotations

from pathlib import Path

import pytest

from _lazy import needs
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CampaignResult,
    Expect,
    Zygote,
    family_from_spec,
)

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tests" / "agents" / "anthropic_stream.py"
ANSWER = "Crash recovery resumes from the last durable step and never repeats an effect."
SERVICES = {"llm": {"replies": [{"match": "Summarise", "reply": ANSWER}]}}
CUT = {"network": {"fail": {"cut": 4}}}

pytestmark = needs(
    "anthropic", reason="the agent streams with the anthropic SDK (pip install anthropic)"
)


def campaign(tmp_path: Path, *flags: str) -> CampaignResult:
    """The attempts are forked from a zygote that imported ``anthropic`` once (fork mode: ~3 s
    of import per spawned attempt saved; these tests are about the cut stream, not spawning)."""
    spec = AgentSpec(
        command=("{python}", str(AGENT), "{state_dir}", *flags),
        timeout=30,
        services=SERVICES,
        warm=("*",),
    )
    with Zygote.for_agent(spec) as z:
        result = Campaign(
            spec,
            [family_from_spec(CUT)],
            str(tmp_path / "report"),
            name="anthropic-stream",
            seed=5,
            restarts=2,
            expect=Expect(no_repeated_llm_calls="fail"),
            launcher=z,
        ).run()
        assert z.forks > len(result.trials), "fork mode was not used"
    return result


def test_an_anthropic_agent_that_keeps_a_cut_stream_is_caught(tmp_path: Path) -> None:
    result = campaign(tmp_path, "--keep-partial")
    (t,) = result.trials
    assert t.exercised, t.landed()
    assert "cut after 4 event(s) for llm #1 in attempt 1" in t.landed()
    assert t.status == "failed"
    assert t.root_cause is not None
    assert t.root_cause.name == "same_output", [str(c) for c in t.failed]
    assert "the LLM stand-in cut a streamed reply" in t.root_cause.message
    assert "Crash recovery " in t.root_cause.message
    assert t.attempts[0].returncode == 0
    assert not result.ok


# slow: fast cover: test_an_anthropic_agent_that_keeps_a_cut_stream_is_caught and the unit tests
# of the stand-in (tests/unit/test_anthropic_standin.py)
@pytest.mark.slow
def test_an_anthropic_agent_that_asks_again_passes(tmp_path: Path) -> None:
    result = campaign(tmp_path)
    (t,) = result.trials
    assert t.exercised, t.landed()
    assert t.status == "passed", [str(c) for c in t.failed] + [t.landed()]
    llm = next(c for c in t.checks if c.name == "no_repeated_llm_calls")
    assert "asking again after a cut is a retry" in llm.message
    assert b"try 1: the stream ended without message_stop" in t.attempts[0].stderr
