"""Power-loss planning: the crash states of the golden run's trace, as the family's points.

The golden run is recorded under strace (:mod:`crashpoint.faults`, ``POWER_SYSCALLS``); its
logical operation log and the wall-clock times of its events give the *crash instants*: just
before each file operation (every event that came earlier already happened: its effect was
applied outside, its step reported completed), and after the last. At each instant the model's
crash states (what a power cut may leave) are listed; states that leave the same folders with
the same events behind are judged once. A systematic family runs every state; ``count: N``
draws N by the seed. Running a cut is the engine's (:mod:`crashpoint.harness._engine._power`).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from typing import Any

from crashpoint.faults import OpLog, crash_plan
from crashpoint.harness._spec._model import Fault, Golden

__all__ = ["draw", "oplog_of", "points", "states", "stopped"]

#: Crash states kept per (golden run, model) in this process: planning asks for one at a time.
#: With them, the note that says planning stopped at its deadline ("" when it did not).
_CACHE: dict[tuple[int, str], tuple[Golden, list[dict[str, Any]], str]] = {}


#: The last golden runs' logs, read once each (every power-cut and replayed-kill trial asks):
#: id(golden) -> (golden, its plog, the log); the objects kept so an id is never reused.
_LOGS: dict[int, tuple[Golden, Any, OpLog]] = {}


def oplog_of(golden: Golden) -> OpLog:
    """The golden run's logical file-operation log (recorded for a power_loss family); read
    once per golden run and kept (an :class:`~crashpoint.faults.OpLog` is frozen)."""
    hit = _LOGS.get(id(golden))
    if hit is not None and hit[0] is golden and hit[1] is golden.plog:
        return hit[2]
    log = OpLog.from_json(golden.plog)
    if len(_LOGS) >= 4:
        _LOGS.clear()
    _LOGS[id(golden)] = (golden, golden.plog, log)
    return log


#: A crash state's planning mark (never a fault argument): nothing the agent reported after
#: the first operation the cut loses (no step completed, no effect), so the state tells less
#: than one that contradicts a report; drawn trials take these last.
QUIET = "quiet"

#: The events that tell the world something is done.
_REPORTS = ("step_completed", "effect", "llm_call")


def states(golden: Golden, model: str, deadline: float | None = None) -> list[dict[str, Any]]:
    """Every crash state of ``golden`` under ``model``, in log order, as fault arguments
    (``upto``, ``events``, ``mutation``, ``label``); [] without a trace.

    Planned once per golden run and model (incrementally, :func:`crashpoint.faults.
    crash_plan`); with ``deadline`` (a ``time.monotonic()`` time) planning stops there with
    the states of the operations it reached, and :func:`stopped` says so: the list kept
    for this golden run is then that partial one."""
    return [dict(x) for x in _planned(golden, model, deadline)]


def _planned(golden: Golden, model: str, deadline: float | None = None) -> list[dict[str, Any]]:
    """:func:`states` itself, not a copy (planning draws one per trial: never changed)."""
    if not golden.plog:
        return []
    key = (id(golden), model)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is golden:
        return hit[1]
    log = oplog_of(golden)
    at = sorted(golden.plog_events)  # per event, how many operations came before it
    reports = sorted(
        c
        for k, c in enumerate(golden.plog_events[: len(golden.events)])
        if golden.events[k]["op"] in _REPORTS
    )
    seen: set[tuple[str, int]] = set()
    out: list[dict[str, Any]] = []
    reached = -1
    for upto, first, found in crash_plan(log, model, deadline=deadline):
        reached = upto
        events = bisect.bisect_right(at, upto)  # the events that happened before the cut
        # did the run report something done after the first operation the cut may lose
        # started, and before the cut? (if not, the state is QUIET)
        k = bisect.bisect_right(reports, first)
        quiet = not (k < len(reports) and reports[k] <= upto)
        for st in found:
            ident = (st.digest, events)
            if ident in seen:
                continue
            seen.add(ident)
            out.append(
                {
                    "upto": upto,
                    "events": events,
                    "mutation": st.mutation.to_json(),
                    "label": st.label(),
                    QUIET: quiet,
                }
            )
    note = ""
    if reached < len(log.ops):
        note = (
            f"power_loss ({model}): planning stopped at the budget after "
            f"{max(0, reached)} of {len(log.ops)} operations ({len(out)} crash state(s) "
            "planned from them; the states of the later operations were not planned, and "
            "their trials were not run)"
        )
    if len(_CACHE) > 8:
        _CACHE.clear()
    _CACHE[key] = (golden, out, note)
    return out


def stopped(golden: Golden, model: str) -> str:
    """Why planning the crash states of ``golden`` under ``model`` stopped early (its
    deadline), or "" (it did not, or was not asked)."""
    hit = _CACHE.get((id(golden), model))
    return hit[2] if hit is not None and hit[0] is golden else ""


def draw(
    golden: Golden,
    model: str,
    rng: random.Random,
    boundary: int | None,
    attempt: int,
    pick: Callable[[list[dict[str, Any]]], int] | None = None,
) -> Fault:
    """The power_loss fault of one trial: state ``boundary`` of the sweep, or one drawn:
    ``pick`` (the trial's place in a draw without replacement that takes first the states
    where the cut loses what the agent had already reported done), else by ``rng``; without
    a trace (or nothing to lose), a fault that says why (never a pass)."""
    all_states = _planned(golden, model)
    if not all_states:
        why = golden.recorded_by or "the golden run was not traced"
        if golden.plog and not golden.plog.get("ops"):
            why = (
                "the golden run made no file operation under {state_dir} or {workdir}: a "
                "power cut there loses nothing more than a kill -9 would"
            )
        elif stopped(golden, model):
            why = stopped(golden, model)
        elif golden.plog:
            why = (
                "no crash state differs from what a kill -9 leaves: every file operation "
                "of the golden run was made durable before the next one"
            )
        return Fault.make("power_loss", attempt, model=model, label=why)
    if boundary is not None:
        s = all_states[boundary]
    elif pick is not None:
        s = all_states[pick(all_states)]
    else:
        s = rng.choice(all_states)
    return Fault.make(
        "power_loss", attempt, model=model, **{k: v for k, v in s.items() if k != QUIET}
    )


def points(golden: Golden, model: str) -> int:
    return max(1, len(_planned(golden, model)))
