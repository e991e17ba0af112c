"""no_repeated_llm_calls and resume judged from calls (no step names), on hand-written
histories: a broken one fails (or warns, by policy), a correct one passes, and a golden run
with nothing to judge says so instead of passing."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crashpoint.harness import Expect, Golden, Plan, ScenarioError, load_scenario
from crashpoint.harness._checker._checks import (
    TrialFacts,
    check_no_repeated_llm_calls,
    check_resumes,
    run_checks,
)


def llm(
    attempt: int, fp: str = "A", killed: str = "", tokens: tuple[int, int] = (20, 10)
) -> dict[str, Any]:
    ev = {
        "attempt": attempt,
        "op": "llm_call",
        "name": "gpt-x",
        "fingerprint": fp,
        "prompt_tokens": tokens[0],
        "completion_tokens": tokens[1],
    }
    return {**ev, "killed": killed} if killed else ev


def eff(
    attempt: int,
    payload: str = "hook",
    key: str | None = None,
    killed: str = "",
    applied: bool = True,
) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "attempt": attempt,
        "op": "effect",
        "kind": "POST /hook",
        "payload": {"text": payload},
        "applied": applied,
    }
    if key:
        ev["key"] = key
    else:
        ev["keyless"] = True
    return {**ev, "killed": killed} if killed else ev


def facts(
    golden: list[dict[str, Any]],
    trial: list[dict[str, Any]],
    expect: Expect | None = None,
    steps: list[str] | None = None,
) -> TrialFacts:
    for i, e in enumerate(golden):
        e.update(i=i)
    for i, e in enumerate(trial):
        e.update(i=i)
    g = Golden(steps or [], golden, Counter(), b"", 0.0)
    return TrialFacts(g, Plan(()), expect or Expect(), [], trial, Counter(), "canary", [], 0)


GOLDEN = [llm(1), eff(1)]
#: attempt 1 asks the model, posts the hook and is killed in its in-doubt window; attempt 2
#: starts over and asks the model again (re-billed) before re-posting
BROKEN = [llm(1), eff(1, killed="in_doubt"), llm(2), eff(2)]
#: attempt 2 resumes after the saved model reply: it only re-posts the in-doubt hook
FIXED = [llm(1), eff(1, killed="in_doubt"), eff(2)]


# -- no_repeated_llm_calls --------------------------------------------------------------------


def test_a_re_billed_call_warns_by_default_with_tokens() -> None:
    r = check_no_repeated_llm_calls(facts(GOLDEN, BROKEN))
    assert r.ok
    assert r.warning
    assert not r.skipped
    assert r.message.startswith("1 LLM call(s) re-billed, 30 tokens: LLM call gpt-x A")
    assert "made 1x in the golden run, 2x here" in r.message
    assert "attempt 2 event #2" in r.message
    assert str(r).startswith("no_repeated_llm_calls: WARN: ")


def test_the_fixed_agent_passes_without_warning() -> None:
    r = check_no_repeated_llm_calls(facts(GOLDEN, FIXED))
    assert r.ok
    assert not r.warning
    assert not r.skipped
    assert r.message == "1 golden LLM call(s), none made again"


def test_fail_policy_fails() -> None:
    r = check_no_repeated_llm_calls(facts(GOLDEN, BROKEN, Expect(no_repeated_llm_calls="fail")))
    assert not r.ok
    assert "re-billed, 30 tokens" in r.message


@pytest.mark.parametrize(("budget", "ok"), [(29, False), (30, True), (1000, True)])
def test_token_budget(budget: int, ok: bool) -> None:
    r = check_no_repeated_llm_calls(facts(GOLDEN, BROKEN, Expect(no_repeated_llm_calls=budget)))
    assert r.ok is ok
    assert r.warning is ok  # within the budget: reported as a warning
    assert (
        f"over the budget of {budget}" if not ok else f"within the budget of {budget}"
    ) in r.message


def test_asking_again_after_a_lost_reply_or_an_unbilled_kill_is_fine() -> None:
    lost_reply = [llm(1, killed="in_doubt"), llm(2), eff(2)]
    never_billed = [llm(1, killed="before"), llm(2), eff(2)]
    for trial in (lost_reply, never_billed):
        r = check_no_repeated_llm_calls(facts(GOLDEN, trial, Expect(no_repeated_llm_calls="fail")))
        assert r.ok, r.message
        assert not r.warning, r.message


def test_a_call_the_golden_run_made_twice_is_a_repeat_of_the_golden_run() -> None:
    golden = [llm(1), llm(1), eff(1)]
    r = check_no_repeated_llm_calls(facts(golden, [llm(1), llm(1), eff(1)]))
    assert r.warning  # the crash-free run itself re-billed it: never the baseline
    assert r.message.startswith("1 LLM call(s) re-billed, 30 tokens: in the golden run")
    r = check_no_repeated_llm_calls(facts(golden, [llm(1), llm(1), llm(2), eff(2)]))
    assert r.warning
    assert "made 2x in the golden run, 3x here" in r.message
    assert r.message.startswith("2 LLM call(s) re-billed")


def test_calls_the_golden_run_never_made_are_noted_not_judged() -> None:
    r = check_no_repeated_llm_calls(facts(GOLDEN, [llm(1), llm(1, "B"), eff(1)]))
    assert r.ok
    assert not r.warning
    assert "1 call(s) the golden run never made" in r.message


def test_nothing_to_judge_without_golden_llm_calls() -> None:
    r = check_no_repeated_llm_calls(facts([eff(1)], [eff(1), llm(1)]))
    assert r.skipped
    assert "golden run made no LLM call: nothing to judge" in r.message


def test_run_checks_hint_off_and_warning_shown() -> None:
    out = {c.name: c for c in run_checks(facts(GOLDEN, BROKEN))}
    c = out["no_repeated_llm_calls"]
    assert c.warning
    assert "save each model reply" in c.hint
    assert "-- hint:" in str(c)
    off = run_checks(facts(GOLDEN, BROKEN, Expect(no_repeated_llm_calls="off")))
    assert "no_repeated_llm_calls" not in {c.name for c in off}


@pytest.mark.parametrize("bad", [True, False, "loud", -1, 1.5])
def test_expect_refuses_bad_policies(bad: Any) -> None:
    with pytest.raises(ValueError, match="no_repeated_llm_calls"):
        Expect(no_repeated_llm_calls=bad)


def test_expect_round_trips_through_json() -> None:
    e = Expect(no_repeated_llm_calls=500)
    assert Expect.from_json(e.to_json()) == e


# -- resumes_from_last_completed without step names ---------------------------------------------


def test_resume_re_making_a_completed_call_fails() -> None:
    r = check_resumes(facts(GOLDEN, BROKEN))
    assert not r.ok
    assert r.message.startswith(
        "re-made a completed call: after the restart the first call "
        "of attempt 2 was LLM call gpt-x A at attempt 2 event #2"
    )
    assert "completed at attempt 1 event #0" in r.message


def test_resume_after_the_last_completed_call_passes() -> None:
    r = check_resumes(facts(GOLDEN, FIXED))
    assert r.ok
    assert not r.skipped
    assert "judged from calls" in r.message


def test_a_keyed_effect_sent_again_after_it_was_acknowledged_fails() -> None:
    golden = [eff(1, "a", key="k1"), eff(1, "b", key="k2"), eff(1, "c", key="k3")]
    trial = [
        eff(1, "a", key="k1"),
        eff(1, "b", key="k2"),
        eff(1, "c", key="k3", killed="before"),
        eff(2, "a", key="k1", applied=False),
        eff(2, "b", key="k2", applied=False),
        eff(2, "c", key="k3"),
    ]
    r = check_resumes(facts(golden, trial))
    assert not r.ok
    assert 'POST /hook {"text":"a"}' in r.message
    good = [*trial[:3], eff(2, "c", key="k3")]
    assert check_resumes(facts(golden, good)).ok


def test_the_last_acknowledged_call_of_a_killed_attempt_may_be_made_again() -> None:
    # killed (e.g. at an instant) after the reply, before any later event: it may not have
    # been saved yet
    r = check_resumes(facts(GOLDEN, [llm(1), llm(2), eff(2)]))
    assert r.ok, r.message


def test_in_doubt_and_killed_before_calls_are_not_completed() -> None:
    for first in (eff(1, killed="in_doubt"), eff(1, killed="before", applied=False)):
        trial = [llm(1), {**first}, eff(2)]
        assert check_resumes(facts(GOLDEN, trial)).ok
        again = [{**first}, eff(2)]
        assert check_resumes(facts([eff(1)], again)).ok


def test_resume_with_no_steps_and_no_calls_has_nothing_to_judge() -> None:
    r = check_resumes(facts([{"attempt": 1, "op": "event", "name": "x"}], []))
    assert r.skipped
    assert "nothing to judge" in r.message


def test_step_names_still_win_when_there_are_some() -> None:
    golden = [
        {"attempt": 1, "op": "step_started", "step": "ask"},
        llm(1),
        {"attempt": 1, "op": "step_completed", "step": "ask"},
    ]
    trial = [
        {"attempt": 1, "op": "step_started", "step": "ask"},
        llm(1),
        {"attempt": 1, "op": "step_completed", "step": "ask"},
        {"attempt": 2, "op": "step_started", "step": "ask"},
        llm(2),
    ]
    r = check_resumes(facts(golden, trial, steps=["ask"]))
    assert not r.ok
    assert "re-ran a completed step" in r.message


def test_the_resume_failure_is_the_root_of_the_re_billed_call() -> None:
    out = {
        c.name: c for c in run_checks(facts(GOLDEN, BROKEN, Expect(no_repeated_llm_calls="fail")))
    }
    assert out["no_repeated_llm_calls"].cause == "resumes_from_last_completed"
    assert "save each call's result" in out["resumes_from_last_completed"].hint


# -- scenario expect: no_repeated_llm_calls -------------------------------------------------------

BASE = """\
name: x
agent:
  command: ["{python}", "-c", "pass"]
faults:
  - kill: {at: random, count: 1}
expect:
  no_repeated_llm_calls: VALUE
"""


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("fail", "fail"),
        ("warn", "warn"),
        ("false", "off"),
        ("{max_tokens: 500}", 500),
        ("{max_tokens: 0}", 0),
    ],
)
def test_scenario_policy(tmp_path: Path, value: str, want: Any) -> None:
    p = tmp_path / "x.scenario.yaml"
    p.write_text(BASE.replace("VALUE", value))
    assert load_scenario(p).expect.no_repeated_llm_calls == want


def test_scenario_default_is_warn(tmp_path: Path) -> None:
    p = tmp_path / "x.scenario.yaml"
    p.write_text(BASE.split("expect:")[0])
    assert load_scenario(p).expect.no_repeated_llm_calls == "warn"


@pytest.mark.parametrize(
    ("value", "key", "line", "says"),
    [
        ("true", "expect.no_repeated_llm_calls", 7, "use fail, warn"),
        ("loud", "expect.no_repeated_llm_calls", 7, "got 'loud'"),
        ("{max_tokens: -1}", "expect.no_repeated_llm_calls.max_tokens", 7, "must be from 0"),
        ("{max_tokens: lots}", "expect.no_repeated_llm_calls.max_tokens", 7, "whole number"),
        ("{max_token: 5}", "expect.no_repeated_llm_calls.max_token", 7, "did you mean"),
        ("{}", "expect.no_repeated_llm_calls", 7, "needs max_tokens"),
    ],
)
def test_scenario_bad_policy_names_file_line_key(
    tmp_path: Path, value: str, key: str, line: int, says: str
) -> None:
    p = tmp_path / "x.scenario.yaml"
    p.write_text(textwrap.dedent(BASE.replace("VALUE", value)))
    with pytest.raises(ScenarioError) as ei:
        load_scenario(p)
    e = ei.value
    assert (e.key, e.line) == (key, line), str(e)
    assert says in str(e)
    assert str(e).startswith(f"{p}:{line}")


# -- a warning shows in the reports and never fails ---------------------------------------------


def test_a_warning_is_reported_and_passes() -> None:
    from crashpoint.harness import CheckResult, Outcome, TrialResult
    from crashpoint.harness import summary_row as _row
    from crashpoint.harness._report._html import _check_matrix

    warn = CheckResult("no_repeated_llm_calls", True, "1 LLM call(s) re-billed", warning=True)
    t = TrialResult(
        Plan(()),
        [],
        [],
        {},
        0,
        [CheckResult("completes", True), warn],
        0.0,
        outcomes=[Outcome(0, "kill", True, "x")],
    )
    assert t.status == "passed"
    assert t.to_json()["warnings"] == ["no_repeated_llm_calls: WARN: 1 LLM call(s) re-billed"]
    assert t.to_json()["failures"] == []
    s = {
        "name": "n",
        "ok": True,
        "ran": 1,
        "failed": 0,
        "warned": 1,
        "checks": {"no_repeated_llm_calls": {"passed": 1, "failed": 0, "skipped": 0, "warned": 1}},
    }
    assert _row(s)[-1] == "PASS (1 warned)"
    assert "1 ok (1 warn)" in "".join(_check_matrix([s]))
