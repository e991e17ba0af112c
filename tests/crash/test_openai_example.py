"""The issue's zero-instrumentation example, run as shipped: ``examples/openai-webhook/``.

An agent written with the OpenAI SDK and httpx (no crashpoint import) asks the model, then
posts a webhook. Under the harness its model calls go to the LLM stand-in and its POSTs to the
HTTP stand-in, and each is a boundary. As written it posts without a key and keeps no answer
until the webhook is done: one kill in the webhook's in-doubt window shows the duplicate
webhook (failure) and the model asked again (the re-billed call, a warning). ``--fixed``
passes the same trial. Offline: the SDK talks to the stand-in only. Skipped without the SDK.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from _forked import forking, warm
from _lazy import needs
from crashpoint.harness import (
    Fault,
    Golden,
    Plan,
    TrialResult,
    TrialRunner,
    Zygote,
    load_scenario,
)

pytestmark_0 = needs(
    "openai",
    reason="the example agent is written with the OpenAI SDK "
    "(pip install openai, or the dev extra)",
)
pytestmark_1 = needs("httpx", reason="the example agent posts with httpx")
pytestmark = [pytestmark_0, pytestmark_1]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai-webhook"


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """One warm zygote for both scenarios (one script; they differ in ``--fixed`` only): the
    SDK imported once for the module."""
    with forking(warm(load_scenario(EXAMPLE / "broken.scenario.yaml").agent)) as z:
        yield z


def _trial(name: str, tmp_path: Path, z: Zygote) -> tuple[Golden, TrialResult]:
    sc = load_scenario(EXAMPLE / name)
    # the second ticket's webhook: applied by the service, the agent killed before the reply
    kill = Fault.make("kill", 1, op="effect", name="POST /hook", nth=2, phase="in_doubt")
    agent = warm(sc.agent)  # forked: this trial is about the agent's key, not spawning
    forks = z.forks
    with TrialRunner(
        agent, str(tmp_path / "trials"), restarts=sc.restarts, expect=sc.expect, launcher=z
    ) as runner:
        golden = runner.golden()
        result = golden, runner.run(Plan((kill,), "kill", sc.seed, 0), golden)
    assert z.forks > forks, "fork mode was not used"
    return result


def test_the_agent_as_written_fails_with_the_duplicate_webhook_and_the_re_billed_call(
    tmp_path: Path, zygote: Zygote
) -> None:
    golden, t = _trial("broken.scenario.yaml", tmp_path, zygote)
    calls = [
        (e["op"], e.get("name") or e.get("kind"))
        for e in golden.events
        if e["op"] in ("llm_call", "effect")
    ]
    assert calls == [("llm_call", "gpt-4o-mini"), ("effect", "POST /hook")] * 3
    assert not t.ok
    failed = {c.name: c.message for c in t.failed}
    assert "DUPLICATED POST /hook" in failed["exactly_once"]
    assert '"ticket":"T-2"' in failed["exactly_once"]
    warned = {c.name: c.message for c in t.warnings}
    assert "re-billed" in warned["no_repeated_llm_calls"]
    assert "gpt-4o-mini" in warned["no_repeated_llm_calls"]


def test_the_fixed_agent_passes_the_same_trial(tmp_path: Path, zygote: Zygote) -> None:
    _golden, t = _trial("fixed.scenario.yaml", tmp_path, zygote)
    assert t.ok, [str(c) for c in t.failed]
    hooks = [e for e in t.events if e.get("kind") == "POST /hook"]
    assert [e["applied"] for e in hooks] == [True, True, False, True]  # the resend deduped
    assert not t.warnings  # the label was kept: not asked again


def test_the_scenarios_differ_in_the_fix_flag_only() -> None:
    broken = load_scenario(EXAMPLE / "broken.scenario.yaml").agent
    fixed = load_scenario(EXAMPLE / "fixed.scenario.yaml").agent
    assert dataclasses.replace(fixed, command=fixed.command[:-1]) == broken
    assert fixed.command[-1] == "--fixed"
