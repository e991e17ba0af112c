"""The end-of-run table per scenario and the session's combined reports: gate.json,
report.html, the Markdown step summary (``$GITHUB_STEP_SUMMARY``), what changed since a
baseline, and the GitHub annotations printed after the table."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from typing import Any

import pytest

from crashpoint import harness
from crashpoint.pytest_plugin._annotations import BAD_SCENARIOS, CHANGES, ci_lines, session_errors
from crashpoint.pytest_plugin._options import SETTINGS, SUMMARIES

__all__ = [
    "ci_end_lines",
    "remove_gate_running",
    "session_changes",
    "summary_table",
    "write_ci_summary",
    "write_gate_running",
    "write_session_reports",
    "write_step_summary",
]

#: gate.json while a session runs: a killed gate never leaves an old "ok": true behind
GATE_RUNNING = {"ok": False, "incomplete": True, "status": "running"}


def summary_table(summaries: list[dict[str, Any]], *, interrupted_by: str = "") -> list[str]:
    """Lines of a fixed-width table, one row per scenario family, then skip reasons."""
    cols = harness.SUMMARY_COLUMNS
    rows = [cols, *(harness.summary_row(s) for s in summaries)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
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


def _outside_lines(summaries: list[dict[str, Any]]) -> list[str]:
    """What agents wrote outside their folders: a line per campaign whose agent wrote to its
    private TMPDIRs or (its own processes, each path with how that is known) to the system
    temp folders; then at most one quiet line counting what other processes changed there."""
    out = []
    for s in summaries:
        name = f"{s.get('scenario', s.get('name'))} [{s.get('family', '')}]"
        ow = s.get("outside_writes") or {}
        if ow.get("tmp_bytes") or ow.get("system_tmp"):
            size = harness.human_size(int(ow.get("tmp_bytes", 0)))
            line = f"outside its folders: {name}: {size} in private TMPDIRs (removed)"
            if ow.get("system_tmp"):
                by = ow.get("system_tmp_by") or {}
                paths = [f"{p} (by {by[p]})" if by.get(p) else str(p) for p in ow["system_tmp"][:5]]
                line += (
                    f"; written to the system temp folders by its own processes during "
                    f"{ow['trials_writing_system_tmp']} trial(s) (not removed): {', '.join(paths)}"
                )
            out.append(line)
    others = sum(int((s.get("outside_writes") or {}).get("unattributed", 0)) for s in summaries)
    if others:
        out.append(
            f"outside its folders: {others} change(s) in the system temp folders by other "
            "processes were not attributed to the trials (not listed)"
        )
    return out


def _limits_lines(summaries: list[dict[str, Any]]) -> list[str]:
    """What agents wrote outside their folders, evidence cut at its limit, ledger refusals."""
    out = _outside_lines(summaries)
    for s in summaries:
        name = f"{s.get('scenario', s.get('name'))} [{s.get('family', '')}]"
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
    folder: str,
    summaries: list[dict[str, Any]],
    *,
    interrupted_by: str = "",
    changes: dict[str, Any] | None = None,
    errors: list[str] | None = None,
) -> list[str]:
    """gate.json (every campaign) and report.html (tables + a timeline per failing trial).

    gate.json's top level: ``ok``, ``incomplete``, ``interrupted_by``, ``status``
    (``finished`` or ``interrupted``), ``report_dir`` (the absolute folder written to, so a
    re-render knows where the evidence was), ``campaigns`` (each campaign's summary), and, when
    a baseline was given, ``changes`` (:func:`crashpoint.harness.compare_gates`; report.html
    shows them in a "What changed" section), and, when some could not be run,
    ``scenario_errors`` (one line per scenario file: where and why).

    ``interrupted_by`` (a signal's name): the session was stopped, gate.json says so
    (``"ok": false, "incomplete": true``). The folder is created 0700 without following a link
    and refused if another user owns it or can write in it
    (:class:`crashpoint.errors.UnsafeReportFolder`); each file is written whole (temp + fsync
    + rename), 0600, never through a planted link."""
    path = os.path.join(folder, "gate.json")
    incomplete = bool(interrupted_by) or any(s.get("incomplete") for s in summaries)
    ok = all(s["ok"] for s in summaries) and not interrupted_by
    gate: dict[str, Any] = {
        "ok": ok,
        "incomplete": incomplete,
        "interrupted_by": interrupted_by or None,
        "status": "interrupted" if interrupted_by else "finished",
        "report_dir": os.path.abspath(folder),
        "campaigns": summaries,
    }
    if changes is not None:
        gate["changes"] = changes
    if errors:
        gate["scenario_errors"] = errors
    _write_json(path, gate)
    paths = [path]
    try:
        render_html = harness.render_html
    except ImportError:
        return paths
    html = os.path.join(folder, "report.html")
    sections = [harness.changes_html(changes)] if changes else []
    folder = os.path.abspath(folder)
    page = render_html(summaries, report_dir=folder, origin_dir=folder, sections=sections)
    harness.write_file(html, page)
    paths.append(html)
    return paths


def write_step_summary(
    path: str,
    summaries: list[dict[str, Any]],
    *,
    changes: dict[str, Any] | None = None,
    errors: list[str] | None = None,
    interrupted_by: str = "",
) -> str:
    """Append the gate's Markdown summary to ``path`` (``$GITHUB_STEP_SUMMARY``); returns ""
    or, if it could not be written, a warning line (never raises: the gate's verdict stands).
    Only a regular file is appended to (a FIFO or a device is refused without blocking)."""
    text = harness.render_markdown(
        summaries, changes=changes, errors=errors or (), interrupted_by=interrupted_by
    )
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o600
        )
    except OSError as exc:
        return f"crashpoint: could not write the step summary to {path}: {exc.strerror or exc}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"crashpoint: not writing the step summary to {path}: not a regular file"
        data = ("\n" + text).encode()
        while data:
            data = data[os.write(fd, data) :]
    except OSError as exc:
        return f"crashpoint: could not write the step summary to {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return ""


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


def session_changes(config: pytest.Config) -> dict[str, Any] | None:
    """What changed since ``--crashpoint-baseline`` (None without one); computed once, when the
    session ends, and kept for the reports and the terminal."""
    if CHANGES in config.stash:
        return config.stash[CHANGES]
    baseline = config.stash[SETTINGS].baseline
    if baseline is None:
        return None
    path, previous = baseline
    summaries: list[dict[str, Any]] = config.stash[SUMMARIES]
    changes = harness.compare_gates(previous, summaries, baseline=path)
    config.stash[CHANGES] = changes
    return changes


def write_ci_summary(config: pytest.Config, *, interrupted_by: str = "") -> None:
    """Append the Markdown summary to ``$GITHUB_STEP_SUMMARY`` when it is set and the session
    ran a campaign (or found a bad scenario file, or was interrupted); a failure to write is a
    warning line, never a crash of the gate."""
    path = os.environ.get("GITHUB_STEP_SUMMARY", "")
    summaries = config.stash[SUMMARIES]
    errors = session_errors(config)
    interrupted = bool(interrupted_by and config.stash[SETTINGS].report)  # as for gate.json
    if not path or not (summaries or errors or interrupted):
        return
    warning = write_step_summary(
        path,
        summaries,
        changes=session_changes(config),
        errors=errors,
        interrupted_by=interrupted_by,
    )
    if warning:
        _warn(config, warning)


def _warn(config: pytest.Config, line: str) -> None:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(line)
    else:
        print(line, file=sys.stderr)


def ci_end_lines(config: pytest.Config) -> list[str]:
    """The lines after the table: what changed since the baseline, then (on GitHub Actions)
    the workflow annotations."""
    if not config.stash[SUMMARIES] and not config.stash.get(BAD_SCENARIOS, []):
        return []
    changes = session_changes(config)
    lines = harness.changes_lines(changes) if changes is not None else []
    summaries: list[dict[str, Any]] = config.stash[SUMMARIES]
    return lines + ci_lines(config, summaries)
