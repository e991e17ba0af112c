"""A resumer refused by the lock the other holds is the race having happened (real processes).

``tests/agents/lock_holder.py``: the first attempt takes an ``flock``, does its work and then
lingers holding it; the second tries the lock only then, is refused and exits 75. Its end
comes after the first's last activity and its life is shorter than the barrier's patience:
the timeline that read as "ran at the same time ... but their work never overlapped" in CI
(there an interpreter's slow exit under load put the refused one's end late). The trace of
its refused ``flock`` is the proof. A second attempt that tries the lock only once the first
let go is not turned away and stays "did not fire".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashpoint.faults import strace_available
from crashpoint.harness import AgentSpec, Campaign, TrialResult, family_from_spec

AGENT = Path(__file__).resolve().parents[1] / "agents" / "lock_holder.py"


@pytest.fixture(params=["strace", "audit"])
def recorded_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The refused flock seen by strace, or (strace switched off) by the audit hook's wrapper
    of ``fcntl.flock``."""
    if request.param == "strace":
        ok, why = strace_available()
        if not ok:
            pytest.skip(f"strace cannot trace here: {why}")
    else:
        monkeypatch.setenv("CRASHPOINT_NO_STRACE", "1")
    return str(request.param)


def _trial(tmp_path: Path, after: str, linger: str) -> TrialResult:
    agent = AgentSpec(
        command=("{python}", str(AGENT), "{state_dir}"),
        timeout=30,
        env=(("LOCK_HOLDER_AFTER", after), ("LOCK_HOLDER_LINGER", linger)),
    )
    result = Campaign(
        agent,
        [family_from_spec({"resumers": {"count": 1}})],
        report_dir=str(tmp_path / "report"),
        name="lock_holder",
        seed=1,
    ).run()
    (trial,) = result.trials
    return trial


def _explain(trial: TrialResult) -> str:
    return "\n".join([*map(str, trial.outcomes), *map(str, trial.checks)])


def test_a_resumer_refused_by_the_lock_the_other_holds_fired(
    tmp_path: Path, recorded_by: str
) -> None:
    trial = _trial(tmp_path, "ready", "1.5")  # held long enough under load
    (outcome,) = trial.outcomes
    assert outcome.fired, _explain(trial)
    assert outcome.where.startswith(
        "attempt 2 was refused by the lock attempt 1 held: its flock on {state_dir}/lock failed "
        "(EAGAIN) "  # the same errno as EWOULDBLOCK on Linux: strace and Python name it so
    ), outcome
    assert outcome.where.endswith(
        "and then it exited 75 ('another process holds this run: busy, refusing to start')"
    ), outcome
    assert [a.returncode for a in trial.attempts[:2]] == [0, 75]
    assert trial.ok, _explain(trial)


def test_a_resumer_that_takes_the_lock_after_the_other_let_go_did_not_fire(
    tmp_path: Path, recorded_by: str
) -> None:
    trial = _trial(tmp_path, "released", "0")
    (outcome,) = trial.outcomes
    assert not outcome.fired, _explain(trial)
    assert "their work never overlapped" in outcome.why_not, outcome
    assert [a.returncode for a in trial.attempts[:2]] == [0, 0]
    assert trial.status == "not exercised", trial.status
