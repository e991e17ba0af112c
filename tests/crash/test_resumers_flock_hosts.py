"""``resumers: {hosts: true}`` with real processes, no PostgreSQL: three resumers of an agent
that holds an ``flock`` (a lock of the kernel, which every pid namespace shares) still take
turns, each in a pid and UTS namespace of its own; where namespaces cannot be made the trial is
not exercised, saying why (never a pass)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashpoint.harness import AgentSpec, Campaign, TrialResult, family_from_spec

AGENT = Path(__file__).resolve().parents[1] / "agents" / "good_agent.py"


def trial(tmp_path: Path) -> TrialResult:
    agent = AgentSpec(command=("{python}", str(AGENT), "--state", "{state_dir}"), timeout=30)
    result = Campaign(
        agent,
        [family_from_spec({"resumers": {"count": 1, "processes": 3, "hosts": True}})],
        report_dir=str(tmp_path / "report"),
        name="hosts",
        seed=1,
        restarts=3,
    ).run()
    (t,) = result.trials
    return t


def test_resumers_on_hosts_of_their_own_with_an_flock_take_turns(tmp_path: Path) -> None:
    from crashpoint._proc import hosts_unavailable

    if hosts_unavailable():
        pytest.skip(str(hosts_unavailable()))
    t = trial(tmp_path)
    (outcome,) = t.outcomes
    assert outcome.fired, t.landed()
    assert "each in a pid and UTS namespace of its own" in outcome.where
    assert t.ok, [str(c) for c in t.failed]


def test_without_namespaces_the_trial_is_not_exercised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashpoint.harness._engine import _attempts

    why = "a pid namespace of its own cannot be made here (test)"
    monkeypatch.setattr(_attempts, "hosts_unavailable", lambda: why)
    t = trial(tmp_path)
    assert t.status == "not exercised", t.landed()
    assert t.outcomes[0].why_not == f"resumers on hosts of their own: {why}"
