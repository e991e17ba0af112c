"""GitHub Actions workflow annotations: ``::error file=F,line=L,title=T::message`` lines.

Printed at the end of a session when ``GITHUB_ACTIONS=true``: one for each scenario file that
could not be run (its file, line and key, from the collection error or the item's
``ScenarioError``) and one for each failing campaign (the scenario file and the line of its
fault entry, else line 1). Paths are relative to the working directory (GitHub resolves them
against the repository). Escaping follows GitHub's workflow-command rules: in the message
``%``, ``\\r`` and ``\\n``; in a property also ``:`` and ``,``.

:class:`ScenarioErrors` gathers the bad scenario files from the session's reports (they also go
to the step summary). Imports pytest, the standard library and the harness's lazy face only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from crashpoint import harness

__all__ = [
    "BAD_SCENARIOS",
    "CHANGES",
    "BadScenario",
    "ScenarioErrors",
    "annotation",
    "annotations_enabled",
    "bad_scenario_from_report",
    "campaign_annotations",
    "ci_lines",
    "escape_data",
    "escape_property",
    "scenario_annotations",
    "session_errors",
]

#: ``crashpoint scenario error: PATH[:LINE][ (key 'KEY')]: MESSAGE`` (a collection error), or
#: the same without the prefix (a ScenarioError raised by an item)
_SCENARIO_ERROR = re.compile(
    r"^(?!scenario ')(?:crashpoint scenario error: )?(?P<path>[^\n]+?\.ya?ml)(?::(?P<line>\d+))?"
    r"(?: \(key '(?P<key>[^']*)'\))?: (?P<message>.*)$",
    re.DOTALL,
)


def annotations_enabled(env: Mapping[str, str] | None = None) -> bool:
    """True on GitHub Actions (``GITHUB_ACTIONS=true``)."""
    return (os.environ if env is None else env).get("GITHUB_ACTIONS", "").lower() == "true"


def escape_data(text: str) -> str:
    """A workflow command's message: ``%``, ``\\r`` and ``\\n`` escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: as :func:`escape_data`, and ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(
    message: str, *, file: str = "", line: int | None = None, title: str = "", level: str = "error"
) -> str:
    """One ``::error file=…,line=…,title=…::message`` line (secrets of the environment
    redacted)."""
    props = []
    if file:
        props.append(f"file={escape_property(file)}")
    if line:
        props.append(f"line={int(line)}")
    if title:
        props.append(f"title={escape_property(harness.redact_env_secrets(title))}")
    head = f"::{level}" + (f" {','.join(props)}" if props else "")
    return f"{head}::{escape_data(harness.redact_env_secrets(message))}"


def _relative(path: str) -> str:
    """``path`` relative to the working directory when it is inside it, else as given."""
    if not path:
        return ""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


@dataclass(frozen=True)
class BadScenario:
    """A scenario file that could not be run: where (file, line, key) and why."""

    path: str
    line: int | None
    key: str
    message: str

    def describe(self) -> str:
        where = f"{_relative(self.path)}:{self.line}" if self.line else _relative(self.path)
        return f"{where}{f' (key {self.key!r})' if self.key else ''}: {self.message}"


def bad_scenario_from_report(report: Any) -> BadScenario | None:
    """The scenario error a failed collection or test report of a ``*.scenario.yaml`` carries
    (its text, so it works under pytest-xdist), else None."""
    if not getattr(report, "failed", False):
        return None
    nodeid = str(getattr(report, "nodeid", ""))
    if not re.search(r"\.ya?ml(::|$)", nodeid.split("::", 1)[0] + "::"):
        return None
    m = _SCENARIO_ERROR.match(str(getattr(report, "longrepr", "") or "").strip())
    if m is None:
        return None
    return BadScenario(
        m.group("path"),
        int(m.group("line")) if m.group("line") else None,
        m.group("key") or "",
        m.group("message").strip(),
    )


def scenario_annotations(bad: Iterable[BadScenario]) -> list[str]:
    """One annotation per bad scenario file (duplicates, e.g. one per family, dropped)."""
    out: list[str] = []
    seen: set[tuple[str, int | None, str, str]] = set()
    for b in bad:
        k = (b.path, b.line, b.key, b.message)
        if k in seen:
            continue
        seen.add(k)
        title = "crashpoint scenario error" + (f" (key {b.key})" if b.key else "")
        out.append(
            annotation(
                harness.one_line(b.message, 2000),
                file=_relative(b.path),
                line=b.line or 1,
                title=title,
            )
        )
    return out


def campaign_annotations(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """One annotation per failing campaign: its scenario file and fault entry's line, the
    first failing trial's cause and its replay command."""
    out: list[str] = []
    for s in summaries:
        if s.get("ok"):
            continue
        failures = s.get("failures") or []
        name = f"{s.get('scenario', s.get('name'))} [{s.get('family', '')}]"
        verdict = harness.summary_row(s)[-1]
        if failures:
            f = failures[0]
            checks = f.get("checks") or []
            cause = harness.one_line(f.get("root_cause") or (checks[0] if checks else ""))
            msg = (
                f"{len(failures)} failing trial(s); trial {f.get('index')}: {cause}\n"
                f"replay: {harness.replay_here(str(f.get('replay', '')))}"
            )
        else:
            reasons = [*(s.get("unexercised") or []), *([s["stopped"]] if s.get("stopped") else [])]
            msg = harness.one_line("; ".join(str(r) for r in reasons) or verdict, 1000)
        out.append(
            annotation(
                msg,
                file=_relative(str(s.get("file") or "")),
                line=int(s.get("line") or 1),
                title=f"crashpoint {verdict}: {name}",
            )
        )
    return out


#: the session's scenario files that could not be run (from collection and test reports)
BAD_SCENARIOS = pytest.StashKey[list[BadScenario]]()
#: what changed since the baseline (--crashpoint-baseline), once the session ended
CHANGES = pytest.StashKey[dict[str, Any]]()


class ScenarioErrors:
    """Gathers the scenario errors of failed collection and test reports (the controller sees
    its xdist workers' reports too)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        config.stash[BAD_SCENARIOS] = []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        bad = bad_scenario_from_report(report)
        if bad is not None:
            self.config.stash[BAD_SCENARIOS].append(bad)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        bad = bad_scenario_from_report(report)
        if bad is not None:
            self.config.stash[BAD_SCENARIOS].append(bad)


def session_errors(config: pytest.Config) -> list[str]:
    """The bad scenario files, one line each, without repeats."""
    bad: list[BadScenario] = config.stash.get(BAD_SCENARIOS, [])
    return list(dict.fromkeys(b.describe() for b in bad))


def ci_lines(config: pytest.Config, summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The annotations to print at the end of the session (none off GitHub Actions)."""
    if not annotations_enabled():
        return []
    bad: list[BadScenario] = config.stash.get(BAD_SCENARIOS, [])
    return scenario_annotations(bad) + campaign_annotations(summaries)
