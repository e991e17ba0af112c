"""Persistent faults (``every_attempt: true``) and the ``crash_loop`` check, end to end.

``tests/agents/reboot_loop.py`` (urllib, no crashpoint import) runs update, reboot, report as
POSTs to the HTTP stand-in. The fault kills it in the reboot request's in-doubt window on every
attempt (the reboot takes the host down with it). Without a cap it re-sends the reboot after
every restart until the restarts run out: ``crash_loop`` fails, attempt by attempt. With
``--max-attempts 2`` it counts its starts durably and gives up at the third (exit 69, a line on
stderr), and refuses again when started after that: it passes, and so do ``completes`` and
``exactly_once`` (the report it never sent is not "lost": it gave up clearly). Each way a stop
can go wrong fails with its own message: a stop that says nothing, one that re-sends the reboot
on its way out, one that does not stick. A fault on every attempt that never lands is not
exercised, never a pass.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _forked import forking, warm
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CheckResult,
    Expect,
    TrialResult,
    Zygote,
    family_from_spec,
    replay,
)

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tests" / "agents" / "reboot_loop.py"
#: the golden run's boundaries: POST /update (before, in doubt), POST /reboot (before, in
#: doubt), POST /report (before, in doubt); index 3 is the reboot's in-doubt window
REBOOT_IN_DOUBT = 3
EVERY_BOUNDARY = {"kill": {"at": "every-boundary", "every_attempt": True}}


def _agent(*flags: str) -> AgentSpec:
    return warm(AgentSpec(command=(sys.executable, str(AGENT), "{state_dir}", *flags), timeout=20))


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """One zygote for the module: the golden runs and attempts (up to five processes a trial)
    fork from it; these tests are about the crash_loop check, not about spawning (the replay
    in the first test spawns, as ``crashpoint replay`` does)."""
    with forking(_agent()) as z:
        yield z


def trial(
    zygote: Zygote,
    tmp_path: Path,
    *flags: str,
    fault: dict[str, Any] | None = None,
    only: int = REBOOT_IN_DOUBT,
    **expect: Any,
) -> TrialResult:
    result = Campaign(
        _agent(*flags),
        [family_from_spec(fault or EVERY_BOUNDARY)],
        str(tmp_path / "report"),
        name="loop",
        seed=1,
        restarts=3,
        expect=Expect(**expect),
        launcher=zygote,
    ).run(only=[only])
    (t,) = result.trials
    return t


def check(t: TrialResult, name: str = "crash_loop") -> CheckResult:
    return next(c for c in t.checks if c.name == name)


def test_a_reboot_loop_fails_crash_loop_attempt_by_attempt(zygote: Zygote, tmp_path: Path) -> None:
    t = trial(zygote, tmp_path)
    assert t.plan.describe() == "kill attempt 1 at effect:POST /reboot (in_doubt)"
    assert [a.signal for a in t.attempts] == [9, 9, 9, 9]  # restarts: 3, all used up
    assert t.exercised
    assert "fired in 4 of 4 attempts" in t.landed()
    assert t.status == "failed"
    assert t.root_cause is not None
    assert t.root_cause.name == "crash_loop"
    c = check(t)
    assert "crash loop: the fault on every attempt hit 4 of 4 attempts up to attempt 4" in c.message
    assert "a blind re-run" in c.message
    for n in (2, 3, 4):  # the evidence tells each attempt: what it did, how it ended
        assert f'attempt {n}: POST /reboot {{"command":"reboot","host":"web-1"}} applied again' in (
            c.message
        )
    assert "dead-letter" in c.hint
    assert "cap the attempts" in c.hint
    assert check(t, "completes").cause == "crash_loop"
    loop = (Path(t.folder) / "loop.txt").read_text()
    assert "attempt 4 [hit]" in loop
    assert "POST /reboot" in loop
    again = replay(t.folder)  # the folder's plan holds the fault once; the replay repeats it
    assert not check(again).ok
    assert "fired in 4 of 4 attempts" in again.landed()


def test_within_fails_the_loop_at_that_attempt(zygote: Zygote, tmp_path: Path) -> None:
    t = trial(zygote, tmp_path, "--max-attempts", "2", "--keyed", crash_loop_within=2)
    c = check(t)
    assert not c.ok  # it stopped at attempt 3, one too late
    assert "up to attempt 2" in c.message


def test_an_agent_that_counts_its_attempts_and_gives_up_passes(
    zygote: Zygote, tmp_path: Path
) -> None:
    t = trial(zygote, tmp_path, "--max-attempts", "2", "--keyed")
    assert t.status == "passed", [str(c) for c in t.failed]
    assert [a.returncode for a in t.attempts] == [None, None, 69, 69]
    assert "fired in 2 of 4 attempts (not in attempts 3, 4)" in t.landed()
    c = check(t)
    assert c.ok
    assert not c.skipped
    assert "stopped at attempt 3" in c.message
    assert "gave up after 2 attempts" in c.message
    assert "refused each time (attempt 4)" in c.message
    assert check(t, "completes").ok
    assert check(t, "same_output").skipped
    assert check(t, "exactly_once").ok  # the report it never sent is not counted lost


def test_a_stop_that_says_nothing_fails(zygote: Zygote, tmp_path: Path) -> None:
    t = trial(zygote, tmp_path, "--max-attempts", "2", "--keyed", "--quiet-stop")
    c = check(t)
    assert not c.ok
    assert "said nothing" in c.message
    assert "say why on stderr" in c.hint


def test_a_stop_that_resends_the_command_fails(zygote: Zygote, tmp_path: Path) -> None:
    t = trial(zygote, tmp_path, "--max-attempts", "2", "--resend")
    c = check(t)
    assert not c.ok
    assert "attempt 3 stopped" in c.message
    assert "on its way out applied again POST /update" in c.message
    assert "do not repeat the effects" in c.hint


def test_a_give_up_that_does_not_stick_fails(zygote: Zygote, tmp_path: Path) -> None:
    t = trial(zygote, tmp_path, "--max-attempts", "1", "--keyed", "--forgetful")
    c = check(t)
    assert not c.ok, c
    assert "attempt 2 stopped" in c.message
    assert "attempt 3 ran into the fault again" in c.message
    assert "did not stick" in c.hint


def test_a_fault_on_every_attempt_that_never_fires_is_not_exercised(
    zygote: Zygote, tmp_path: Path
) -> None:
    # failpoints live in crashpoint.checkpoint only: this agent never reaches one
    fault = {"kill": {"at": "failpoint", "every_attempt": True, "count": 1}}
    t = trial(zygote, tmp_path, fault=fault, only=0)
    assert t.status == "not exercised"
    assert not t.exercised
    (o,) = t.outcomes
    assert not o.fired
    assert "fired in 0 of 1 attempts" in o.why_not
    assert check(t).skipped


def test_the_example_ops_agent_dead_letters_through_the_library(tmp_path: Path) -> None:
    """examples/crash-loop/agent.py (the gate's crash-loop scenario): the library's Supervisor
    counts the attempts in the run's journal and dead-letters it; started again, it refuses."""
    example = ROOT / "examples" / "crash-loop" / "agent.py"
    agent = AgentSpec(
        command=(sys.executable, str(example), "--state", "{state_dir}", "--max-attempts", "2"),
        timeout=20,
    )
    result = Campaign(
        agent,
        [family_from_spec(EVERY_BOUNDARY)],
        str(tmp_path / "report"),
        name="example",
        seed=1,
        restarts=3,
        expect=Expect(crash_loop_within=3),
    ).run(only=[6])
    (t,) = result.trials
    assert t.plan.describe() == "kill attempt 1 at effect:POST /reboot (in_doubt)"
    assert t.status == "passed", [str(c) for c in t.failed]
    assert [a.returncode for a in t.attempts] == [None, None, 69, 69]
    c = check(t)
    assert "stopped at attempt 3" in c.message
    assert "dead-lettered after 2 attempts" in c.message


def test_a_service_that_stays_down_is_a_fault_on_every_attempt(
    zygote: Zygote, tmp_path: Path
) -> None:
    """network with every_attempt: the reboot request gets a 503 in every attempt; the agent
    (no retry) crashes each time. Uncapped it loops; capped it gives up at its third start."""
    down = {"network": {"call": "POST /reboot", "fail": 503, "every_attempt": True, "count": 1}}
    looped = trial(zygote, tmp_path / "a", fault=down, only=0)
    assert "fired in 4 of 4 attempts" in looped.landed()
    assert [a.returncode for a in looped.attempts] == [1, 1, 1, 1]  # HTTP 503: a traceback
    assert not check(looped).ok
    assert "hit 4 of 4 attempts" in check(looped).message
    capped = trial(zygote, tmp_path / "b", "--max-attempts", "2", fault=down, only=0)
    assert capped.status == "passed", [str(c) for c in capped.failed]
    assert "fired in 2 of 4 attempts" in capped.landed()
    assert "stopped at attempt 3" in check(capped).message
