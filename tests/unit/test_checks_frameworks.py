"""The checks model what frameworks do (issue 23), on hand-written histories shaped like the
real ones: parallel steps of one name (LangGraph ``Send``), nested steps (a subgraph node),
loops, requests the service failed, the window between a reply and its first durable write,
and a crash-free run that is itself wrong. Each rule has a correct history that passes and a
broken one that fails."""

from __future__ import annotations

import base64
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crashpoint.harness import Attempt, Expect, Golden, Plan
from crashpoint.harness._checker._checks import (
    TrialFacts,
    check_exactly_once,
    check_no_repeated_llm_calls,
    check_resumes,
    find_secret,
    golden_effect_problems,
    run_checks,
)
from crashpoint.harness._spec import call_outcome, canonical


def start(a: int, step: str) -> dict[str, Any]:
    return {"attempt": a, "op": "step_started", "step": step}


def done(a: int, step: str) -> dict[str, Any]:
    return {"attempt": a, "op": "step_completed", "step": step}


def llm(a: int, fp: str = "A", **more: Any) -> dict[str, Any]:
    return {
        "attempt": a,
        "op": "llm_call",
        "name": "gpt-x",
        "fingerprint": fp,
        "prompt_tokens": 20,
        "completion_tokens": 10,
        **more,
    }


def eff(a: int, payload: str = "x", key: str | None = None, **more: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "attempt": a,
        "op": "effect",
        "kind": "POST /hook",
        "payload": {"v": payload},
        "applied": True,
    }
    if key is None:
        ev["keyless"] = True
    else:
        ev["key"] = key
    ev.update(more)
    return ev


def ended(*codes: int | None) -> list[Attempt]:
    """Attempts 1..n: a code of None was killed (SIGKILL), else exited with it."""
    return [
        Attempt(n, [], code, 9 if code is None else None, False, 0.0, b"", b"")
        for n, code in enumerate(codes, 1)
    ]


def facts(
    golden: list[dict[str, Any]],
    trial: list[dict[str, Any]],
    *,
    attempts: list[Attempt] | None = None,
    expect: Expect | None = None,
) -> TrialFacts:
    golden = [{**e, "i": i} for i, e in enumerate(golden)]
    trial = [{**e, "i": i} for i, e in enumerate(trial)]
    steps = [str(e["step"]) for e in golden if e["op"] == "step_started"]
    applied: Counter[tuple[str, str]] = Counter(
        (str(e["kind"]), canonical(e["payload"]))
        for e in golden
        if e["op"] == "effect" and e.get("applied")
    )
    got: Counter[tuple[str, str]] = Counter(
        (str(e["kind"]), canonical(e["payload"]))
        for e in trial
        if e["op"] == "effect" and e.get("applied")
    )
    g = Golden(steps, golden, applied, b"", 0.0)
    return TrialFacts(g, Plan(()), expect or Expect(), attempts or [], trial, got, "canary", [], 0)


# -- parallel steps of one name (LangGraph Send fan-out) ----------------------------------------

FANOUT = [
    start(1, "plan"),
    done(1, "plan"),
    start(1, "work"),
    start(1, "work"),
    start(1, "work"),
    done(1, "work"),
    done(1, "work"),
    done(1, "work"),
    start(1, "reduce"),
    done(1, "reduce"),
]
#: attempt 1 ran the three branches and reported two of them completed
FANOUT_CRASH = [
    start(1, "plan"),
    done(1, "plan"),
    start(1, "work"),
    start(1, "work"),
    start(1, "work"),
    done(1, "work"),
    done(1, "work"),
]


def test_resuming_the_one_unfinished_branch_of_a_fan_out_passes() -> None:
    trial = [*FANOUT_CRASH, start(2, "work"), done(2, "work"), start(2, "reduce")]
    r = check_resumes(facts(FANOUT, trial))
    assert r.ok, r.message


def test_the_reduce_after_a_branch_whose_report_the_crash_took_passes() -> None:
    # the third branch's completion was durable, its report lost: the resume goes to reduce
    r = check_resumes(facts(FANOUT, [*FANOUT_CRASH, start(2, "reduce")]))
    assert r.ok, r.message


def test_running_a_completed_branch_again_fails() -> None:
    trial = [*FANOUT_CRASH, start(2, "work"), start(2, "work")]
    r = check_resumes(facts(FANOUT, trial))
    assert not r.ok
    assert "re-ran a completed step: attempt 2 started 'work'" in r.message
    assert "all 3 of the golden run's occurrence(s) of 'work'" in r.message


def test_skipping_branches_no_attempt_started_fails() -> None:
    trial = [start(1, "plan"), done(1, "plan"), start(2, "reduce")]
    r = check_resumes(facts(FANOUT, trial))
    assert not r.ok
    assert "skipped a step no attempt had started" in r.message
    assert "'work' (occurrence 1 of 3)" in r.message


def test_parallel_branches_of_different_names_may_start_in_any_order() -> None:
    golden = [
        start(1, "plan"),
        done(1, "plan"),
        start(1, "a"),
        start(1, "b"),
        done(1, "a"),
        done(1, "b"),
        start(1, "join"),
        done(1, "join"),
    ]
    trial = [start(1, "plan"), done(1, "plan"), start(2, "b"), start(2, "a")]
    assert check_resumes(facts(golden, trial)).ok
    # but not a step after them: neither branch had started
    bad = [start(1, "plan"), done(1, "plan"), start(2, "join")]
    assert "skipped" in check_resumes(facts(golden, bad)).message


def test_starting_over_from_the_first_step_fails() -> None:
    r = check_resumes(facts(FANOUT, [*FANOUT_CRASH, start(2, "plan")]))
    assert not r.ok
    assert "'plan'" in r.message


# -- nested steps (a subgraph node) ---------------------------------------------------------------

SUBGRAPH = [
    start(1, "plan"),
    done(1, "plan"),
    start(1, "sub"),
    start(1, "s1"),
    done(1, "s1"),
    start(1, "s2"),
    done(1, "s2"),
    done(1, "sub"),
    start(1, "reduce"),
    done(1, "reduce"),
]
SUB_CRASH = [start(1, "plan"), done(1, "plan"), start(1, "sub"), start(1, "s1"), done(1, "s1")]


def test_re_entering_an_unfinished_parent_after_a_crash_inside_it_is_a_resume() -> None:
    trial = [*SUB_CRASH, start(2, "sub"), start(2, "s2"), done(2, "s2"), done(2, "sub")]
    r = check_resumes(facts(SUBGRAPH, trial))
    assert r.ok, r.message
    assert "re-entered 'sub' (not completed; its nested step(s) s1 were)" in r.message


def test_running_a_completed_nested_step_again_fails() -> None:
    trial = [*SUB_CRASH, start(2, "sub"), start(2, "s1")]
    r = check_resumes(facts(SUBGRAPH, trial))
    assert not r.ok
    assert "attempt 2 started 's1'" in r.message  # not its first: that was 'sub'
    first = check_resumes(facts(SUBGRAPH, [*SUB_CRASH, start(2, "s1")])).message
    assert "after the restart the first step started was 's1'" in first


def test_re_entering_a_completed_parent_fails() -> None:
    trial = [*SUBGRAPH[:8], start(2, "sub")]
    r = check_resumes(facts(SUBGRAPH, trial))
    assert not r.ok
    assert "'sub'" in r.message


# -- loops (one step name, one after another) -----------------------------------------------------

LOOP = [
    start(1, "model"),
    done(1, "model"),
    start(1, "tools"),
    done(1, "tools"),
    start(1, "model"),
    done(1, "model"),
    start(1, "tools"),
    done(1, "tools"),
    start(1, "model"),
    done(1, "model"),
]


def test_a_loop_resumes_at_the_occurrence_it_stopped_at() -> None:
    trial = [*LOOP[:6], start(2, "tools")]
    assert check_resumes(facts(LOOP, trial)).ok
    skip = [*LOOP[:6], start(2, "model")]  # the second tools never ran
    assert "skipped" in check_resumes(facts(LOOP, skip)).message


# -- responses decide what happened ---------------------------------------------------------------


def test_the_classification_every_check_reads() -> None:
    assert call_outcome(eff(1, killed="before")) == "killed"
    assert call_outcome(eff(1, failed="status 503", applied=False)) == "failed"
    assert call_outcome(eff(1, failed="timeout", reply_lost=True)) == "in_doubt"
    assert call_outcome(eff(1, killed="in_doubt")) == "in_doubt"
    assert call_outcome(eff(1)) == "acked"


def test_a_request_answered_503_is_not_a_completed_call() -> None:
    # the agent retries a 503 with backoff, gives up (exit 1) and is restarted: the webhook
    # the service never applied is sent again
    failed = {"failed": "status 503", "applied": False}
    trial = [eff(1, **failed), eff(1, **failed), eff(1, **failed), eff(2)]
    r = check_resumes(facts([eff(1)], trial, attempts=ended(1, 0)))
    assert r.ok, r.message
    # once acknowledged, sending it again is a re-made call
    bad = [eff(1, **failed), eff(1), llm(1), eff(2), llm(2)]
    r = check_resumes(facts([eff(1), llm(1)], bad, attempts=ended(1, 0)))
    assert not r.ok
    assert "re-made a completed call" in r.message


def test_failed_model_calls_are_not_billed() -> None:
    failed = {"failed": "status 503", "prompt_tokens": 0, "completion_tokens": 0}
    trial = [llm(1, **failed), llm(1, **failed), llm(1, **failed), llm(1)]
    r = check_no_repeated_llm_calls(
        facts([llm(1)], trial, expect=Expect(no_repeated_llm_calls="fail"))
    )
    assert r.ok, r.message
    assert not r.warning


# -- the window between a reply and its first durable write ----------------------------------------

GOLDEN_TWO_CALLS = [llm(1, "A"), llm(1, "B")]


def test_a_reply_the_crash_took_before_it_could_be_saved_may_be_asked_again() -> None:
    trial = [llm(1, "A"), llm(2, "A"), llm(2, "B")]
    f = facts(
        GOLDEN_TWO_CALLS,
        trial,
        attempts=ended(None, 0),
        expect=Expect(no_repeated_llm_calls="fail"),
    )
    r = check_no_repeated_llm_calls(f)
    assert r.ok, r.message
    assert "the window before the first durable write" in r.message
    assert "attempt 1 event #0" in r.message
    resume = check_resumes(f)  # the resume check exempts the same call, and says so
    assert resume.ok, resume.message
    assert "its reply reached attempt 1 (attempt 1 event #0 (llm_call ))" in resume.message


def test_an_agent_that_goes_on_before_saving_the_reply_still_fails() -> None:
    # it asked the second question before saving the first reply: killed after that, both
    # are asked again, and the first was not in the window
    trial = [llm(1, "A"), llm(1, "B"), llm(2, "A"), llm(2, "B")]
    f = facts(
        GOLDEN_TWO_CALLS,
        trial,
        attempts=ended(None, 0),
        expect=Expect(no_repeated_llm_calls="fail"),
    )
    r = check_no_repeated_llm_calls(f)
    assert not r.ok
    assert r.message.startswith("1 LLM call(s) re-billed")
    assert "LLM call gpt-x A made 1x in the golden run, 2x here after a restart" in r.message


def test_the_window_needs_a_crash_an_attempt_that_finished_is_not_excused() -> None:
    trial = [llm(1, "A"), llm(2, "A"), llm(2, "B")]
    f = facts(
        GOLDEN_TWO_CALLS,
        trial,
        attempts=ended(0, 0),
        expect=Expect(no_repeated_llm_calls="fail"),
    )
    assert not check_no_repeated_llm_calls(f).ok


# -- the golden run is judged too ----------------------------------------------------------------

#: an effect placed before interrupt(): the node runs again from its start on resume
INTERRUPTED = [
    start(1, "approve"),
    eff(1, "ask"),
    start(1, "approve"),
    eff(1, "ask"),
    done(1, "approve"),
]


def test_an_effect_sent_again_by_a_re_run_in_the_golden_run_fails() -> None:
    problems, dups = golden_effect_problems([{**e, "i": i} for i, e in enumerate(INTERRUPTED)])
    assert dups == Counter({("POST /hook", '{"v":"ask"}'): 1})
    assert "DUPLICATED in the golden run (crash-free)" in problems[0]
    r = check_exactly_once(facts(INTERRUPTED, INTERRUPTED))
    assert not r.ok
    assert "when step 'approve' ran again after its earlier run" in r.message
    out = {c.name: c for c in run_checks(facts(INTERRUPTED, INTERRUPTED))}
    assert "send it after the interrupt" in out["exactly_once"].hint


def test_the_same_effect_from_two_completed_steps_is_no_golden_duplicate() -> None:
    golden = [start(1, "a"), eff(1), done(1, "a"), start(1, "b"), eff(1), done(1, "b")]
    assert check_exactly_once(facts(golden, golden)).ok
    keyed = [start(1, "approve"), eff(1, key="k"), start(1, "approve")]
    keyed += [eff(1, key="k", applied=False), done(1, "approve")]
    assert check_exactly_once(facts(keyed, keyed)).ok


def test_a_key_sent_with_two_payloads_in_the_golden_run_fails() -> None:
    golden = [eff(1, "one", key="k"), eff(1, "two", key="k", applied=False)]
    r = check_exactly_once(facts(golden, golden))
    assert not r.ok
    assert "LOST in the golden run (crash-free): key 'k'" in r.message


@pytest.mark.parametrize(("policy", "ok"), [("warn", True), ("fail", False)])
def test_a_model_call_repeated_in_the_golden_run_is_reported(policy: str, ok: bool) -> None:
    golden = [llm(1), llm(1)]
    r = check_no_repeated_llm_calls(
        facts(golden, golden, expect=Expect(no_repeated_llm_calls=policy))
    )
    assert r.ok is ok
    assert r.warning is ok
    assert "in the golden run (crash-free) LLM call gpt-x A was billed 2x" in r.message


def test_a_key_re_sent_with_another_payload_after_a_restart_gets_the_right_hint() -> None:
    golden = [eff(1, "v1", key="k")]
    trial = [eff(1, "v1", key="k", killed="in_doubt"), eff(2, "v2", key="k", applied=False)]
    golden2 = [eff(1, "v2", key="k")]  # the payload the golden run sent
    out = {c.name: c for c in run_checks(facts(golden2, trial, attempts=ended(None, 0)))}
    c = out["exactly_once"]
    assert not c.ok
    assert "sent again after the restart with a different payload" in c.hint
    assert "recorded as done" not in c.hint
    assert check_exactly_once(facts(golden, [eff(1, "v1", key="k")])).ok


def test_an_effect_sent_with_another_payload_under_a_new_key_gets_the_right_hint() -> None:
    """A retry that lost part of the input: the transcript filed at the end differs from the
    crash-free run's (LOST the golden payload, UNEXPECTED the new one): the hint says the
    payload changed, not that the step was recorded before its effect."""
    golden = [eff(1, "hello and thanks", key="t")]
    trial = [eff(1, "thanks", key="t")]
    out = {c.name: c for c in run_checks(facts(golden, trial, attempts=ended(None, 0)))}
    c = out["exactly_once"]
    assert not c.ok
    assert "LOST" in c.message
    assert "UNEXPECTED" in c.message
    assert "payload the golden run never had" in c.hint
    assert "recorded as done" not in c.hint


# -- a secret is a secret however it is encoded -------------------------------------------------


@pytest.mark.parametrize(
    ("encode", "how"),
    [
        (lambda s: s, "as is"),
        (lambda s: base64.b64encode(b'{"v":"' + s + b'"}'), "base64"),
        (lambda s: base64.b64encode(b"x" + s + b"yy"), "base64"),
        (lambda s: base64.urlsafe_b64encode(b"ab" + s), "base64"),
        (lambda s: s.hex().encode(), "hex"),
        (lambda s: s.decode().encode("utf-16-le"), "UTF-16"),
    ],
)
def test_a_secret_stored_encoded_is_found(tmp_path: Path, encode: Any, how: str) -> None:
    secret = b"sk-crashpoint-canary-0123456789abcdef01234567"
    (tmp_path / "seg.log").write_bytes(b"header\0" + encode(secret) + b"\ntrailer")
    assert find_secret([str(tmp_path)], secret) == [(str(tmp_path / "seg.log"), how)]
    (tmp_path / "seg.log").write_bytes(b"header\0" + encode(b"sk-something-else-entirely-00000"))
    assert find_secret([str(tmp_path)], secret) == []
