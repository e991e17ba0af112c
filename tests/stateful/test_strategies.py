"""crashpoint.strategies: plans are valid and shrink well (no processes), a search over
fault_plans() finds a seeded bug and shrinks it to at most two faults whose replay command
reproduces it, and CrashRecoveryMachine passes the demo agent and catches a broken one."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.stateful import run_state_machine_as_test

from _forked import forking, warm
from crashpoint._failpoints import FAILPOINTS, parse
from crashpoint.cli import main
from crashpoint.faults import CORRUPTIONS
from crashpoint.harness import (
    AgentSpec,
    Fault,
    Golden,
    GoldenRunFailed,
    Plan,
    TrialResult,
    TrialRunner,
)
from crashpoint.strategies import (
    CI_PROFILE,
    FAULT_PLAN_KINDS,
    LOCAL_PROFILE,
    CrashRecoveryMachine,
    check_trial,
    corruptions,
    fault_plans,
    golden_for,
    kill_schedules,
)

BUGGY = Path(__file__).with_name("_buggy_agent.py")
DEMO = AgentSpec(("{python}", "-m", "crashpoint.agents.demo", "--state", "{state_dir}"), timeout=60)
NO_EXPLAIN = tuple(p for p in Phase if p is not Phase.explain)


def buggy(bug: str) -> AgentSpec:
    return AgentSpec(("{python}", str(BUGGY), "--state", "{state_dir}", "--bug", bug), timeout=60)


def _ev(op: str, **kw: Any) -> dict[str, Any]:
    return {"op": op, **kw}


# The golden run of _buggy_agent.py, written out: property tests of the strategies need no
# process. Boundaries: 0..6 "before", plus 1 "in_doubt" (the effect).
GOLDEN = Golden(
    steps=["notify", "fetch", "archive"],
    events=[
        _ev("step_started", step="notify"),
        _ev("effect", kind="notify", payload={"to": "ops"}, key="run:notify:0"),
        _ev("step_completed", step="notify"),
        _ev("step_started", step="fetch"),
        _ev("step_completed", step="fetch"),
        _ev("step_started", step="archive"),
        _ev("step_completed", step="archive"),
    ],
    effects=Counter({("notify", '{"to":"ops"}'): 1}),
    output=b"{}\n",
    duration=0.1,
)

#: 50 derandomized examples per property (a plan with one fault too many, drawn when a
#: corruption comes with its own kill, fails within them); the reach-everything test below
#: keeps 300 (it needs every kind and boundary drawn), and the slow twin draws 1,000
FAST = settings(
    max_examples=50,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def assert_runnable(
    plan: Plan,
    golden: Golden | None,
    *,
    max_faults: int = 3,
    restarts: int = 3,
    kinds: tuple[str, ...] = FAULT_PLAN_KINDS,
    hows: tuple[str, ...] = CORRUPTIONS,
) -> None:
    """What the trial runner needs from a plan, and what fault_plans promises."""
    assert 1 <= len(plan.faults) <= max_faults, plan
    assert Plan.from_json(plan.to_json()) == plan
    events = len(golden.events) if golden is not None else 50
    bounds = {(b.index, b.phase, b.label) for b in golden.boundaries()} if golden else set()
    ended: list[int] = []  # attempts a kill, failpoint or disk_full hit
    last: Fault | None = None
    for f in plan.faults:
        assert f.kind in FAULT_PLAN_KINDS
        assert last is None or f.attempt >= last.attempt, f"out of attempt order: {plan}"
        if f.kind == "corrupt":
            assert last is not None, f"a corrupt must follow a kill: {plan}"
            assert (last.kind, last.attempt) == ("kill", f.attempt - 1), (
                f"a corrupt must follow the kill that ended the attempt before it: {plan}"
            )
            assert f.arg("how") in hows
            assert f.arg("path") == "{state_dir}/**"
            assert f.arg("seed") in range(1 << 30)
        else:
            assert f.attempt == len(ended) + 1, f"one attempt-ending fault per attempt: {plan}"
            ended.append(f.attempt)
        if f.kind == "kill":
            index, phase = f.arg("index"), f.arg("phase")
            assert index in range(events)
            assert phase in ("before", "in_doubt")
            if f.attempt == 1 and golden is not None:
                assert (index, phase, f.arg("label")) in bounds, f
        elif f.kind == "failpoint":
            ((name, (action, nth)),) = parse(f.arg("spec")).items()
            assert name in FAILPOINTS
            assert action in ("kill", "enospc", "eio")
            assert nth >= 1
        elif f.kind == "disk_full":
            assert f.arg("capacity") > 0
            assert f.arg("mechanism") in ("tmpfs", "rlimit", "failpoint")
        last = f
    assert len(ended) <= restarts, f"no fault-free attempt left after {plan}"
    used = {f.kind for f in plan.faults}
    assert used <= set(kinds) | ({"kill"} if "corrupt" in kinds else set()), plan


# -- (a) the strategies themselves -----------------------------------------------------------------


@FAST
@given(plan=fault_plans(GOLDEN))
def test_fault_plans_are_runnable(plan: Plan) -> None:
    assert_runnable(plan, GOLDEN)


@FAST
@given(plan=fault_plans())
def test_fault_plans_without_golden_use_counters_up_to_49(plan: Plan) -> None:
    assert_runnable(plan, None)


@pytest.mark.parametrize(
    ("max_faults", "restarts", "kinds"),
    [
        (1, 3, FAULT_PLAN_KINDS),
        (1, 3, ("corrupt",)),
        (2, 1, ("kill", "corrupt")),
        (5, 2, ("kill",)),
        (4, 4, ("disk_full", "failpoint")),
    ],
)
def test_fault_plans_respect_their_bounds(
    max_faults: int, restarts: int, kinds: tuple[str, ...]
) -> None:
    @FAST
    @given(
        plan=fault_plans(
            GOLDEN, max_faults=max_faults, restarts=restarts, kinds=kinds, hows=("truncate", "zero")
        )
    )
    def check(plan: Plan) -> None:
        assert_runnable(
            plan,
            GOLDEN,
            max_faults=max_faults,
            restarts=restarts,
            kinds=kinds,
            hows=("truncate", "zero"),
        )

    check()


# slow: more examples of the same properties; fast cover: test_fault_plans_are_runnable and
# test_fault_plans_respect_their_bounds (50 examples each)
@pytest.mark.slow
@settings(FAST, max_examples=1000)
@given(plan=fault_plans(GOLDEN, max_faults=4, restarts=2))
def test_fault_plans_are_runnable_in_many_examples(plan: Plan) -> None:
    assert_runnable(plan, GOLDEN, max_faults=4, restarts=2)


def test_fault_plans_reach_every_kind_and_boundary() -> None:
    seen: set[Any] = set()

    @settings(FAST, max_examples=300)
    @given(plan=fault_plans(GOLDEN))
    def collect(plan: Plan) -> None:
        for f in plan.faults:
            seen.add(f.kind)
            if f.kind == "kill" and f.attempt == 1:
                seen.add((f.arg("index"), f.arg("phase")))

    collect()
    assert set(FAULT_PLAN_KINDS) <= seen
    assert {(b.index, b.phase) for b in GOLDEN.boundaries()} <= seen


FIND = settings(max_examples=500, derandomize=True, database=None, deadline=None)


def test_the_simplest_plan_is_one_kill_at_the_first_event() -> None:
    plan = find(fault_plans(GOLDEN), lambda p: True, settings=FIND)
    assert plan.faults == (
        Fault.make("kill", 1, index=0, phase="before", label="step_started:notify"),
    )


def test_a_corruption_shrinks_to_the_kill_it_needs_and_the_first_kind() -> None:
    plan = find(fault_plans(GOLDEN), lambda p: p.corrupts, settings=FIND)
    assert [f.kind for f in plan.faults] == ["kill", "corrupt"]
    assert plan.faults[0].arg("index") == 0
    assert plan.faults[1] == Fault.make("corrupt", 2, how="truncate", path="{state_dir}/**", seed=0)


def test_late_kills_shrink_to_one_kill_at_the_earliest_event_that_fails() -> None:
    def late(p: Plan) -> bool:
        return any(f.kind == "kill" and f.attempt == 1 and f.arg("index") >= 4 for f in p.faults)

    plan = find(fault_plans(GOLDEN), late, settings=FIND)
    assert plan.faults == (
        Fault.make("kill", 1, index=4, phase="before", label="step_completed:fetch"),
    )
    assert find(fault_plans(GOLDEN), late, settings=FIND) == plan  # deterministic


def test_fault_plans_shrink_away_faults_that_do_not_matter() -> None:
    def two_attempts_killed(p: Plan) -> bool:
        return sum(f.kind == "kill" for f in p.faults) >= 2

    plan = find(fault_plans(GOLDEN), two_attempts_killed, settings=FIND)
    assert plan.faults == (
        Fault.make("kill", 1, index=0, phase="before", label="step_started:notify"),
        Fault.make("kill", 2, index=0, phase="before"),
    )


@FAST
@given(kills=kill_schedules(GOLDEN, max_kills=3))
def test_kill_schedules_kill_one_attempt_after_another(kills: list[Fault]) -> None:
    assert 1 <= len(kills) <= 3
    assert [f.attempt for f in kills] == list(range(1, len(kills) + 1))
    assert all(f.kind == "kill" and 0 <= f.arg("index") < len(GOLDEN.events) for f in kills)
    first = kills[0]
    assert any(
        (b.index, b.phase, b.label) == (first.arg("index"), first.arg("phase"), first.arg("label"))
        for b in GOLDEN.boundaries()
    )


@FAST
@given(kills=kill_schedules(max_kills=2, min_kills=0))
def test_kill_schedules_without_golden_count_up_to_49(kills: list[Fault]) -> None:
    assert len(kills) <= 2
    assert all(0 <= f.arg("index") < 50 and f.arg("phase") in ("before", "in_doubt") for f in kills)


def test_kill_schedules_shrink_to_fewer_and_earlier_kills() -> None:
    kills = find(kill_schedules(GOLDEN), lambda ks: len(ks) >= 2, settings=FIND)
    assert [(f.attempt, f.arg("index"), f.arg("phase")) for f in kills] == [
        (1, 0, "before"),
        (2, 0, "before"),
    ]


@FAST
@given(fault=corruptions(hows=("bitflip", "zero"), path="{state_dir}/*.json", attempt=3))
def test_corruptions_are_seeded_corrupt_faults(fault: Fault) -> None:
    assert (fault.kind, fault.attempt) == ("corrupt", 3)
    assert fault.arg("how") in ("bitflip", "zero")
    assert fault.arg("path") == "{state_dir}/*.json"
    assert 0 <= fault.arg("seed") < 1 << 30


def test_corruptions_shrink_to_the_first_kind_and_seed_zero() -> None:
    fault = find(corruptions(), lambda f: True, settings=FIND)
    assert fault == Fault.make("corrupt", 2, how=CORRUPTIONS[0], path="{state_dir}/**", seed=0)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: fault_plans(kinds=("kill", "explode")), "cannot draw 'explode'"),
        (lambda: fault_plans(kinds=()), "at least one"),
        (lambda: fault_plans(max_faults=0), "max_faults"),
        (lambda: fault_plans(restarts=0), "restarts"),
        (lambda: fault_plans(hows=("shred",)), "subset"),
        (lambda: corruptions(hows=()), "subset"),
        (lambda: corruptions(attempt=1), "attempt >= 2"),
        (lambda: kill_schedules(max_kills=0), "max_kills"),
    ],
)
def test_bad_arguments_are_refused(call: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # building the strategy is enough: arguments are checked eagerly


def test_profiles_are_registered_with_what_slow_trials_need() -> None:
    ci = settings.get_profile(CI_PROFILE)
    assert ci.derandomize
    assert ci.deadline is None
    assert ci.print_blob
    assert 10 <= ci.max_examples <= 100
    assert Phase.explain not in ci.phases
    local = settings.get_profile(LOCAL_PROFILE)
    assert local.deadline is None
    assert local.max_examples > ci.max_examples
    assert not local.derandomize


def test_golden_runs_are_computed_once_and_a_broken_one_is_reported_each_time() -> None:
    agent = buggy("none")
    assert golden_for(agent) is golden_for(agent)
    assert golden_for(agent).steps == GOLDEN.steps
    assert [e["op"] for e in golden_for(agent).events] == [e["op"] for e in GOLDEN.events]
    broken = AgentSpec(("{python}", "-c", "import sys; sys.exit(3)"))
    for _ in range(2):
        with pytest.raises(GoldenRunFailed, match="exit 3"):
            golden_for(broken)


def test_a_machine_without_an_agent_says_what_to_set() -> None:
    class NoAgent(CrashRecoveryMachine):
        pass

    with pytest.raises(TypeError, match="set agent = AgentSpec"):
        NoAgent()


# -- (b) the Done-when test: a search over fault_plans() finds the seeded bug and shrinks it ---


def _find_failure(
    agent: AgentSpec, folder: Path, *, kinds: tuple[str, ...], max_examples: int
) -> tuple[AssertionError, dict[Plan, TrialResult]]:
    """Run @given(fault_plans(golden)) with check_trial until it fails; return the error
    Hypothesis raised for the minimal example, and every trial that ran. The trials' attempts
    are forked from a warm interpreter (what is found and shrunk does not depend on spawning);
    the replay command the failure names runs as it would anywhere."""
    golden = golden_for(agent)
    spec = warm(agent)
    ran: dict[Plan, TrialResult] = {}

    @settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=NO_EXPLAIN,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(plan=fault_plans(golden, kinds=kinds))
    def trial_recovers(plan: Plan) -> None:
        check_trial(runner, plan, golden, cache=ran)

    with forking(spec) as zygote:
        runner = TrialRunner(spec, str(folder), launcher=zygote)
        with pytest.raises(AssertionError) as info:
            trial_recovers()
    return info.value, ran


def _shrunk_plan(err: AssertionError) -> tuple[Plan, str]:
    """The minimal plan and its trial folder, read back from the failure message."""
    text = "\n".join([str(err), *getattr(err, "__notes__", [])])
    m = re.search(r"replay: crashpoint replay (\S+)", str(err))
    assert m, f"the failure does not name a replay command:\n{text}"
    folder = m.group(1)
    assert f"crashpoint replay {folder}" in getattr(err, "__notes__", []), (
        f"the replay command is not among Hypothesis's notes:\n{text}"
    )
    with open(os.path.join(folder, "plan.json")) as f:
        return Plan.from_json(json.load(f)), folder


def _replay(folder: str) -> subprocess.CompletedProcess[str]:
    """``crashpoint replay FOLDER``, run in this process (the command's ``main``: its own
    interpreter would import the harness again; the agent's attempts are processes still)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["replay", folder])
    return subprocess.CompletedProcess(
        ["crashpoint", "replay", folder], code, out.getvalue(), err.getvalue()
    )


# slow: fast cover: test_fault_plans_find_a_one_fault_bug_and_shrink_it_to_one_kill
@pytest.mark.slow
def test_fault_plans_find_a_two_fault_bug_and_shrink_it_to_two_faults(tmp_path: Path) -> None:
    """Done when: a Hypothesis test over fault_plans() finds a seeded bug in a broken agent and
    shrinks it to a plan of at most two faults (and its replay command reproduces it).

    The seeded bug needs two faults: a kill once the notify step is checkpointed, then a
    corruption that breaks the checkpoint's checksum (the agent "repairs" by starting a new
    generation of idempotency keys, so the notification goes out twice)."""
    err, ran = _find_failure(
        buggy("repair-fresh-key"), tmp_path, kinds=("kill", "corrupt"), max_examples=40
    )
    plan, folder = _shrunk_plan(err)
    print(f"shrunk plan ({len(ran)} distinct trials ran): {plan.describe()}")
    assert len(plan.faults) <= 2
    kill, corrupt = plan.faults  # and no single fault triggers it
    assert (kill.kind, kill.attempt) == ("kill", 1)
    assert (kill.arg("index"), kill.arg("phase")) == (2, "before")  # the earliest that fails
    assert corrupt == Fault.make("corrupt", 2, how="truncate", path="{state_dir}/**", seed=0)
    assert "exactly_once: FAIL: DUPLICATED notify" in str(err)
    assert all(r.ok for p, r in ran.items() if len(p.faults) < 2), "one fault was enough?"
    done = _replay(folder)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "reproduced: exactly_once" in done.stdout


def test_fault_plans_find_a_one_fault_bug_and_shrink_it_to_one_kill(tmp_path: Path) -> None:
    err, _ = _find_failure(buggy("resend-on-resume"), tmp_path, kinds=("kill",), max_examples=20)
    plan, folder = _shrunk_plan(err)
    print(f"shrunk plan: {plan.describe()}")
    assert plan.faults == (
        Fault.make("kill", 1, index=2, phase="before", label="step_completed:notify"),
    )
    assert _replay(folder).returncode == 1


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["repair-fresh-key", "resend-on-resume"])
def test_fault_plans_over_every_kind_find_and_shrink_each_bug(tmp_path: Path, bug: str) -> None:
    err, ran = _find_failure(buggy(bug), tmp_path, kinds=FAULT_PLAN_KINDS, max_examples=150)
    plan, folder = _shrunk_plan(err)
    print(f"{bug}: shrunk plan after {len(ran)} distinct trials: {plan.describe()}")
    assert len(plan.faults) <= (2 if bug == "repair-fresh-key" else 1)
    assert _replay(folder).returncode == 1


@pytest.mark.slow
def test_the_correct_agent_survives_every_plan(tmp_path: Path) -> None:
    agent = buggy("none")
    golden = golden_for(agent)
    runner = TrialRunner(agent, str(tmp_path))

    @settings(max_examples=60, derandomize=True, database=None, deadline=None, phases=NO_EXPLAIN)
    @given(plan=fault_plans(golden, kinds=("kill", "corrupt")))
    def trial_recovers(plan: Plan) -> None:
        check_trial(runner, plan, golden)

    trial_recovers()


# -- (c) CrashRecoveryMachine ----------------------------------------------------------------------


class DemoAgentMachine(CrashRecoveryMachine):
    agent = DEMO


TestDemoAgentMachine = DemoAgentMachine.TestCase
TestDemoAgentMachine.settings = settings(
    max_examples=3,
    derandomize=True,
    database=None,
    deadline=None,
    phases=NO_EXPLAIN,
    stateful_step_count=6,
)


@pytest.mark.slow
def test_the_demo_agent_survives_many_machine_examples() -> None:
    run_state_machine_as_test(
        DemoAgentMachine,
        settings=settings(
            max_examples=40,
            derandomize=True,
            database=None,
            deadline=None,
            phases=NO_EXPLAIN,
            stateful_step_count=8,
        ),
    )


class ResendOnResumeMachine(CrashRecoveryMachine):
    agent = buggy("resend-on-resume")
    kinds = ("kill", "corrupt")
    max_faults = 2


def test_the_machine_catches_a_broken_agent_and_prints_the_replay() -> None:
    with pytest.raises(AssertionError, match="DUPLICATED notify") as info:
        run_state_machine_as_test(
            ResendOnResumeMachine,
            settings=settings(
                max_examples=30,
                derandomize=True,
                database=None,
                deadline=None,
                phases=NO_EXPLAIN,
                stateful_step_count=6,
            ),
        )
    m = re.search(r"replay: crashpoint replay (\S+)", str(info.value))
    assert m, str(info.value)
    folder = m.group(1)
    notes = "\n".join(info.value.__notes__)
    try:
        # Hypothesis reports the minimal program: one kill after the notification, then the run
        assert "state = ResendOnResumeMachine()" in notes, notes
        assert (
            "state.kill(at=Boundary(index=2, phase='before', "
            "label='step_completed:notify'))" in notes
        ), notes
        assert f"crashpoint replay {folder}" in info.value.__notes__
        assert os.path.isfile(os.path.join(folder, "REPLAY"))
        assert _replay(folder).returncode == 1
    finally:
        shutil.rmtree(os.path.dirname(folder), ignore_errors=True)
