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
    for s in summaries:
        for f in s.get("failures", [])[:3]:
            out.append(f"FAILED {s.get('scenario')} [{s.get('family')}] trial {f['index']}: "
                       f"{'; '.join(f['checks'])}")
            out.append(f"  replay: {f['replay']}")
    return out


def write_session_reports(folder: str, summaries: list[dict[str, Any]]) -> list[str]:
    """gate.json (every campaign) and report.html (tables + a timeline per failing trial)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "gate.json")
    ok = all(s["ok"] for s in summaries)
    with open(path, "w") as f:
        json.dump({"ok": ok, "campaigns": summaries}, f, indent=2, sort_keys=True, default=str)
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
