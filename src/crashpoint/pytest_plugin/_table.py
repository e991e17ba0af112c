"""The option table: what pytest must know when it starts (the plugin's flags and ini keys,
their help, the ``crashpoint`` marker line), as plain strings and tuples.

Loaded with the plugin's entry module in every pytest session of an environment that has
crashpoint installed, used or not: no import, no class, no dataclass, nothing built. What the
values mean (their parsing, the resolved settings) is in :mod:`._options`, loaded once a
session uses crashpoint.
"""

from __future__ import annotations

__all__ = [
    "BASELINE_DESC",
    "BUDGET_DESC",
    "MARKER",
    "MODE_DESC",
    "OPTIONS",
    "PROGRESS_DESC",
    "REPORT_DESC",
    "SEED_DESC",
    "SHARD_DESC",
    "TRIALS_DESC",
]

SEED_DESC = "seed of every crashpoint campaign (trial plans are a pure function of it)"
TRIALS_DESC = "number of random trials per campaign (systematic ones cover every boundary)"
MODE_DESC = (
    "systematic: kill at every boundary, every power-loss state; random: draw boundaries at random"
)
REPORT_DESC = "folder for crashpoint reports (JSON, JUnit, HTML, failing trial folders)"
SHARD_DESC = "run only shard I of N of every campaign's trials (I/N, 1-based), for CI matrices"
PROGRESS_DESC = "show trials done / total and failures so far while campaigns run"
BUDGET_DESC = (
    "time budget of each campaign, e.g. 10m (none: no limit); past it the running "
    "trial is stopped, the rest is not run, and the campaign fails (default 10m)"
)
BASELINE_DESC = (
    "a previous gate.json (or the report folder holding it): the end of the run says what "
    "changed since (new failures, fixed, flaky), in the terminal, gate.json, report.html and "
    "the step summary"
)

#: name -> (CLI flag, environment variable, ini key, help, default)
OPTIONS: dict[str, tuple[str, str, str, str, str | None]] = {
    "seed": ("--crashpoint-seed", "CRASHPOINT_SEED", "crashpoint_seed", SEED_DESC, None),
    "trials": ("--crashpoint-trials", "CRASHPOINT_TRIALS", "crashpoint_trials", TRIALS_DESC, None),
    "mode": ("--crashpoint-mode", "CRASHPOINT_MODE", "crashpoint_mode", MODE_DESC, None),
    "report": ("--crashpoint-report", "CRASHPOINT_REPORT", "crashpoint_report", REPORT_DESC, None),
    "shard": ("--crashpoint-shard", "CRASHPOINT_SHARD", "crashpoint_shard", SHARD_DESC, None),
    "progress": (
        "--crashpoint-progress",
        "CRASHPOINT_PROGRESS",
        "crashpoint_progress",
        PROGRESS_DESC,
        None,
    ),
    "budget": ("--crashpoint-budget", "CRASHPOINT_BUDGET", "crashpoint_budget", BUDGET_DESC, None),
    "baseline": (
        "--crashpoint-baseline",
        "CRASHPOINT_BASELINE",
        "crashpoint_baseline",
        BASELINE_DESC,
        None,
    ),
}
MARKER = (
    "crashpoint(trials=None, faults=None, seed=None, restarts=None): campaign settings "
    "for the crash_harness fixture of this test"
)
