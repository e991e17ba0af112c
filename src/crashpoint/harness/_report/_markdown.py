"""The gate's Markdown summary: what a CI's own page shows (GitHub Actions' job summary).

:func:`render_markdown` takes the campaign summaries (as gate.json keeps them) and returns the
overall verdict, the per-campaign table (the columns of the terminal's table,
:data:`SUMMARY_COLUMNS` and :func:`summary_row`, defined here so both show the same thing),
each failing trial with its one-line cause and its replay command, the reasons trials were
skipped or not exercised, and, given a baseline's ``changes``
(:func:`crashpoint.harness.compare_gates`), what changed since it. The text is bounded
(GitHub keeps at most 1 MiB per step): the failing trials are capped with a "N more in
report.html" line, and the whole is cut at ``max_bytes``. Values of secret-named environment
variables are redacted, as in the other reports.

Standard library, the library's redaction rule (through :mod:`._safe`) and this room's
:mod:`._baseline` only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from crashpoint.checkpoint import Redactor
from crashpoint.harness._report._baseline import baseline_note, one_line
from crashpoint.harness._report._safe import redact_text

__all__ = [
    "MAX_FAILING_LISTED",
    "SUMMARY_COLUMNS",
    "redact_env_secrets",
    "render_markdown",
    "replay_here",
    "summary_row",
]

#: At most this many failing trials are listed (the rest: "N more in report.html").
MAX_FAILING_LISTED = 30
#: The summary is cut to this many bytes (GitHub's limit is 1 MiB per step: room for others).
MAX_BYTES = 512 * 1024

SUMMARY_COLUMNS = (
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


def summary_row(s: Mapping[str, Any]) -> tuple[str, ...]:
    """One campaign's row of the gate's table (:data:`SUMMARY_COLUMNS`)."""
    checks = s.get("checks") or {}
    passed = sum(int(c.get("passed", 0)) for c in checks.values())
    judged = passed + sum(int(c.get("failed", 0)) for c in checks.values())
    faults = " ".join(f"{k}:{v}" for k, v in (s.get("faults_by_kind") or {}).items()) or "-"
    ran = s.get("ran", s.get("trials", 0))
    trials = f"{ran}" + (f" (+{s['skipped']} skipped)" if s.get("skipped") else "")
    resume = f"{s['median_resume_ms']:.0f} ms" if s.get("median_resume_ms") is not None else "-"
    verdict = "PASS" if s.get("ok") else f"FAIL ({s.get('failed', 0)})"
    if not s.get("ok") and not s.get("failed") and s.get("unexercised"):
        verdict = "FAIL (not exercised)"
    if s.get("ok") and s.get("warned"):
        verdict = f"PASS ({s['warned']} warned)"
    if s.get("ok") and s.get("skipped") and not ran:
        verdict = "SKIP"
    planned = sum(int(d.get("planned", 0)) for d in (s.get("families") or {}).values())
    exercised = f"{s.get('exercised', 0)}/{planned}" if "exercised" in s else "-"
    if s.get("incomplete"):
        verdict = "INTERRUPTED" if s.get("interrupted_by") else "FAIL (budget)"
    if s.get("not_run"):
        trials += f" (+{s['not_run']} not run)"
    return (
        f"{s.get('scenario', s.get('name', '?'))} [{s.get('family', '')}]",
        trials,
        exercised,
        faults,
        f"{passed}/{judged}",
        str(s.get("duplicate_effects", 0)),
        str(s.get("lost_effects", 0)),
        resume,
        verdict,
    )


def redact_env_secrets(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with the value of every secret-named variable of ``env`` (default: this
    process's environment; ``API_KEY``, ``GITHUB_TOKEN``, ``DB_PASSWORD``: the library's rule)
    replaced by its marker, as the other reports redact them; a value that is an existing
    path is kept, as in evidence (``is_plain_path``)."""
    r = Redactor()
    env = os.environ if env is None else env
    secrets = {
        k: v
        for k, v in env.items()
        if r.is_secret_name(k) and not (os.path.isabs(v) and os.path.exists(v))
    }  # a path on disk (PWD, OLDPWD) is no secret: the reports name their own folders
    return redact_text(text, secrets)


def _cell(text: object) -> str:
    """Text for a table cell: one line, pipes escaped."""
    return one_line(text, 400).replace("\\", "\\\\").replace("|", "\\|")


def _code(text: object) -> str:
    """Inline code that survives backticks in ``text``."""
    flat = " ".join(str(text).split())
    fence = "``" if "`" in flat else "`"
    return f"{fence} {flat} {fence}" if fence == "``" else f"`{flat}`"


def _verdict(summaries: Sequence[Mapping[str, Any]], interrupted_by: str) -> str:
    if interrupted_by:
        return f"INTERRUPTED by {interrupted_by} (incomplete)"
    if not summaries:
        return "NO CAMPAIGNS"
    if not all(s.get("ok") for s in summaries):
        return "FAIL"
    if all(s.get("skipped") and not s.get("ran") for s in summaries):
        return "SKIP"
    return "PASS"


def render_markdown(
    summaries: Sequence[Mapping[str, Any]],
    *,
    changes: Mapping[str, Any] | None = None,
    errors: Sequence[str] = (),
    interrupted_by: str = "",
    title: str = "crashpoint gate",
    max_failures: int = MAX_FAILING_LISTED,
    max_bytes: int = MAX_BYTES,
) -> str:
    """The gate as Markdown (see the module docstring); ``errors`` are scenario files that
    could not be run (one line each)."""
    ran = sum(int(s.get("ran", 0) or 0) for s in summaries)
    failed = sum(int(s.get("failed", 0) or 0) for s in summaries)
    skipped = sum(int(s.get("skipped", 0) or 0) for s in summaries)
    seeds = sorted({str(s.get("seed")) for s in summaries if s.get("seed") is not None})
    verdict = _verdict(summaries, interrupted_by)
    if errors and verdict in ("PASS", "NO CAMPAIGNS", "SKIP"):
        verdict = "FAIL (scenario errors)"
    out = [
        f"## {title}: {verdict}",
        "",
        f"{len(summaries)} campaign(s), {ran} trial(s) run, {failed} failing, {skipped} "
        f"skipped; seed(s) {', '.join(seeds) or '-'}",
        "",
    ]
    if errors:
        out += ["### Scenario errors", ""]
        out += [f"- {_cell(e)}" for e in errors]
        out.append("")
    if summaries:
        out.append("| " + " | ".join(SUMMARY_COLUMNS) + " |")
        out.append("|" + "|".join("---" for _ in SUMMARY_COLUMNS) + "|")
        out += ["| " + " | ".join(_cell(c) for c in summary_row(s)) + " |" for s in summaries]
        out.append("")
    out += _failing(summaries, max_failures)
    out += _reasons(summaries)
    if changes:
        out += _changes(changes, max_failures)
    text = "\n".join(out).rstrip() + "\n"
    return _bounded(redact_env_secrets(text), max_bytes)


def _failing(summaries: Sequence[Mapping[str, Any]], limit: int) -> list[str]:
    failures = [(s, f) for s in summaries for f in s.get("failures") or []]
    if not failures:
        return []
    out = [f"### Failing trials ({len(failures)})", ""]
    for s, f in failures[:limit]:
        checks = f.get("checks") or []
        names = ", ".join(str(c).split(":", 1)[0] for c in checks) or "failed"
        cause = str(f.get("root_cause") or (checks[0] if checks else ""))
        first = names.split(", ", 1)[0]
        for prefix in (f"{first}: FAIL: ", f"{first}: "):
            if cause.startswith(prefix):
                cause = cause[len(prefix) :]
                break
        cause = one_line(cause)
        out.append(
            f"- **{_cell(s.get('scenario', s.get('name')))} [{_cell(s.get('family', ''))}] "
            f"trial {f.get('index')}** ({_cell(names)}): {_cell(cause)}"
        )
        if f.get("plan"):
            out.append(f"  - plan: {_cell(f['plan'])}")
        if f.get("replay"):
            out.append(f"  - replay: {_code(replay_here(f['replay']))}")
    if len(failures) > limit:
        out.append(f"- ... {len(failures) - limit} more in report.html")
    out.append("")
    return out


def replay_here(command: str, cwd: str | None = None) -> str:
    """``crashpoint replay /abs/…/trial-0001`` with the trial folder relative to ``cwd``
    (default: the working directory) when it lies inside it, as a CI job's log and summary
    show it (the runner's absolute path means nothing in a downloaded artifact); else as is."""
    prefix = "crashpoint replay "
    if not command.startswith(prefix):
        return command
    path = command[len(prefix) :]
    if not os.path.isabs(path):
        return command
    here = os.path.abspath(cwd or os.getcwd())
    rel = os.path.relpath(path, here)
    if rel == os.curdir or rel.startswith(os.pardir):
        return command
    return prefix + rel


def _reasons(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        f"- skipped: {_cell(r)}"
        for r in sorted({str(r) for s in summaries for r in s.get("skip_reasons") or []})
    ]
    for s in summaries:
        name = f"{s.get('scenario', s.get('name'))} [{s.get('family', '')}]"
        lines += [f"- not exercised: {_cell(name)}: {_cell(m)}" for m in s.get("unexercised") or []]
        if s.get("stopped"):
            lines.append(f"- stopped: {_cell(name)}: {_cell(s['stopped'])}")
    return ["### Skipped and not exercised", "", *lines, ""] if lines else []


def _changes(changes: Mapping[str, Any], limit: int) -> list[str]:
    c = changes.get("counts") or {}
    out = [
        "### What changed",
        "",
        f"{_cell(baseline_note(changes))}: **{c.get('new_failures', 0)} new failure(s)**, "
        f"{c.get('fixed', 0)} fixed, {c.get('still_failing', 0)} still failing, "
        f"{c.get('flaky', 0)} with the same seed and plan and another verdict (flaky unless "
        "the agent changed)",
        "",
    ]
    for title, kind in (("New failures", "new_failures"), ("Fixed", "fixed"), ("Flaky", "flaky")):
        entries = changes.get(kind) or []
        if not entries:
            continue
        out.append(f"**{title}**")
        out.append("")
        for e in entries[:limit]:
            line = f"- {_cell(e['campaign'])} trial {e['index']}: {e['before']} → {e['now']}"
            if e.get("cause") and e.get("now") == "failed":
                line += f": {_cell(e['cause'])}"
            out.append(line)
            if e.get("replay") and e.get("now") == "failed":
                out.append(f"  - replay: {_code(replay_here(e['replay']))}")
        if int(c.get(kind, len(entries))) > min(limit, len(entries)):
            out.append(f"- ... {int(c.get(kind, 0)) - min(limit, len(entries))} more in gate.json")
        out.append("")
    for title, kind in (
        ("new campaign", "campaigns_new"),
        ("removed campaign", "campaigns_removed"),
    ):
        out += [f"- {title}: {_cell(n)}" for n in changes.get(kind) or []]
    out.append("")
    return out


def _bounded(text: str, max_bytes: int) -> str:
    """``text``, cut at a line boundary to at most ``max_bytes`` (UTF-8), saying so."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    tail = "\n\n... cut here (the summary is limited); the rest is in report.html\n"
    head = data[: max(0, max_bytes - len(tail.encode()))].decode(errors="ignore")
    return head[: head.rfind("\n") + 1 if "\n" in head else 0] + tail
