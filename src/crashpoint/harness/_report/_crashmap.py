"""The crash map of a campaign: where along the golden run each trial's fault landed.

:func:`crash_map` turns a campaign's golden run and its trials into plain JSON (the
``crash_map`` field of ``CampaignResult.summary()``, so a report can be drawn again from
gate.json alone); :func:`crash_map_svg` draws it (``_html`` puts it at the top of each
campaign's section). The shape::

    {
      "axis": [                      # the golden run, in order (at most MAX_AXIS entries)
        {"kind": "step_started" | "step_completed" | "effect" | "llm_call" | "event"
                 | "fileop" | "powerop" | "start" | "end",
         "label": str,               # "step_completed:draft", "write {state_dir}/x.tmp #1"
         "step": str | None,         # the step an event is about
         "event": int?,              # its index among the golden run's events
         "op": int?,                 # fileop: its index in golden.fileops; powerop: in the
                                     # power-loss operation log (numbered from 1 in labels)
         "states": int?},            # powerop: crash states the model lists after it
      ],
      "points": [                    # one per trial that ran, in index order
        {"trial": int,               # the trial's index (its section is #c{k}-t{trial})
         "at": int | None,           # the axis entry it landed at (None: not on the axis)
         "verdict": "pass" | "fail" | "not_exercised" | "skipped",
         "phase": "in_doubt"?,       # a kill after the effect was applied, before the reply
         "where": str,               # where it landed (or was aimed, if it did not fire)
         "placed": "planned" | "reported"?},  # "reported": placed by the events the killed
                                     # attempt had reported (a kill at a time or failpoint)
      ],
      "note": str?                   # what the map leaves out or guesses, in words
    }

Where a fault lands: a kill at a boundary at that golden event (``phase`` ``in_doubt`` for the
window after an effect was applied); a kill before a file operation at that operation; a power
cut after the operation it followed (``upto``; "start" if before the first); a corruption at
the kill that preceded it; a network fault at its request; a kill at a time, a failpoint or a
signal at the first golden event the killed attempt had not reported yet. File operations are
placed among the events by the golden run's timed trace (``Golden.fileop_events``, with
strace); without one, by the events the attempt killed before each had reported (that kill's
own trial), those no trial hit just after the one before them (the note says so). A trial
whose fault did not fire is drawn as *not exercised* at the point it was aimed at (never a
pass); one whose position is unknown is listed off the axis.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from crashpoint.harness._spec import Fault, Golden, TrialResult, call_of, event_name, oplog_of
from crashpoint.harness._spec import states as power_states

__all__ = ["CRASHMAP_LEGEND", "MAX_AXIS", "crash_map", "crash_map_svg"]

#: At most this many axis entries are kept (operations no trial hit are dropped first).
MAX_AXIS = 400

_VERDICTS = {
    "passed": "pass",
    "failed": "fail",
    "not exercised": "not_exercised",
    "skipped": "skipped",
}


def _event_index(golden: Golden, op: str, name: str, nth: int) -> int | None:
    seen = 0
    for j, ev in enumerate(golden.events):
        if ev.get("op") == op and event_name(ev) == name:
            seen += 1
            if seen == nth:
                return j
    return None


def _call_index(golden: Golden, call: str, nth: int) -> int | None:
    seen = 0
    for j, ev in enumerate(golden.events):
        if call and call_of(ev) == call:
            seen += 1
            if seen == nth:
                return j
    return None


def _identity(golden: Golden, f: Fault) -> int | None:
    """The golden event a fault names by identity (op, name, nth)."""
    return _event_index(golden, str(f.arg("op")), str(f.arg("name", "")), int(f.arg("nth", 1)))


def _reported(t: TrialResult, attempt: int) -> int:
    """How many events attempt ``attempt`` of ``t`` reported before it ended."""
    return sum(1 for e in t.events if int(e.get("attempt", 0) or 0) == attempt)


def _fileop_index(golden: Golden, f: Fault) -> int | None:
    op = f.arg("fileop") or {}
    if not op:
        return None
    ident = (op.get("op"), op.get("path"), int(op.get("n", 1) or 1))
    for j, g in enumerate(golden.fileops):
        if (g.get("op"), g.get("path"), int(g.get("n", 1) or 1)) == ident:
            return j
    return None


class _Place:
    """Where one trial's fault sits: an event, a file operation or a power-loss operation."""

    __slots__ = ("event", "fileop", "phase", "placed", "powerop", "where")

    def __init__(self) -> None:
        self.event: int | None = None  # golden event index (len(events): after the last)
        self.fileop: int | None = None
        self.powerop: int | None = None  # upto: ops performed (0: before the first)
        self.phase = ""
        self.placed = "planned"
        self.where = ""


def _place(golden: Golden, t: TrialResult) -> _Place:
    """The first fault of ``t``'s plan that has a position on the golden run."""
    p = _Place()
    fired = {o.fault: o for o in t.outcomes}
    for k, f in enumerate(t.plan.faults):
        o = fired.get(k)
        p.where = (o.where if o and o.fired else "") or str(f)
        if f.kind in ("kill", "exit") and f.arg("op"):
            p.event = _event_index(
                golden, f.arg("op"), str(f.arg("name", "")), int(f.arg("nth", 1))
            )
            p.phase = "in_doubt" if f.arg("phase") == "in_doubt" else ""
        elif f.kind == "kill" and f.arg("index") is not None and f.attempt == 1:
            p.event = int(f.arg("index"))
            p.phase = "in_doubt" if f.arg("phase") == "in_doubt" else ""
        elif f.kind == "fileop":
            p.fileop = _fileop_index(golden, f)
        elif f.kind == "power_loss" and f.arg("upto") is not None:
            p.powerop = int(f.arg("upto"))
        elif f.kind == "power_loss" and f.arg("op"):
            p.event = _event_index(
                golden, f.arg("op"), str(f.arg("name", "")), int(f.arg("nth", 1))
            )
        elif f.kind == "network" and f.arg("call"):
            p.event = _call_index(golden, str(f.arg("call")), int(f.arg("nth", 1)))
        elif f.kind in ("kill_at_time", "failpoint", "signal") and f.attempt == 1:
            if o is not None and o.fired and t.events:
                p.event = _reported(t, 1)
                p.placed = "reported"
        elif f.kind == "corrupt":
            continue  # placed at the kill before it (already seen) or nowhere
        if p.event is not None or p.fileop is not None or p.powerop is not None:
            return p
    p.where = t.landed() if t.outcomes else t.plan.describe()
    return p


def _fileop_events(
    golden: Golden, trials: Sequence[TrialResult], places: list[_Place]
) -> tuple[list[int], int]:
    """For each of ``golden.fileops``, how many golden events came before it: as the golden
    run's timed trace says (``fileop_events``), else what the attempt killed before it had
    reported, else the same as the operation before it; and how many operations were placed
    by the trace or a trial's evidence."""
    if len(golden.fileop_events) == len(golden.fileops):
        return [int(n) for n in golden.fileop_events], len(golden.fileops)
    known: dict[int, int] = {}
    for t, p in zip(trials, places, strict=True):
        if p.fileop is None or not t.events:
            continue
        fault = next((f for f in t.plan.faults if f.kind == "fileop"), None)
        out = next((o for o in t.outcomes if o.kind == "fileop"), None)
        if fault is None or out is None or not out.fired:
            continue
        n = _reported(t, fault.attempt)
        known[p.fileop] = min(known.get(p.fileop, n), n)
    out_list, last = [], 0
    for j in range(len(golden.fileops)):
        last = max(last, known.get(j, last))
        out_list.append(last)
    return out_list, len(known)


def crash_map(golden: Golden, trials: Sequence[TrialResult]) -> dict[str, Any]:
    """The crash map of a campaign (see the module docstring for its shape)."""
    places = [_place(golden, t) for t in trials]
    notes: list[str] = []
    use_fileops = any(p.fileop is not None for p in places) and bool(golden.fileops)
    use_power = any(p.powerop is not None for p in places) and bool(golden.plog.get("ops"))
    # -- the axis: events, with file operations / power-loss operations between them
    entries: list[dict[str, Any]] = []
    ev_at: dict[int, int] = {}
    fop_at: dict[int, int] = {}
    pop_at: dict[int, int] = {}
    fop_before, fop_known = _fileop_events(golden, trials, places) if use_fileops else ([], 0)
    power_ops: list[str] = []
    power_counts: dict[int, int] = {}
    if use_power:
        try:
            power_ops = [op.describe() for op in oplog_of(golden).ops]
        except ValueError:
            power_ops = []
        models = {
            str(f.arg("model"))
            for t in trials
            for f in t.plan.faults
            if f.kind == "power_loss" and f.arg("upto") is not None
        }
        if len(models) == 1:
            for st in power_states(golden, models.pop()):
                power_counts[int(st["upto"])] = power_counts.get(int(st["upto"]), 0) + 1
    pev = list(golden.plog_events) if use_power else []
    needs_start = any(p.powerop == 0 for p in places)
    if needs_start:
        entries.append({"kind": "start", "label": "start of the run", "step": None})
    fj = pj = 0

    def flush_ops(before_event: int) -> None:
        nonlocal fj, pj
        while use_fileops and fj < len(golden.fileops) and fop_before[fj] <= before_event:
            g = golden.fileops[fj]
            fop_at[fj] = len(entries)
            label = f"{g.get('op', '?')} {g.get('path', '?')} #{g.get('n', 1)}"
            entries.append({"kind": "fileop", "label": label, "step": None, "op": fj})
            fj += 1
        while use_power and pj < len(power_ops):
            # op pj (0-based) happened before event k when plog_events[k] > pj
            if before_event < len(pev) and pev[before_event] <= pj:
                break
            if before_event >= len(pev) and before_event < len(golden.events):
                break  # no timing for this event: the rest go after the last event
            pop_at[pj + 1] = len(entries)  # keyed by upto: a cut after op pj+1
            entry: dict[str, Any] = {
                "kind": "powerop",
                "label": f"op {pj + 1}: {power_ops[pj]}",
                "step": None,
                "op": pj,
            }
            if power_counts:
                entry["states"] = power_counts.get(pj + 1, 0)
            entries.append(entry)
            pj += 1

    for k, ev in enumerate(golden.events):
        flush_ops(k)
        op = str(ev.get("op", "event"))
        ev_at[k] = len(entries)
        entries.append(
            {
                "kind": op,
                "label": f"{op}:{event_name(ev)}",
                "step": ev.get("step"),
                "event": k,
            }
        )
    flush_ops(len(golden.events) + 1)
    # a kill placed past the last event (its attempt reported them all)
    if any(p.event is not None and p.event >= len(golden.events) for p in places):
        ev_at[len(golden.events)] = len(entries)
        entries.append({"kind": "end", "label": "after the last event", "step": None})
    if needs_start:
        pop_at[0] = 0
    if use_fileops and len(golden.fileops) > fop_known:
        notes.append(
            "file operations are placed among the events by what the attempt killed before "
            f"each had reported; {len(golden.fileops) - fop_known} that no trial killed at "
            "are placed just after the operation before them"
        )
    # -- the points
    points: list[dict[str, Any]] = []
    for t, p in zip(trials, places, strict=True):
        at: int | None = None
        if p.event is not None:
            at = ev_at.get(p.event)
        elif p.fileop is not None:
            at = fop_at.get(p.fileop)
        elif p.powerop is not None:
            at = pop_at.get(p.powerop)
        pt: dict[str, Any] = {
            "trial": t.plan.index,
            "at": at,
            "verdict": _VERDICTS.get(t.status, "not_exercised"),
            "where": p.where,
        }
        if p.phase:
            pt["phase"] = p.phase
        if p.placed != "planned" and at is not None:
            pt["placed"] = p.placed
        points.append(pt)
    # -- bounded: drop operations no trial hit, then cut the tail
    if len(entries) > MAX_AXIS:
        entries, points, dropped = _bound(entries, points)
        notes.append(dropped)
    unplaced = sum(1 for p in points if p["at"] is None)
    if unplaced:
        notes.append(f"{unplaced} trial(s) have no position on the golden run (listed aside)")
    out: dict[str, Any] = {"axis": entries, "points": points}
    if notes:
        out["note"] = "; ".join(notes)
    return out


def _bound(
    entries: list[dict[str, Any]], points: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    hit = {p["at"] for p in points if p["at"] is not None}
    keep = [k for k, e in enumerate(entries) if k in hit or e["kind"] not in ("fileop", "powerop")]
    ops_dropped = len(entries) - len(keep)
    cut = max(0, len(keep) - MAX_AXIS)
    if cut:
        # keep every hit entry, and the others until the cap
        room = MAX_AXIS - len([k for k in keep if k in hit])
        kept: list[int] = []
        for k in keep:
            if k in hit or room > 0:
                kept.append(k)
                room -= 0 if k in hit else 1
        cut = len(keep) - len(kept)
        keep = kept[:MAX_AXIS]
    new_index = {old: new for new, old in enumerate(keep)}
    pts = [{**p, "at": new_index.get(p["at"]) if p["at"] is not None else None} for p in points]
    words = []
    if ops_dropped:
        words.append(f"{ops_dropped} operation(s) no trial ran at are left out")
    if cut:
        words.append(f"{cut} more entries are left out (the axis keeps {MAX_AXIS})")
    return [entries[k] for k in keep], pts, "the golden run is long: " + ", ".join(words)


# -- drawing ------------------------------------------------------------------------------------


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


#: Verdicts in stacking order (nearest the axis first) with their word.
_ORDER = (
    ("fail", "FAIL"),
    ("not_exercised", "not exercised"),
    ("skipped", "skipped"),
    ("pass", "pass"),
)
_WIDTH = 1180  # what fits a 1,280 px window with the page's margins
_LEFT = 8
_MIN_COL = 16
_LABEL_GAP = 18
_MAX_COL = 64


def _mark(verdict: str, x: float, y: float) -> str:
    """A verdict's mark: shape and colour both say it (print in grey stays readable)."""
    if verdict == "fail":  # a red square with a white cross
        return (
            f'<rect class="m-fail" x="{x - 6:.1f}" y="{y - 6:.1f}" width="12" height="12"/>'
            f'<path class="m-x" d="M{x - 3.5:.1f},{y - 3.5:.1f} L{x + 3.5:.1f},{y + 3.5:.1f} '
            f'M{x + 3.5:.1f},{y - 3.5:.1f} L{x - 3.5:.1f},{y + 3.5:.1f}"/>'
        )
    if verdict == "pass":  # a green disc
        return f'<circle class="m-pass" cx="{x:.1f}" cy="{y:.1f}" r="5.5"/>'
    if verdict == "skipped":  # an amber hollow square
        return f'<rect class="m-skip" x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10"/>'
    # not exercised: a grey dashed ring
    return f'<circle class="m-none" cx="{x:.1f}" cy="{y:.1f}" r="5"/>'


def _tick(kind: str, x: float, y: float) -> str:
    if kind == "step_started":
        return f'<line class="ss" x1="{x:.1f}" y1="{y - 7:.1f}" x2="{x:.1f}" y2="{y + 7:.1f}"/>'
    if kind == "step_completed":
        return f'<circle class="sc" cx="{x:.1f}" cy="{y:.1f}" r="4"/>'
    if kind in ("effect", "llm_call"):
        return (
            f'<path class="ea" d="M{x:.1f},{y - 6:.1f} L{x + 6:.1f},{y:.1f} '
            f'L{x:.1f},{y + 6:.1f} L{x - 6:.1f},{y:.1f} Z"/>'
        )
    if kind in ("fileop", "powerop"):
        return f'<rect class="fo" x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6"/>'
    if kind in ("start", "end"):
        return f'<line class="axis" x1="{x:.1f}" y1="{y - 9:.1f}" x2="{x:.1f}" y2="{y + 9:.1f}"/>'
    return f'<rect class="ev" x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6"/>'


def _short(label: str, n: int) -> str:
    return label if len(label) <= n else label[: n - 1] + "\u2026"


_WRITE = re.compile(r"^write \d+ B at \d+ to ")


def _brief(label: str) -> str:
    """An operation's label short enough to read under a tick: without the state folder's
    placeholder or a write's size and offset (the full label is in its ``<title>``)."""
    out = re.sub(r"^op (\d+): ", r"\1 ", label)
    out = _WRITE.sub("write ", re.sub(r"^(\d+ )write \d+ B at \d+ to ", r"\1write ", out))
    out = re.sub(r"^((?:\d+ )?rename \S+) to \S+$", r"\1", out)
    out = out.replace("{state_dir}/", "").replace("{workdir}/", "work/")
    return out.replace("{state_dir} (folder)", "state dir").replace("{state_dir}", "state dir")


def crash_map_svg(cmap: Mapping[str, Any], anchor: str = "") -> str:
    """An inline SVG of ``cmap`` (:func:`crash_map`'s JSON): the golden run along one axis
    (ticks as in the timelines; file operations grey squares), above it one stack of marks per
    point and verdict (a count beside a mark that stands for several trials), each with a
    ``<title>`` naming the point and its trials; a failing mark links to
    ``#{anchor}-t{trial}``. Points off the axis are stacked at its right end."""
    axis = [a for a in cmap.get("axis") or [] if isinstance(a, Mapping)]
    points = [p for p in cmap.get("points") or [] if isinstance(p, Mapping)]
    groups: dict[tuple[int | None, str], dict[str, list[Mapping[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for p in points:
        at = p.get("at")
        at = int(at) if isinstance(at, int) and 0 <= at < len(axis) else None
        phase = "in_doubt" if p.get("phase") == "in_doubt" and at is not None else ""
        groups[(at, phase)][str(p.get("verdict", "not_exercised"))].append(p)
    offaxis = bool(groups.get((None, "")))
    slots = len(axis) + (2 if offaxis else 0)
    col = max(_MIN_COL, min(_MAX_COL, (_WIDTH - _LEFT - 30) / max(1, slots)))
    stack = max((len(v) for v in groups.values()), default=1)
    top = 30 + 18 * stack
    axis_y = top + 8
    label_room = 100 if col >= 22 else 60
    width = int(_LEFT + col * slots + 120)
    height = int(axis_y + label_room + 10)

    def cx(i: int) -> float:
        return _LEFT + col * i + col / 2

    ops = any(a.get("kind") in ("fileop", "powerop") for a in axis)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="crashmap-svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="crash map: {len(points)} trial(s) along {len(axis)} point(s) of the '
        f'golden run">',
        "<title>crash map: where each trial's fault landed along the golden run</title>",
        f'<text x="{_LEFT}" y="14" class="small">golden run, left to right (steps, effects'
        f"{' and file operations' if ops else ''}"
        f"); above each point, its trials by verdict</text>",
    ]
    if axis:
        out.append(
            f'<line class="axis" x1="{_LEFT:.1f}" y1="{axis_y:.1f}" '
            f'x2="{cx(len(axis) - 1) + col / 2:.1f}" y2="{axis_y:.1f}"/>'
        )
    last_label = -1e9  # x of the last labelled tick: labels at least _LABEL_GAP apart
    for i, a in enumerate(axis):
        x = cx(i)
        kind = str(a.get("kind", ""))
        title = str(a.get("label", ""))
        if a.get("states") is not None:
            title += f" ({a.get('states')} crash state(s) after it)"
        text = ""
        is_op = kind in ("fileop", "powerop")
        # a dense axis names its steps and effects only (every tick has its <title>)
        show = (
            kind != "step_completed" and (col >= 22 or not is_op) and x - last_label >= _LABEL_GAP
        )
        if show:
            last_label = x
            lab = str(a.get("label", "")) if is_op else str(a.get("step") or a.get("label") or "")
            lab = _short(_brief(lab), 20 if col >= 22 else 10)
            text = (
                f'<text class="{"small" if is_op else "steplabel"}" '
                f'transform="translate({x - 3:.1f},{axis_y + 14:.1f}) '
                f'rotate(40)">{_e(lab)}</text>'
            )
        out.append(
            f'<g class="axis-entry" data-kind="{_e(kind)}"><title>{_e(title)}</title>'
            f"{_tick(kind, x, axis_y)}{text}</g>"
        )
    if offaxis:
        x0 = cx(len(axis)) + col / 2
        out.append(
            f'<text class="small" x="{x0 - 4:.1f}" y="{axis_y + 14:.1f}">not on the axis</text>'
        )
    for (at, phase), by in sorted(groups.items(), key=lambda kv: (kv[0][0] is None, kv[0])):
        if at is None:
            x = cx(len(axis)) + col / 2 + 10
            name = "not on the golden run's axis"
        else:
            x = cx(at) + (col / 3 if phase else 0)
            name = str(axis[at].get("label", ""))
            if phase:
                name += " (in doubt: applied, reply not yet received)"
        level = 0
        for verdict, word in _ORDER:
            trials = by.get(verdict) or []
            if not trials:
                continue
            y = axis_y - 16 - 18 * level
            level += 1
            idx = [str(p.get("trial")) for p in trials]
            shown = ", ".join(idx[:20]) + (f" and {len(idx) - 20} more" if len(idx) > 20 else "")
            where = str(trials[0].get("where") or "")
            states = ""
            if at is not None and axis[at].get("states") is not None:
                states = f"; {len(trials)} of {axis[at].get('states')} crash state(s) here"
            title = (
                f"{name}: {len(trials)} trial(s) {word}: {shown}{states}"
                + (f"; {where}" if where else "")
                + (
                    "; placed by the events the attempt had reported"
                    if any(p.get("placed") == "reported" for p in trials)
                    else ""
                )
            )
            body = _mark(verdict, x, y)
            total = axis[at].get("states") if at is not None else None
            if isinstance(total, int) and total > 0:  # power loss: states drawn / listed
                body += (
                    f'<text class="count" x="{x + 8:.1f}" y="{y + 4:.1f}">'
                    f"{len(trials)}/{total}</text>"
                )
            elif len(trials) > 1:
                body += f'<text class="count" x="{x + 8:.1f}" y="{y + 4:.1f}">{len(trials)}</text>'
            g = (
                f'<g class="point p-{_e(verdict)}" data-at="{"" if at is None else at}" '
                f'data-trials="{_e(" ".join(idx))}"><title>{_e(title)}</title>{body}</g>'
            )
            if verdict == "fail" and anchor:
                g = f'<a href="#{_e(anchor)}-t{_e(idx[0])}">{g}</a>'
            out.append(g)
    out.append("</svg>")
    return "".join(out)


CRASHMAP_LEGEND = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="1180" height="22" role="img" '
    'aria-label="crash map legend">'
    + _mark("fail", 10, 11)
    + '<text x="22" y="15">FAIL (links to the trial)</text>'
    + _mark("pass", 200, 11)
    + '<text x="212" y="15">pass</text>'
    + _mark("not_exercised", 266, 11)
    + '<text x="278" y="15">not exercised (fault did not fire)</text>'
    + _mark("skipped", 500, 11)
    + '<text x="512" y="15">skipped</text>'
    + '<text x="580" y="15">a number: that many trials (power loss: crash states '
    "drawn / listed after the operation)</text></svg>"
)
