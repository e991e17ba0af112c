"""The checks of Contract 2: black-box invariants judged from what crossed the agent's boundary.

Each check is a function ``(TrialFacts) -> CheckResult`` registered in :data:`BUILTIN_CHECKS`.
A message says what happened and where in the history (attempt, event index).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from crashpoint.harness._checker._facts import TrialFacts
from crashpoint.harness._checker._verdict import explain
from crashpoint.harness._checker._writers import judge_writes
from crashpoint.harness._spec import CheckResult, call_of, canonical

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
    tail = fin.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
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
        return CheckResult("same_output", False, "no output: the agent did not complete")
    out = f.attempts[-1].stdout
    if out == f.golden.output:
        return CheckResult("same_output", True)
    return CheckResult(
        "same_output",
        False,
        f"final output differs from the golden run: got "
        f"{out[:160]!r}, expected {f.golden.output[:160]!r}",
    )


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


def check_exactly_once(f: TrialFacts) -> CheckResult:
    lost, dup, extra = [], [], []
    for (kind, payload), n in f.golden.effects.items():
        got = f.applied.get((kind, payload), 0)
        if got < n and not f.refused:
            lost.append(f"{kind} {payload[:80]} applied {got}x, golden {n}x")
        elif got > n:
            dup.append(_dup_text(f, kind, payload, got, n))
    for (kind, payload), n in f.applied.items():
        if (kind, payload) not in f.golden.effects and n:
            extra.append(f"{kind} {payload[:80]} applied {n}x, not in the golden run")
    problems = (
        [f"DUPLICATED {d}" for d in dup]
        + [f"LOST {x}" for x in lost]
        + [f"UNEXPECTED {e}" for e in extra]
    )
    if problems:
        effects = [e for e in f.events if e["op"] == "effect"]
        hist = ", ".join(f"{_where(e)} applied={e.get('applied')}" for e in effects[:12])
        return CheckResult("exactly_once", False, "; ".join(problems) + f". Effects seen: {hist}")
    return CheckResult("exactly_once", True)


def check_resumes(f: TrialFacts) -> CheckResult:
    """After a restart the first step started is the first not reported completed — or a
    later one that an earlier attempt had already started (its completion was durable but the
    crash took the report). A reported-completed step never starts again."""
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
    golden_steps = f.golden.steps
    completed = 0  # golden positions reported completed so far
    started = 0  # one past the furthest golden position started so far
    seen_first_of: set[int] = set()
    for ev in f.events:
        a = int(ev["attempt"])
        if ev["op"] == "step_started":
            got = ev.get("step")
            pos = _position(golden_steps, got, completed) - 1
            if a > 1 and a not in seen_first_of:
                seen_first_of.add(a)
                expected = golden_steps[completed] if completed < len(golden_steps) else "<none>"
                if pos < completed or pos > started:
                    kind = (
                        "re-ran a completed step"
                        if pos < completed
                        else "skipped a step no attempt had started"
                    )
                    return CheckResult(
                        name,
                        False,
                        f"{kind}: after the restart the first step "
                        f"started was {got!r} at {_where(ev)}, but "
                        f"{completed} step(s) were reported "
                        f"completed ({_names(golden_steps, completed)}"
                        f"), so it should be {expected!r}",
                    )
            started = max(started, pos + 1)
        elif ev["op"] == "step_completed":
            completed = max(completed, _position(golden_steps, ev.get("step"), completed))
    return CheckResult(name, True)


def _names(steps: list[str], n: int) -> str:
    return ", ".join(steps[:n]) or "-"


def _position(steps: list[str], step: Any, done: int) -> int:
    """Number of golden steps completed once ``step`` completes, given ``done`` before."""
    if done < len(steps) and steps[done] == step:
        return done + 1
    try:
        return steps.index(step) + 1
    except ValueError:
        return done


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

    A call is *completed* once it was acknowledged (not killed before it was applied, nor in
    its in-doubt window) and its attempt went on to a later event: an agent that saves a
    call's result before its next call has it durable by then. The first call of a restarted
    attempt (the first the golden run knows) must not be one an earlier attempt completed:
    re-making it means the agent did not resume from the last completed point (an upstream
    step re-run, an LLM call re-billed, a tool re-fired). The last acknowledged call of a
    killed attempt may be made again (its result may not have been saved yet)."""
    name = "resumes_from_last_completed"
    seq = [call_identity(e) for e in f.golden.events if e["op"] in CALL_OPS]
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
    for ev in f.events:
        a = int(ev["attempt"])
        if a in pending:  # the attempt went on: its last acknowledged call is completed
            pos, done_ev = pending.pop(a)
            by.setdefault(pos, done_ev)
            completed = max(completed, pos + 1)
        if ev["op"] not in CALL_OPS:
            continue
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
        p = _call_position(seq, ident, cursor.get(a, 0))
        if p is None:
            continue
        cursor[a] = p + 1
        if not ev.get("killed"):
            pending[a] = (p, ev)
    return CheckResult(name, True, f"judged from calls (no step names): {len(seq)} golden call(s)")


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


def check_no_repeated_llm_calls(f: TrialFacts) -> CheckResult:
    """LLM calls the golden run made and the trial (across its attempts) made again: each
    re-billed. A call whose reply never reached the agent (killed in its in-doubt window) may
    be asked again; one killed before it was answered was never billed. Policy
    (``expect.no_repeated_llm_calls``): warn (default), fail, or a token budget."""
    name = "no_repeated_llm_calls"
    policy = f.expect.no_repeated_llm_calls
    golden = Counter(str(e.get("fingerprint")) for e in f.golden.events if e["op"] == "llm_call")
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
    lost: Counter[str] = Counter()
    for e in f.events:
        if e["op"] != "llm_call" or e.get("killed") == "before":
            continue
        fp = str(e.get("fingerprint"))
        billed.setdefault(fp, []).append(e)
        if e.get("killed") == "in_doubt":
            lost[fp] += 1  # billed, but the agent never had the reply: asking again is fine
    repeats: list[tuple[str, list[dict[str, Any]]]] = []
    for fp, evs in billed.items():
        extra = len(evs) - golden.get(fp, 0) - lost[fp]
        if fp in golden and extra > 0:
            repeats.append((fp, evs))
    new = sum(len(v) for fp, v in billed.items() if fp not in golden)
    note = f"; {new} call(s) the golden run never made (not judged)" if new else ""
    total = sum(golden.values())
    if not repeats:
        return CheckResult(name, True, f"{total} golden LLM call(s), none made again{note}")
    tokens = 0
    parts = []
    for fp, evs in repeats:
        extra = len(evs) - golden[fp] - lost[fp]
        again = evs[-extra:]
        tokens += sum(_tokens(e) for e in again)
        where = ", ".join(_where(e) for e in evs[:4]) + (", ..." if len(evs) > 4 else "")
        parts.append(
            f"{_call_text(evs[0])} made {golden[fp]}x in the golden run, {len(evs)}x here ({where})"
        )
    calls = sum(len(evs) - golden[fp] - lost[fp] for fp, evs in repeats)
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
    """Two live attempts of one run never work at once, judged from what evidence there is.

    From step events: no attempt starts a step while another live attempt is inside one, and
    no attempt goes back to work after another took over (an attempt's open step ends with its
    step_completed, or when the attempt went away: its probe connection closed). From the
    files two resumers changed (:func:`judge_writes`): no file changed by both while both were
    at work. Either failing fails the check. With step events from fewer than two attempts and
    no file changes recorded, nothing was judged: the result is skipped ("not judged: ..."),
    never a pass."""
    name = "single_writer"
    by_events = _single_writer_by_events(f)
    by_files = judge_writes(f)
    if by_files is not None and not by_files.ok:
        if not by_events.ok:  # the file first: it names what the two clobbered
            return CheckResult(name, False, f"{by_files.message}; and {by_events.message}")
        return by_files
    if not by_events.ok:
        return by_events
    stepped = sorted(
        {int(e["attempt"]) for e in f.events if e["op"] in ("step_started", "step_completed")}
    )
    judged = []
    if len(stepped) >= 2:
        judged.append(f"judged from the step events of attempts {', '.join(map(str, stepped))}")
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


def _single_writer_by_events(f: TrialFacts) -> CheckResult:
    name = "single_writer"
    ended: dict[int, float] = f.extra.get("ended", {})
    inside: dict[int, dict[str, Any]] = {}  # attempt -> its open step_started event
    order: list[int] = []
    for ev in f.events:
        if ev["op"] not in ("step_started", "step_completed", "effect"):
            continue
        a = int(ev["attempt"])
        t = ev.get("t")
        for b in [b for b in inside if t is not None and b in ended and ended[b] <= t]:
            del inside[b]  # b went away mid-step: its step is over
        if ev["op"] == "step_started":
            others = [b for b in inside if b != a]
            if others:
                b = others[0]
                return CheckResult(
                    name,
                    False,
                    f"attempts {b} and {a} executed steps at the same time: attempt "
                    f"{a} started {ev.get('step')!r} at {_where(ev)} while attempt "
                    f"{b} was still inside {inside[b].get('step')!r} (started at "
                    f"{_where(inside[b])}); two live writers of one run",
                )
            inside[a] = ev
        elif ev["op"] == "step_completed":
            inside.pop(a, None)
        if order and order[-1] == a:
            continue
        if a in order:
            return CheckResult(
                name,
                False,
                f"attempts {order[-1]} and {a} executed steps at the same time: "
                f"attempt {a} went on at {_where(ev)} after attempt {order[-1]} "
                "had started working (two live writers of one run)",
            )
        order.append(a)
    return CheckResult(name, True)


def scan_for_bytes(folders: list[str], needle: bytes) -> list[str]:
    """Files under ``folders`` that contain ``needle``."""
    hits = []
    for folder in folders:
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                p = os.path.join(dirpath, name)
                try:
                    if os.path.islink(p):
                        continue
                    with open(p, "rb") as fh:
                        if needle in fh.read():
                            hits.append(p)
                except OSError:
                    continue
    return hits


def check_no_secret_leak(f: TrialFacts) -> CheckResult:
    hits = scan_for_bytes(f.state_dirs, f.canary.encode())
    if hits:
        return CheckResult(
            "no_secret_leak",
            False,
            f"the canary secret from the agent's environment was written to "
            f"{len(hits)} file(s): {', '.join(hits[:5])}",
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
        )
        if not on
    }
    out = [fn(facts) for n, fn in BUILTIN_CHECKS.items() if n not in off]
    for fn in (extra or {}).values():
        out.append(fn(facts))
    return explain(facts, out)
