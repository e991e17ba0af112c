"""The power_loss family in the harness: running the crash states as trials.

Planning (which crash states, one per trial) is the specification's
(:mod:`crashpoint.harness._spec._power`).

Running (:func:`cut`): the trial does not re-run the prefix. Attempt 1 *is* the golden run up
to the instant: its crash state is materialised into the trial's fresh folders, the ledger is
loaded with the golden events before the instant (as attempt 1: effects applied, steps
acknowledged), and the agent is started once to resume. The usual checks then judge it: an
effect applied before the cut and again after it is a duplicate; a step reported completed
before the cut whose data was lost is re-run ("acknowledged but not durable").
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crashpoint.faults import (
    POWER_STRSIZE,
    POWER_SYSCALLS,
    CrashState,
    Mutation,
    OpLog,
    build_oplog,
    crash_states,
    event_points,
    materialize,
    read_trace,
    rebuild_crash_state,
    snapshot_roots,
    strace_available,
    strace_wrap,
)
from crashpoint.harness._spec import Attempt, Fault, Golden, oplog_of

__all__ = [
    "Cut",
    "Recovery",
    "as_sent",
    "cut",
    "excerpt",
    "replay_events",
    "snapshot",
    "state_note",
    "synthetic_attempt",
    "trace_excerpt",
    "unsupported",
]


@dataclass
class Cut:
    """A power cut applied to a trial: the state it left and what it says."""

    state: CrashState
    events: list[dict[str, Any]]
    written: list[str]

    def note(self) -> tuple[bool, str, str]:
        """The fault's accounting: (fired, where, why_not)."""
        st = self.state
        where = f"power cut ({st.model}) {st.label()}"
        if st.lost:
            where += "; lost: " + "; ".join(st.lost[:4])
        return True, where, ""


def unsupported(f: Fault, golden: Golden) -> str:
    """Why a power_loss fault cannot run here ("" if it can)."""
    if f.arg("op"):  # a cut during recovery: traced live
        ok, why = strace_available()
        return "" if ok else f"power_loss needs strace: {why}"
    if f.arg("upto") is None:
        ok, why = strace_available()
        if not golden.plog and not ok:  # the machine cannot trace: skipped, with the reason
            return (
                f"power_loss skipped: it needs strace to record the agent's file "
                f"operations, and strace cannot run here ({why})"
            )
        return ""  # the accounting says why (never a pass)
    if not golden.plog:
        return "power_loss needs the golden run's syscall trace, and there is none"
    return ""


def cut(f: Fault, golden: Golden, roots: Mapping[str, str]) -> Cut:
    """Materialise ``f``'s crash state into ``roots`` and return it with the golden events
    that happened before the cut (to load into the ledger as attempt 1)."""
    log = oplog_of(golden)
    st = rebuild_crash_state(
        log,
        str(f.arg("model")),
        int(f.arg("upto")),
        Mutation.from_json(f.arg("mutation") or {}),
    )
    written = materialize(st, roots)
    events = [dict(e) for e in golden.events[: int(f.arg("events", 0))]]
    return Cut(st, events, written)


def state_note(st: CrashState) -> dict[str, Any]:
    """What the checks and the hints read of a crash state (``TrialFacts.extra["power"]``)."""
    return {"explain": st.explain, "lost": list(st.lost), "label": st.label()}


#: What the ledger adds to an event it records (not part of the message the agent sent).
_RECORDED = frozenset({"i", "ai", "nth", "attempt", "applied", "killed", "keyless", "t", "wall"})


def as_sent(ev: dict[str, Any], attempt: int) -> dict[str, Any]:
    """The message a recorded golden event was, sent again as attempt ``attempt``'s."""
    msg = {k: v for k, v in ev.items() if k not in _RECORDED and k != "pid"}
    msg["attempt"] = attempt
    return msg


def replay_events(ledger: Any, events: list[dict[str, Any]], attempt: int = 1) -> None:
    """Load ``events`` into ``ledger`` as attempt ``attempt``: effects applied (their keys
    remembered: a keyed retry is recognised), steps reported."""
    for ev in events:
        ledger.handle(as_sent(ev, attempt))


def synthetic_attempt(c: Cut, argv: list[str]) -> Attempt:
    """Attempt 1 of a power-loss trial: the golden run cut at the instant (not re-run)."""
    return Attempt(
        1,
        list(argv),
        None,
        None,
        False,
        0.0,
        b"",
        b"",
        killed_by=f"power loss ({c.state.model}) {c.state.label()}",
    )


def excerpt(
    log: OpLog,
    st: CrashState,
    events: list[dict[str, Any]],
    points: list[int],
    *,
    what: str,
    around: int = 8,
) -> str:
    """The operations around the cut, for the evidence folder: what was done, what was
    pending (not durable) and lost, and the events among them."""
    upto = st.upto
    pending = set(st.pending)
    before = sum(1 for k in points if k <= upto)
    lines = [
        f"power cut under model {st.model} after {upto} of {len(log.ops)} file "
        f"operations of {what}; {before} of its {len(events)} events had happened",
        f"crash state: {st.label()}",
        "",
    ]
    lo = max(0, min([upto - around, *pending]))
    for k in range(lo, min(len(log.ops), upto + 3)):
        for j, at in enumerate(points):
            if at == k and j < len(events):
                ev = events[j]
                lines.append(
                    f"      event #{j} {ev.get('op')} "
                    f"{ev.get('step') or ev.get('kind') or ''}".rstrip()
                )
        op = log.ops[k]
        if k == upto:
            lines.append(f"CUT> ---- the power went here: op {upto + 1} and later never ran ----")
        mark = "  ~ " if op.seq in pending else "    "
        lines.append(f"{mark} op {op.seq + 1}: {op.describe()}")
    if upto >= len(log.ops):
        lines.append("CUT> ---- the power went here: after the last operation ----")
    lines += [
        "",
        "~ : done but not durable at the cut (no fsync / folder fsync since): the "
        "model may lose, tear or reorder it",
    ]
    if st.lost:
        lines += [
            "",
            "what the power cut took (compared with a kill -9 at the same point):",
            *(f"  {x}" for x in st.lost),
        ]
    if st.explain:
        lines += ["", "missing barrier: " + st.explain]
    if log.notes:
        lines += ["", "not modelled:", *(f"  {x}" for x in log.notes)]
    return "\n".join(lines) + "\n"


def trace_excerpt(golden: Golden, f: Fault, state: CrashState | None = None) -> str:
    """:func:`excerpt` of a cut planned from the golden run (``state``: the cut's crash
    state, if :func:`cut` made it already; else it is rebuilt)."""
    if not golden.plog or f.arg("upto") is None:
        return ""
    log = oplog_of(golden)
    st = state or rebuild_crash_state(
        log,
        str(f.arg("model")),
        int(f.arg("upto")),
        Mutation.from_json(f.arg("mutation") or {}),
    )
    return excerpt(log, st, golden.events, golden.plog_events, what="the golden run")


# -- a power cut during recovery (a chain: another fault first) --------------------------------


def snapshot(roots: Mapping[str, str]) -> dict[str, bytes | None]:
    """What ``roots`` hold now (:func:`crashpoint.faults.snapshot_roots`)."""
    return snapshot_roots(roots)


@dataclass
class Recovery:
    """A power cut during attempt ``attempt`` (after another fault): the attempt runs under
    strace, is killed at a planned event, and the crash state at that instant (drawn by the
    seed from those the model allows) replaces its folders before the next attempt."""

    fault: Fault
    index: int
    trace: str
    initial: dict[str, bytes | None]

    def wrap(self, argv: list[str]) -> list[str]:
        return strace_wrap(
            argv,
            self.trace,
            syscalls=POWER_SYSCALLS,
            strsize=POWER_STRSIZE,
            timestamps=True,
        )

    def apply(
        self,
        roots: Mapping[str, str],
        killed: bool,
        where: str,
        cwd: str,
        events: list[dict[str, Any]],
        rng: random.Random,
    ) -> tuple[tuple[bool, str, str], CrashState | None, str]:
        """After the attempt: (the accounting note, the state applied or None, excerpt)."""
        model = str(self.fault.arg("model", "posix"))
        if not killed:
            return (False, "", f"attempt {self.fault.attempt} was never cut: {where}"), None, ""
        log = build_oplog(read_trace(self.trace, cwd=cwd), roots, initial=self.initial)
        found = crash_states(log, model, len(log.ops))
        if not found:
            return (
                (
                    False,
                    "",
                    f"nothing was pending when the power went ({where}): every "
                    "file operation of the attempt was already durable, so the cut "
                    "left what a kill -9 leaves",
                ),
                None,
                "",
            )
        st = found[rng.randrange(len(found))]
        materialize(st, roots)
        text = excerpt(
            log,
            st,
            events,
            event_points(log, [float(e.get("wall", 0.0)) for e in events]),
            what=f"attempt {self.fault.attempt}",
        )
        note = (
            f"power cut ({model}) during attempt {self.fault.attempt} at {where}: "
            f"{st.label()}" + (f"; lost: {'; '.join(st.lost[:4])}" if st.lost else "")
        )
        return (True, note, ""), st, text


def write_state_copy(st: CrashState, folder: str) -> None:
    """The crash state as files under ``folder`` (evidence: what the resume started from)."""
    roots = {}
    for rel in st.files:
        if rel.startswith("{") and "}" in rel:
            name = rel[1 : rel.index("}")]
            roots[name] = os.path.join(folder, name)
    for r in roots.values():
        os.makedirs(r, mode=0o700, exist_ok=True)
    materialize(st, roots)
