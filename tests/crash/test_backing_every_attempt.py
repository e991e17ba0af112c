"""``backing`` with ``every_attempt: true``: the database goes away at the same step in every
attempt (a lock another job takes each time that step runs; a server that restarts on every
deploy).

examples/backing/agent.py on SQLite (WAL): the write lock is held from the start of step
``read`` in every attempt, and the agent is killed at its next step report. Without ``--fixed``
it reports the step completed although its write failed, so every restart runs ``read`` again
and meets the lock again: fired in 4 of 4 attempts, and ``crash_loop`` (and the acknowledged
write lost) fail. With ``--fixed`` it waits the lock out: its step was durable, the next attempt
resumes past ``read`` and the outage planned for it never begins ("not in attempt 2").
"""

from __future__ import annotations

import sys
from pathlib import Path

from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CheckResult,
    Expect,
    Plan,
    TrialResult,
    family_from_spec,
)
from crashpoint.harness._spec import persist

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "backing" / "agent.py"
EVERY_STEP = {
    "backing": {"service": "sqlite", "at": "every-step", "for": "0.5s", "every_attempt": True}
}
READ = 1  # the sweep's second step: step_started:read


def trial(tmp_path: Path, *flags: str) -> TrialResult:
    agent = AgentSpec(
        command=(sys.executable, str(EXAMPLE), "--sqlite", "{state_dir}/research.db", *flags),
        timeout=20,
    )
    result = Campaign(
        agent,
        [family_from_spec(EVERY_STEP)],
        str(tmp_path / "report"),
        name="backing",
        seed=1,
        restarts=3,
        expect=Expect(),
    ).run(only=[READ])
    (t,) = result.trials
    return t


def check(t: TrialResult, name: str) -> CheckResult:
    return next(c for c in t.checks if c.name == name)


def test_a_lock_on_every_attempt_loops_an_agent_that_loses_its_write(tmp_path: Path) -> None:
    t = trial(tmp_path)
    assert (
        t.plan.describe()
        == "SQLite lock of {state_dir}/** for 0.5s in attempt 1 at step_started:read"
    )
    assert [a.signal for a in t.attempts] == [9, 9, 9, 9]
    assert "fired in 4 of 4 attempts" in t.landed()
    assert "SQLite immediate lock at attempt 2 event" in t.landed()
    assert not check(t, "crash_loop").ok
    assert not check(t, "resumes_from_last_completed").ok


def test_an_agent_that_waits_the_lock_out_resumes_past_it(tmp_path: Path) -> None:
    t = trial(tmp_path, "--fixed")
    assert [(a.returncode, a.signal) for a in t.attempts] == [(None, 9), (0, None)]
    assert t.status == "passed", [str(c) for c in t.failed]
    assert "fired in 1 of 2 attempts (not in attempt 2)" in t.landed()


def test_the_plan_repeats_the_outage_at_the_same_step_for_every_attempt() -> None:
    from crashpoint.harness import Fault, Golden

    events = [
        {"op": "step_started", "step": "search", "attempt": 1},
        {"op": "step_completed", "step": "search", "attempt": 1},
        {"op": "step_started", "step": "read", "attempt": 1},
        {"op": "step_completed", "step": "read", "attempt": 1},
    ]
    golden = Golden(["search", "read"], events, {}, b"", 0.1)  # type: ignore[arg-type]
    f = Fault.make(
        "backing", 1, service="sqlite", op="step_started", name="read", nth=1, every=True
    )
    ran, origin = persist(Plan((f,)), golden, 3)
    assert [g.attempt for g in ran.faults] == [1, 2, 3, 4]
    assert {(g.arg("op"), g.arg("name"), g.arg("nth")) for g in ran.faults} == {
        ("step_started", "read", 1)
    }
    assert origin == [0, 0, 0, 0]
