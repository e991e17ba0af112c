"""The gate's HTML report: one self-contained page (inline CSS and SVG; no script, no assets).

:func:`render_html` takes the campaign summaries the pytest plugin gathers (``CampaignResult.
summary()`` plus ``scenario``, ``family`` and ``trial_results``, each ``TrialResult.to_json()``)
and returns the page: a row per campaign (trials, faults by kind, checks passed / failed /
skipped, duplicated and lost effects, median time to resume, verdict), a check-by-campaign
matrix, then a section per campaign: its crash map (:mod:`._crashmap`: where each trial's fault
landed along the golden run, coloured by verdict) and, for each failing trial, a timeline drawn
by :func:`timeline_svg` from the ``history.jsonl`` in the trial's folder (with a time axis),
its corruptions, the failing checks' messages, the tail of the failing attempt's stderr and the
command that replays it. Every string from a summary or a history is escaped.

Evidence that travels: given ``report_dir`` (the folder the page is written to), every path
under ``origin_dir`` (the folder the gate wrote its evidence to; ``report_dir`` unless the page
is drawn again from a downloaded gate.json) is shown and linked relative to ``report_dir``, and
histories are read from there; a path outside it is shown by its base name only. The page
holds no absolute path of the machine that ran the gate (the scenario file is shown relative to
the report folder's parent, the gate's working folder).
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crashpoint.harness._report._crashmap import CRASHMAP_LEGEND, crash_map_svg

__all__ = ["render_html", "timeline_svg"]

#: At most this many failing trials get a timeline per campaign (the rest are listed).
MAX_TIMELINES = 10
#: At most this many columns (events and attempt ends) are drawn per timeline.
MAX_COLUMNS = 400

_CHECKS = (
    "completes",
    "same_output",
    "exactly_once",
    "resumes_from_last_completed",
    "single_writer",
    "no_secret_leak",
    "within_disk_budget",
    "no_orphans",
    "corruption_detected",
    "no_repeated_llm_calls",
)

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d232a}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}
h3{font-size:15px;margin:18px 0 6px}
.verdict-pass{color:#1a7f37}.verdict-fail{color:#cf222e}.verdict-skip{color:#9a6700}
table{border-collapse:collapse;margin:6px 0 12px}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td{background:#fff1f0}tr.skip td{background:#fff8e6}
td.c-pass{background:#e6f6ea}td.c-fail{background:#ffd7d5;font-weight:600}
td.c-skip{color:#6e7781}td.c-none{color:#afb8c1}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:6px 8px;white-space:pre-wrap;
 word-break:break-word;margin:4px 0}
.trial{border:1px solid #d0d7de;border-left:4px solid #cf222e;padding:8px 12px;margin:10px 0}
.muted{color:#57606a}.timeline{overflow-x:auto;margin:6px 0}
.scroll{overflow-x:auto;max-width:100%;margin:6px 0}
code{overflow-wrap:anywhere}td.name{min-width:14em;overflow-wrap:anywhere}
table.checks th{font-size:12px;min-width:5em}
pre.stderr{max-height:22em;overflow:auto;background:#fffdf5}
h4{font-size:14px;margin:12px 0 4px}
ul{margin:4px 0 4px 18px;padding:0}
svg text{font:10px ui-monospace,SFMono-Regular,Menlo,monospace;fill:#1d232a}
svg .lane{fill:#f6f8fa;stroke:#d0d7de}svg .axis{stroke:#8c959f;stroke-width:1.5}
svg .ss{stroke:#0969da;stroke-width:2}svg .sc{fill:#0969da}
svg .ea{fill:#1a7f37}svg .ed{fill:#fff;stroke:#1a7f37;stroke-width:1.5}
svg .en{fill:#fff;stroke:#8c959f;stroke-width:1.5;stroke-dasharray:2 2}
svg .ev{fill:#8250df}svg .kill{stroke:#cf222e;stroke-width:3}
svg .end-ok{fill:#1a7f37}svg .end-exit{fill:#bf8700}svg .end-sig{fill:#cf222e}
svg .corrupt{fill:#8250df}svg text.small{font-size:9px;fill:#57606a}
svg text.killtext{fill:#cf222e;font-weight:600}
svg text.corrupttext{fill:#8250df;font-weight:600}
svg .tick{stroke:#8c959f}svg text.time{font-size:9px;fill:#57606a}
svg .fo{fill:#d0d7de;stroke:#57606a}
svg .m-fail{fill:#cf222e}svg .m-x{stroke:#fff;stroke-width:2}
svg .m-pass{fill:#1a7f37}svg .m-skip{fill:#fff;stroke:#9a6700;stroke-width:2}
svg .m-none{fill:#fff;stroke:#6e7781;stroke-width:1.5;stroke-dasharray:2 2}
svg text.count{font-size:10px;font-weight:600}
svg text.steplabel{font-size:10px;font-weight:600;fill:#0b4a8f}
svg a .point{cursor:pointer}
"""


def _e(value: object) -> str:
    """Escape for text and for attribute values (quotes included)."""
    return html.escape(str(value), quote=True)


# -- the timeline -------------------------------------------------------------------------------

_LEFT = 150  # lane labels
_COL = 26  # one column per event or attempt end
_LANE = 112
_TOP = 26
_RIGHT = 190  # room for the last attempt's outcome text
_ATTEMPT = re.compile(r"^attempt (\d+):\s*(.*)$", re.DOTALL)
_CORRUPT_AT = re.compile(r"corrupt\(attempt (\d+)")


@dataclass(frozen=True)
class _Outcome:
    short: str
    css: str
    full: str


def _outcome(description: str) -> _Outcome:
    """``attempt 2: killed by signal 9 (…)`` -> a short label and a colour class."""
    m = _ATTEMPT.match(description)
    rest = m.group(2) if m else description
    sig = re.match(r"killed by signal (\d+)", rest)
    if sig:
        try:
            name = signal.Signals(int(sig.group(1))).name
        except ValueError:
            name = f"signal {sig.group(1)}"
        return _Outcome(name, "end-sig", description)
    if rest.startswith("hung"):
        return _Outcome("hung: killed", "end-sig", description)
    if "power loss" in rest or "power cut" in rest:  # not run: its crash state was made
        return _Outcome("power cut", "end-sig", description)
    code = re.match(r"exit (-?\d+)", rest)
    if code:
        return _Outcome(
            f"exit {code.group(1)}", "end-ok" if code.group(1) == "0" else "end-exit", description
        )
    return _Outcome(rest[:24] or "?", "end-exit", description)


def _attempt_map(attempts: Sequence[str]) -> dict[int, str]:
    out: dict[int, str] = {}
    for k, desc in enumerate(attempts, 1):
        m = _ATTEMPT.match(str(desc))
        out[int(m.group(1)) if m else k] = str(desc)
    return out


def _event_label(ev: Mapping[str, Any]) -> str:
    return str(ev.get("step") or ev.get("kind") or ev.get("name") or "")


def _event_title(ev: Mapping[str, Any]) -> str:
    op = str(ev.get("op", "?"))
    parts = [f"event #{ev.get('i', '?')} attempt {ev.get('attempt', '?')}: {op}"]
    if ev.get("step") is not None:
        parts.append(f"step {ev.get('step')}")
    if op == "effect":
        parts.append(f"{ev.get('kind')} key={ev.get('key')}")
        applied = ev.get("applied")
        parts.append(
            f"failed by the service ({ev.get('failed')}): not applied"
            if ev.get("failed")
            else "applied by the outside world"
            if applied is True
            else "deduplicated (same key seen before)"
            if applied is False
            else "not applied"
        )
        if ev.get("payload") is not None:
            parts.append(
                "payload " + json.dumps(ev.get("payload"), sort_keys=True, default=str)[:200]
            )
    if ev.get("killed"):
        parts.append(f"KILLED here ({ev.get('killed')})")
    return "; ".join(parts)


_TIMED = "; times: since the attempt's first event"


def _ms(seconds: float) -> str:
    """``+12 ms``, ``+1.4 s``."""
    if seconds < 1:
        return f"+{seconds * 1000:.0f} ms" if seconds >= 0.0005 else "+0 ms"
    return f"+{seconds:.1f} s" if seconds < 100 else f"+{seconds:.0f} s"


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def timeline_svg(
    events: Sequence[Mapping[str, Any]],
    attempts: Sequence[str],
    corruptions: Sequence[Mapping[str, Any]] = (),
    plan: str = "",
    durations: Sequence[float] = (),
) -> str:
    """An inline SVG of one trial: a lane per attempt, its events in history order as ticks
    (step started: bar; step completed: dot; effect: diamond, filled if the outside world
    applied it, hollow if it deduplicated the key, dashed if it was never applied), the kill
    point (a red cross), the attempt's end (exit code or signal), and each corruption (a purple
    triangle at the start of the attempt it was applied before). ``attempts`` are
    ``Attempt.describe()`` strings; ``plan`` is ``Plan.describe()`` (it says which attempt each
    corruption hit). Under each lane a time axis: when each event came, in ms (or s) after
    the attempt's first event (from the events' monotonic ``t``); ``durations``: each
    attempt's wall-clock time, in attempt order, shown beside its outcome."""
    descs = _attempt_map(attempts)
    evs = sorted(
        (e for e in events if isinstance(e, Mapping)),
        key=lambda e: (int(e.get("i", 0)), int(e.get("attempt", 0))),
    )
    numbers = sorted({*descs, *(int(e.get("attempt", 1)) for e in evs)})
    # place every event and every attempt end on one left-to-right order
    keys: list[tuple[float, str, int, Mapping[str, Any] | None]] = [
        (float(e.get("i", k)), "ev", int(e.get("attempt", 1)), e) for k, e in enumerate(evs)
    ]
    last_key = -1.0
    for n in numbers:
        mine = [float(e.get("i", 0)) for e in evs if int(e.get("attempt", 1)) == n]
        end = (max(mine) + 0.5) if mine else last_key + 0.01
        keys.append((end, "end", n, None))
        last_key = max(last_key, end)
    keys.sort(key=lambda k: (k[0], k[1] == "end"))
    truncated = len(keys) > MAX_COLUMNS
    keys = keys[:MAX_COLUMNS]
    lane = {n: k for k, n in enumerate(numbers)}
    width = max(_LEFT + _COL * max(1, len(keys)) + _RIGHT, 760)
    height = _TOP + _LANE * max(1, len(numbers)) + 8

    def cx(col: int) -> float:
        return _LEFT + col * _COL + _COL / 2

    def cy(n: int) -> float:
        return _TOP + lane[n] * _LANE + 66

    first_col: dict[int, int] = {}
    end_col: dict[int, int] = {}
    t0: dict[int, float] = {}
    for col, (_key, what, n, _ev) in enumerate(keys):
        first_col.setdefault(n, col)
        if what == "end":
            end_col[n] = col
        elif _ev is not None and isinstance(_ev.get("t"), (int, float)):
            t0.setdefault(n, float(_ev["t"]))
    timed = bool(t0)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline-svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{_e("timeline of the trial: " + plan)}">',
        f"<title>{_e('timeline: ' + plan)}</title>",
        f'<text x="{_LEFT}" y="14" class="small">one column per event or attempt end, '
        f"in history order{_TIMED if timed else ''}"
        f"{' - truncated' if truncated else ''}</text>",
    ]
    for n in numbers:
        y0 = _TOP + lane[n] * _LANE
        y = cy(n)
        desc = descs.get(n, f"attempt {n}: (no record)")
        oc = _outcome(desc)
        took = ""
        if (
            0 < n <= len(durations)
            and isinstance(durations[n - 1], (int, float))
            and (durations[n - 1] > 0)
        ):
            took = _duration(float(durations[n - 1]))
            desc += f" (ran {took})"
        out.append(
            f'<g class="attempt" data-attempt="{n}"><title>{_e(desc)}</title>'
            f'<rect class="lane" x="2" y="{y0 + 2}" width="{width - 4}" '
            f'height="{_LANE - 4}" rx="4"/>'
            f'<text x="8" y="{y - 4:.1f}">attempt {n}</text>'
            f'<text x="8" y="{y + 10:.1f}" class="small">{_e(oc.short)}</text>'
            + (f'<text x="8" y="{y + 24:.1f}" class="small">ran {_e(took)}</text>' if took else "")
            + "</g>"
        )
        x1 = cx(first_col.get(n, 0)) - _COL / 2
        x2 = cx(end_col[n]) if n in end_col else x1
        out.append(f'<line class="axis" x1="{x1:.1f}" y1="{y:.1f}" x2="{x2:.1f}" y2="{y:.1f}"/>')
    for col, (_key, what, n, ev) in enumerate(keys):
        x, y = cx(col), cy(n)
        if what == "end" or ev is None:
            oc = _outcome(descs.get(n, f"attempt {n}: (no record)"))
            out.append(
                f'<g class="end {oc.css}" data-attempt="{n}"><title>{_e(oc.full)}'
                f'</title><rect class="{oc.css}" x="{x - 3:.1f}" y="{y - 14:.1f}" '
                f'width="6" height="28"/><text x="{x + 7:.1f}" y="{y + 4:.1f}">'
                f"{_e(oc.short)}</text></g>"
            )
            continue
        op = str(ev.get("op", ""))
        title = f"<title>{_e(_event_title(ev))}</title>"
        if op == "step_started":
            shape = (
                f'<line class="ss" x1="{x:.1f}" y1="{y - 9:.1f}" x2="{x:.1f}" y2="{y + 9:.1f}"/>'
            )
            kind = "step_started"
        elif op == "step_completed":
            shape = f'<circle class="sc" cx="{x:.1f}" cy="{y:.1f}" r="5"/>'
            kind = "step_completed"
        elif op == "effect":
            applied = ev.get("applied")
            css = "ea" if applied is True else "ed" if applied is False else "en"
            kind = {"ea": "effect-applied", "ed": "effect-dedup", "en": "effect-not-applied"}[css]
            shape = (
                f'<path class="{css}" d="M{x:.1f},{y - 7:.1f} L{x + 7:.1f},{y:.1f} '
                f'L{x:.1f},{y + 7:.1f} L{x - 7:.1f},{y:.1f} Z"/>'
            )
        else:
            shape = f'<rect class="ev" x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8"/>'
            kind = "event"
        label = _event_label(ev)
        label = label if len(label) <= 12 else label[:11] + "\u2026"
        text = (
            ""
            if not label or op == "step_completed"
            else (
                f'<text class="small" transform="translate({x + 2:.1f},{y - 11:.1f}) '
                f'rotate(-45)">{_e(label)}</text>'
            )
        )
        out.append(f'<g class="{kind}" data-i="{_e(ev.get("i", ""))}">{title}{shape}{text}</g>')
        if ev.get("killed"):
            phase = str(ev.get("killed"))
            out.append(
                f'<g class="kill-point" data-phase="{_e(phase)}"><title>'
                f"{_e('SIGKILL at this event (' + phase + ')')}</title>"
                f'<line class="kill" x1="{x - 7:.1f}" y1="{y - 7 + 16:.1f}" '
                f'x2="{x + 7:.1f}" y2="{y + 7 + 16:.1f}"/>'
                f'<line class="kill" x1="{x + 7:.1f}" y1="{y - 7 + 16:.1f}" '
                f'x2="{x - 7:.1f}" y2="{y + 7 + 16:.1f}"/>'
                f'<text class="killtext" x="{x + 9:.1f}" y="{y + 20:.1f}">'
                f"kill ({_e(phase)})</text></g>"
            )
    out += _time_ticks(keys, t0, cx, cy)
    hit = [int(m) for m in _CORRUPT_AT.findall(plan)]
    for k, c in enumerate(corruptions):
        n = hit[k] if k < len(hit) else (numbers[-1] if numbers else 1)
        if n not in lane:
            continue
        x = cx(first_col.get(n, 0)) - _COL / 2 + 2
        y = cy(n)
        what = f"corruption before attempt {n}: {c.get('how')} {c.get('path')}"
        if c.get("detail"):
            what += f" ({c.get('detail')})"
        out.append(
            f'<g class="corruption"><title>{_e(what)}</title>'
            f'<path class="corrupt" d="M{x:.1f},{y - 22:.1f} L{x + 10:.1f},'
            f'{y - 22:.1f} L{x + 5:.1f},{y - 13:.1f} Z"/>'
            f'<text class="corrupttext" x="{x + 12:.1f}" y="{y - 14:.1f}">'
            f"{_e(c.get('how'))}</text></g>"
        )
    out.append("</svg>")
    return "".join(out)


def _time_ticks(
    keys: Sequence[tuple[float, str, int, Mapping[str, Any] | None]],
    t0: Mapping[int, float],
    cx: Any,
    cy: Any,
) -> list[str]:
    """Each lane's time axis: a tick under every event, labelled where there is room (the
    attempt's first and last event, and every fourth column or so)."""
    out: list[str] = []
    last_label: dict[int, int] = {}
    last_col: dict[int, int] = {}
    for col, (_key, what, n, ev) in enumerate(keys):
        if what == "ev" and ev is not None and isinstance(ev.get("t"), (int, float)):
            last_col[n] = col
    for col, (_key, what, n, ev) in enumerate(keys):
        if what != "ev" or ev is None or n not in t0 or not isinstance(ev.get("t"), (int, float)):
            continue
        x, y = cx(col), cy(n) + 34
        dt = max(0.0, float(ev["t"]) - t0[n])
        out.append(
            f'<line class="tick" x1="{x:.1f}" y1="{y - 6:.1f}" x2="{x:.1f}" y2="{y - 2:.1f}"/>'
        )
        prev = last_label.get(n)
        if prev is None or (col == last_col.get(n) and col - prev >= 2) or col - prev >= 4:
            last_label[n] = col
            out.append(
                f'<text class="time" x="{x:.1f}" y="{y + 7:.1f}" '
                f'text-anchor="middle">{_e(_ms(dt))}</text>'
            )
    return out


_LEGEND = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="900" height="26" role="img" '
    'aria-label="legend">'
    '<line class="ss" x1="8" y1="5" x2="8" y2="21"/><text x="16" y="17">step started</text>'
    '<circle class="sc" cx="104" cy="13" r="5"/><text x="114" y="17">step completed</text>'
    '<path class="ea" d="M214,6 L221,13 L214,20 L207,13 Z"/>'
    '<text x="226" y="17">effect applied</text>'
    '<path class="ed" d="M324,6 L331,13 L324,20 L317,13 Z"/>'
    '<text x="336" y="17">effect dedup\'d</text>'
    '<path class="en" d="M434,6 L441,13 L434,20 L427,13 Z"/>'
    '<text x="446" y="17">not applied</text>'
    '<line class="kill" x1="526" y1="7" x2="538" y2="19"/>'
    '<line class="kill" x1="538" y1="7" x2="526" y2="19"/><text x="544" y="17">kill</text>'
    '<path class="corrupt" d="M582,8 L592,8 L587,17 Z"/><text x="598" y="17">corruption</text>'
    '<rect class="end-sig" x="680" y="3" width="6" height="20"/>'
    '<text x="692" y="17">attempt ends (exit or signal)</text></svg>'
)


# -- the page -----------------------------------------------------------------------------------


def _campaign_name(s: Mapping[str, Any]) -> str:
    scenario = s.get("scenario") or s.get("name") or "campaign"
    family = s.get("family")
    return f"{scenario} [{family}]" if family else str(scenario)


def _check_totals(s: Mapping[str, Any]) -> tuple[int, int, int]:
    checks = s.get("checks") or {}
    p = sum(int(c.get("passed", 0)) for c in checks.values())
    f = sum(int(c.get("failed", 0)) for c in checks.values())
    k = sum(int(c.get("skipped", 0)) for c in checks.values())
    return p, f, k


def _verdict(s: Mapping[str, Any]) -> tuple[str, str]:
    if not s.get("ok", False):
        if not s.get("failed") and s.get("unexercised"):
            return "FAIL (not exercised)", "fail"
        return f"FAIL ({s.get('failed', '?')})", "fail"
    if s.get("skipped") and not s.get("ran"):
        return "SKIP", "skip"
    return "PASS", "pass"


class _Paths:
    """Evidence paths as the page shows and links them (see the module docstring)."""

    def __init__(
        self, report_dir: str | None, origin_dir: str | None, evidence_dir: str | None = None
    ) -> None:
        self.report = os.path.abspath(report_dir) if report_dir else None
        origin = origin_dir or report_dir
        self.origin = os.path.abspath(origin) if origin else None
        # where the evidence is now (a downloaded copy of the origin): the report folder
        # unless the page is written somewhere else
        self.evidence = os.path.abspath(evidence_dir) if evidence_dir else self.report
        # the gate's working folder: where a scenario path is shown from
        self.base = os.path.dirname(self.origin) if self.origin else None

    def relative(self, path: str) -> str | None:
        """``path`` relative to the report folder (POSIX separators), or None when it lies
        outside the folder the gate wrote its evidence to."""
        if not self.origin or not path:
            return None
        full = os.path.normpath(os.path.join(self.origin, path))
        try:
            rel = os.path.relpath(full, self.origin)
        except ValueError:  # another drive
            return None
        if rel == os.curdir:
            return "."
        if rel.startswith(os.pardir):
            return None
        return rel.replace(os.sep, "/")

    def local(self, path: str) -> str:
        """Where to read ``path``'s evidence now: under the report folder if it came from
        the origin, else where it was (an absolute path of this machine is never shown)."""
        rel = self.relative(path)
        if rel is not None and self.evidence:
            return os.path.join(self.evidence, rel)
        return path

    def show(self, path: str, *, folder: bool = False) -> str:
        """The HTML for an evidence path: a relative link, or a base name with a note."""
        if self.report is None:  # no report folder given: as recorded
            return f"<code>{_e(path)}</code>"
        rel = self.relative(path)
        if rel is None:
            return (
                f"<code>{_e(os.path.basename(path.rstrip('/')) or path)}</code> "
                '<span class="muted">(outside the report folder: not linked)</span>'
            )
        href = rel
        if self.evidence and self.evidence != self.report:  # the page is not beside it
            href = os.path.relpath(os.path.join(self.evidence, rel), self.report)
            href = href.replace(os.sep, "/")
        href += "/" if folder and not href.endswith("/") else ""
        return f'<a href="{_e(href)}"><code>{_e(rel)}</code></a>'

    def text(self, value: object) -> str:
        """``value`` as text with the report and origin folders' absolute paths made
        relative (a message, a replay command, a stderr tail quote them), and then the gate's
        working folder's (a message cut short may end inside the report folder's name)."""
        out = str(value)
        if self.report is None:
            return out
        for root in sorted(
            {r for r in (self.origin, self.report, self.evidence) if r}, key=len, reverse=True
        ):
            out = out.replace(root + os.sep, "").replace(root, ".")
        base = self.base or ""
        if base.count(os.sep) >= 2:  # never "/" or "/work": only a folder of some depth
            out = out.replace(base + os.sep, "")
        return out

    def scenario(self, path: str) -> str:
        """A scenario file: relative to the gate's working folder, else its base name."""
        if self.report is None:
            return f"<code>{_e(path)}</code>"
        if self.base and os.path.isabs(path):
            try:
                rel = os.path.relpath(path, self.base)
            except ValueError:
                rel = os.pardir
            if not rel.startswith(os.pardir):
                return f"<code>{_e(rel.replace(os.sep, '/'))}</code>"
            return (
                f"<code>{_e(os.path.basename(path))}</code> "
                '<span class="muted">(outside the gate\'s working folder)</span>'
            )
        return f"<code>{_e(path)}</code>"


def _scroll(inner: str) -> str:
    """A wide block that scrolls inside itself rather than widening the page."""
    return f'<div class="scroll">{inner}</div>'


def _campaign_rows(summaries: Sequence[Mapping[str, Any]]) -> Iterable[str]:
    yield (
        '<table class="campaigns"><thead><tr><th>campaign</th><th>seed</th><th>trials</th>'
        "<th>exer&shy;cised</th><th>faults by kind</th><th>checks passed</th><th>failed</th>"
        "<th>skipped</th>"
        "<th>dupli&shy;cated effects</th><th>lost effects</th><th>dedup'd retries</th>"
        "<th>median resume</th><th>verdict</th></tr></thead><tbody>"
    )
    for k, s in enumerate(summaries):
        p, f, sk = _check_totals(s)
        faults = ", ".join(f"{kind}: {n}" for kind, n in (s.get("faults_by_kind") or {}).items())
        trials = str(s.get("ran", s.get("trials", 0)))
        if s.get("skipped"):
            trials += f" (+{s.get('skipped')} skipped)"
        resume = s.get("median_resume_ms")
        resume_text = f"{resume:.0f} ms" if isinstance(resume, (int, float)) else "-"
        verdict, css = _verdict(s)
        planned = sum(int(d.get("planned", 0)) for d in (s.get("families") or {}).values())
        exercised = f"{s.get('exercised', 0)}/{planned}" if "exercised" in s else "-"
        anchor = f' <a href="#c{k}">{"failures" if s.get("failures") else "details"}</a>'
        yield (
            f'<tr class="{css}"><td class="name">{_e(_campaign_name(s))}{anchor}</td>'
            f'<td class="num">{_e(s.get("seed", ""))}</td><td class="num">{_e(trials)}</td>'
            f'<td class="num">{_e(exercised)}</td>'
            f'<td>{_e(faults or "-")}</td><td class="num">{p}</td>'
            f'<td class="num">{f}</td><td class="num">{sk}</td>'
            f'<td class="num">{_e(s.get("duplicate_effects", 0))}</td>'
            f'<td class="num">{_e(s.get("lost_effects", 0))}</td>'
            f'<td class="num">{_e(s.get("dedup_hits", 0))}</td>'
            f'<td class="num">{_e(resume_text)}</td>'
            f'<td class="verdict-{css}"><b>{_e(verdict)}</b></td></tr>'
        )
    yield "</tbody></table>"


def _header(name: str) -> str:
    """A check's column header: breakable at its underscores (narrow columns, whole names)."""
    return "_<wbr>".join(_e(part) for part in name.split("_"))


def _check_matrix(summaries: Sequence[Mapping[str, Any]]) -> Iterable[str]:
    names = list(_CHECKS)
    for s in summaries:
        for n in s.get("checks") or {}:
            if n not in names:
                names.append(str(n))
    yield (
        '<table class="checks"><thead><tr><th>campaign</th>'
        + "".join(f'<th title="{_e(n)}">{_header(n)}</th>' for n in names)
        + "</tr></thead><tbody>"
    )
    for s in summaries:
        cells = []
        checks = s.get("checks") or {}
        for n in names:
            c = checks.get(n)
            if not c:
                cells.append('<td class="c-none">-</td>')
                continue
            p, f, k = int(c.get("passed", 0)), int(c.get("failed", 0)), int(c.get("skipped", 0))
            css = "c-fail" if f else "c-pass" if p else "c-skip"
            text = f"{p} ok" + (f", {f} FAIL" if f else "") + (f", {k} skip" if k else "")
            if c.get("warned"):  # passed with a warning: counted among the ok
                text += f" ({int(c['warned'])} warn)"
            cells.append(f'<td class="{css}">{_e(text)}</td>')
        yield f'<tr><td class="name">{_e(_campaign_name(s))}</td>{"".join(cells)}</tr>'
    yield "</tbody></table>"


def _history(trial: Mapping[str, Any], paths: _Paths) -> list[dict[str, Any]] | None:
    """The trial's probe history: inline under ``history``, else its folder's history.jsonl
    (read under the report folder when the folder came from the gate's)."""
    inline = trial.get("history")
    if isinstance(inline, list):
        return [e for e in inline if isinstance(e, dict)]
    folder = trial.get("folder")
    if not folder:
        return None
    path = os.path.join(paths.local(str(folder)), "history.jsonl")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    out = []
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out


def _failing_trials(s: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The failing trials of a campaign: its ``failures`` joined with ``trial_results``."""
    by_index = {t.get("index"): t for t in s.get("trial_results") or [] if isinstance(t, dict)}
    out: list[dict[str, Any]] = []
    seen = set()
    for f in s.get("failures") or []:
        t = dict(by_index.get(f.get("index"), {}))
        t.update({k: v for k, v in f.items() if v not in (None, "")})
        out.append(t)
        seen.add(f.get("index"))
    for idx, t in by_index.items():
        if idx not in seen and not t.get("ok", True) and not t.get("skipped"):
            out.append(dict(t))
    return out


def _trial_section(
    s: Mapping[str, Any], t: Mapping[str, Any], anchor: str, draw: bool, paths: _Paths
) -> str:
    idx = t.get("index", "?")
    tx = paths.text
    parts = [
        f'<div class="trial" id="{_e(anchor)}">'
        f"<h4>trial {_e(idx)}: {_e(t.get('family') or s.get('family') or '')}</h4>"
        f"<div><b>plan</b>: {_e(tx(t.get('plan', '')))}</div>"
    ]
    if t.get("landed"):
        parts.append(f"<div><b>landed</b>: {_e(tx(t['landed']))}</div>")
    attempts = [str(a) for a in t.get("attempts") or []]
    durations = [float(d) for d in t.get("attempt_durations") or [] if isinstance(d, (int, float))]
    if attempts:
        parts.append(
            "<div><b>attempts</b><ul>"
            + "".join(
                f"<li>{_e(tx(a))}"
                + (
                    f' <span class="muted">(ran {_duration(durations[j])})</span>'
                    if j < len(durations) and durations[j] > 0
                    else ""
                )
                + "</li>"
                for j, a in enumerate(attempts)
            )
            + "</ul></div>"
        )
    corruptions = [c for c in t.get("corruptions") or [] if isinstance(c, Mapping)]
    if draw:
        events = _history(t, paths)
        if events is None:
            parts.append(
                '<p class="muted">no history.jsonl next to this trial (its folder '
                "was moved or not kept): no timeline</p>"
            )
        else:
            parts.append(
                '<div class="timeline">'
                + timeline_svg(events, attempts, corruptions, str(t.get("plan", "")), durations)
                + "</div>"
            )
    if corruptions:
        parts.append(
            "<div><b>corruptions</b><ul>"
            + "".join(
                f"<li>{_e(c.get('how'))} {_e(tx(c.get('path')))}"
                f"{_e(' at byte ' + str(c.get('offset'))) if c.get('offset') else ''}"
                f"{_e(' (' + str(c.get('detail')) + ')') if c.get('detail') else ''}</li>"
                for c in corruptions
            )
            + "</ul></div>"
        )
    if t.get("rerun_steps"):
        parts.append(f"<div><b>steps re-run</b>: {_e(', '.join(map(str, t['rerun_steps'])))}</div>")
    checks = t.get("checks")
    messages = (
        [str(c) for c in checks]
        if isinstance(checks, list)
        else [str(c) for c in t.get("failures") or []]
    )
    if messages:
        parts.append(
            "<div><b>failing checks</b>"
            + "".join(f"<pre>{_e(tx(m))}</pre>" for m in messages)
            + "</div>"
        )
    tail = t.get("stderr_tail")
    if isinstance(tail, str) and tail.strip():
        cut = " (its last lines)" if t.get("stderr_cut") else ""
        parts.append(
            f"<div><b>stderr of attempt {_e(t.get('stderr_attempt', '?'))}</b>{cut}"
            f'<pre class="stderr">{_e(tx(tail))}</pre></div>'
        )
    folder = str(t.get("folder") or "")
    rel = paths.relative(folder) if folder and paths.report else None
    if rel is not None:
        replay = f"crashpoint replay {rel}"
        parts.append(
            f"<div><b>replay</b>: <code>{_e(replay)}</code> "
            '<span class="muted">(run from the report folder)</span></div>'
        )
    else:
        replay = str(t.get("replay") or (f"crashpoint replay {folder}" if folder else ""))
        if replay and paths.report is not None and folder:
            replay = "crashpoint replay " + os.path.basename(folder.rstrip("/"))
            parts.append(
                f"<div><b>replay</b>: <code>{_e(replay)}</code> "
                '<span class="muted">(from the folder that holds the trial\'s evidence)'
                "</span></div>"
            )
        elif replay:
            parts.append(f"<div><b>replay</b>: <code>{_e(tx(replay))}</code></div>")
    if folder:
        parts.append(f'<div class="muted">evidence: {paths.show(folder, folder=True)}</div>')
    parts.append("</div>")
    return "".join(parts)


def _relative_strings(value: Any, paths: _Paths) -> Any:
    """``value`` (JSON) with every string's report and origin folders made relative (a crash
    map's titles quote where a fault landed: a failpoint's file, a disk's mount)."""
    if isinstance(value, str):
        return paths.text(value)
    if isinstance(value, Mapping):
        return {k: _relative_strings(v, paths) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative_strings(v, paths) for v in value]
    return value


def _campaign_section(k: int, s: Mapping[str, Any], paths: _Paths) -> list[str]:
    """A campaign's section: its verdict, its crash map, then its failing trials."""
    verdict, css = _verdict(s)
    out = [
        f'<h3 id="c{k}">{_e(_campaign_name(s))}: '
        f'<span class="verdict-{css}">{_e(verdict)}</span></h3>'
    ]
    facts = []
    if s.get("file"):
        facts.append(f"scenario file {paths.scenario(str(s['file']))}")
    golden = s.get("golden") or {}
    if golden:
        facts.append(
            f"golden run: {len(golden.get('steps') or [])} step(s), "
            f"{_e(golden.get('events', 0))} event(s) in {_e(golden.get('duration_s', '?'))} s"
        )
    if facts:
        out.append(f'<div class="muted">{"; ".join(facts)}</div>')
    for msg in s.get("unexercised") or []:
        out.append(f'<p class="verdict-fail">{_e(paths.text(msg))}</p>')
    for note in s.get("notes") or []:  # how it was planned and run: replayed kills, caps ...
        out.append(f'<p class="muted">note: {_e(paths.text(str(note)))}</p>')
    cmap = s.get("crash_map")
    if isinstance(cmap, Mapping) and (cmap.get("axis") or cmap.get("points")):
        out.append(_scroll(crash_map_svg(_relative_strings(cmap, paths), f"c{k}")))
        if cmap.get("note"):
            out.append(f'<p class="muted">crash map: {_e(cmap["note"])}</p>')
    elif s.get("ran"):
        out.append('<p class="muted">no crash map in this summary</p>')
    trials = _failing_trials(s)
    if trials:
        out.append(f"<h4>{len(trials)} failing trial(s)</h4>")
    for j, t in enumerate(trials):
        out.append(_trial_section(s, t, f"c{k}-t{t.get('index', j)}", j < MAX_TIMELINES, paths))
    if len(trials) > MAX_TIMELINES:
        out.append(
            f'<p class="muted">timelines drawn for the first {MAX_TIMELINES}; '
            "the others are listed without one (every history is in its trial "
            "folder)</p>"
        )
    return out


def render_html(
    summaries: list[dict[str, Any]],
    *,
    report_dir: str | None = None,
    origin_dir: str | None = None,
    sections: Sequence[str] = (),
    evidence_dir: str | None = None,
) -> str:
    """The whole report as one HTML page (see the module docstring).

    ``report_dir``: the folder the page is written to (evidence paths are shown and linked
    relative to it; without it they are shown as recorded). ``origin_dir``: the folder the
    gate wrote its evidence to (``report_dir`` unless the page is drawn again elsewhere).
    ``sections``: HTML blocks, already escaped, put right after the verdict header.
    ``evidence_dir``: where that evidence is now, when the page is written elsewhere (links go
    from ``report_dir`` to it; default ``report_dir``)."""
    paths = _Paths(report_dir, origin_dir, evidence_dir)
    ok = all(bool(s.get("ok", False)) for s in summaries)
    ran = sum(int(s.get("ran", s.get("trials", 0)) or 0) for s in summaries)
    failed = sum(int(s.get("failed", 0) or 0) for s in summaries)
    skipped = sum(int(s.get("skipped", 0) or 0) for s in summaries)
    seeds = sorted({str(s.get("seed")) for s in summaries if s.get("seed") is not None})
    verdict, css = ("PASS", "pass") if ok else ("FAIL", "fail")
    if not summaries:
        verdict, css = "NO CAMPAIGNS", "skip"
    body = [
        f'<h1>crashpoint gate: <span class="verdict-{css}">{verdict}</span></h1>',
        f'<p class="muted">{len(summaries)} campaign(s), {ran} trial(s) run, {failed} '
        f"failing, {skipped} skipped; seed(s) {_e(', '.join(seeds) or '-')}</p>",
        *sections,
        "<h2>Campaigns</h2>",
        _scroll("".join(_campaign_rows(summaries))),
    ]
    reasons = sorted({str(r) for s in summaries for r in s.get("skip_reasons") or []})
    if reasons:
        body.append(
            "<p><b>skipped</b>:</p><ul>"
            + "".join(f"<li>{_e(paths.text(r))}</li>" for r in reasons)
            + "</ul>"
        )
    body += ["<h2>Checks by campaign</h2>", _scroll("".join(_check_matrix(summaries)))]
    if summaries:
        body.append("<h2>Each campaign</h2>")
        body.append(
            '<p class="muted">The crash map: the golden run along one axis; above each point '
            "where a trial's fault landed, its trials by verdict (hover a mark for them; a "
            "failing mark links to its trial); a mark just right of an effect: killed after "
            f"the effect was applied, before its reply.</p><div>{CRASHMAP_LEGEND}</div>"
        )
        if any(_failing_trials(s) for s in summaries):
            body.append(
                f'<p class="muted">The timelines of failing trials:</p><div>{_LEGEND}</div>'
            )
    for k, s in enumerate(summaries):
        body += _campaign_section(k, s, paths)
    title = f"crashpoint gate: {verdict}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<title>{_e(title)}</title><meta name="viewport" '
        f'content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>'
        f"<body>{''.join(body)}</body></html>\n"
    )
