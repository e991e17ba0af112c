"""The crash-recovery gate: kill each agent at every boundary of its run, restart it, and
check it finishes with the same output and every effect applied exactly once."""

import pytest

KILL_EVERYWHERE = [{"kill": {"at": "every-boundary"}}]


@pytest.mark.crashpoint(faults=KILL_EVERYWHERE)
def test_demo_agent_recovers(crash_harness, demo_agent):
    crash_harness.run(demo_agent).assert_ok()


@pytest.mark.crashpoint(faults=KILL_EVERYWHERE)
def test_our_agent_recovers(crash_harness, broken_agent):
    crash_harness.run(broken_agent).assert_ok()
