"""The checks of Contract 2: black-box invariants judged from what crossed the agent's boundary.

Each check is a function ``(TrialFacts) -> CheckResult`` registered in :data:`BUILTIN_CHECKS`.
A message says what happened and where in the history (attempt, event index).
"""

from __future__ import annotations

import base64
import os
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any

from crashpoint.harness._checker._divergence import check_replay_divergence
from crashpoint.harness._checker._facts import TrialFacts
from crashpoint.harness._checker._history import History, history_of, ran_at_once
from crashpoint.harness._checker._loop import check_crash_loop, gave_up
from crashpoint.harness._checker._silent import check_no_silent_failure
from crashpoint.harness._checker._verdict import explain
from crashpoint.harness._checker._writers import judge_writes
from crashpoint.harness._spec import (
    CheckResult,
    call_of,
    call_outcome,
    canonical,
    resumed_attempt,
)

__all__ = ["BUILTIN_CHECKS", "run_checks", "scan_for_bytes"]


def _where(ev: dict[str, Any]) -> str:
    what = ev.get("step") or ev.get("key") or ev.get("kind") or ""
    return f"attempt {ev['attempt']} event #{ev['i']} ({ev['op']} {what})".rstrip()


def check_completes(f: TrialFacts) -> CheckResult:
    fin = f.final
    if fin is None:
        return CheckResult("completes", False, "the agent never ran")
    if fin.returncode == 0:
        return CheckResult("completes", True)
    if fin.returncode in f.expect.fail_stop_codes:
        return CheckResult("completes", True, f"fail-stopped with documented exit {fin.returncode}")
    if f.refused:
        return CheckResult(
            "completes",
            True,
            f"refused corrupt state ({f.expect.refusal(fin.returncode, fin.stderr)})",
        )
    stopped = gave_up(f)  # a fault on every attempt: giving up is the right end (crash_loop)
    if stopped:
        return CheckResult("completes", True, stopped)
    tail = [fin.error_line()]  # the error, not a Node.js agent's last stack frame
    return CheckResult(
        "completes",
        False,
        f"did not finish within {len(f.attempts)} attempts; last "
        f"{fin.describe()}; stderr: {tail[0][:200]!r}",
    )


def check_same_output(f: TrialFacts) -> CheckResult:
    if not f.completed:
        if f.refused:
            return CheckResult("same_output", True, "refused corrupt state", skipped=True)
        if gave_up(f):
            return CheckResult(
                "same_output", True, "gave up under a fault on every attempt", skipped=True
            )
        return CheckResult("same_output", False, "no output: the agent did not complete")
    out = f.attempts[-1].stdout
    if out == f.golden.output:
        return CheckResult("same_output", True)
    return CheckResult(
        "same_output",
        False,
        f"final output differs from the golden run: got "
        f"{out[:160]!r}, expected {f.golden.output[:160]!r}" + _cut_cause(f, out),
    )


def cut_streams(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``llm_call`` events whose streamed reply the stand-in cut part-way (a ``network``
    stream failure: ``partial_reply`` says how much was delivered)."""
    return [e for e in events if e["op"] == "llm_call" and isinstance(e.get("partial_reply"), dict)]


def _cut_cause(f: TrialFacts, out: bytes) -> str:
    """Why the output may differ: a streamed reply cut part-way whose delivered text the
    output holds, on a line the golden run's output does not have (the partial reply kept as
    the answer); or, failing that, that a stream was cut at all."""
    cuts = cut_streams(f.events)
    if not cuts:
        return ""
    got = out.decode("utf-8", "replace")
    golden = set(f.golden.output.decode("utf-8", "replace").splitlines())
    for e in cuts:
        text = str(e["partial_reply"].get("text") or "").strip()
        if not text or text not in got:
            continue
        lines = [ln for ln in got.splitlines() if text.splitlines()[-1] in ln]
        if lines and not all(ln in golden for ln in lines):
            return (
                f"; the LLM stand-in cut a streamed reply ({_call_text(e)} at {_at(e)}: "
                f"{e.get('failed')}) and the output holds its partial text "
                f"{text[-60:]!r}: the agent kept the partial reply as the answer (a cut "
                "stream ends without a finish_reason and without [DONE], an Anthropic one "
                "without message_stop: ask again)"
            )
    e = cuts[0]
    return (
        f"; {len(cuts)} streamed reply(ies) cut in this trial (first: {_call_text(e)} at "
        f"{_at(e)}: {e.get('failed')}): was a partial reply kept?"
    )


def _at(ev: dict[str, Any]) -> str:
    return f"attempt {ev.get('attempt')} event #{ev.get('i')}"


def _sends(f: TrialFacts, kind: str, payload: str) -> list[dict[str, Any]]:
    """The effect events of this content (kind + canonical payload) the world applied."""
    return [
        e
        for e in f.events
        if e["op"] == "effect"
        and e.get("applied")
        and str(e.get("kind")) == kind
        and canonical(e.get("payload")) == payload
    ]


def _dup_text(f: TrialFacts, kind: str, payload: str, got: int, n: int) -> str:
    sends = _sends(f, kind, payload)
    keyless = [e for e in sends if e.get("keyless")]
    what = f"{kind} {payload[:80]} applied {got}x, golden {n}x"
    if keyless and len(keyless) == len(sends):
        return f"{what}: {len(sends)} sends of the same payload, no key"
    keys = sorted({str(e.get("key")) for e in sends if not e.get("keyless")})
    if len(keys) > 1:
        return f"{what}: under {len(keys)} different keys " + ", ".join(
            f"{k[:40]!r}" for k in keys[:3]
        )
    return what


def golden_effect_problems(
    events: list[dict[str, Any]],
) -> tuple[list[str], Counter[tuple[str, str]]]:
    """What the crash-free run itself got wrong about its effects, and the applications of
    each effect that were duplicates there (so the baseline does not count them).

    * an effect applied again by a re-run of the step that sent it, after that step's earlier
      run never completed (an effect placed before LangGraph's ``interrupt()``, which re-runs
      the node on resume; a node retried after an error) with no key to deduplicate it;
    * a key re-sent with a different payload: the service kept the first payload, and the
      second was lost.

    Identical effects sent by different steps, or by a step that completed each time, are
    judged by count like any others (an agent may send the same thing twice on purpose)."""
    problems: list[str] = []
    extra: Counter[tuple[str, str]] = Counter()
    count: Counter[str] = Counter()
    open_: list[tuple[str, int]] = []  # (step, occurrence) started, not completed
    completed: set[tuple[str, int]] = set()
    sends: dict[tuple[str, str], list[tuple[tuple[str, int] | None, dict[str, Any]]]] = {}
    keyed: dict[str, dict[str, Any]] = {}  # key -> the send that applied it
    for ev in events:
        op = ev["op"]
        if op == "step_started":
            step = str(ev.get("step"))
            count[step] += 1
            open_.append((step, count[step]))
        elif op == "step_completed":
            step = str(ev.get("step"))
            for k in range(len(open_) - 1, -1, -1):
                if open_[k][0] == step:
                    completed.add(open_.pop(k))
                    break
        elif op == "effect":
            content = (str(ev.get("kind")), canonical(ev.get("payload")))
            key = ev.get("key")
            if ev.get("applied"):
                sends.setdefault(content, []).append((open_[-1] if open_ else None, ev))
                if key is not None and not ev.get("keyless"):
                    keyed.setdefault(str(key), ev)
            elif key is not None and str(key) in keyed:
                first = keyed[str(key)]
                if canonical(first.get("payload")) != content[1]:
                    problems.append(
                        f"LOST in the golden run (crash-free): key {str(key)[:40]!r} was sent "
                        f"again with a different payload {content[1][:60]} at golden event "
                        f"#{ev.get('i', '?')} after it had been applied with "
                        f"{canonical(first.get('payload'))[:60]} (event #{first.get('i', '?')}); "
                        "the service kept the first"
                    )
    for (kind, payload), got in sends.items():
        for j in range(1, len(got)):
            step_j = got[j][0]
            if step_j is None:
                continue
            earlier = [
                s
                for s, _ev in got[:j]
                if s is not None and s[0] == step_j[0] and s != step_j and s not in completed
            ]
            if earlier:
                extra[(kind, payload)] += 1
                problems.append(
                    f"DUPLICATED in the golden run (crash-free): {kind} {payload[:80]} was "
                    f"applied at golden event #{got[0][1].get('i', '?')} and again at "
                    f"#{got[j][1].get('i', '?')}, when step {step_j[0]!r} ran again after its "
                    "earlier run (which sent it) did not complete"
                )
    return problems, extra


def check_exactly_once(f: TrialFacts) -> CheckResult:
    if not f.golden.effects and not any(f.applied.values()):
        return CheckResult(
            "exactly_once",
            True,
            "no effect reached the stand-ins, in the golden run or the trial: nothing to judge "
            "(effects are seen when the agent's calls go to {http}, {smtp}, {llm} or the probe)",
            skipped=True,
        )
    lost, dup, extra = [], [], []
    golden_problems, golden_dups = golden_effect_problems(f.golden.events)
    stopped = f.refused or bool(gave_up(f))  # effects a clear stop prevented are not lost
    for (kind, payload), n0 in f.golden.effects.items():
        n = n0 - golden_dups.get((kind, payload), 0)  # a golden duplicate is no baseline
        got = f.applied.get((kind, payload), 0)
        if got < n and not stopped:
            lost.append(f"{kind} {payload[:80]} applied {got}x, golden {n}x")
        elif got > n:
            dup.append(_dup_text(f, kind, payload, got, n))
    for (kind, payload), n in f.applied.items():
        if (kind, payload) not in f.golden.effects and n:
            extra.append(f"{kind} {payload[:80]} applied {n}x, not in the golden run")
    problems = (
        golden_problems
        + [f"DUPLICATED {d}" for d in dup]
        + [f"LOST {x}" for x in lost]
        + [f"UNEXPECTED {e}" for e in extra]
    )
    if problems:
        effects = [e for e in f.events if e["op"] == "effect"]
        hist = ", ".join(f"{_where(e)} applied={e.get('applied')}" for e in effects[:12])
        return CheckResult("exactly_once", False, "; ".join(problems) + f". Effects seen: {hist}")
    return CheckResult("exactly_once", True)


def check_resumes(f: TrialFacts) -> CheckResult:
    """After a restart no step reported completed starts again, and the first step started is
    the first not completed, or a later one that an earlier attempt had already started (its
    completion was durable but the crash took the report) or that ran beside it in the golden
    run (a parallel branch, or the parent it is nested in).

    Steps are counted by occurrence, as frameworks run them: a name may repeat (a loop) or run
    in parallel (a fan-out sends one node several times); started occurrences include the
    completed ones. A step nested in another (a subgraph node's inner nodes) completes on its
    own: re-entering an unfinished parent after a crash inside it is a resume, not a re-run.
    """
    name = "resumes_from_last_completed"
    if f.plan.corrupts:
        return CheckResult(
            name,
            True,
            "skipped after a corruption (re-running steps is a legitimate rollback there)",
            skipped=True,
        )
    if not f.golden.steps:  # an agent that names no step: judged from the calls it repeats
        return _resumes_by_calls(f)
    return _resumes_by_steps(f)


class _GoldenSteps:
    """The golden run's steps by occurrence: position ``i`` is the ``occ[i]``-th start of
    ``names[i]``; two positions overlap when one started before the other completed (a
    parallel branch, or a step nested in another)."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.names: list[str] = []
        self.occ: list[int] = []
        self.at: dict[tuple[str, int], int] = {}  # (name, occurrence) -> position
        began: list[int] = []  # event index of each position's start
        ended: list[float] = []  # event index of its completion (inf: never)
        open_: dict[str, list[int]] = {}  # name -> positions started, not completed
        count: Counter[str] = Counter()
        for k, ev in enumerate(events):
            step = str(ev.get("step"))
            if ev["op"] == "step_started":
                count[step] += 1
                i = len(self.names)
                self.names.append(step)
                self.occ.append(count[step])
                self.at[(step, count[step])] = i
                began.append(k)
                ended.append(float("inf"))
                open_.setdefault(step, []).append(i)
            elif ev["op"] == "step_completed" and open_.get(step):
                ended[open_[step].pop()] = k  # the latest start of that name (an interrupt()
                # leaves an earlier start of the node that never completes)
        self.began, self.ended, self.count = began, ended, count

    def overlap(self, p: int, q: int) -> bool:
        return self.began[q] < self.ended[p] and self.began[p] < self.ended[q]

    def nested_in(self, p: int, q: int) -> bool:
        """Position ``p`` ran inside position ``q`` (q is its parent, or an ancestor)."""
        return self.began[q] < self.began[p] and self.ended[p] <= self.ended[q]


def _resumes_by_steps(f: TrialFacts) -> CheckResult:
    name = "resumes_from_last_completed"
    g = _GoldenSteps(f.golden.events)
    done: Counter[str] = Counter()  # completions reported so far, by name (every attempt)
    done_ev: dict[tuple[str, int], dict[str, Any]] = {}  # (name, occurrence) -> its report
    started: Counter[str] = Counter()  # furthest occurrence started so far, by name
    before: dict[int, Counter[str]] = {}  # attempt -> completions reported before it began
    mine: dict[int, Counter[str]] = {}  # attempt -> its own starts, by name
    notes: list[str] = []
    for ev in f.events:
        a = int(ev["attempt"])
        step = str(ev.get("step"))
        if ev["op"] == "step_completed":
            done[step] += 1
            done_ev.setdefault((step, done[step]), ev)
            continue
        if ev["op"] != "step_started":
            continue
        first = a not in before
        base = before.setdefault(a, Counter(done))
        k = mine.setdefault(a, Counter())
        k[step] += 1
        occ = base[step] + k[step]  # the attempt resumes after the occurrences completed
        if a == 1:
            started[step] = max(started[step], occ)
            continue
        total = g.count.get(step, 0)
        if total and occ > total:
            last = done_ev.get((step, total), {})
            was = f" (the last at {_where(last)})" if last else ""
            lead = (
                f"after the restart the first step started was {step!r}"
                if first
                else f"attempt {a} started {step!r}"
            )
            return CheckResult(
                name,
                False,
                f"re-ran a completed step: {lead} at {_where(ev)}, but all {total} of the "
                f"golden run's occurrence(s) of {step!r} had been reported completed{was} "
                f"before attempt {a} began",
            )
        p = g.at.get((step, occ))
        if first and p is not None:
            bad = _skipped(g, p, done, started)
            if bad is not None:
                expected = g.names[bad]
                return CheckResult(
                    name,
                    False,
                    f"skipped a step no attempt had started: after the restart the first step "
                    f"started was {step!r} at {_where(ev)}, but {expected!r} "
                    f"(occurrence {g.occ[bad]} of {g.count[expected]}) was neither reported "
                    f"completed nor started by an earlier attempt; completed so far: "
                    f"{_done_text(done)}",
                )
            inner = [
                g.names[q]
                for q in range(p + 1, len(g.names))
                if g.nested_in(q, p) and g.occ[q] <= done[g.names[q]]
            ]
            if inner:
                notes.append(
                    f"attempt {a} re-entered {step!r} (not completed; its nested step(s) "
                    f"{', '.join(dict.fromkeys(inner))} were): a resume, not a re-run"
                )
        started[step] = max(started[step], occ)
    note = "; ".join(notes[:3])
    return CheckResult(name, True, note)


def _skipped(g: _GoldenSteps, p: int, done: Counter[str], started: Counter[str]) -> int | None:
    """The first golden position before ``p`` that is neither completed, nor started by an
    earlier attempt, nor run beside ``p`` (parallel or nesting): a step the resume skipped."""
    for q in range(p):
        n = g.names[q]
        if g.occ[q] <= done[n] or g.occ[q] <= started[n] or g.overlap(p, q):
            continue
        return q
    return None


def _done_text(done: Counter[str]) -> str:
    return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in done.items()) or "none"


#: The events that are calls to the outside world (what resume is judged by without steps).
CALL_OPS = ("effect", "llm_call")


def call_identity(ev: dict[str, Any]) -> str:
    """What makes two calls the same call: an effect's kind and canonical payload (its
    content, whatever its key), an LLM call's fingerprint."""
    if ev["op"] == "llm_call":
        return f"llm {ev.get('name', '')} {ev.get('fingerprint', '')}"
    return f"{ev.get('kind')} {canonical(ev.get('payload'))}"


def _call_position(seq: list[str], ident: str, done: int) -> int | None:
    """Where call ``ident`` is in the golden call sequence ``seq`` given ``done`` calls
    completed: its first occurrence from ``done`` on, else its last before; None if the golden
    run never made it."""
    if ident in seq[done:]:
        return done + seq[done:].index(ident)
    before = [k for k in range(min(done, len(seq))) if seq[k] == ident]
    return before[-1] if before else None


def _resumes_by_calls(f: TrialFacts) -> CheckResult:
    """Resume judged without step names, from the calls (effects, LLM calls) repeated.

    A call is *completed* once it was acknowledged (:func:`call_outcome` ``acked``: not
    killed before it was applied, not failed by the service, not in its in-doubt window) and
    its attempt went on to a later event: an agent that saves a
    call's result before its next call has it durable by then. The first call of a restarted
    attempt (the first the golden run knows) must not be one an earlier attempt completed:
    re-making it means the agent did not resume from the last completed point (an upstream
    step re-run, an LLM call re-billed, a tool re-fired). The last acknowledged call of a
    killed attempt may be made again (its result may not have been saved yet)."""
    name = "resumes_from_last_completed"
    seq = [
        call_identity(e)
        for e in f.golden.events
        if e["op"] in CALL_OPS and call_outcome(e) != "failed"
    ]
    if not seq:
        return CheckResult(
            name,
            True,
            "the golden run reported no step and made no call: nothing to judge a resume by",
            skipped=True,
        )
    completed = 0  # golden call positions completed so far (by any attempt)
    by: dict[int, dict[str, Any]] = {}  # golden position -> the event that completed it
    cursor: dict[int, int] = {}  # attempt -> one past its last call's golden position
    pending: dict[int, tuple[int, dict[str, Any]]] = {}  # acked, not yet followed
    judged: set[int] = set()
    notes: list[str] = []
    for ev in f.events:
        a = int(ev["attempt"])
        if a in pending:  # the attempt went on: its last acknowledged call is completed
            pos, done_ev = pending.pop(a)
            by.setdefault(pos, done_ev)
            completed = max(completed, pos + 1)
        if ev["op"] not in CALL_OPS or call_outcome(ev) == "failed":
            continue  # a request the service failed did nothing: making it again is a retry
        ident = call_identity(ev)
        if a > 1 and a not in judged:
            p = _call_position(seq, ident, completed)
            if p is not None:
                judged.add(a)
                if p < completed:
                    first = by.get(p, {})
                    was = f" at {_where(first)}" if first else ""
                    return CheckResult(
                        name,
                        False,
                        (
                            f"re-made a completed call: after the restart the first call of "
                            f"attempt {a} was {_call_text(ev)} at {_where(ev)}, but it had been "
                            f"completed{was} (acknowledged, and the attempt went on), so the run "
                            f"should resume after it ({completed} of the golden run's {len(seq)} "
                            "calls were completed)"
                        ),
                    )
                left = [e for b, (q, e) in pending.items() if b < a and q == p]
                if left:
                    notes.append(
                        f"attempt {a} made {_call_text(ev)} again: its reply reached attempt "
                        f"{left[0]['attempt']} ({_where(left[0])}) just before it ended, with "
                        "nothing done since (the window before the first durable write, which "
                        "no agent can close)"
                    )
        p = _call_position(seq, ident, cursor.get(a, 0))
        if p is None:
            continue
        cursor[a] = p + 1
        if call_outcome(ev) == "acked":
            pending[a] = (p, ev)
    return CheckResult(
        name,
        True,
        f"judged from calls (no step names): {len(seq)} golden call(s)"
        + "".join(f"; {n}" for n in notes[:3]),
    )


def _call_text(ev: dict[str, Any]) -> str:
    if ev["op"] == "llm_call":
        return f"LLM call {ev.get('name', '')} {str(ev.get('fingerprint', ''))[:12]}".rstrip()
    return f"{ev.get('kind')} {canonical(ev.get('payload'))[:60]}"


def _tokens(ev: dict[str, Any]) -> int:
    n = 0
    for k in ("prompt_tokens", "completion_tokens"):
        v = ev.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            n += v
    return n


def _billed(ev: dict[str, Any]) -> bool:
    """A model call the service answered (and so billed): acknowledged, or in doubt. One
    killed before it was answered, or failed by the service (5xx, reset), was not billed."""
    return ev["op"] == "llm_call" and call_outcome(ev) in ("acked", "in_doubt")


def window_calls(f: TrialFacts) -> dict[int, dict[str, Any]]:
    """Attempt -> its last event, when that is a call acknowledged just before the attempt
    ended without finishing (killed, cut, or crashed): the reply or acknowledgement had
    arrived, and the agent had done nothing observable since. That is the window no agent can
    close (between a reply's arrival and its first durable write): the call may be made again
    after the restart. An agent that went on to its next call, step or effect before saving
    the reply has left that window, and re-making the call is not excused."""
    last: dict[int, dict[str, Any]] = {}
    for ev in f.events:
        last[int(ev["attempt"])] = ev
    ended_badly = {a.number for a in f.attempts if a.returncode != 0}
    return {
        a: ev
        for a, ev in last.items()
        if a in ended_badly
        and ev["op"] in CALL_OPS
        and call_outcome(ev) == "acked"
        and a < len(f.attempts)
    }


def check_no_repeated_llm_calls(f: TrialFacts) -> CheckResult:
    """LLM calls the golden run made and the trial (across its attempts) made again: each
    re-billed. Calls the service failed (5xx, reset) or never answered were not billed and are
    not counted. A call whose reply never reached the agent (in its in-doubt window, or the
    reply lost) may be asked again; so may one whose reply arrived just before the crash, in
    the window before the agent could save it (:func:`window_calls`). The golden run is judged
    too: the same call billed twice there is a repeat, never the baseline. Policy
    (``expect.no_repeated_llm_calls``): warn (default), fail, or a token budget."""
    name = "no_repeated_llm_calls"
    policy = f.expect.no_repeated_llm_calls
    golden_calls = [e for e in f.golden.events if _billed(e)]
    golden = Counter(str(e.get("fingerprint")) for e in golden_calls)
    if not golden:
        return CheckResult(
            name,
            True,
            "the golden run made no LLM call: nothing to judge (an "
            "agent's model calls are seen when it reaches the "
            "stand-in: OPENAI_BASE_URL)",
            skipped=True,
        )
    billed: dict[str, list[dict[str, Any]]] = {}
    free: Counter[str] = Counter()  # asking again is fine: the agent never had (or kept) it
    for e in f.events:
        if not _billed(e):
            continue
        fp = str(e.get("fingerprint"))
        billed.setdefault(fp, []).append(e)
        if call_outcome(e) == "in_doubt":
            free[fp] += 1
    window = [e for e in window_calls(f).values() if e["op"] == "llm_call"]
    for e in window:
        free[str(e.get("fingerprint"))] += 1
    repeats: list[tuple[str, list[dict[str, Any]], int]] = []
    for fp, evs in billed.items():
        # beyond what the golden run made (a repeat there is reported on its own, below)
        extra = len(evs) - golden.get(fp, 0) - free[fp]
        if fp in golden and extra > 0:
            repeats.append((fp, evs, extra))
    new = sum(len(v) for fp, v in billed.items() if fp not in golden)
    note = f"; {new} call(s) the golden run never made (not judged)" if new else ""
    if window:
        note += "; " + "; ".join(
            f"{_call_text(e)} at {_where(e)} may be asked again: its reply arrived and the "
            f"attempt ended before doing anything else (the window before the first durable "
            f"write, which no agent can close)"
            for e in window[:3]
        )
    cuts = cut_streams(f.events)
    if cuts:
        sent = sum(int(e.get("completion_tokens") or 0) for e in cuts)
        note += (
            f"; {len(cuts)} streamed reply(ies) cut part-way (billed the prompt and the "
            f"{sent} completion token(s) delivered): asking again after a cut is a retry, "
            "not a repeat"
        )
    golden_again = [(fp, n) for fp, n in golden.items() if n > 1]
    total = sum(golden.values())
    if not repeats and not golden_again:
        return CheckResult(name, True, f"{total} golden LLM call(s), none made again{note}")
    tokens = 0
    parts = []
    for fp, n in golden_again:
        evs = [e for e in golden_calls if str(e.get("fingerprint")) == fp]
        tokens += sum(_tokens(e) for e in evs[1:])
        parts.append(
            f"in the golden run (crash-free) {_call_text(evs[0])} was billed {n}x "
            f"(golden events #{', #'.join(str(e.get('i', '?')) for e in evs[:4])}): a repeat "
            "with no crash at all"
        )
    for fp, evs, extra in repeats:
        again = evs[-extra:]
        tokens += sum(_tokens(e) for e in again)
        where = ", ".join(_where(e) for e in evs[:4]) + (", ..." if len(evs) > 4 else "")
        attempts = sorted({int(e["attempt"]) for e in evs})
        when = "after a restart" if len(attempts) > 1 else f"within attempt {attempts[0]}"
        parts.append(
            f"{_call_text(evs[0])} made {golden[fp]}x in the golden run, {len(evs)}x here "
            f"{when} ({where})"
        )
    calls = sum(extra for _fp, _evs, extra in repeats) + sum(n - 1 for _fp, n in golden_again)
    msg = (
        f"{calls} LLM call(s) re-billed, {tokens} tokens: "
        + "; ".join(parts[:5])
        + (f"; and {len(parts) - 5} more" if len(parts) > 5 else "")
        + note
    )
    if policy == "fail":
        return CheckResult(name, False, msg)
    if isinstance(policy, int):
        if tokens > policy:
            return CheckResult(name, False, f"{msg} (over the budget of {policy} tokens)")
        return CheckResult(
            name, True, f"{msg} (within the budget of {policy} tokens)", warning=True
        )
    return CheckResult(name, True, msg, warning=True)


def check_single_writer(f: TrialFacts) -> CheckResult:
    """Live attempts of one run never work at once, judged from what evidence there is.

    From the history of step events (:func:`check_history`, over every attempt at once): no
    attempt starts a step while another live attempt is inside one, and no attempt goes back to
    work after another took over (an attempt's open step ends with its step_completed, or when
    the attempt went away: its probe connection closed). Where attempts ran at once
    (``resumers``) the same pass also finds a step completed by two attempts more often than in
    the golden run (consume-once), a step acknowledged before an attempt began and started
    again by it, two successors of one checkpoint (a fork), and an effect applied by two
    attempts; each anomaly is named with its witness (the few events that show it). From the
    files the resumers changed (:func:`judge_writes`): no file changed by two while both were
    at work. Any of them failing fails the check. With step events from fewer than two
    attempts, no anomaly and no file changes recorded, nothing was judged: the result is
    skipped ("not judged: ..."), never a pass."""
    name = "single_writer"
    history = history_of(f)
    by_events = _single_writer_by_events(history)
    others = [a for a in history.anomalies if a.kind != "single_writer"]
    by_files = judge_writes(f)
    failed = [
        r.message for r in (by_files, by_events) if r is not None and not r.ok
    ]  # the file first: it names what the two clobbered
    if others:
        rest = Counter(a.kind for a in others[1:])
        more = (
            f"; and {len(others) - 1} more ("
            + ", ".join(f"{k} x{n}" if n > 1 else k for k, n in rest.items())
            + "; all in anomalies.txt)"
            if rest
            else ""
        )
        failed.append(f"the history shows two writers of one run: {others[0].text()}{more}")
    if failed:
        return CheckResult(name, False, "; and ".join(failed))
    stepped = sorted(
        {int(e["attempt"]) for e in f.events if e["op"] in ("step_started", "step_completed")}
    )
    judged = []
    if len(stepped) >= 2:
        judged.append(f"judged from the step events of attempts {', '.join(map(str, stepped))}")
        if ran_at_once(f):
            judged.append(
                f"history of {history.events} events: no step completed by two attempts, no "
                "acknowledged step started again, no fork, no effect applied by two attempts"
            )
    if by_files is not None and not by_files.skipped:
        judged.append(by_files.message)
    if judged:
        return CheckResult(name, True, "; ".join(judged))
    steps = (
        f"step events came from attempt {stepped[0]} only"
        if stepped
        else "no attempt reported a step"
    )
    files = (
        by_files.message.removeprefix("not judged from files: ")
        if by_files is not None
        else "file operations are recorded in resumers trials only"
    )
    return CheckResult(name, True, f"not judged: {steps}, and {files}", skipped=True)


def _single_writer_by_events(history: History) -> CheckResult:
    """The single-writer rules of the history (the first that broke), with how many attempts
    were inside steps at once when more than two were."""
    name = "single_writer"
    found = history.of("single_writer")
    if not found:
        return CheckResult(name, True)
    most = (
        f"; up to {history.most_inside} attempts were inside steps at once"
        if history.most_inside > 2
        else ""
    )
    return CheckResult(name, False, found[0].summary + most)


def _file_contents(folders: list[str]) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of each regular file under ``folders`` (symlinks and unreadable files
    skipped)."""
    for folder in folders:
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                p = os.path.join(dirpath, name)
                try:
                    if os.path.islink(p):
                        continue
                    with open(p, "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                yield p, data


def scan_for_bytes(folders: list[str], needle: bytes) -> list[str]:
    """Files under ``folders`` that contain ``needle``."""
    return [p for p, data in _file_contents(folders) if needle in data]


def secret_forms(secret: bytes) -> dict[bytes, str]:
    """The byte strings that give ``secret`` away in a file, each with its encoding: as is,
    UTF-16 (little and big endian), hex, and base64 (standard and URL-safe) at each of the
    three alignments it can start at inside a longer encoded value (a state store that
    base64-encodes what it saves, as checkpoint serialisers often do)."""
    forms = {
        secret: "as is",
        secret.decode("latin-1").encode("utf-16-le"): "UTF-16",
        secret.decode("latin-1").encode("utf-16-be"): "UTF-16",
        secret.hex().encode(): "hex",
        secret.hex().upper().encode(): "hex",
    }
    for off in range(3):
        whole = secret[off : off + (len(secret) - off) // 3 * 3]  # whole base64 groups
        if len(whole) >= 12:
            forms.setdefault(base64.b64encode(whole), "base64")
            forms.setdefault(base64.urlsafe_b64encode(whole), "base64")
    return forms


def find_secret(folders: list[str], secret: bytes) -> list[tuple[str, str]]:
    """(file, encoding) for each file under ``folders`` holding ``secret`` in one of its
    :func:`secret_forms`."""
    forms = secret_forms(secret)
    hits = []
    for p, data in _file_contents(folders):
        how = next((v for k, v in forms.items() if k in data), None)
        if how is not None:
            hits.append((p, how))
    return hits


def check_no_secret_leak(f: TrialFacts) -> CheckResult:
    hits = find_secret(f.state_dirs, f.canary.encode())
    if hits:
        return CheckResult(
            "no_secret_leak",
            False,
            f"the canary secret from the agent's environment was written to "
            f"{len(hits)} file(s): "
            + ", ".join(p if how == "as is" else f"{p} ({how})" for p, how in hits[:5]),
        )
    return CheckResult("no_secret_leak", True)


def check_within_disk_budget(f: TrialFacts) -> CheckResult:
    budget = f.expect.max_state_bytes
    if budget is None:
        return CheckResult("within_disk_budget", True, "no budget set", skipped=True)
    if f.max_state_bytes > budget:
        return CheckResult(
            "within_disk_budget",
            False,
            f"the state folder reached {f.max_state_bytes} bytes; the budget is {budget}",
        )
    return CheckResult("within_disk_budget", True)


def check_no_orphans(f: TrialFacts) -> CheckResult:
    bad = [(a.number, a.orphans) for a in f.attempts if a.orphans]
    if bad:
        desc = "; ".join(f"attempt {n}: pids {', '.join(map(str, p))}" for n, p in bad)
        return CheckResult(
            "no_orphans",
            False,
            f"processes of the agent's tree outlived it (killed by the harness): {desc}",
        )
    return CheckResult("no_orphans", True)


def check_corruption_detected(f: TrialFacts) -> CheckResult:
    name = "corruption_detected"
    if not f.plan.corrupts:
        return CheckResult(name, True, "no corruption in this trial", skipped=True)
    if f.completed:
        good_output = f.attempts[-1].stdout == f.golden.output
        good_effects = all(f.applied.get(k, 0) == n for k, n in f.golden.effects.items())
        if good_output and good_effects:
            return CheckResult(name, True, "repaired to the correct result")
        what = "output" if not good_output else "effects"
        return CheckResult(
            name,
            False,
            f"completed with wrong {what} after the corruption "
            "(it accepted damaged state silently)",
        )
    fin = f.final
    if f.refused and fin is not None:
        return CheckResult(name, True, f"refused: {f.expect.refusal(fin.returncode, fin.stderr)}")
    how = fin.describe() if fin else "no attempt"
    return CheckResult(
        name,
        False,
        f"neither repaired nor refused clearly: {how} (a clear "
        f"refusal exits non-zero and says on stderr that the state "
        f"is corrupt or damaged, or exits with one of "
        f"{list(f.expect.refuse_codes)})",
    )


# -- no_retry_storm (issue 12: the network family) ---------------------------------------------


def _net_counts(events: list[dict[str, Any]]) -> Counter[tuple[int, str]]:
    """(attempt, call) -> how many requests of that call the attempt sent to the stand-ins
    (failed ones included: each reached the service)."""
    out: Counter[tuple[int, str]] = Counter()
    for e in events:
        call = call_of(e)
        if call:
            out[(int(e["attempt"]), call)] += 1
    return out


def check_no_retry_storm(f: TrialFacts) -> CheckResult:
    """No attempt sends one network call more than ``expect.max_retries`` times beyond what
    the golden run sent in all: a retry loop without a cap (or backoff) hammers a failing
    service."""
    name = "no_retry_storm"
    limit = f.expect.max_retries
    golden: Counter[str] = Counter()
    for (_a, call), n in _net_counts(f.golden.events).items():
        golden[call] += n
    storms = []
    for (attempt, call), n in sorted(_net_counts(f.events).items()):
        extra = n - golden[call]
        if extra > limit:
            ts = [
                float(e["t"])
                for e in f.events
                if int(e["attempt"]) == attempt and e.get("t") is not None and call_of(e) == call
            ]
            gaps = sorted(b - a for a, b in pairwise(ts))
            pace = f"; median gap between them {gaps[len(gaps) // 2]:.3f}s" if gaps else ""
            storms.append(
                f"attempt {attempt} sent {call} {n} times (golden run: "
                f"{golden[call]}), {extra} more, above expect.max_retries = "
                f"{limit}{pace}"
            )
    if storms:
        return CheckResult(name, False, "retry storm: " + "; ".join(storms))
    return CheckResult(name, True)


BUILTIN_CHECKS: dict[str, Callable[[TrialFacts], CheckResult]] = {
    "completes": check_completes,
    "same_output": check_same_output,
    "exactly_once": check_exactly_once,
    "resumes_from_last_completed": check_resumes,
    "single_writer": check_single_writer,
    "no_secret_leak": check_no_secret_leak,
    "within_disk_budget": check_within_disk_budget,
    "no_orphans": check_no_orphans,
    "corruption_detected": check_corruption_detected,
    "no_repeated_llm_calls": check_no_repeated_llm_calls,
    "no_retry_storm": check_no_retry_storm,
    "crash_loop": check_crash_loop,
    "replay_divergence": check_replay_divergence,
    "no_silent_failure": check_no_silent_failure,
}


def run_checks(
    facts: TrialFacts, extra: dict[str, Callable[[TrialFacts], CheckResult]] | None = None
) -> list[CheckResult]:
    """Run every enabled check (built-in, then ``extra``) and return their results."""
    e = facts.expect
    off = {
        n
        for n, on in (
            ("exactly_once", e.exactly_once),
            ("resumes_from_last_completed", e.resumes_from_last_completed),
            ("same_output", e.same_output),
            ("single_writer", e.single_writer),
            ("no_secret_leak", e.no_secret_leak),
            ("no_orphans", e.no_orphans),
            ("no_repeated_llm_calls", e.no_repeated_llm_calls != "off"),
            ("no_retry_storm", e.no_retry_storm),
            ("no_silent_failure", e.no_silent_failure),
            # judged only where a fault hits every attempt (a family's every_attempt)
            ("crash_loop", e.crash_loop and any(x.arg("every") for x in facts.plan.faults)),
            # judged only where a crash is resumed to be compared (upgrade, always_replay)
            ("replay_divergence", e.replay_divergence and resumed_attempt(facts.plan) is not None),
        )
        if not on
    }
    out = [fn(facts) for n, fn in BUILTIN_CHECKS.items() if n not in off]
    for fn in (extra or {}).values():
        out.append(fn(facts))
    return explain(facts, out)
