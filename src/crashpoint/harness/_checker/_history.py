"""The history checker: what the ledger's events of one trial show about its writers, in one
pass, each anomaly with a minimal witness.

The ledger records every probe event and stand-in request of a trial in one order (its index
``i``), each with the attempt that sent it. :func:`check_history` reads them once, keeping only
dictionaries keyed by step, effect, checkpoint and attempt, so its work grows linearly with the
history (at most 32 attempts run at once; what is done per event is bounded by that, never by
the length of the history). It reports:

- **single writer** (``single_writer``): an attempt starts a step while another attempt is
  inside one and still alive (its step ends with a ``step_completed``, or when its process went
  away: ``ended``); or an attempt goes on working after another took over (it sent an event,
  another attempt then sent its first, and the first sends another). Over every attempt of
  the trial at once, not pair by pair; the most attempts inside steps at one instant is noted;
- **consume-once** (``consume_once``): a step completed more times across the attempts than in
  the golden run, by two attempts or more: two resumers both did the same step of the run;
- **lost acknowledged work** (``lost_ack``): a step whose completion the ledger acknowledged
  before an attempt began is started again by that attempt as if never done (its occurrence
  is past what the golden run has, counting what was done before it began);
- **forks** (``fork``): two different checkpoints saved with the same parent (events that
  carry ``checkpoint`` and ``parent`` ids, such as the LangGraph adapter's and the conformance
  agent's; ``parent`` absent or empty: the thread's first checkpoint, so two first
  checkpoints are two roots of one thread), keyed by the thread and namespace when the event
  carries them;
- **duplicate effects across attempts** (``duplicate_effect``): an effect (kind and canonical
  payload, whatever its key) that the outside world applied more times than in the golden run,
  by two attempts or more.

Each :class:`Anomaly` keeps the 2 to 4 events that show it (its *witness*, each with attempt,
index, op and name), so a reader can check it without the rest of the history. Checks other
than the single writer rules only mean something when attempts ran at once (``concurrent``):
after a sequential crash, re-running steps may be a legitimate rollback, which other checks
judge. The trial folder keeps the report as ``anomalies.txt`` (:func:`history_text`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from crashpoint.harness._checker._facts import TrialFacts
from crashpoint.harness._spec import canonical, event_name

__all__ = [
    "ANOMALY_KINDS",
    "Anomaly",
    "History",
    "check_history",
    "history_of",
    "history_text",
    "ran_at_once",
    "witness_line",
]

#: The anomalies the history checker reports, in the order they are listed.
ANOMALY_KINDS = ("single_writer", "consume_once", "lost_ack", "fork", "duplicate_effect")
_STEP_OPS = frozenset({"step_started", "step_completed", "effect"})


def witness_line(ev: Mapping[str, Any], t0: float | None = None, *, ids: bool = True) -> str:
    """One witness event: ``attempt 3 event #12 step_completed 'plan'`` (its effect key, its
    checkpoint and parent unless ``ids`` is false, its time from ``t0`` when given)."""
    op = str(ev.get("op", ""))
    out = f"attempt {ev.get('attempt')} event #{ev.get('i')} {op} {event_name(ev)!r}"
    if op == "effect":
        out += f" key {ev['key']!r}" if ev.get("key") else " (no key)"
        if "applied" in ev:
            out += " applied" if ev["applied"] else " deduplicated"
    if ids and ev.get("checkpoint"):
        out += f" checkpoint {ev['checkpoint']} (parent {ev.get('parent') or 'none'})"
    if t0 is not None and ev.get("t") is not None:
        out += f" at +{float(ev['t']) - t0:.3f}s"
    return out


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One anomaly of the history: its ``kind`` (one of :data:`ANOMALY_KINDS`), a one-line
    ``summary``, and its ``witness``: the few events that show it, in ledger order."""

    kind: str
    summary: str
    witness: tuple[Mapping[str, Any], ...]

    def text(self) -> str:
        """The summary and its witness on one line (for a check's message)."""
        ids = self.kind == "fork"  # elsewhere the ids only lengthen the line
        lines = "; ".join(witness_line(e, ids=ids) for e in self.witness)
        return f"{self.summary} (witness: {lines})"


@dataclass(frozen=True, slots=True)
class History:
    """What :func:`check_history` found: the anomalies (at most one per step, checkpoint
    parent or effect; the single-writer rules once each), how many events it read, which
    attempts sent them, the most attempts inside steps at one instant, and ``work``: the
    steps of its inner loops (what the linear-time test counts)."""

    anomalies: tuple[Anomaly, ...]
    events: int
    attempts: tuple[int, ...]
    most_inside: int
    work: int

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def of(self, kind: str) -> list[Anomaly]:
        return [a for a in self.anomalies if a.kind == kind]


def check_history(
    events: Iterable[Mapping[str, Any]],
    golden_steps: Mapping[str, int] | None = None,
    golden_effects: Mapping[tuple[str, str], int] | None = None,
    ended: Mapping[int, float] | None = None,
    *,
    concurrent: bool = True,
) -> History:
    """Read the ledger ``events`` of one trial once, in order (see the module docstring).

    ``golden_steps``: step name -> how many times the golden run completed it;
    ``golden_effects``: (kind, canonical payload) -> how many times it applied it (a step or
    effect the golden run never had counts as once); ``ended``: attempt -> when it went away
    (``time.monotonic()``, the clock of the events' ``t``); ``concurrent``: attempts ran at
    once (a ``resumers`` trial), so consume-once, lost work, forks and duplicates are judged
    too. A pure function: it reads nothing else and changes nothing."""
    g_steps = golden_steps or {}
    g_effects = golden_effects or {}
    gone = ended or {}
    found: dict[str, list[Anomaly]] = {k: [] for k in ANOMALY_KINDS}
    work = 0
    n = 0
    attempts: dict[int, None] = {}
    first_of: dict[int, Mapping[str, Any]] = {}  # attempt -> its first event
    # single writer: attempt -> its open step_started; when open attempts go away (a heap)
    inside: dict[int, Mapping[str, Any]] = {}
    leaving: list[tuple[float, int]] = []
    most = 0
    order: dict[int, Mapping[str, Any]] = {}  # attempt -> its first working event
    working: int | None = None  # the attempt that sent the last working event
    last_of: dict[int, Mapping[str, Any]] = {}
    sw_start = sw_back = False
    # consume-once and lost work
    done: dict[str, int] = {}
    done_by: dict[str, dict[int, Mapping[str, Any]]] = {}
    seen_at_start: dict[int, dict[str, int]] = {}  # attempt -> completions when it began
    starts: dict[tuple[int, str], int] = {}
    reported: set[tuple[str, str]] = set()
    # forks and duplicates
    children: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    applied: dict[tuple[str, str], int] = {}
    applied_by: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = {}
    dup_keys: list[tuple[str, str]] = []
    for ev in events:
        n += 1
        work += 1
        op = ev.get("op")
        a = int(ev.get("attempt") or 0)
        if a not in attempts:
            attempts[a] = None
            first_of[a] = ev
            if concurrent:
                seen_at_start[a] = dict(done)  # what was acknowledged when it began
                work += len(done)
        t = ev.get("t")
        if op in _STEP_OPS:
            # -- single writer over every attempt at once --------------------------------------
            while leaving and t is not None and leaving[0][0] <= float(t):
                work += 1
                _end, b = heapq.heappop(leaving)
                inside.pop(b, None)  # b went away mid-step: its step is over
            if op == "step_started":
                other = next((b for b in inside if b != a), None)
                work += 1
                if other is not None and not sw_start:
                    sw_start = True
                    mine, theirs = inside[other], ev
                    found["single_writer"].append(
                        Anomaly(
                            "single_writer",
                            f"attempts {other} and {a} executed steps at the same time: "
                            f"attempt {a} started {ev.get('step')!r} at {_at(ev)} while "
                            f"attempt {other} was still inside {mine.get('step')!r} (started "
                            f"at {_at(mine)}); two live writers of one run",
                            (mine, theirs),
                        )
                    )
                if a not in inside and a in gone:
                    heapq.heappush(leaving, (float(gone[a]), a))
                inside[a] = ev
                most = max(most, len(inside))
            elif op == "step_completed":
                inside.pop(a, None)
            if working is not None and working != a and a in order and not sw_back:
                sw_back = True
                found["single_writer"].append(
                    Anomaly(
                        "single_writer",
                        f"attempts {working} and {a} executed steps at the same time: attempt "
                        f"{a} went on at {_at(ev)} after attempt {working} had started working "
                        "(two live writers of one run)",
                        tuple(x for x in (last_of.get(a), order.get(working), ev) if x is not None),
                    )
                )
            order.setdefault(a, ev)
            working = a
            last_of[a] = ev
        if not concurrent:
            continue
        # -- consume-once and lost acknowledged work -------------------------------------------
        if op == "step_completed":
            step = event_name(ev)
            done[step] = done.get(step, 0) + 1
            by = done_by.setdefault(step, {})
            by.setdefault(a, ev)
            if (
                done[step] > max(1, g_steps.get(step, 0))
                and len(by) >= 2
                and ("consume_once", step) not in reported
            ):
                reported.add(("consume_once", step))
                first = next(e for b, e in by.items() if b != a)
                work += 1
                found["consume_once"].append(Anomaly("consume_once", step, (first, ev)))
        elif op == "step_started":
            step = event_name(ev)
            j = starts[(a, step)] = starts.get((a, step), 0) + 1
            before = seen_at_start.get(a, {}).get(step, 0)
            if (
                before
                and before + j > max(1, g_steps.get(step, 0))
                and ("lost_ack", step) not in reported
            ):
                reported.add(("lost_ack", step))
                began = first_of[a]
                acked = next(
                    (e for b, e in done_by.get(step, {}).items() if e["i"] < began["i"]), None
                )
                work += 1
                found["lost_ack"].append(
                    Anomaly(
                        "lost_ack",
                        f"step {step!r} was completed and acknowledged {_times(before)} before "
                        f"attempt {a} began, and attempt {a} started it again as if never done "
                        f"(the golden run has it {_times(g_steps.get(step, 0))})",
                        (*(x for x in (acked, began) if x is not None and x is not ev), ev),
                    )
                )
        elif op == "effect" and ev.get("applied") is True:
            ident = (str(ev.get("kind")), canonical(ev.get("payload")))
            applied[ident] = applied.get(ident, 0) + 1
            by = applied_by.setdefault(ident, {})
            by.setdefault(a, ev)
            if (
                applied[ident] > max(1, g_effects.get(ident, 0))
                and len(by) >= 2
                and ("duplicate_effect", repr(ident)) not in reported
            ):
                reported.add(("duplicate_effect", repr(ident)))
                first = next(e for b, e in by.items() if b != a)
                work += 1
                dup_keys.append(ident)
                found["duplicate_effect"].append(Anomaly("duplicate_effect", "", (first, ev)))
        cid = ev.get("checkpoint")
        if cid:
            key = (
                str(ev.get("thread") or ""),
                str(ev.get("ns") or ""),
                str(ev.get("parent") or ""),
            )
            sibling = children.setdefault(key, ev)
            if sibling.get("checkpoint") != cid and ("fork", repr(key)) not in reported:
                reported.add(("fork", repr(key)))
                parent = key[2] or "none: the thread's first checkpoint"
                found["fork"].append(
                    Anomaly(
                        "fork",
                        f"checkpoint {key[2] or '(none)'} has two successors, "
                        f"{sibling['checkpoint']} (attempt {sibling.get('attempt')}) and {cid} "
                        f"(attempt {a}): the history forked at parent {parent}"
                        + (f" in namespace {key[1]!r}" if key[1] else ""),
                        (sibling, ev),
                    )
                )
    # counted to the end of the history: how many times, by which attempts (the witness is
    # the first two that show it)
    found["consume_once"] = [
        Anomaly(
            x.kind,
            f"step {x.summary!r} completed {done[x.summary]} times by {_nums(done_by[x.summary])} "
            f"(the golden run completed it {_times(g_steps.get(x.summary, 0))}): two attempts "
            "did the same step of the run",
            x.witness,
        )
        for x in found["consume_once"]
    ]
    found["duplicate_effect"] = [
        Anomaly(
            x.kind,
            f"effect {ident[0]!r} with the same payload applied {applied[ident]} times by "
            f"{_nums(applied_by[ident])} (the golden run applied it "
            f"{_times(g_effects.get(ident, 0))}): the outside world saw it more than once",
            x.witness,
        )
        for x, ident in zip(found["duplicate_effect"], dup_keys, strict=True)
    ]
    work += len(found["consume_once"]) + len(found["duplicate_effect"])
    return History(
        tuple(x for k in ANOMALY_KINDS for x in found[k]),
        n,
        tuple(sorted(attempts)),
        most,
        work,
    )


def ran_at_once(f: TrialFacts) -> bool:
    """Attempts of the trial ran at once: its plan starts resumers."""
    return any(x.kind == "resumers" for x in f.plan.faults)


def history_of(f: TrialFacts) -> History:
    """:func:`check_history` over a trial's facts: its events, the golden run's step
    completions and applied effects, when each attempt went away, whether attempts ran at
    once."""
    steps: dict[str, int] = {}
    for e in f.golden.events:
        if e.get("op") == "step_completed":
            steps[event_name(e)] = steps.get(event_name(e), 0) + 1
    return check_history(
        f.events,
        steps,
        dict(f.golden.effects),
        f.extra.get("ended") or {},
        concurrent=ran_at_once(f),
    )


def history_text(f: TrialFacts, history: History | None = None) -> str:
    """The trial folder's ``anomalies.txt``: each anomaly of the history and its witness, one
    event a line; "" when there is none."""
    h = history if history is not None else history_of(f)
    if h.ok:
        return ""
    t0 = min((float(e["t"]) for e in f.events if e.get("t") is not None), default=None)
    span = f"attempts {h.attempts[0]} to {h.attempts[-1]}" if len(h.attempts) > 1 else "one attempt"
    out = [
        f"history check: {h.events} ledger events of {span}, read once; "
        f"{len(h.anomalies)} anomal{'y' if len(h.anomalies) == 1 else 'ies'}"
        + (f"; up to {h.most_inside} attempts inside steps at once" if h.most_inside > 1 else ""),
        "",
    ]
    for a in h.anomalies:
        out.append(f"{a.kind}: {a.summary}")
        out += [f"  {witness_line(e, t0)}" for e in a.witness]
        out.append("")
    return "\n".join(out)


def _at(ev: Mapping[str, Any]) -> str:
    what = ev.get("step") or ev.get("key") or ev.get("kind") or ""
    return f"attempt {ev['attempt']} event #{ev['i']} ({ev['op']} {what})".rstrip()


def _nums(by: Mapping[int, Any]) -> str:
    """The attempts of ``by``: ``attempts 1-3, 5``, ``attempt 2``."""
    nums = sorted(by)
    runs: list[list[int]] = []
    for n in nums:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
    return ("attempt " if len(nums) == 1 else "attempts ") + text


def _times(n: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")
