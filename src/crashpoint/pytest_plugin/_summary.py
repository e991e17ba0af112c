"""The end-of-run table per scenario and the session's combined reports."""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["summary_table", "write_session_reports"]

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
    return (f"{s.get('scenario', s['name'])} [{s.get('family', '')}]", trials, faults,
            f"{passed}/{judged}", str(s.get("duplicate_effects", 0)),
            str(s.get("lost_effects", 0)), resume, verdict)


def summary_table(summaries: list[dict[str, Any]]) -> list[str]:
    """Lines of a fixed-width table, one row per scenario family, then skip reasons."""
    rows = [_COLS, *(_row(s) for s in summaries)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLS))]
    seeds = sorted({str(s.get("seed")) for s in summaries})
    out = [f"crashpoint gate: {len(summaries)} campaigns, seed {', '.join(seeds)}"]
    for k, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    reasons = sorted({r for s in summaries for r in s.get("skip_reasons", [])})
    out += [f"skipped: {r}" for r in reasons]
    out += _limits_lines(summaries)
    for s in summaries:
        for f in s.get("failures", [])[:3]:
            out.append(f"FAILED {s.get('scenario')} [{s.get('family')}] trial {f['index']}: "
                       f"{'; '.join(f['checks'])}")
            out.append(f"  replay: {f['replay']}")
    return out


def _limits_lines(summaries: list[dict[str, Any]]) -> list[str]:
    """What agents wrote outside their folders, evidence cut at its limit, ledger refusals."""
    from crashpoint.harness._reportfs import human_size

    out = []
    for s in summaries:
        name = f"{s.get('scenario', s.get('name'))} [{s.get('family', '')}]"
        ow = s.get("outside_writes") or {}
        if ow.get("tmp_bytes") or ow.get("system_tmp"):
            line = f"outside its folders: {name}: {human_size(int(ow.get('tmp_bytes', 0)))} in " \
                   "private TMPDIRs (removed)"
            if ow.get("system_tmp"):
                line += f"; new in the system temp folders ({ow['trials_writing_system_tmp']} " \
                        f"trial(s), not removed): {', '.join(ow['system_tmp'][:5])}"
            out.append(line)
        ev = s.get("evidence") or {}
        if ev.get("trials_cut"):
            out.append(f"evidence cut: {name}: {ev['trials_cut']} trial folder(s) over the "
                       f"evidence limit (see evidence_omitted in result.json)")
        refused = s.get("ledger_refused") or {}
        if refused:
            out.append(f"ledger limits: {name}: refused " +
                       ", ".join(f"{k} x{v}" for k, v in refused.items()))
    return out


def write_session_reports(folder: str, summaries: list[dict[str, Any]]) -> list[str]:
    """gate.json (every campaign) and report.html (tables + a timeline per failing trial).

    The folder is created 0700 without following a link and refused if another user owns it
    or can write in it (crashpoint.harness._reportfs.UnsafeReportFolder); each file is written
    whole (temp + fsync + rename), 0600, never through a planted link."""
    from crashpoint.harness._reportfs import secure_dir, write_file

    secure_dir(folder)
    path = os.path.join(folder, "gate.json")
    ok = all(s["ok"] for s in summaries)
    write_file(path, json.dumps({"ok": ok, "campaigns": summaries}, indent=2, sort_keys=True,
                                default=str))
    paths = [path]
    try:
        from crashpoint.harness._html import render_html
    except ImportError:
        return paths
    html = os.path.join(folder, "report.html")
    write_file(html, render_html(summaries))
    paths.append(html)
    return paths
