"""What changed since a previous gate: a gate.json read back, and two gates compared.

:func:`load_gate` reads a ``gate.json`` (or the report folder holding one) and refuses, with
one line naming the path, what is not one (:class:`crashpoint.errors.GateFileError`).
:func:`compare_gates` compares the campaigns of a new gate with a previous one's, campaign by
campaign (scenario + family) and trial by trial (index, with its seed and plan), and returns
the ``"changes"`` record gate.json keeps (its shape is in docs/reference/pytest-plugin.md);
:func:`changes_lines` and :func:`changes_html` show it in the terminal and in report.html.

Verdicts compared are a trial's ``passed`` and ``failed`` (``skipped`` and ``not exercised``
prove nothing either way). A trial whose verdict differs while its seed and its plan's text are
the same on both sides is also listed as *flaky*: nothing the harness chose changed, so either
the agent did (the change under review) or the trial does not reproduce; a differing plan
(another golden run, another seed) is a *changed plan*, never flaky.

Standard library, the base's errors and this room's :mod:`._safe` only.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from crashpoint.errors import GateFileError

__all__ = [
    "baseline_note",
    "changes_html",
    "changes_lines",
    "compare_gates",
    "load_gate",
    "one_line",
]

#: At most this many trials per kind of change are kept in gate.json and shown (the counts are
#: always whole).
MAX_LISTED = 200
#: A cause is cut to this many characters in the terminal, the summary and annotations.
CAUSE_CHARS = 240


def one_line(text: object, limit: int = CAUSE_CHARS) -> str:
    """``text`` on one line (whitespace runs become one space), cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def load_gate(path: str, *, allow_running: bool = False) -> tuple[str, dict[str, Any]]:
    """``(gate.json's absolute path, its content)`` for ``path``: a gate.json or a report
    folder holding one. Refuses (:class:`~crashpoint.errors.GateFileError`, one line naming
    the path) a missing or unreadable file, one that is not JSON or not a gate.json, and, unless
    ``allow_running``, the "running" marker a gate that never finished leaves behind."""
    where = os.path.abspath(path)
    if os.path.isdir(where):
        where = os.path.join(where, "gate.json")
        if not os.path.exists(where):
            raise GateFileError(
                path, "the folder holds no gate.json: give a report folder `crashpoint run` wrote"
            )
    try:
        with open(where, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise GateFileError(path, "no such file or folder") from None
    except OSError as exc:
        raise GateFileError(path, f"cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise GateFileError(path, "is not JSON (not UTF-8 text)") from None
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        raise GateFileError(
            path, f"is not JSON{f' (line {line})' if line else ''}: {one_line(exc, 120)}"
        ) from None
    running = isinstance(data, dict) and data.get("status") == "running"
    if running and not allow_running:
        raise GateFileError(
            path,
            "holds no results: the gate that wrote it was still running, or was killed before "
            "it finished (give the report of a gate that finished)",
        )
    if running and "campaigns" not in data:
        data = {**data, "campaigns": []}
    campaigns = data.get("campaigns") if isinstance(data, dict) else None
    if not isinstance(data, dict) or "ok" not in data or not isinstance(campaigns, list):
        raise GateFileError(
            path,
            "is not a gate.json (a JSON object with 'ok' and a 'campaigns' list, as "
            "`crashpoint run --report DIR` writes it)",
        )
    if not all(isinstance(c, dict) for c in campaigns):
        raise GateFileError(path, "is not a gate.json: an entry of 'campaigns' is not an object")
    return where, data


def _campaign_key(s: Mapping[str, Any]) -> str:
    return f"{s.get('scenario', s.get('name', '?'))} [{s.get('family', '')}]"


def _verdict(t: Mapping[str, Any] | None) -> str:
    """``passed``, ``failed``, ``skipped``, ``not exercised``, or ``absent``."""
    if t is None:
        return "absent"
    status = t.get("status")
    if status:
        return str(status)
    return "passed" if t.get("ok") else "failed"


def _trials(s: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    out: dict[int, Mapping[str, Any]] = {}
    for t in s.get("trial_results") or []:
        if isinstance(t, Mapping) and isinstance(t.get("index"), int):
            out[int(t["index"])] = t
    return out


def _failure(s: Mapping[str, Any], index: int) -> Mapping[str, Any]:
    for f in s.get("failures") or []:
        if isinstance(f, Mapping) and f.get("index") == index:
            return f
    return {}


def _cause(s: Mapping[str, Any], t: Mapping[str, Any]) -> str:
    f = _failure(s, int(t.get("index", -1)))
    checks = f.get("checks") or t.get("failures") or []
    text = f.get("root_cause") or t.get("root_cause") or (checks[0] if checks else "")
    return one_line(text) if text else ""


def _entry(
    campaign: str,
    s: Mapping[str, Any],
    index: int,
    before: Mapping[str, Any] | None,
    now: Mapping[str, Any] | None,
    source: Mapping[str, Any],
) -> dict[str, Any]:
    """One trial's change. ``source`` is the side whose failure (cause, replay) is shown."""
    t = now if now is not None else before
    assert t is not None
    same_seed = before is not None and now is not None and before.get("seed") == now.get("seed")
    same_plan = before is not None and now is not None and before.get("plan") == now.get("plan")
    shown = now if source is s and now is not None else before
    assert shown is not None
    out: dict[str, Any] = {
        "campaign": campaign,
        "scenario": s.get("scenario", s.get("name")),
        "family": s.get("family", ""),
        "index": index,
        "seed": t.get("seed"),
        "plan": t.get("plan", ""),
        "before": _verdict(before),
        "now": _verdict(now),
        "same_seed_and_plan": bool(same_seed and same_plan),
        "cause": _cause(source, shown),
        "replay": str(_failure(source, index).get("replay") or ""),
    }
    if before is not None and now is not None and not same_plan:
        out["plan_before"] = before.get("plan", "")
    return out


def compare_gates(
    previous: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]], *, baseline: str = ""
) -> dict[str, Any]:
    """The ``"changes"`` record: ``summaries`` (this gate's campaigns) against ``previous``
    (a gate.json's content, :func:`load_gate`); ``baseline`` is the path shown for it.

    ``new_failures`` fail now and passed before, were absent (a new campaign or trial) or
    proved nothing (skipped, not exercised);
    ``fixed`` failed before and pass now; ``still_failing`` fail on both sides; ``flaky`` are
    the trials of ``new_failures`` and ``fixed`` whose seed and plan are the same on both sides;
    ``changed_plan`` those whose plan differs. Each list holds at most :data:`MAX_LISTED`
    entries; ``counts`` has the whole numbers."""
    before_by = {_campaign_key(c): c for c in previous.get("campaigns") or []}
    now_by = {_campaign_key(c): c for c in summaries}
    lists: dict[str, list[dict[str, Any]]] = {
        k: [] for k in ("new_failures", "fixed", "still_failing", "flaky", "changed_plan")
    }
    for key, s in now_by.items():
        prev = before_by.get(key)
        old = _trials(prev) if prev is not None else {}
        new = _trials(s)
        for index in sorted(set(old) | set(new)):
            b, n = old.get(index), new.get(index)
            vb, vn = _verdict(b), _verdict(n)
            if vn == "failed" and vb == "failed":
                kind = "still_failing"
            elif vn == "failed":  # passed, absent, or proved nothing before
                kind = "new_failures"
            elif vb == "failed" and vn == "passed":
                kind = "fixed"
            else:
                continue
            source = s if vn == "failed" else (prev or s)
            e = _entry(key, s, index, b, n, source)
            lists[kind].append(e)
            if kind != "still_failing" and vb in ("passed", "failed"):
                lists["flaky" if e["same_seed_and_plan"] else "changed_plan"].append(e)
    return {
        "baseline": baseline,
        "baseline_status": str(previous.get("status") or "finished"),
        "baseline_incomplete": bool(previous.get("incomplete")),
        "campaigns_new": sorted(set(now_by) - set(before_by)),
        "campaigns_removed": sorted(set(before_by) - set(now_by)),
        "counts": {k: len(v) for k, v in lists.items()},
        **{k: v[:MAX_LISTED] for k, v in lists.items()},
    }


def _headline(changes: Mapping[str, Any]) -> str:
    c = changes.get("counts") or {}
    parts = [
        f"{c.get('new_failures', 0)} new failure(s)",
        f"{c.get('fixed', 0)} fixed",
        f"{c.get('still_failing', 0)} still failing",
        f"{c.get('flaky', 0)} with the same seed and plan and another verdict (flaky unless "
        "the agent changed)",
    ]
    if c.get("changed_plan"):
        parts.append(f"{c['changed_plan']} with a changed plan")
    new, gone = changes.get("campaigns_new") or [], changes.get("campaigns_removed") or []
    if new or gone:
        parts.append(f"campaigns: {len(new)} new, {len(gone)} removed")
    return "; ".join(parts)


def baseline_note(changes: Mapping[str, Any]) -> str:
    """Where the baseline came from, and whether it was complete."""
    note = f"since {changes.get('baseline') or 'the baseline'}"
    if changes.get("baseline_incomplete"):
        note += f" (an incomplete gate: {changes.get('baseline_status')}; compared what it has)"
    return note


def _tag(e: Mapping[str, Any]) -> str:
    if e.get("before") != "absent" and e.get("same_seed_and_plan"):
        return " (same seed and plan as before)"
    if e.get("plan_before"):
        return " (plan changed)"
    return " (new trial)" if e.get("before") == "absent" else ""


def changes_lines(changes: Mapping[str, Any], *, limit: int = 10) -> list[str]:
    """A few lines for the terminal: the counts, then each new failure with its replay
    command and each fix (at most ``limit`` of each)."""
    out = [f"crashpoint changes {baseline_note(changes)}: {_headline(changes)}"]
    for title, kind in (("NEW FAILURE", "new_failures"), ("FIXED", "fixed")):
        entries = changes.get(kind) or []
        for e in entries[:limit]:
            line = f"  {title} {e['campaign']} trial {e['index']}{_tag(e)}"
            out.append(line + (f": {e['cause']}" if kind == "new_failures" and e["cause"] else ""))
            if kind == "new_failures" and e.get("replay"):
                out.append(f"    replay: {e['replay']}")
        more = int((changes.get("counts") or {}).get(kind, 0)) - min(limit, len(entries))
        if more > 0:
            out.append(f'  ... {more} more {title.lower()}(s) in gate.json ("changes")')
    for name in changes.get("campaigns_new") or []:
        out.append(f"  NEW CAMPAIGN {name}")
    for name in changes.get("campaigns_removed") or []:
        out.append(f"  REMOVED CAMPAIGN {name}")
    return out


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _mark_html(e: Mapping[str, Any]) -> str:
    tag = _tag(e).strip(" ()")
    if tag == "same seed and plan as before":
        tag = "same seed and plan (flaky?)"
    return f'<br><span class="muted">{_e(tag)}</span>' if tag else ""


def _code_html(text: object) -> str:
    return f"<code>{_e(text)}</code>" if text else ""


def changes_html(changes: Mapping[str, Any], *, limit: int = 20) -> str:
    """The "What changed" section of report.html (escaped, ready for ``sections=``): the
    counts, then a table each of new failures, fixes and trials still failing (at most
    ``limit`` rows each; a trial with the same seed and plan as before is marked flaky), then
    campaigns new and removed. Tables scroll inside themselves."""
    parts = [
        '<section id="changes"><h2>What changed</h2>',
        f'<p class="muted">{_e(baseline_note(changes))}: {_e(_headline(changes))}</p>',
    ]
    counts = changes.get("counts") or {}
    for title, kind in (
        ("New failures", "new_failures"),
        ("Fixed", "fixed"),
        ("Still failing", "still_failing"),
    ):
        entries = changes.get(kind) or []
        if not entries:
            continue
        total = int(counts.get(kind, len(entries)))
        parts.append(f"<h3>{_e(title)}: {total}</h3>")
        rows = "".join(
            f"<tr><td>{_e(e['campaign'])}</td><td class=num>{_e(e['index'])}</td>"
            f"<td>{_e(e['before'])}&nbsp;&rarr;&nbsp;{_e(e['now'])}{_mark_html(e)}</td>"
            f"<td>{_e(e['plan'])}</td><td>{_e(one_line(e['cause'], 160))}</td>"
            f"<td>{_code_html(e.get('replay'))}</td></tr>"
            for e in entries[:limit]
        )
        parts.append(
            '<div style="overflow-x:auto"><table><tr><th>campaign</th><th>trial</th>'
            "<th>verdict</th><th>plan</th><th>cause</th><th>replay</th></tr>"
            f"{rows}</table></div>"
        )
        if total > min(limit, len(entries)):
            parts.append(
                f'<p class="muted">{total - min(limit, len(entries))} more in gate.json '
                "(&quot;changes&quot;)</p>"
            )
    for title, kind in (
        ("New campaigns", "campaigns_new"),
        ("Removed campaigns", "campaigns_removed"),
    ):
        names = changes.get(kind) or []
        if names:
            parts.append(
                f"<p><b>{_e(title)}</b>:</p><ul>"
                + "".join(f"<li>{_e(n)}</li>" for n in names)
                + "</ul>"
            )
    parts.append("</section>")
    return "".join(parts)
