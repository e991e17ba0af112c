"""The demo agent, SIGKILLed at every step boundary and in every effect's in-doubt window.

Each trial: a fresh state folder, a kill armed in the fake target at one event of the golden
run, restarts (same ``--state``) until the agent exits 0. Every trial must give the golden
output byte for byte, apply every effect exactly once, and never start a step again that was
reported completed. The same checks run against deliberately broken agents must fail, so the
checks have teeth.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from resume_check import (
    DEMO,
    PAUSED,
    Attempt,
    Golden,
    Trial,
    failures,
    kill_points,
    run_trial,
    sweep,
    violations,
)

from crashpoint.checkpoint import Store, decide

if TYPE_CHECKING:
    from conftest import Children

BROKEN = [sys.executable, str(Path(__file__).parent / "broken_agent.py")]


def approve_when_paused(state: Path, run_id: str = "demo") -> Callable[[Attempt], None]:
    """Between attempts: record an approval once the run has paused for one."""

    def on_exit(attempt: Attempt) -> None:
        if attempt.returncode == PAUSED:
            decide(Store(state / "checkpoints"), run_id, approved=True, note="ok")

    return on_exit


def demo(state: Path, *extra: str) -> list[str]:
    return [*DEMO, "--state", str(state), *extra]


@pytest.fixture
def golden(children: Children, tmp_path_factory: pytest.TempPathFactory) -> Golden:
    return Golden.of(run_trial(children, demo(tmp_path_factory.mktemp("golden"))))


def test_golden_run_shows_every_step_and_effect(golden: Golden) -> None:
    assert golden.returncode == 0
    assert golden.steps == ("plan", "search", "summarise", "write_report", "notify", "publish")
    assert sorted(k for k, _ in golden.effects) == ["publish", "send_notification"]
    assert set(golden.effects.values()) == {1}
    out = json.loads(golden.stdout)
    assert out["notified"] is True
    assert out["published"] is True
    assert len(kill_points(golden)) == 12 + 2 * 2  # 6 steps x 2 boundaries, 2 effects x 2


# slow: fast cover: test_broken_agents.py's test_demo_agent_passes_a_mixed_fault_campaign (a kill
# at each of the demo's boundaries) and test_sweep_catches_a_broken_agent below (this sweep fails)
@pytest.mark.slow
def test_demo_survives_a_kill_at_every_boundary(
    children: Children, golden: Golden, tmp_path: Path
) -> None:
    found = failures(golden, sweep(children, demo, golden, tmp_path))
    assert not found, "\n".join(found)


def test_an_in_doubt_kill_is_resent_with_the_same_key(
    children: Children, golden: Golden, tmp_path: Path
) -> None:
    """A sweep that never killed anything would pass vacuously: check one in-doubt trial."""
    index = next(e.index for e in golden.events if e.op == "effect")
    trial = run_trial(children, demo(tmp_path), kill=(index, "in_doubt"))
    assert [a.returncode for a in trial.attempts] == [-9, 0]
    resent = next(e for e in trial.attempts[1].events if e.op == "effect")
    assert resent.name == golden.events[index].name  # the same key...
    assert resent.applied is False  # ...deduplicated by the target
    assert violations(golden, trial) == []


def approval_sweep(children: Children, tmp_path: Path, *, after_pause_only: bool) -> None:
    g_state = tmp_path / "golden"
    gold = Golden.of(
        run_trial(children, demo(g_state, "--approval"), on_exit=approve_when_paused(g_state))
    )
    assert "approve" in gold.steps
    assert gold.returncode == 0
    if after_pause_only:  # before the pause the run is the plain demo's, swept above
        first = next(e.index for e in gold.events if e.attempt == "2")
        gold = dataclasses.replace(gold, events=gold.events[first:])
    trials = sweep(
        children,
        lambda state: demo(state, "--approval"),
        gold,
        tmp_path,
        on_exit_for=approve_when_paused,
    )
    assert len(trials) >= 6
    # one pause per trial: a decision, once recorded, survives every later kill
    assert all([a.returncode for a in t.attempts].count(PAUSED) == 1 for t in trials)
    found = failures(gold, trials)
    assert not found, "\n".join(found)


def test_demo_with_approval_survives_a_kill_after_the_decision(
    children: Children, tmp_path: Path
) -> None:
    approval_sweep(children, tmp_path, after_pause_only=True)


@pytest.mark.slow
def test_demo_with_approval_survives_a_kill_at_every_boundary(
    children: Children, tmp_path: Path
) -> None:
    approval_sweep(children, tmp_path, after_pause_only=False)


# -- the checks have teeth -----------------------------------------------------------------------


def broken(bug: str) -> Callable[[Path], list[str]]:
    return lambda state: [*BROKEN, "--state", str(state), "--bug", bug]


@pytest.mark.slow  # the demo sweep above already shows a correct agent passes
def test_correct_small_agent_passes_the_same_sweep(children: Children, tmp_path: Path) -> None:
    gold = Golden.of(run_trial(children, broken("none")(tmp_path / "golden")))
    assert gold.returncode == 0, gold
    found = failures(gold, sweep(children, broken("none"), gold, tmp_path))
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("bug", "check"),
    [
        ("fresh-key", "exactly_once: effect notify"),
        ("from-scratch", "resumes_from_last_completed"),
        ("lost-effect", "exactly_once: effect notify"),
    ],
)
def test_sweep_catches_a_broken_agent(
    children: Children, bug: str, check: str, tmp_path: Path
) -> None:
    gold = Golden.of(run_trial(children, broken(bug)(tmp_path / "golden")))
    assert gold.returncode == 0

    # the sweep over the notify step (its start, the effect before it is sent and in doubt,
    # its completion): where all three bugs show; prepare's and report's kills (half the
    # sweep) add nothing here, and the correct agent passes the whole sweep (slow, above)
    def start(step: str) -> int:
        return next(
            i for i, e in enumerate(gold.events) if (e.op, e.name) == ("step_started", step)
        )

    notify = dataclasses.replace(gold, events=gold.events[start("notify") : start("report")])
    assert sorted(e.op for e in notify.events) == ["effect", "step_completed", "step_started"]
    found = failures(gold, sweep(children, broken(bug), notify, tmp_path))
    assert any(check in f for f in found), f"the {bug!r} agent passed:\n" + "\n".join(found)


def test_violations_reports_a_lost_and_a_repeated_effect(golden: Golden) -> None:
    """The helper itself: a trial that lost one effect and applied another twice."""
    (k1, p1), (k2, p2) = sorted(golden.effects)
    fake = Trial(
        ["agent"],
        (1, "before"),
        attempts=[
            Attempt(1, -9, b"", b"", golden.events[:3]),
            Attempt(2, 0, golden.stdout, b"", golden.events[1:]),
        ],
        applications=[(k1, p1, "a"), (k1, p1, "b")],
    )
    found = "\n".join(violations(golden, fake))
    assert f"effect {k1} {p1} duplicated" in found
    assert f"effect {k2} {p2} lost" in found
    assert "started ['plan'] again" in found
