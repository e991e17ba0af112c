"""A scenario whose agent uses ``{postgres}`` (the harness's throw-away PostgreSQL) is skipped,
with the reason, where no server can run; the gate's other scenarios still run."""

from __future__ import annotations

from typing import Any

import pytest

pytest_plugins = ["pytester"]

WHY = "PostgreSQL server binaries (initdb, postgres) not found on PATH"


def test_a_postgres_scenario_is_skipped_where_no_server_can_run(
    inner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashpoint.pytest_plugin import _collect

    monkeypatch.setattr(_collect, "postgres_unavailable", lambda: WHY)
    inner.scenario(
        "pg",
        "backing: {service: postgres, do: restart, count: 1}",
        command='["{python}", "-c", "pass", "{postgres}"]',
    )
    result = inner.inprocess("-rs", "pg.scenario.yaml")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [f"*the agent uses {{postgres}}, and no PostgreSQL can run here: {WHY}*"]
    )


def test_a_memory_family_is_skipped_where_no_memory_cgroup_exists(
    inner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the memory family's item: the scenario's other families still run."""
    from crashpoint.pytest_plugin import _collect

    no = "our v1 memory cgroup /sys/fs/cgroup/memory/x is not writable (run as root)"
    monkeypatch.setattr(_collect, "memory_unavailable", lambda: no)
    inner.scenario(
        "mem",
        "memory: {limit: 64MiB, count: 1}\nkill: {at: random, count: 1}",
    )
    result = inner.inprocess("-rs", "mem.scenario.yaml")
    result.assert_outcomes(skipped=1, passed=1)
    result.stdout.fnmatch_lines([f"*memory faults: no memory cgroup here: {no}*"])
