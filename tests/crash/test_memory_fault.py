"""The ``memory`` fault: the attempt runs in a memory cgroup of its own, and a limit set from its
start or squeezed at a boundary makes the kernel OOM-kill the agent when it allocates past it.

``examples/memory/agent.py`` allocates 96 MiB in its ``load`` step. Fault accounting counts
the fault as fired only when the cgroup's own counters show an OOM kill; the cgroups are gone
after the trial. Needs a writable memory cgroup (root, and a cgroup v1 memory hierarchy or the
v2 memory controller): elsewhere the trials are skipped with the reason, which one test checks
without needing one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from crashpoint._proc import memory_cgroup_support
from crashpoint._proc._memcg import _PREFIX, _base
from crashpoint.errors import FaultSpecError
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CheckResult,
    Expect,
    TrialResult,
    family_from_spec,
)

ROOT = Path(__file__).resolve().parents[2]
HOG = ROOT / "examples" / "memory" / "agent.py"
WHY_NOT = memory_cgroup_support()
needs_cgroup = pytest.mark.skipif(bool(WHY_NOT), reason=f"no writable memory cgroup: {WHY_NOT}")
#: the hog's events: step_started/step_completed of prepare, load, report; 2 is load's start
LOAD_STARTED = 2


def trials(
    tmp_path: Path, fault: dict[str, Any], *flags: str, only: list[int] | None = None
) -> list[TrialResult]:
    agent = AgentSpec(command=(sys.executable, str(HOG), "{state_dir}", *flags), timeout=20)
    result = Campaign(
        agent,
        [family_from_spec(fault)],
        str(tmp_path / "report"),
        name="memory",
        seed=1,
        restarts=3,
        expect=Expect(),
    ).run(only=only)
    return list(result.trials)


def check(t: TrialResult, name: str) -> CheckResult:
    return next(c for c in t.checks if c.name == name)


def our_cgroups() -> list[str]:
    """The attempt cgroups this process still has (there should be none between trials)."""
    base, _version = _base()
    mine = [n for n in os.listdir(base) if n.startswith(_PREFIX) and f"-{os.getpid()}-" in n]
    return [
        os.path.join(base, n, a)
        for n in mine
        for a in os.listdir(os.path.join(base, n))
        if a.startswith("a-")
    ]


@needs_cgroup
def test_a_limit_from_the_start_oom_kills_and_the_next_attempt_resumes(tmp_path: Path) -> None:
    (t,) = trials(tmp_path, {"memory": {"limit": "48MiB", "count": 1}})
    assert t.plan.describe() == "memory limit 48 MiB in attempt 1 from its start"
    assert [(a.returncode, a.signal) for a in t.attempts] == [(None, 9), (0, None)]
    assert t.status == "passed", [str(c) for c in t.failed]
    (o,) = t.outcomes
    assert o.fired
    assert "the kernel OOM-killed it (oom_kill 1" in o.where
    assert our_cgroups() == []  # removed with the attempt


@needs_cgroup
def test_a_squeeze_at_a_boundary_lands_there(tmp_path: Path) -> None:
    fault = {"memory": {"limit": "48MiB", "at": "every-boundary"}}
    (t,) = trials(tmp_path, fault, only=[LOAD_STARTED])
    assert t.plan.describe() == "memory limit 48 MiB in attempt 1 at step_started:load"
    (o,) = t.outcomes
    assert o.fired, o.why_not
    assert "at event #2 step_started:load" in o.where
    assert t.attempts[0].signal == 9


@needs_cgroup
def test_a_limit_the_agent_never_reaches_is_not_exercised(tmp_path: Path) -> None:
    (t,) = trials(tmp_path, {"memory": {"limit": "1GiB", "count": 1}})
    assert [a.returncode for a in t.attempts] == [0]
    assert t.status == "not exercised"
    (o,) = t.outcomes
    assert not o.fired
    assert "never OOM-killed it (the cgroup counted no OOM kill, its peak use" in o.why_not


@needs_cgroup
def test_a_persistent_oom_loops_unless_the_agent_caps_its_attempts(tmp_path: Path) -> None:
    fault = {"memory": {"limit": "48MiB", "count": 1, "every_attempt": True}}
    (looped,) = trials(tmp_path / "a", fault)
    assert [a.signal for a in looped.attempts] == [9, 9, 9, 9]
    assert "fired in 4 of 4 attempts" in looped.landed()
    assert not check(looped, "crash_loop").ok
    (capped,) = trials(tmp_path / "b", fault, "--max-attempts", "2")
    assert [a.returncode for a in capped.attempts] == [None, None, 69, 69]
    assert capped.status == "passed", [str(c) for c in capped.failed]
    assert "stopped at attempt 3" in check(capped, "crash_loop").message
    assert our_cgroups() == []


def test_without_a_memory_cgroup_the_trial_is_skipped_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashpoint.harness._engine import _trial

    monkeypatch.setattr(_trial, "memory_cgroup_support", lambda: "not root (uid 1000)")
    (t,) = trials(tmp_path, {"memory": {"limit": "48MiB", "count": 1}})
    assert t.attempts == []
    assert "memory faults skipped: no writable memory cgroup here (not root (uid 1000))" in (
        t.skipped
    )


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"memory": {}}, "memory.limit is required"),
        ({"memory": {"limit": "512KiB"}}, "memory.limit must be from 1MiB to 1TiB"),
        ({"memory": {"limit": "lots"}}, "memory.limit"),
        ({"memory": {"limit": "64MiB", "at": "time"}}, "memory.at must be one of start"),
    ],
)
def test_bad_memory_options_say_what(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(FaultSpecError) as info:
        family_from_spec(spec)
    assert says in str(info.value)


SLEEPER = (
    "import os, time\n"
    "from crashpoint import probe\n"
    "probe.step_started('work')\n"
    "time.sleep(30 if os.environ.get('CRASHPOINT_MEMORY_CGROUP') else 0)\n"
    "probe.step_completed('work')\n"
    "print('done')\n"
)


@needs_cgroup
def test_ctrl_c_removes_the_memory_cgroups(tmp_path: Path) -> None:
    """``crashpoint run`` stopped by SIGINT while an attempt runs in its memory cgroup: the
    cgroup (and the harness's folder of them) is gone when it exits."""
    import signal
    import subprocess
    import time

    (tmp_path / "sleeper.py").write_text(SLEEPER)
    (tmp_path / "s.scenario.yaml").write_text(
        "name: sleeps in its memory cgroup\n"
        'agent:\n  command: ["{python}", "{scenario_dir}/sleeper.py"]\n  timeout: 60s\n'
        "faults:\n  - memory: {limit: 1GiB, count: 1}\nrestarts: 1\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "crashpoint", "run", str(tmp_path), "--report", str(tmp_path / "r")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base, _version = _base()
    tag = f"-{proc.pid}-"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            owners = [n for n in os.listdir(base) if n.startswith(_PREFIX) and tag in n]
            if any(a.startswith("a-") for n in owners for a in os.listdir(os.path.join(base, n))):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the attempt's memory cgroup never appeared")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert [n for n in os.listdir(base) if n.startswith(_PREFIX) and tag in n] == []
