"""``replay_divergence``: the resumed attempt continues as the golden run did from the crash.

Judged in the trials of the ``upgrade`` and ``always_replay`` families (a kill of attempt 1,
then a resume: under version B for an upgrade). The resumed attempt's events (steps by name,
effects by kind and canonical payload, model calls by fingerprint, other events by name) must
be the golden run's events from where it resumed: after the last step completed before the
kill, or later (a completion that was durable but not reported), or earlier (a step re-run:
``resumes_from_last_completed`` judges that). A call the golden run made before the kill was
applied then: the resumed attempt may make it again (deduplicated) or skip it, so such calls
are left out on both sides. An attempt that did not finish is compared as far as it went
(``completes`` judges the rest).

Where they part, the message shows the first differing event and a unified diff of event
lines around it, and for an upgrade says whether version B's own crash-free run already parts
from A's (B changed the workflow) or only its resume does (B reads A's state differently).
"""

from __future__ import annotations

import difflib
from collections import Counter
from typing import Any

from crashpoint.harness._checker._facts import TrialFacts
from crashpoint.harness._spec import (
    CheckResult,
    call_outcome,
    canonical,
    crash_index,
    event_name,
    resumed_attempt,
)

__all__ = ["check_replay_divergence", "event_identity", "event_line"]

NAME = "replay_divergence"
#: The ops that are calls to the outside world (applied before a crash: optional after it).
_CALLS = ("effect", "llm_call")
#: Lines of the diff shown in the message (the rest is cut, and the cut said).
_DIFF_LINES = 24
#: Events around where the two part that a diff (and a tie-break) looks at.
_WINDOW = 200
#: How many golden events before the expected resume point a resume may start at (a step
#: re-run; from scratch, event 0, is always tried).
_BACK = 64
#: Starts with the same common prefix compared further (by a diff) to pick the best.
_TIES = 4
#: Characters of an effect's payload shown on its line.
_PAYLOAD_SHOWN = 90

HINT_UPGRADE_WORKFLOW = (
    "version B changed the workflow (its own crash-free run parts from A's), so a run A left "
    "in flight resumes down B's path: record the code version in the run's state and keep A's "
    "steps and effects for runs A began (a version marker, as Temporal's patched() or a "
    "workflow version does), or let A finish its runs before B takes over"
)
HINT_UPGRADE_STATE = (
    "version B follows A's path from scratch but not when it resumes A's state: it reads A's "
    "checkpoint differently (a renamed step or field, another format); migrate A's state when "
    "B loads it, or keep reading A's names"
)
HINT_NONDETERMINISM = (
    "the same code resumed from its record and did not continue as its crash-free run did: "
    "what it does next depends on something a replay does not restore (set or dict order, "
    "the clock, random numbers, threads racing); sort what it iterates, and take times, "
    "random values and decisions from its checkpoint (record them before acting on them)"
)


def event_identity(ev: dict[str, Any]) -> str:
    """What makes two events the same event when a resume is compared with the golden run."""
    op = str(ev["op"])
    if op == "effect":
        return f"effect {ev.get('kind')} {canonical(ev.get('payload'))}"
    if op == "llm_call":
        return f"llm_call {ev.get('name', '')} {ev.get('fingerprint', '')}"
    return f"{op} {event_name(ev)}"


def event_line(ev: dict[str, Any]) -> str:
    """One event as a diff line: ``step_started fetch``, ``effect notify {"to":"ops"}``."""
    if ev["op"] == "effect":
        payload = canonical(ev.get("payload"))
        if len(payload) > _PAYLOAD_SHOWN:
            payload = payload[: _PAYLOAD_SHOWN - 3] + "..."
        return f"effect {ev.get('kind')} {payload}"
    if ev["op"] == "llm_call":
        return f"llm_call {ev.get('name', '')} {str(ev.get('fingerprint', ''))[:12]}".rstrip()
    return f"{ev['op']} {event_name(ev)}"


def _resumed_events(got: list[dict[str, Any]], before: Counter[str]) -> list[dict[str, Any]]:
    """The resumed attempt's events without (the first of) the calls the earlier attempts had
    applied (``before``, by identity): made again or skipped, they were done before."""
    optional = Counter(before)
    mine: list[dict[str, Any]] = []
    for ev in got:
        ident = event_identity(ev)
        if ev["op"] in _CALLS and optional[ident] > 0:
            optional[ident] -= 1
            continue
        mine.append(ev)
    return mine


def _prefix(a: list[str], b: list[str]) -> int:
    """How many items from the start ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _common(a: list[str], b: list[str]) -> int:
    """How many items the two share in order, as a diff matches them (within a window)."""
    matcher = difflib.SequenceMatcher(None, a[:_WINDOW], b[:_WINDOW], autojunk=False)
    return sum(m.size for m in matcher.get_matching_blocks())


def _diff(
    exp: list[tuple[int, dict[str, Any]]],
    mine: list[dict[str, Any]],
    k: int,
    source: str,
    target: str,
) -> list[str]:
    """A unified diff of event lines around position ``k`` where the two part."""
    lo = max(0, k - 3)
    shown = exp[lo : k + _WINDOW]
    lines = list(
        difflib.unified_diff(
            [event_line(g) for _k, g in shown],
            [event_line(e) for e in mine[lo : k + _WINDOW]],
            f"{source}, from golden event #{shown[0][0] if shown else '-'}",
            target,
            n=3,
            lineterm="",
        )
    )
    if len(lines) > _DIFF_LINES:
        lines = [*lines[:_DIFF_LINES], f"... ({len(lines) - _DIFF_LINES} more diff lines)"]
    return lines


def _versions(f: TrialFacts) -> tuple[str, str]:
    """For an upgrade: how version B's own crash-free run compares with A's, and the hint."""
    up = f.extra.get("upgrade") or {}
    b = [event_identity(e) for e in up.get("golden") or []]
    a = [event_identity(e) for e in f.golden.events]
    if b == a:
        return (
            f"version B's own crash-free run is the same as A's ({len(a)} events): B parts from "
            "A only when it resumes A's state",
            HINT_UPGRADE_STATE,
        )
    k = next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    was = event_line(f.golden.events[k]) if k < len(a) else "nothing (A's run ended)"
    now = event_line(up["golden"][k]) if k < len(b) else "nothing (B's run ended)"
    return (
        f"version B's own crash-free run parts from A's too, at golden event #{k}: A "
        f"{was!r}, B {now!r}",
        HINT_UPGRADE_WORKFLOW,
    )


def check_replay_divergence(f: TrialFacts) -> CheckResult:
    """See the module docstring."""
    marker = resumed_attempt(f.plan)
    if marker is None:
        return CheckResult(NAME, True, "no upgrade or always_replay in this trial", skipped=True)
    crash = crash_index(f.golden, f.plan)
    r = marker.attempt
    att = next((a for a in f.attempts if a.number == r), None)
    if crash is None or att is None:
        why = (
            f"attempt {r} never ran (no crash to resume)"
            if att is None
            else "the plan's kill names no event of the golden run"
        )
        return CheckResult(NAME, True, f"not judged: {why}", skipped=True)
    i, phase = crash
    golden = f.golden.events
    last = i if phase == "in_doubt" else i - 1
    resume = next((j + 1 for j in range(i - 1, -1, -1) if golden[j]["op"] == "step_completed"), 0)
    got = [e for e in f.events if int(e["attempt"]) == r]
    before: Counter[str] = Counter(  # what the world had done for the crashed attempt(s)
        event_identity(e)
        for e in f.events
        if int(e["attempt"]) < r and e["op"] in _CALLS and call_outcome(e) in ("acked", "in_doubt")
    )
    partial = att.returncode != 0
    ids = [event_identity(e) for e in golden]
    # the golden run without the calls made up to the crash (applied then: optional after it)
    keep = [k for k in range(len(golden)) if not (k <= last and golden[k]["op"] in _CALLS)]
    mine = _resumed_events(got, before)
    mids = [event_identity(e) for e in mine]
    # a resume starts at golden event 0 to i + 1: at position p of ``keep``, 0 to ``top``
    top = next((p for p, k in enumerate(keep) if k >= i + 1), len(keep))
    at_resume = next((p for p, k in enumerate(keep) if k >= resume), len(keep))
    # tried: from scratch, the expected resume point, and the starts near it (a few steps back,
    # up to just after the kill) whose first event is the resumed attempt's first
    starts = {
        p
        for p in range(max(0, at_resume - _BACK), top + 1)
        if p == len(keep) or (mids and ids[keep[p]] == mids[0])
    }
    starts |= {0, at_resume, top}

    def expected(p: int) -> list[int]:
        ks = keep[p:]
        return ks[: len(mids)] if partial else ks

    # (shared from the start, shared in all, -distance from the resume point, -position)
    scored: list[tuple[int, int, int, int]] = []
    for p in sorted(starts):
        exp_ids = [ids[k] for k in expected(p)]
        shared = _prefix(exp_ids, mids)
        if shared == len(exp_ids) == len(mids):
            upgrade = marker.kind == "upgrade"
            who = f"attempt {r}" + (" (version B)" if upgrade else "")
            cut = f" as far as it went ({att.describe()})" if partial else ""
            s = keep[p] if p < len(keep) else len(golden)
            return CheckResult(
                NAME,
                True,
                f"{who} continued as the golden run did from golden event #{s}{cut}: "
                f"{len(mine)} event(s) compared"
                + (f"; {_versions(f)[0]}" if upgrade and f.extra.get("upgrade") else ""),
            )
        scored.append((shared, 0, -abs(p - at_resume), -p))
    scored.sort(reverse=True)
    ties = [x for x in scored if x[0] == scored[0][0]][:_TIES]
    if len(ties) > 1:  # the same prefix: the start that has the most in common
        ties = sorted(
            ((x[0], _common([ids[k] for k in expected(-x[3])], mids), x[2], x[3]) for x in ties),
            reverse=True,
        )
    k, p = ties[0][0], -ties[0][3]
    exp = [(j, golden[j]) for j in expected(p)]
    s = keep[p] if p < len(keep) else len(golden)
    if marker.kind == "upgrade":
        label = str(marker.arg("label", ""))
        source, target = "golden run (version A)", f"attempt {r} (version B: {label})"
        versions, hint = _versions(f) if f.extra.get("upgrade") else ("", HINT_UPGRADE_STATE)
    else:
        source, target = "golden run", f"attempt {r} (resumed from attempt {r - 1}'s crash)"
        versions, hint = "", HINT_NONDETERMINISM
    wanted = (
        f"{event_line(exp[k][1])!r} (golden event #{exp[k][0]})"
        if k < len(exp)
        else "nothing more (the golden run ended)"
    )
    seen = (
        f"{event_line(mine[k])!r} (its event #{mine[k].get('ai', '?')})"
        if k < len(mine)
        else f"nothing more ({att.describe()})"
    )
    at = "in the in-doubt window of" if phase == "in_doubt" else "before"
    head = (
        f"replay diverged: attempt {r}, resuming after the kill {at} golden event #{i} "
        f"({event_line(golden[i])}), parted from the golden run's continuation after {k} "
        f"matching event(s): expected {wanted}, got {seen}"
    )
    body = _diff(exp, mine, k, source, target)
    skipped = sum(1 for k2 in range(s, last + 1) if golden[k2]["op"] in _CALLS)
    again = len(got) - len(mine)  # the calls made before the crash that it made again
    note = (
        f"(calls made before the crash are left out: {skipped} of the golden run's, {again} "
        f"made again by attempt {r}; made again or not, they were applied)"
        if skipped or again
        else ""
    )
    text = head + "".join(f"\n    {line}" for line in [*body, *([note] if note else [])])
    if versions:
        text += f"\n    {versions}"
    return CheckResult(NAME, False, text, hint=hint)
