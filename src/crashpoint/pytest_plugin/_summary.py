"""The end-of-run table per scenario and the session's combined reports."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from crashpoint import harness

__all__ = ["remove_gate_running", "summary_table", "write_gate_running", "write_session_reports"]

#: gate.json while a session runs: a killed gate never leaves an old "ok": true behind
GATE_RUNNING = {"ok": False, "incomplete": True, "status": "running"}

_COLS = (
    "scenario [family]",
    "trials",
    "exercised",
    "faults",
    "checks ok",
    "dup",
    "lost",
    "resume p50",
    "verdict",
)


def _row(s: dict[str, Any]) -> tuple[str, ...]:
    checks = s.get("checks", {})
    passed = sum(c["passed"] for c in checks.values())
    judged = passed + sum(c["failed"] for c in checks.values())
    faults = " ".join(f"{k}:{v}" for k, v in s.get("faults_by_kind", {}).items()) or "-"
    trials = f"{s['ran']}" + (f" (+{s['skipped']} skipped)" if s.get("skipped") else "")
    resume = f"{s['median_resume_ms']:.0f} ms" if s.get("median_resume_ms") is not None else "-"
    verdict = "PASS" if s["ok"] else f"FAIL ({s['failed']})"
    if not s["ok"] and not s["failed"] and s.get("unexercised"):
        verdict = "FAIL (not exercised)"
    if s["ok"] and s.get("warned"):
        verdict = f"PASS ({s['warned']} warned)"
    if s["ok"] and s.get("skipped") and not s["ran"]:
        verdict = "SKIP"
    planned = sum(int(d.get("planned", 0)) for d in (s.get("families") or {}).values())
    exercised = f"{s.get('exercised', 0)}/{planned}" if "exercised" in s else "-"
    if s.get("incomplete"):
        verdict = "INTERRUPTED" if s.get("interrupted_by") else "FAIL (budget)"
    if s.get("not_run"):
        trials += f" (+{s['not_run']} not run)"
    return (
        f"{s.get('scenario', s['name'])} [{s.get('family', '')}]",
        trials,
        exercised,
        faults,
        f"{passed}/{judged}",
        str(s.get("duplicate_effects", 0)),
        str(s.get("lost_effects", 0)),
        resume,
        verdict,
    )


def summary_table(summaries: list[dict[str, Any]], *, interrupted_by: str = "") -> list[str]:
    """Lines of a fixed-width table, one row per scenario family, then skip reasons."""
    rows = [_COLS, *(_row(s) for s in summaries)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLS))]
    seeds = sorted({str(s.get("seed")) for s in summaries})
    out = [f"crashpoint gate: {len(summaries)} campaigns, seed {', '.join(seeds)}"]
    if interrupted_by:
        out[0] = f"crashpoint gate: INTERRUPTED by {interrupted_by} (report incomplete): " + (
            f"{len(summaries)} campaigns, seed {', '.join(seeds)}"
            if summaries
            else "no campaign finished"
        )
    if not summaries:
        return out
    for k, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    reasons = sorted({r for s in summaries for r in s.get("skip_reasons", [])})
    out += [f"skipped: {r}" for r in reasons]
    out += _limits_lines(summaries)
    for s in summaries:
        if s.get("stopped"):
            out.append(f"STOPPED {s.get('scenario')} [{s.get('family')}]: {s['stopped']}")
    for s in summaries:
        for msg in s.get("unexercised", []):
            out.append(f"NOT EXERCISED {s.get('scenario')}: {msg}")
    for s in summaries:
        for msg in s.get("notes", []):
            out.append(f"note {s.get('scenario')}: {msg}")
    for s in summaries:
        for f in s.get("failures", [])[:3]:
            out.append(
                f"FAILED {s.get('scenario')} [{s.get('family')}] trial {f['index']}: "
                f"{f.get('root_cause') or '; '.join(f['checks'])}"
            )
            if f.get("landed"):
                out.append(f"  landed: {f['landed']}")
            out.append(f"  replay: {f['replay']}")
    return out


def _limits_lines(summaries: list[dict[str, Any]]) -> list[str]:
    """What agents wrote outside their folders, evidence cut at its limit, ledger refusals."""
    out = []
    for s in summaries:
        name = f"{s.get('scenario', s.get('name'))} [{s.get('family', '')}]"
        ow = s.get("outside_writes") or {}
        if ow.get("tmp_bytes") or ow.get("system_tmp"):
            size = harness.human_size(int(ow.get("tmp_bytes", 0)))
            line = f"outside its folders: {name}: {size} in private TMPDIRs (removed)"
            if ow.get("system_tmp"):
                line += (
                    f"; appeared in the system temp folders during "
                    f"{ow['trials_writing_system_tmp']} trial(s) (the agent's or another "
                    f"process's; not removed): {', '.join(ow['system_tmp'][:5])}"
                )
            out.append(line)
        ev = s.get("evidence") or {}
        if ev.get("trials_cut"):
            out.append(
                f"evidence cut: {name}: {ev['trials_cut']} trial folder(s) over the "
                f"evidence limit (see evidence_omitted in result.json)"
            )
        if s.get("launch"):  # fork mode asked for (agent.warm) and not used, or partly
            out.append(f"launch: {name}: {s['launch']}")
        refused = s.get("ledger_refused") or {}
        if refused:
            out.append(
                f"ledger limits: {name}: refused "
                + ", ".join(f"{k} x{v}" for k, v in refused.items())
            )
    return out


def write_session_reports(
    folder: str, summaries: list[dict[str, Any]], *, interrupted_by: str = ""
) -> list[str]:
    """gate.json (every campaign) and report.html (tables + a timeline per failing trial).

    ``interrupted_by`` (a signal's name): the session was stopped, gate.json says so
    (``"ok": false, "incomplete": true``). The folder is created 0700 without following a link
    and refused if another user owns it or can write in it
    (:class:`crashpoint.errors.UnsafeReportFolder`); each file is written whole (temp + fsync
    + rename), 0600, never through a planted link."""
    path = os.path.join(folder, "gate.json")
    incomplete = bool(interrupted_by) or any(s.get("incomplete") for s in summaries)
    ok = all(s["ok"] for s in summaries) and not interrupted_by
    _write_json(
        path,
        {
            "ok": ok,
            "incomplete": incomplete,
            "interrupted_by": interrupted_by or None,
            "status": "interrupted" if interrupted_by else "finished",
            "campaigns": summaries,
        },
    )
    paths = [path]
    try:
        render_html = harness.render_html
    except ImportError:
        return paths
    html = os.path.join(folder, "report.html")
    harness.write_file(html, render_html(summaries, report_dir=folder))
    paths.append(html)
    return paths


def write_gate_running(folder: str) -> str:
    """Replace any gate.json in ``folder`` by :data:`GATE_RUNNING` (before any trial runs)."""
    path = os.path.join(folder, "gate.json")
    _write_json(path, GATE_RUNNING)
    return path


def remove_gate_running(folder: str) -> None:
    """Remove gate.json if it is still :data:`GATE_RUNNING` (the session ran no campaign)."""
    path = os.path.join(folder, "gate.json")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read(4096) or b"null")
    except (OSError, ValueError):
        return
    if data == GATE_RUNNING:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _write_json(path: str, data: Any) -> None:
    """Write by temp file + fsync + rename into a safe folder (created 0700, never through a
    link): a reader sees the old or the new file, never half; a link planted at ``path`` is
    refused, not followed."""
    harness.secure_dir(os.path.dirname(path))
    harness.write_file(path, json.dumps(data, indent=2, sort_keys=True, default=str))
