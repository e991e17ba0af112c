"""Campaigns run by pytest items: a harness built from the session's settings, and the record of
each campaign it ran.

Used by the ``crash_harness`` fixture and by the scenario items of
:mod:`crashpoint.pytest_plugin._collect`: :func:`make_harness` (options, the
``pytest_crashpoint_*`` hooks and the progress line wired in), :func:`record_campaign` for a
finished campaign (a summary on the item's test report, so it reaches the end table and
gate.json under pytest-xdist too) and :func:`record_interrupted` for one a signal stopped.

Imports pytest, the standard library, the plugin's options and the harness's lazy face only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from crashpoint import harness
from crashpoint.pytest_plugin._options import BOARD, SETTINGS, SUMMARIES, WORKER_FILE

if TYPE_CHECKING:
    from crashpoint.harness import CrashHarness

__all__ = ["folder_for", "make_harness", "record_campaign", "record_interrupted"]


def folder_for(config: pytest.Config, nodeid: str, fallback: Path) -> str:
    """The report folder of test ``nodeid``: under ``--crashpoint-report`` if given, else
    ``fallback``."""
    s = config.stash[SETTINGS]
    if not s.report:
        return str(fallback)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150]
    return os.path.join(s.report, safe)


def make_harness(
    config: pytest.Config,
    folder: str,
    *,
    seed: int | None = None,
    trials: int | None = None,
    faults: Any = None,
    restarts: int | None = None,
    item: str = "",
) -> CrashHarness:
    """A CrashHarness configured from the options (CLI > env > ini > marker > default)."""
    s = config.stash[SETTINGS]
    checks: dict[str, Any] = {}
    for part in config.hook.pytest_crashpoint_checks(config=config):
        if part:
            checks.update(part)

    def plan_hook(family: Any, golden: Any, seed_: int, index: int) -> Any:
        return config.hook.pytest_crashpoint_plan(
            config=config, family=family, golden=golden, seed=seed_, index=index
        )

    return harness.CrashHarness(
        folder,
        seed=s.seed if s.seed is not None else (seed or 0),
        trials=s.trials,
        mode=s.mode,
        shard=s.shard,
        restarts=3 if restarts is None else restarts,
        extra_checks=checks,
        plan_hook=plan_hook,
        progress=_progress(config, item),
        default_faults=faults,
        default_trials=trials,
        budget=s.budget,
    )


def record_campaign(item: pytest.Item, result: Any, **extra: Any) -> None:
    """Report a finished campaign: call ``pytest_crashpoint_campaign_finished`` and attach its
    summary to the item's test report (the end table and gate.json are built from those
    reports, so this works under pytest-xdist too)."""
    item.config.hook.pytest_crashpoint_campaign_finished(
        config=item.config, name=result.name, result=result
    )
    summary = result.summary()
    summary.update(extra)
    summary["trial_results"] = [t.to_json() for t in result.trials]
    item.user_properties.append(("crashpoint", json.dumps(summary, default=str)))


def record_interrupted(item: pytest.Item, result: Any, **extra: Any) -> None:
    """Keep the summary of a campaign a signal stopped (it has no test report) for the end
    table and gate.json (marked incomplete)."""
    summary = result.summary()
    summary.update(extra)
    summary["trial_results"] = [t.to_json() for t in result.trials]
    item.config.stash[SUMMARIES].append(json.loads(json.dumps(summary, default=str)))


def _progress(config: pytest.Config, item: str = "") -> Callable[[int, int, int, Any], None] | None:
    """The campaign's progress callback: a line naming the item, its trials, the session's
    items done of all and an ETA (printed here, or, on an xdist worker, written for the
    controller to print)."""
    board = config.stash.get(BOARD, None)
    if not config.stash[SETTINGS].progress or board is None:
        return None
    tr = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    worker_file = config.stash.get(WORKER_FILE, None)
    board.start_item(item)
    last = [0.0]

    def show(done: int, total: int, failures: int, result: Any) -> None:
        board.trial(done, total, not result.ok)
        if worker_file is not None:
            worker_file.write(board)
            return
        every = max(10, total // 10)
        due = (
            done == total or done % every == 0 or not result.ok or time.monotonic() - last[0] > 5.0
        )
        if tr is None or not due:
            return
        last[0] = time.monotonic()
        msg = f"{item}: trials {done}/{total}, failures so far: {failures}"
        if not result.ok:
            msg += f" (trial {result.plan.index}: {', '.join(c.name for c in result.failed)})"
        ctx = (
            capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
        )
        with ctx:
            tr.write_line(board.line(msg))

    return show
