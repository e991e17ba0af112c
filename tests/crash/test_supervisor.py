"""Auto-resume at start-up: interrupted runs complete, poison runs are dead-lettered.

Three demo runs in one store are SIGKILLed mid-way (after a step, and in two effects' in-doubt
windows); a ``Supervisor`` started afterwards finds and resumes all three, and each completes
with the golden output, every effect applied once. A run that fails on every attempt ends
dead-lettered after ``max_attempts`` with its reason, and refuses to open afterwards. Paused
runs wait for their decision, and even then only ``auto_resume_hitl`` resumes them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fake_target import FakeTarget
from resume_check import DEMO, PAUSED, run_attempt, run_to_end

from crashpoint.checkpoint import (
    Store,
    Supervisor,
    decide,
    interrupted_runs,
    open_run,
    resume_interrupted,
    run_reducer,
)
from crashpoint.errors import RunDeadLettered

if TYPE_CHECKING:
    from conftest import Children

POISON = [sys.executable, str(Path(__file__).parent / "poison_agent.py")]
#: Where each run is killed, as an event offset in its attempt (0 is the probe's hello).
KILLS = {
    "r1": (4, "before"),  # step_completed search: killed before hearing back
    "r2": (10, "in_doubt"),  # send_notification applied, the agent never told
    "r3": (13, "in_doubt"),
}  # publish applied, the agent never told


def demo(state: Path, run_id: str, *extra: str) -> list[str]:
    return [*DEMO, "--state", str(state), "--run-id", run_id, *extra]


def output_of(store: Store, run_id: str) -> object:
    return store.read(run_id, reducer=run_reducer).state.get("output")


def test_three_killed_runs_are_all_resumed_at_start_up(children: Children, tmp_path: Path) -> None:
    golden = run_to_end(children, demo(tmp_path / "golden", "g"))
    assert golden.returncode == 0
    state = tmp_path / "state"
    store = Store(state / "checkpoints")
    with FakeTarget() as target:
        env = {"CRASHPOINT_LEDGER": target.address}
        for n, (run_id, (offset, window)) in enumerate(sorted(KILLS.items()), start=1):
            target.arm_kill(len(target.events) + offset, window)  # type: ignore[arg-type]
            killed = run_attempt(children, demo(state, run_id), env=env, number=n, target=target)
            assert killed.returncode == -9, killed.stderr
        done = run_to_end(children, demo(state, "r0"), env=env)  # a finished run: left alone
        assert done.returncode == 0
        assert sorted(interrupted_runs(store)) == ["r1", "r2", "r3"]

        clean = {k: v for k, v in os.environ.items() if not k.startswith("CRASHPOINT_")}
        supervisor = Supervisor(
            store,
            command=lambda rid: demo(state, rid),
            timeout=30,
            max_attempts=3,
            env={**clean, **env},
        )
        outcomes = supervisor.resume_all()
        assert [(o.run_id, o.status, o.attempts) for o in outcomes] == [
            ("r1", "completed", 1),
            ("r2", "completed", 1),
            ("r3", "completed", 1),
        ]
        assert interrupted_runs(store) == []
        for run_id in ("r0", "r1", "r2", "r3"):
            assert output_of(store, run_id) == json.loads(golden.stdout)
            assert store.meta(run_id)["status"] == "completed"
        keys = [
            f"{rid}:{step}"
            for rid in ("r0", "r1", "r2", "r3")
            for step in ("4.notify:send_notification:0", "5.publish:publish:0")
        ]
        assert dict(target.applied) == dict.fromkeys(keys, 1)  # each effect once...
        assert target.deliveries["r2:4.notify:send_notification:0"] == 2  # ...retried in doubt,
        assert target.deliveries["r3:5.publish:publish:0"] == 2  # same key, deduplicated
        assert supervisor.resume_all() == []  # nothing left to do on the next start-up


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("exit", "exit 3: poison: cannot parse"), ("raise", "ValueError: poison: the input")],
)
def test_a_poison_run_is_dead_lettered_after_max_attempts(
    children: Children, tmp_path: Path, mode: str, reason: str
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    store = Store(state / "checkpoints")
    argv = [*POISON, "--state", str(state), "--run-id", "bad", "--mode", mode]
    first = run_to_end(children, argv)  # the crash that leaves it interrupted
    assert first.returncode != 0
    assert interrupted_runs(store) == ["bad"]

    outcomes = Supervisor(store, command=lambda rid: argv, max_attempts=3).resume_all()
    assert len(outcomes) == 1
    out = outcomes[0]
    assert (out.run_id, out.status, out.attempts) == ("bad", "dead", 3)
    assert reason in out.reason
    assert "all 3 attempts" in out.reason
    assert (state / "attempts-bad").read_text() == "x" * 4  # the first crash + 3 resumes
    assert store.meta("bad")["status"] == "dead"
    assert interrupted_runs(store) == []
    assert Supervisor(store, command=lambda rid: argv).resume_all() == []  # no crash loop
    assert (state / "attempts-bad").read_text() == "x" * 4
    with pytest.raises(RunDeadLettered) as info:
        open_run(store, "bad")
    assert reason in info.value.reason
    assert info.value.attempts >= 3
    again = run_to_end(children, argv)  # the agent itself is refused, with the dead exit code
    assert again.returncode != 0
    assert b"dead-lettered" in again.stderr


def test_a_hung_run_is_killed_at_the_timeout_and_counted(
    children: Children, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    store = Store(state / "checkpoints")
    exits = [*POISON, "--state", str(state), "--run-id", "slow", "--mode", "exit"]
    assert run_to_end(children, exits).returncode == 3
    hangs = [*POISON, "--state", str(state), "--run-id", "slow", "--mode", "hang"]
    [out] = Supervisor(store, command=lambda rid: hangs, timeout=0.5, max_attempts=1).resume_all()
    assert (out.status, out.attempts) == ("dead", 1)
    assert "timed out after 0.5s" in out.reason
    assert not store.runs()[0].locked  # the hung attempt's process group is gone


def test_in_process_resume_dead_letters_a_raising_run(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    with open_run(store, "bad", steps=["a"]):
        pass  # opened, never finished: interrupted
    calls = []

    def resume(run_id: str) -> None:
        calls.append(run_id)
        with open_run(store, run_id, steps=["a"]):
            raise RuntimeError("boom")

    [out] = resume_interrupted(store, resume, max_attempts=2)
    assert (out.status, out.attempts) == ("dead", 2)
    assert "RuntimeError: boom" in out.reason
    assert calls == ["bad", "bad"]


def test_paused_runs_wait_for_a_decision_and_auto_resume_hitl(
    children: Children, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    store = Store(state / "checkpoints")
    assert run_to_end(children, demo(state, "hitl", "--approval")).returncode == PAUSED
    attempts = store.read("hitl", reducer=run_reducer).state["attempts"]

    def command(rid: str) -> list[str]:
        return demo(state, rid, "--approval")

    for auto in (False, True):  # no decision: never resumed, even with auto_resume_hitl
        assert interrupted_runs(store, auto_resume_hitl=auto) == []
        assert Supervisor(store, command=command, auto_resume_hitl=auto).resume_all() == []
    decide(store, "hitl", approved=True)
    assert interrupted_runs(store) == []  # decided, but auto-resume of HITL runs is off
    assert Supervisor(store, command=command).resume_all() == []
    assert store.read("hitl", reducer=run_reducer).state["attempts"] == attempts  # untouched
    [out] = Supervisor(store, command=command, auto_resume_hitl=True).resume_all()
    assert (out.run_id, out.status) == ("hitl", "completed")
    assert store.meta("hitl")["status"] == "completed"
