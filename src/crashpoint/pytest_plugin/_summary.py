"""The end-of-run table per scenario and the session's combined reports: gate.json,
report.html, the Markdown step summary (``$GITHUB_STEP_SUMMARY``), what changed since a
baseline, and the GitHub annotations printed after the table."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

import pytest

from crashpoint import harness
from crashpoint.pytest_plugin._annotations import (
    BAD_SCENARIOS,
    CHANGES,
    bad_scenario_from_report,
    ci_lines,
    session_errors,
)
from crashpoint.pytest_plugin._options import GATE_NOTES, SETTINGS, SUMMARIES

if TYPE_CHECKING:
    from crashpoint.harness import GateVerdict

__all__ = [
    "INTERRUPTED_MESSAGE",
    "ci_end_lines",
    "has_notes",
    "mark_junit_unfinished",
    "note_collect_report",
    "note_item_report",
    "remove_gate_running",
    "session_changes",
    "session_verdict",
    "summary_table",
    "write_ci_summary",
    "write_gate_running",
    "write_session_reports",
    "write_step_summary",
]


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
    verdict: GateVerdict | None = None,
) -> list[str]:
    """gate.json (every campaign) and report.html (tables + a timeline per failing trial).

    gate.json's top level: ``ok``, ``incomplete``, ``interrupted_by``, ``status``
    (``finished`` or ``interrupted``), ``report_dir`` (the absolute folder written to, so a
    re-render knows where the evidence was), ``campaigns`` (each campaign's summary), and, when
    a baseline was given, ``changes`` (:func:`crashpoint.harness.compare_gates`; report.html
    shows them in a "What changed" section), and, when some could not be run,
    ``scenario_errors`` (one line per scenario file: where and why). With ``verdict``
    (:func:`crashpoint.harness.gate_verdict`): ``verdict`` (``pass``, ``fail``, ``bad input``,
    ``not judged``, ``interrupted``), ``exit_code`` (what ``crashpoint run`` exits with: 0, 1,
    2, 3, 130, 143) and ``reasons`` (why it is not a pass, one line each); ``ok`` is then
    true only for a pass.

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
    if verdict is not None:
        gate.update(verdict.to_json())
        gate["ok"] = ok and verdict.ok
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


def write_gate_running(folder: str) -> list[str]:
    """Before any trial runs: the previous run's gate.json, junit.xml and report.html in
    ``folder`` replaced by "running" markers (:func:`crashpoint.harness.mark_report_running`):
    a gate killed before it writes never leaves an old ``"ok": true`` or a green junit.xml."""
    harness.secure_dir(folder)
    return harness.mark_report_running(folder)


def remove_gate_running(folder: str, names: tuple[str, ...] = ("gate.json", "report.html")) -> None:
    """Remove those of ``names`` that still hold their "running" marker (the session wrote no
    gate: no campaign ran). junit.xml is pytest's, written after this: see
    :func:`mark_junit_unfinished`'s caller."""
    with contextlib.suppress(OSError):
        harness.clear_report_running(folder, names)


# -- the gate's verdict -----------------------------------------------------------------------


def _notes(config: pytest.Config) -> dict[str, list[str]]:
    return config.stash.setdefault(GATE_NOTES, {"bad_input": [], "failed": [], "not_judged": []})


def _is_scenario_node(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0].endswith(harness.SUFFIX)


def _report_line(report: Any) -> str:
    """A failed report as one line: the scenario error's file, line and key where it names
    them, else the node id and the first line of what went wrong."""
    bad = bad_scenario_from_report(report)
    if bad is not None:
        return bad.describe()
    text = str(getattr(report, "longrepr", "") or "").strip().splitlines()
    return f"{report.nodeid or '.'}: {harness.one_line(text[-1] if text else 'failed', 300)}"


def note_collect_report(config: pytest.Config, report: Any) -> None:
    """A failed collection (a malformed scenario file, an import error): bad input."""
    if report.failed:
        _notes(config)["bad_input"].append(_report_line(report))


def note_item_report(config: pytest.Config, report: Any) -> None:
    """A scenario item that failed with no campaign behind it (its golden run failed, its
    agent reports no boundary): a failure, or, for an agent with nothing to judge it by, not
    judged. Items with a campaign are judged by the campaign's summary."""
    if not report.failed or report.when not in ("setup", "call"):
        return
    if not _is_scenario_node(report.nodeid):
        return
    props = dict(report.user_properties)
    if "crashpoint" in props:
        return
    line = _report_line(report)
    if "crashpoint_not_judged" in props:
        _notes(config)["not_judged"].append(line)
    else:
        _notes(config)["failed"].append(line)


def session_verdict(config: pytest.Config, *, interrupted_by: str = "") -> GateVerdict:
    """The session's gate verdict (:func:`crashpoint.harness.gate_verdict`): its campaigns and
    what its reports said besides."""
    notes = _notes(config)
    summaries: list[dict[str, Any]] = config.stash[SUMMARIES]
    return harness.gate_verdict(
        summaries,
        bad_input=notes["bad_input"],
        failed=notes["failed"],
        not_judged=notes["not_judged"],
        interrupted_by=interrupted_by,
    )


def has_notes(config: pytest.Config) -> bool:
    """Did the reports say anything for the verdict besides the campaigns?"""
    return any(_notes(config).values())


# -- junit.xml after an interrupt -------------------------------------------------------------

#: the error each unfinished item gets in junit.xml after an interrupt
INTERRUPTED_MESSAGE = "interrupted before this trial finished"


def _junit_names(nodeid: str) -> tuple[str, str]:
    """(classname, name) of a node id, as pytest's junitxml spells them."""
    path, *names = nodeid.split("::")
    path = path.replace("/", ".")
    if path.endswith(".py"):
        path = path[:-3]
    parts = [path, *names]
    return ".".join(parts[:-1]), parts[-1]


def mark_junit_unfinished(
    path: str, collected: list[str], finished: list[str], *, interrupted_by: str
) -> int:
    """After an interrupt: every collected item of junit.xml at ``path`` that did not finish
    gets a testcase with ``<error message="interrupted before this trial finished">`` (one
    for the gate itself if none is known), and the testsuite counts them as errors, so a CI
    never reads an interrupted run as green. Read and rewritten whole, never through a link;
    returns the errors added (0: the file is not there or not pytest's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    finally:
        os.close(fd)
    try:
        root = ET.fromstring(data)  # noqa: S314 - pytest's report, in our own 0700 folder
    except ET.ParseError:
        return 0
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return 0
    for case in list(suite.findall("testcase")):
        if case.get("name") is None and not len(case):  # pytest's empty one for the cut item
            suite.remove(case)
    seen = {(c.get("classname"), c.get("name")) for c in suite.iter("testcase")}
    done = set(finished)
    missing = [n for n in dict.fromkeys(collected) if n not in done]
    cases = [_junit_names(n) for n in missing]
    cases = [c for c in cases if c not in seen] or [("crashpoint", "gate")]
    why = (
        f"the gate was stopped by {interrupted_by} before this item finished: its trials that "
        "ran are in gate.json (marked incomplete), the others never ran"
    )
    for classname, name in cases:
        case = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0.000")
        ET.SubElement(case, "error", message=INTERRUPTED_MESSAGE).text = why
    suite.set("errors", str(int(suite.get("errors", "0") or 0) + len(cases)))
    suite.set("tests", str(int(suite.get("tests", "0") or 0) + len(cases)))
    harness.write_file(path, ET.tostring(root, encoding="utf-8", xml_declaration=True))
    return len(cases)


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
