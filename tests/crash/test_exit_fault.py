"""The ``exit`` fault: at a chosen probe event the agent exits with a chosen non-zero code.

The ledger's reply to the event carries ``"exit": N`` and crashpoint.probe ends the process
with it (``os._exit`` after flushing what it printed). With ``every_attempt: true`` it is a
persistent non-zero exit at the same point: examples/crash-loop/agent.py (the library's
Supervisor, ``--max-attempts 2``) dead-letters its run at the third start and passes
``crash_loop``; with no real cap (``--max-attempts 50``) it loops and fails it. Fault
accounting: fired only when the attempt really ended with the code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from crashpoint.errors import FaultSpecError
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CheckResult,
    Expect,
    TrialResult,
    family_from_spec,
    replay,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "crash-loop" / "agent.py"
IGNORER = ROOT / "tests" / "agents" / "ignores_exit.py"
#: the example's probe events: step_started/step_completed of update, reboot, report (its
#: effects go over HTTP, where no exit can be carried); index 2 is step_started:reboot
REBOOT_STARTED = 2
EVERY = {"exit": {"at": "every-boundary", "code": 3, "every_attempt": True}}


def trial(
    tmp_path: Path, command: tuple[str, ...], fault: dict[str, Any], only: int, **expect: Any
) -> TrialResult:
    agent = AgentSpec(command=command, timeout=20)
    result = Campaign(
        agent,
        [family_from_spec(fault)],
        str(tmp_path / "report"),
        name="exit",
        seed=1,
        restarts=3,
        expect=Expect(**expect),
    ).run(only=[only])
    (t,) = result.trials
    return t


def example(max_attempts: int) -> tuple[str, ...]:
    return (
        sys.executable,
        str(EXAMPLE),
        "--state",
        "{state_dir}",
        "--max-attempts",
        str(max_attempts),
    )


def check(t: TrialResult, name: str = "crash_loop") -> CheckResult:
    return next(c for c in t.checks if c.name == name)


def test_a_dead_lettering_agent_passes_crash_loop_under_an_exit_on_every_attempt(
    tmp_path: Path,
) -> None:
    t = trial(tmp_path, example(2), EVERY, REBOOT_STARTED, crash_loop_within=3)
    assert t.plan.describe() == "exit 3 in attempt 1 at step_started:reboot (before)"
    assert [a.returncode for a in t.attempts] == [3, 3, 69, 69]
    assert [a.signal for a in t.attempts] == [None] * 4
    assert t.status == "passed", [str(c) for c in t.failed]
    assert "fired in 2 of 4 attempts (not in attempts 3, 4)" in t.landed()
    assert "step_started:reboot (before), exit 3" in t.landed()
    assert "stopped at attempt 3" in check(t).message
    assert "told to exit 3 at event" in t.attempts[0].killed_by


def test_a_looping_agent_fails_crash_loop_and_the_replay_repeats_it(tmp_path: Path) -> None:
    t = trial(tmp_path, example(50), EVERY, REBOOT_STARTED, crash_loop_within=3)
    assert [a.returncode for a in t.attempts] == [3, 3, 3, 3]
    assert "fired in 4 of 4 attempts" in t.landed()
    assert t.status == "failed"
    c = check(t)
    assert not c.ok
    assert "hit 3 of 3 attempts up to attempt 3" in c.message
    assert "exit 3 (the fault hit it" in (Path(t.folder) / "loop.txt").read_text()
    again = replay(t.folder)  # the folder's plan holds the fault once; the replay repeats it
    assert not check(again).ok
    assert [a.returncode for a in again.attempts] == [3, 3, 3, 3]


def test_a_single_exit_is_resumed_from(tmp_path: Path) -> None:
    fault = {"exit": {"at": "every-boundary", "code": 7}}
    t = trial(tmp_path, example(2), fault, REBOOT_STARTED)
    assert [a.returncode for a in t.attempts] == [7, 0]
    assert t.status == "passed", [str(c) for c in t.failed]
    (o,) = t.outcomes
    assert o.fired
    assert o.where.endswith("exit 7")


def test_a_client_that_ignores_the_exit_is_not_exercised(tmp_path: Path) -> None:
    fault = {"exit": {"at": "every-boundary", "code": 5}}
    t = trial(tmp_path, (sys.executable, str(IGNORER)), fault, 0)
    assert [a.returncode for a in t.attempts] == [0]
    assert t.status == "not exercised"
    (o,) = t.outcomes
    assert not o.fired
    assert "told the agent to exit 5, but the attempt exited 0" in o.why_not
    assert "wire-protocol" in o.why_not


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"exit": {"code": 0}}, "exit.code must be at least 1"),
        ({"exit": {"code": 256}}, "above the cap of 255"),
        ({"exit": {"code": "3"}}, "exit.code must be a whole number"),
        ({"exit": {"at": "time"}}, "exit.at must be one of random, every-boundary, failpoint"),
        ({"exit": {"sig": "TERM"}}, "unknown option(s) sig"),
        ({"exit": {"names": ["journal.write"]}}, "exit.names goes with at: failpoint"),
        ({"exit": {"at": "failpoint", "names": ["nope"]}}, "known: journal.write"),
    ],
)
def test_bad_exit_options_say_what_and_where(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(FaultSpecError, match=None) as info:
        family_from_spec(spec)
    assert says in str(info.value)


def test_an_agent_without_probe_events_gets_a_clear_error(tmp_path: Path) -> None:
    """reboot_loop.py only POSTs to the HTTP stand-in: no reply there can carry an exit."""
    from crashpoint.errors import NoBoundaries

    agent = AgentSpec(
        command=(sys.executable, str(ROOT / "tests" / "agents" / "reboot_loop.py"), "{state_dir}"),
        timeout=20,
    )
    camp = Campaign(
        agent, [family_from_spec({"exit": {"count": 1}})], str(tmp_path / "r"), name="x", seed=1
    )
    with pytest.raises(NoBoundaries, match="exit faults need an agent that reports steps"):
        camp.run()


def test_an_exit_at_a_library_failpoint(tmp_path: Path) -> None:
    """at: failpoint arms one of crashpoint.checkpoint's failpoints to exit(CODE) itself."""
    fault = {"exit": {"at": "failpoint", "names": ["step.after_complete"], "code": 4, "count": 1}}
    t = trial(tmp_path, example(5), fault, 0)
    assert t.plan.faults[0].arg("spec").startswith("step.after_complete=exit(4)@")
    assert t.attempts[0].returncode == 4
    assert t.attempts[-1].returncode == 0
    (o,) = t.outcomes
    assert o.fired, o.why_not
    assert "failpoint step.after_complete hit" in o.where
    assert t.status == "passed", [str(c) for c in t.failed]


def test_an_exit_in_an_effects_in_doubt_window(tmp_path: Path) -> None:
    """The demo agent's effects go through the probe: at ``effect:publish (in_doubt)`` the
    effect is applied, then the reply tells the agent to exit; the next attempt retries with
    the same key and the ledger deduplicates it."""
    demo = (sys.executable, "-m", "crashpoint.agents.demo", "--state", "{state_dir}")
    fault = {"exit": {"at": "every-boundary", "code": 9}}
    t = trial(tmp_path, demo, fault, 14)
    assert t.plan.describe() == "exit 9 in attempt 1 at effect:publish (in_doubt)"
    assert [a.returncode for a in t.attempts] == [9, 0]
    hit = next(e for e in t.events if e.get("exit"))
    assert (hit["op"], hit["killed"], hit["applied"], hit["exit"]) == (
        "effect",
        "in_doubt",
        True,
        9,
    )
    assert t.status == "passed", [str(c) for c in t.failed]
    assert next(c for c in t.checks if c.name == "exactly_once").ok
