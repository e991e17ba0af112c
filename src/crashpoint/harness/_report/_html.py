"""The gate's HTML report: one self-contained page (inline CSS and SVG; no script, no assets).

:func:`render_html` takes the campaign summaries the pytest plugin gathers (``CampaignResult.
summary()`` plus ``scenario``, ``family`` and ``trial_results``, each ``TrialResult.to_json()``)
and returns the page: a row per campaign (trials, faults by kind, checks passed / failed /
skipped, duplicated and lost effects, median time to resume, verdict), a check-by-campaign
matrix, and for each failing trial a timeline drawn by :func:`timeline_svg` from the
``history.jsonl`` in the trial's folder, with its corruptions, the failing checks' messages and
the command that replays it. Every string from a summary or a history is escaped.
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
"""


def _e(value: object) -> str:
    """Escape for text and for attribute values (quotes included)."""
    return html.escape(str(value), quote=True)


# -- the timeline -------------------------------------------------------------------------------

_LEFT = 150  # lane labels
_COL = 26  # one column per event or attempt end
_LANE = 88
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


def timeline_svg(
    events: Sequence[Mapping[str, Any]],
    attempts: Sequence[str],
    corruptions: Sequence[Mapping[str, Any]] = (),
    plan: str = "",
) -> str:
    """An inline SVG of one trial: a lane per attempt, its events in history order as ticks
    (step started: bar; step completed: dot; effect: diamond, filled if the outside world
    applied it, hollow if it deduplicated the key, dashed if it was never applied), the kill
    point (a red cross), the attempt's end (exit code or signal), and each corruption (a purple
    triangle at the start of the attempt it was applied before). ``attempts`` are
    ``Attempt.describe()`` strings; ``plan`` is ``Plan.describe()`` (it says which attempt each
    corruption hit)."""
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
    width = _LEFT + _COL * max(1, len(keys)) + _RIGHT
    height = _TOP + _LANE * max(1, len(numbers)) + 8

    def cx(col: int) -> float:
        return _LEFT + col * _COL + _COL / 2

    def cy(n: int) -> float:
        return _TOP + lane[n] * _LANE + 66

    first_col: dict[int, int] = {}
    end_col: dict[int, int] = {}
    for col, (_key, what, n, _ev) in enumerate(keys):
        first_col.setdefault(n, col)
        if what == "end":
            end_col[n] = col
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline-svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{_e("timeline of the trial: " + plan)}">',
        f"<title>{_e('timeline: ' + plan)}</title>",
        f'<text x="{_LEFT}" y="14" class="small">history order, left to right '
        f"(each column is one probe event or the end of an attempt)"
        f"{' - truncated' if truncated else ''}</text>",
    ]
    for n in numbers:
        y0 = _TOP + lane[n] * _LANE
        y = cy(n)
        desc = descs.get(n, f"attempt {n}: (no record)")
        oc = _outcome(desc)
        out.append(
            f'<g class="attempt" data-attempt="{n}"><title>{_e(desc)}</title>'
            f'<rect class="lane" x="2" y="{y0 + 2}" width="{width - 4}" '
            f'height="{_LANE - 4}" rx="4"/>'
            f'<text x="8" y="{y - 4:.1f}">attempt {n}</text>'
            f'<text x="8" y="{y + 10:.1f}" class="small">{_e(oc.short)}</text></g>'
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


def _campaign_rows(summaries: Sequence[Mapping[str, Any]]) -> Iterable[str]:
    yield (
        '<table class="campaigns"><thead><tr><th>campaign</th><th>seed</th><th>trials</th>'
        "<th>exercised</th><th>faults by kind</th><th>checks passed</th><th>failed</th>"
        "<th>skipped</th>"
        "<th>duplicated effects</th><th>lost effects</th><th>dedup'd retries</th>"
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
        anchor = f' <a href="#c{k}">failures</a>' if s.get("failures") else ""
        yield (
            f'<tr class="{css}"><td>{_e(_campaign_name(s))}{anchor}</td>'
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


def _check_matrix(summaries: Sequence[Mapping[str, Any]]) -> Iterable[str]:
    names = list(_CHECKS)
    for s in summaries:
        for n in s.get("checks") or {}:
            if n not in names:
                names.append(str(n))
    yield (
        '<table class="checks"><thead><tr><th>campaign</th>'
        + "".join(f"<th>{_e(n)}</th>" for n in names)
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
        yield f"<tr><td>{_e(_campaign_name(s))}</td>{''.join(cells)}</tr>"
    yield "</tbody></table>"


def _history(trial: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The trial's probe history: inline under ``history``, else its folder's history.jsonl."""
    inline = trial.get("history")
    if isinstance(inline, list):
        return [e for e in inline if isinstance(e, dict)]
    folder = trial.get("folder")
    if not folder:
        return None
    path = os.path.join(str(folder), "history.jsonl")
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


def _trial_section(s: Mapping[str, Any], t: Mapping[str, Any], anchor: str, draw: bool) -> str:
    idx = t.get("index", "?")
    parts = [
        f'<div class="trial" id="{_e(anchor)}">'
        f"<h4>trial {_e(idx)}: {_e(t.get('family') or s.get('family') or '')}</h4>"
        f"<div><b>plan</b>: {_e(t.get('plan', ''))}</div>"
    ]
    attempts = [str(a) for a in t.get("attempts") or []]
    if attempts:
        parts.append(
            "<div><b>attempts</b><ul>"
            + "".join(f"<li>{_e(a)}</li>" for a in attempts)
            + "</ul></div>"
        )
    corruptions = [c for c in t.get("corruptions") or [] if isinstance(c, Mapping)]
    if draw:
        events = _history(t)
        if events is None:
            parts.append(
                '<p class="muted">no history.jsonl next to this trial (its folder '
                "was moved or not kept): no timeline</p>"
            )
        else:
            parts.append(
                '<div class="timeline">'
                + timeline_svg(events, attempts, corruptions, str(t.get("plan", "")))
                + "</div>"
            )
    if corruptions:
        parts.append(
            "<div><b>corruptions</b><ul>"
            + "".join(
                f"<li>{_e(c.get('how'))} {_e(c.get('path'))}"
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
            + "".join(f"<pre>{_e(m)}</pre>" for m in messages)
            + "</div>"
        )
    folder = t.get("folder")
    replay = t.get("replay") or (f"crashpoint replay {folder}" if folder else "")
    if replay:
        parts.append(f"<div><b>replay</b>: <code>{_e(replay)}</code></div>")
    if folder:
        parts.append(f'<div class="muted">evidence: <code>{_e(folder)}</code></div>')
    parts.append("</div>")
    return "".join(parts)


def render_html(
    summaries: list[dict[str, Any]],
    *,
    report_dir: str | None = None,
    origin_dir: str | None = None,
    sections: Sequence[str] = (),
) -> str:
    """The whole report as one HTML page (see the module docstring). ``sections``: HTML
    (already escaped) inserted after the verdict header, such as what changed since a
    baseline. ``report_dir`` (where the page goes) and ``origin_dir`` (where the gate wrote
    it) are accepted for a re-render."""
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
        *_campaign_rows(summaries),
    ]
    reasons = sorted({str(r) for s in summaries for r in s.get("skip_reasons") or []})
    if reasons:
        body.append(
            "<p><b>skipped</b>:</p><ul>" + "".join(f"<li>{_e(r)}</li>" for r in reasons) + "</ul>"
        )
    body += ["<h2>Checks by campaign</h2>", *_check_matrix(summaries)]
    failing = [(k, s) for k, s in enumerate(summaries) if _failing_trials(s)]
    if failing:
        body.append("<h2>Failing trials</h2>")
        body.append(f"<div>{_LEGEND}</div>")
    for k, s in failing:
        trials = _failing_trials(s)
        body.append(f'<h3 id="c{k}">{_e(_campaign_name(s))}: {len(trials)} failing trial(s)</h3>')
        if s.get("file"):
            body.append(f'<div class="muted">scenario file <code>{_e(s["file"])}</code></div>')
        for j, t in enumerate(trials):
            body.append(_trial_section(s, t, f"c{k}-t{t.get('index', j)}", draw=j < MAX_TIMELINES))
        if len(trials) > MAX_TIMELINES:
            body.append(
                f'<p class="muted">timelines drawn for the first {MAX_TIMELINES}; '
                "the others are listed without one (every history is in its trial "
                "folder)</p>"
            )
    title = f"crashpoint gate: {verdict}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<title>{_e(title)}</title><meta name="viewport" '
        f'content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>'
        f"<body>{''.join(body)}</body></html>\n"
    )
