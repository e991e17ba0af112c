"""The history checker on hand-made ledger histories: each anomaly found with its minimal
witness, a clean history of k resumers passes, and the work grows linearly with the history
(counted, not timed: benchmarks/history_checker.py times 100,000 events)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from crashpoint.harness import Attempt, Expect, Fault, Golden, Plan
from crashpoint.harness._checker import TrialFacts, check_history, history_text
from crashpoint.harness._checker._checks import check_single_writer
from crashpoint.harness._spec import canonical


class Ledger:
    """Events in ledger order, as the ledger records them (``i``, ``attempt``, ``t``)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, attempt: int, op: str, **kw: Any) -> dict[str, Any]:
        ev = {"i": len(self.events), "attempt": attempt, "op": op, "t": len(self.events) * 0.01}
        ev.update(kw)
        self.events.append(ev)
        return ev

    def start(self, attempt: int, step: str, **kw: Any) -> dict[str, Any]:
        return self.add(attempt, "step_started", step=step, **kw)

    def done(self, attempt: int, step: str, **kw: Any) -> dict[str, Any]:
        return self.add(attempt, "step_completed", step=step, **kw)

    def effect(self, attempt: int, kind: str, payload: Any, **kw: Any) -> dict[str, Any]:
        kw.setdefault("applied", True)
        return self.add(attempt, "effect", kind=kind, payload=payload, **kw)


GOLDEN = {"fetch": 1, "summarise": 1, "notify": 1}


def kinds(h: Any) -> list[str]:
    return [a.kind for a in h.anomalies]


def test_a_clean_history_of_three_resumers_has_no_anomaly() -> None:
    """One proceeds, the other two refused before any event; a later attempt finds it done."""
    led = Ledger()
    for step in GOLDEN:
        led.start(1, step)
        led.done(1, step)
    h = check_history(led.events, GOLDEN, ended={1: 1.0})
    assert h.ok, h.anomalies
    assert h.attempts == (1,)
    assert h.events == 6


def test_two_attempts_completing_one_step_is_consume_once_with_a_two_event_witness() -> None:
    led = Ledger()
    led.start(1, "fetch")
    led.start(3, "fetch")  # released together
    first = led.done(1, "fetch")
    second = led.done(3, "fetch")
    h = check_history(led.events, GOLDEN)
    (a,) = h.of("consume_once")
    assert a.witness == (first, second)
    assert a.summary.startswith("step 'fetch' completed 2 times by attempts 1, 3")
    assert "(the golden run completed it once)" in a.summary
    assert not h.of("lost_ack")  # attempt 3 began before attempt 1's fetch was acknowledged


def test_a_loop_completing_a_step_as_often_as_the_golden_run_is_not_consume_once() -> None:
    led = Ledger()
    led.start(2, "model")  # two resumers released together, each did one of the two turns
    led.start(1, "model")
    led.done(1, "model")
    led.done(2, "model")
    h = check_history(led.events, {"model": 2})
    assert not h.of("consume_once"), h.anomalies
    led.start(2, "model")
    led.done(2, "model")
    (a,) = check_history(led.events, {"model": 2}).of("consume_once")
    assert "completed 3 times by attempts 1, 2 (the golden run completed it twice)" in a.summary


def test_a_step_acknowledged_before_an_attempt_began_and_started_again_is_lost_work() -> None:
    led = Ledger()
    led.start(1, "fetch")
    acked = led.done(1, "fetch")
    began = led.start(2, "summarise")  # attempt 2 began after fetch was acknowledged ...
    again = led.start(2, "fetch")  # ... and runs it as if never done
    (a,) = check_history(led.events, GOLDEN).of("lost_ack")
    assert a.witness == (acked, began, again)
    assert "completed and acknowledged once before attempt 2 began" in a.summary


def test_a_step_started_by_an_attempt_that_began_before_it_was_acknowledged_is_not_lost() -> None:
    led = Ledger()
    led.start(1, "fetch")
    led.start(2, "fetch")  # both released together: consume-once / single writer, not lost
    led.done(1, "fetch")
    assert not check_history(led.events, GOLDEN).of("lost_ack")


def test_two_successors_of_one_checkpoint_are_a_fork_and_two_first_checkpoints_too() -> None:
    led = Ledger()
    a = led.done(2, "plan", checkpoint="c2", parent="c1", thread="t")
    led.done(2, "search", checkpoint="c3", parent="c2", thread="t")
    b = led.done(3, "plan", checkpoint="c2b", parent="c1", thread="t")
    led.done(3, "plan", checkpoint="c2b", parent="c1", thread="t")  # the same one again: no
    led.done(4, "x", checkpoint="c9", parent="c1", thread="other")  # another thread: no
    (fork,) = check_history(led.events, {"plan": 1, "search": 1, "x": 1}).of("fork")
    assert fork.witness == (a, b)
    assert fork.summary.startswith("checkpoint c1 has two successors, c2 (attempt 2) and c2b")
    assert "c2b (parent c1)" in fork.text()  # the ids are the point of a fork's witness
    roots = Ledger()
    roots.add(1, "event", name="langgraph:checkpoint:-1", checkpoint="r1", thread="t")
    roots.add(2, "event", name="langgraph:checkpoint:-1", checkpoint="r2", thread="t")
    (fork,) = check_history(roots.events).of("fork")
    assert "forked at parent none: the thread's first checkpoint" in fork.summary


def test_an_effect_applied_by_two_attempts_is_a_duplicate_whatever_its_keys() -> None:
    led = Ledger()
    one = led.effect(1, "email", {"to": "a"}, key="k-pid-1")
    led.effect(2, "email", {"to": "a"}, key="k-pid-1", applied=False)  # deduplicated: fine
    two = led.effect(2, "email", {"to": "a"}, key="k-pid-2")  # a fresh key: applied again
    effects = {("email", canonical({"to": "a"})): 1}
    (a,) = check_history(led.events, {}, effects).of("duplicate_effect")
    assert a.witness == (one, two)
    assert "applied 2 times by attempts 1, 2 (the golden run applied it once)" in a.summary


def test_single_writer_over_three_attempts_at_once_names_the_two_and_counts_them_all() -> None:
    led = Ledger()
    inside = led.start(1, "fetch")
    led.start(2, "fetch")
    led.start(3, "fetch")
    h = check_history(led.events, GOLDEN)
    (sw,) = h.of("single_writer")
    assert sw.witness == (inside, led.events[1])
    assert sw.summary.startswith("attempts 1 and 2 executed steps at the same time")
    assert h.most_inside == 3


def test_an_attempt_that_went_away_mid_step_is_not_inside_it_any_more() -> None:
    led = Ledger()
    led.start(1, "fetch")  # t 0.00; attempt 1 was killed at 0.005
    led.start(2, "fetch")  # t 0.01
    assert check_history(led.events, GOLDEN, ended={1: 0.005}).ok
    assert not check_history(led.events, GOLDEN, ended={1: 0.5}).ok


def test_after_a_sequential_crash_only_the_single_writer_rules_are_judged() -> None:
    """A rollback after a corruption may re-run an acknowledged step: other checks judge it."""
    led = Ledger()
    led.start(1, "fetch")
    led.done(1, "fetch")
    led.start(2, "fetch")
    led.done(2, "fetch")
    assert check_history(led.events, GOLDEN, ended={1: 0.015}, concurrent=False).ok
    assert kinds(check_history(led.events, GOLDEN, ended={1: 0.015})) == [
        "consume_once",
        "lost_ack",
    ]


def _facts(events: list[dict[str, Any]], k: int) -> TrialFacts:
    golden = Golden(
        list(GOLDEN),
        [{"op": "step_completed", "step": s, "i": n, "attempt": 1} for n, s in enumerate(GOLDEN)],
        Counter(),
        b"",
        0.0,
    )
    plan = Plan((Fault.make("resumers", 1, processes=k),), "resumers", 1, 0)
    attempts = [Attempt(n, [], 0, None, False, 1.0, b"", b"") for n in range(1, k + 1)]
    return TrialFacts(golden, plan, Expect(), attempts, events, Counter(), "c", [], 0, {})


def test_single_writer_fails_with_the_witness_and_the_folder_lists_every_anomaly() -> None:
    led = Ledger()
    for a in (1, 2, 3):  # three resumers released together, each at its own pace
        led.start(a, "fetch")
    for a in (2, 3):
        led.done(a, "fetch")
    facts = _facts(led.events, 3)
    r = check_single_writer(facts)
    assert not r.ok
    assert r.message.startswith("attempts 1 and 2 executed steps at the same time"), r.message
    assert "; up to 3 attempts were inside steps at once" in r.message
    assert (
        "the history shows two writers of one run: step 'fetch' completed 2 times by attempts "
        "2, 3 (the golden run completed it once): two attempts did the same step of the run "
        "(witness: attempt 2 event #3 step_completed 'fetch'; attempt 3 event #4 "
        "step_completed 'fetch')"
    ) in r.message, r.message
    text = history_text(facts)
    assert text.startswith("history check: 5 ledger events of attempts 1 to 3, read once; "), text
    assert "\nconsume_once: step 'fetch' completed 2 times" in text
    assert "\n  attempt 3 event #4 step_completed 'fetch' at +0.040s\n" in text


def test_a_clean_history_of_resumers_passes_single_writer_saying_what_was_read() -> None:
    """Attempt 1 was killed after fetch; attempts 2 and 3 resumed at once: 2 went on, 3 was
    refused before its first event."""
    led = Ledger()
    led.start(1, "fetch")
    led.done(1, "fetch")
    for step in ("summarise", "notify"):
        led.start(2, step)
        led.done(2, step)
    facts = _facts(led.events, 2)
    facts.extra["ended"] = {1: 0.015}
    r = check_single_writer(facts)
    assert r.ok, r
    assert not r.skipped, r
    assert r.message == (
        "judged from the step events of attempts 1, 2; history of 6 events: no step completed "
        "by two attempts, no acknowledged step started again, no fork, no effect applied by "
        "two attempts"
    )
    assert history_text(facts) == ""
    one = _facts(led.events[:2], 2)
    assert check_single_writer(one).skipped  # step events from one attempt, no file recorded


# -- linear in the history ---------------------------------------------------------------------


def synthetic(n: int, k: int = 32) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """About ``n`` events of ``k`` resumers racing through a long run: every attempt starts
    every step, completions, effects with and without keys, checkpoints with parents, in an
    interleaved order (every anomaly kind occurs, many times)."""
    led = Ledger()
    golden: dict[str, int] = {}
    step = 0
    while len(led.events) < n:
        name = f"s{step % (n // 40 + 1)}"  # names repeat: loops
        golden[name] = golden.get(name, 0) + 1
        for a in range(1, k + 1):
            if len(led.events) >= n:
                break
            led.start(a, name)
            if a % 3 == 0:
                led.effect(a, "mail", {"step": step}, key=f"{a}:{step}")
            if a % 2 == 0:
                led.done(a, name, checkpoint=f"c{step}.{a}", parent=f"c{step - 1}", thread="t")
        step += 1
    return led.events[:n], golden


def test_the_work_grows_linearly_with_the_history() -> None:
    """Counted inner-loop steps (``History.work``), not seconds: doubling the history (to
    20,000 events of 32 resumers) at most doubles the work (within 10%), and the work per
    event stays bounded (counts: 20,000 events show a quadratic loop as well as 100,000 did)."""
    small, g1 = synthetic(10_000)
    large, g2 = synthetic(20_000)
    h1 = check_history(small, g1)
    h2 = check_history(large, g2)
    assert h1.events == 10_000
    assert h2.events == 20_000
    assert {"single_writer", "consume_once", "fork", "duplicate_effect"} <= set(kinds(h2))
    assert h2.work / h1.work < 2.2, (h1.work, h2.work)
    assert h2.work < 4 * h2.events, h2.work  # a few steps per event, whatever the length
