"""The end-of-run table per scenario and the session's combined reports."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

__all__ = ["remove_gate_running", "summary_table", "write_gate_running",
           "write_session_reports"]

#: gate.json while a session runs: a killed gate never leaves an old "ok": true behind
GATE_RUNNING = {"ok": False, "incomplete": True, "status": "running"}

_COLS = ("scenario [family]", "trials", "faults", "checks ok", "dup", "lost", "resume p50",
         "verdict")


def _row(s: dict[str, Any]) -> tuple[str, ...]:
    checks = s.get("checks", {})
    passed = sum(c["passed"] for c in checks.values())
    judged = passed + sum(c["failed"] for c in checks.values())
    faults = " ".join(f"{k}:{v}" for k, v in s.get("faults_by_kind", {}).items()) or "-"
    trials = f"{s['ran']}" + (f" (+{s['skipped']} skipped)" if s.get("skipped") else "")
    resume = f"{s['median_resume_ms']:.0f} ms" if s.get("median_resume_ms") is not None else "-"
    verdict = "PASS" if s["ok"] else f"FAIL ({s['failed']})"
    if s["ok"] and s.get("skipped") and not s["ran"]:
        verdict = "SKIP"
    if s.get("incomplete"):
        verdict = "INTERRUPTED" if s.get("interrupted_by") else "FAIL (budget)"
    if s.get("not_run"):
        trials += f" (+{s['not_run']} not run)"
    return (f"{s.get('scenario', s['name'])} [{s.get('family', '')}]", trials, faults,
            f"{passed}/{judged}", str(s.get("duplicate_effects", 0)),
            str(s.get("lost_effects", 0)), resume, verdict)


def summary_table(summaries: list[dict[str, Any]], *, interrupted_by: str = "") -> list[str]:
    """Lines of a fixed-width table, one row per scenario family, then skip reasons."""
    rows = [_COLS, *(_row(s) for s in summaries)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLS))]
    seeds = sorted({str(s.get("seed")) for s in summaries})
    out = [f"crashpoint gate: {len(summaries)} campaigns, seed {', '.join(seeds)}"]
    if interrupted_by:
        out[0] = f"crashpoint gate: INTERRUPTED by {interrupted_by} (report incomplete): " + \
            (f"{len(summaries)} campaigns, seed {', '.join(seeds)}" if summaries else
             "no campaign finished")
    if not summaries:
        return out
    for k, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    reasons = sorted({r for s in summaries for r in s.get("skip_reasons", [])})
    out += [f"skipped: {r}" for r in reasons]
    for s in summaries:
        if s.get("stopped"):
            out.append(f"STOPPED {s.get('scenario')} [{s.get('family')}]: {s['stopped']}")
    for s in summaries:
        for f in s.get("failures", [])[:3]:
            out.append(f"FAILED {s.get('scenario')} [{s.get('family')}] trial {f['index']}: "
                       f"{'; '.join(f['checks'])}")
            out.append(f"  replay: {f['replay']}")
    return out


def write_session_reports(folder: str, summaries: list[dict[str, Any]], *,
                          interrupted_by: str = "") -> list[str]:
    """gate.json (every campaign) and report.html (tables + a timeline per failing trial).

    ``interrupted_by`` (a signal's name): the session was stopped, gate.json says so
    (``"ok": false, "incomplete": true``)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "gate.json")
    incomplete = bool(interrupted_by) or any(s.get("incomplete") for s in summaries)
    ok = all(s["ok"] for s in summaries) and not interrupted_by
    _write_json(path, {"ok": ok, "incomplete": incomplete,
                       "interrupted_by": interrupted_by or None,
                       "status": "interrupted" if interrupted_by else "finished",
                       "campaigns": summaries})
    paths = [path]
    try:
        from crashpoint.harness._html import render_html
    except ImportError:
        return paths
    html = os.path.join(folder, "report.html")
    with open(html, "w", encoding="utf-8") as f:
        f.write(render_html(summaries))
    paths.append(html)
    return paths


def write_gate_running(folder: str) -> str:
    """Replace any gate.json in ``folder`` by :data:`GATE_RUNNING` (before any trial runs)."""
    os.makedirs(folder, exist_ok=True)
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
    """Write by temp file + rename: a reader sees the old or the new file, never half; a
    symlink planted at ``path`` is replaced, not followed."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True, default=str)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
