"""What a session asks of crashpoint: the options, their resolved settings, and the marker.

Each option is a flag, an environment variable and an ini key sharing one help text
(:data:`OPTIONS`, from the plain table in :mod:`._table` that the entry module reads when pytest
starts); :func:`resolve_settings` takes each from the command line, else the
environment, else the ini file, and a bad value is a usage error naming where it came from.
The ``crashpoint`` marker is parsed strictly (:func:`marker_options`). The stash keys the
plugin's modules share live here too.

Imports pytest, the standard library and the harness's lazy face only: a harness name is
loaded when a value needs it (a budget, a report folder, a marker's faults).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from crashpoint import harness
from crashpoint.pytest_plugin._table import (
    BASELINE_DESC,
    BUDGET_DESC,
    MARKER,
    MODE_DESC,
    OPTIONS,
    PROGRESS_DESC,
    REPORT_DESC,
    SEED_DESC,
    SHARD_DESC,
    TRIALS_DESC,
)

__all__ = [
    "BASELINE_DESC",
    "BOARD",
    "BUDGET_DESC",
    "GATE_NOTES",
    "ITEMS",
    "MARKER",
    "MODE_DESC",
    "OPTIONS",
    "PROGRESS_DESC",
    "REPORT_DESC",
    "SEED_DESC",
    "SETTINGS",
    "SHARD_DESC",
    "SUMMARIES",
    "TRIALS_DESC",
    "WORKER_FILE",
    "Settings",
    "marker_options",
    "resolve_settings",
]

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Settings:
    """The resolved crashpoint options, each with where it came from."""

    seed: int | None
    trials: int | None
    mode: str | None
    report: str | None
    shard: tuple[int, int] | None
    progress: bool
    where: dict[str, str]
    budget: float | None = None  # seconds (inf: no limit); None: the scenario's, else 10m
    #: the baseline's (gate.json path, content), read when the session starts (before the
    #: session replaces a gate.json in its report folder)
    baseline: tuple[str, dict[str, Any]] | None = field(default=None, repr=False)


SETTINGS = pytest.StashKey[Settings]()
#: the session's campaign summaries (from test reports, and from campaigns a signal stopped)
SUMMARIES = pytest.StashKey[list[dict[str, Any]]]()
BOARD = pytest.StashKey[Any]()  # crashpoint.pytest_plugin._board.Board
WORKER_FILE = pytest.StashKey[Any]()  # an xdist worker's _board.WorkerFile
#: what the session's reports said besides the campaigns, for the gate's verdict: "bad_input"
#: (collection errors: a malformed scenario file), "failed" (a scenario item that failed
#: without a campaign: its golden run failed), "not_judged" (an agent with no boundary); one
#: line each
GATE_NOTES = pytest.StashKey[dict[str, list[str]]]()
#: the session's items: "collected" (node ids, in order; an xdist controller's from its
#: workers) and "finished" (those whose teardown was reported): after an interrupt, the rest
#: are errors in junit.xml
ITEMS = pytest.StashKey[dict[str, list[str]]]()


def _parse(name: str, raw: Any, where: str) -> Any:
    def bad(why: str) -> pytest.UsageError:
        return pytest.UsageError(f"crashpoint: bad value {raw!r} for {where}: {why}")

    if name in ("seed", "trials"):
        try:
            v = int(str(raw).strip())
        except ValueError:
            raise bad("expected a whole number") from None
        if v < 0:
            raise bad("expected a number >= 0")
        return v
    if name == "mode":
        v2 = str(raw).strip().lower()
        if v2 not in ("systematic", "random"):
            raise bad("expected one of: systematic, random")
        return v2
    if name == "shard":
        m = _SHARD.match(str(raw))
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            raise bad("expected I/N with 1 <= I <= N, e.g. 1/4")
        return (int(m.group(1)), int(m.group(2)))
    if name == "budget":
        try:
            return harness.parse_budget(str(raw), what="")
        except harness.UnitError as exc:
            raise bad(f"{exc}; or none for no limit") from None
    if name == "progress":
        if isinstance(raw, bool):
            return raw
        v3 = str(raw).strip().lower()
        if v3 in ("1", "true", "yes", "on"):
            return True
        if v3 in ("0", "false", "no", "off", ""):
            return False
        raise bad("expected true or false")
    if name == "baseline":
        if not str(raw).strip():
            raise bad("expected a gate.json or the report folder holding it")
        try:
            return harness.load_gate(str(raw))
        except harness.GateFileError as exc:
            raise bad(exc.message) from None
    if not str(raw).strip():
        raise bad("expected a folder path")
    if os.path.exists(raw) and not os.path.isdir(raw):
        raise bad("it is an existing file; expected a folder path")
    try:  # another user's folder, or one others can write in: refused before anything runs
        harness.check_report_folder(str(raw))
    except harness.UnsafeReportFolder as exc:
        raise bad(str(exc)) from None
    return os.path.abspath(str(raw))  # agents run in their own folder: relative would move


def resolve_settings(config: pytest.Config) -> Settings:
    """Each option from the command line, else the environment, else the ini file."""
    values: dict[str, Any] = {}
    where: dict[str, str] = {}
    for name, (flag, env, ini, _help, default) in OPTIONS.items():
        cli = config.getoption(f"crashpoint_{name}")
        if cli is not None:
            values[name], where[name] = _parse(name, cli, f"{flag} (command line)"), "cli"
        elif os.environ.get(env, "") != "":
            values[name] = _parse(name, os.environ[env], f"{env} (environment)")
            where[name] = "env"
        else:
            ini_v = config.getini(ini)
            if str(ini_v).strip():
                values[name] = _parse(name, ini_v, f"{ini} (ini file {config.inipath})")
                where[name] = "ini"
            else:
                values[name] = default if name != "progress" else False
                where[name] = "default"
    return Settings(
        values["seed"],
        values["trials"],
        values["mode"],
        values["report"],
        values["shard"],
        bool(values["progress"]),
        where,
        values["budget"],
        values["baseline"],
    )


# -- marker -----------------------------------------------------------------------------------


def _marker_signature(
    *,
    trials: int | None = None,
    faults: Any = None,
    seed: int | None = None,
    restarts: int | None = None,
) -> dict[str, Any]:
    return {"trials": trials, "faults": faults, "seed": seed, "restarts": restarts}


def marker_options(item: pytest.Item) -> dict[str, Any]:
    """The crashpoint marker's arguments, parsed strictly (unknown ones are an error)."""
    m = item.get_closest_marker("crashpoint")
    if m is None:
        return _marker_signature()
    try:
        opts = _marker_signature(*m.args, **m.kwargs)
    except TypeError as exc:
        why = str(exc).replace("_marker_signature()", "crashpoint()")
        raise pytest.UsageError(
            f"{item.nodeid}: bad @pytest.mark.crashpoint arguments (from marker): {why}; "
            "allowed: trials=, faults=, seed=, restarts="
        ) from None
    for key in ("trials", "seed", "restarts"):
        v = opts[key]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.crashpoint({key}={v!r}) "
                "(from marker): expected a whole number >= 0"
            )
    if opts["faults"] is not None:
        as_families = harness.as_families
        try:
            as_families(opts["faults"])
        except (TypeError, ValueError, AttributeError) as exc:
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.crashpoint(faults={opts['faults']!r}) (from "
                f"marker): {exc}"
            ) from None
    return opts
