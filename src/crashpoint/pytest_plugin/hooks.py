"""Hooks a conftest or plugin can implement to extend crashpoint (``pytest_crashpoint_*``)."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_crashpoint_checks(config: pytest.Config) -> dict[str, Any] | None:
    """Return extra checks ``{name: check(facts) -> CheckResult}`` run on every trial.

    ``facts`` is a :class:`crashpoint.harness.TrialFacts`; a check returns a
    :class:`crashpoint.harness.CheckResult`. Results from every implementation are merged.
    """


@pytest.hookspec(firstresult=True)
def pytest_crashpoint_plan(
    config: pytest.Config, family: Any, golden: Any, seed: int, index: int
) -> Any:
    """Return the :class:`crashpoint.harness.Plan` of trial ``index`` of ``family``, or None to
    leave it to the next implementation (the built-in one runs last). Use it for custom faults:
    any ``Fault`` kinds the trial runner knows, in your own combinations."""


def pytest_crashpoint_campaign_finished(config: pytest.Config, name: str, result: Any) -> None:
    """Called with each finished :class:`crashpoint.harness.CampaignResult`."""


def pytest_crashpoint_gate_finished(config: pytest.Config, verdict: Any) -> None:
    """Called once at the end of a session that used crashpoint (on the xdist controller), with
    the gate's :class:`crashpoint.harness.GateVerdict`: its exit code (0 pass, 1 fail, 2 bad
    input, 3 not judged, 130/143 interrupted), its word and its reasons. ``crashpoint run``
    exits with ``verdict.code``; pytest's own exit status is left as it is."""
