"""Upgrade crashes and always-replay on paper: the families' options, version B built from the
scenario's agent, the plans (a kill's, then the resumed attempt), scenario files (errors at the
line of the key under ``to``), and the ``replay_divergence`` check on hand-made histories."""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crashpoint.errors import FaultSpecError
from crashpoint.harness import AgentSpec, Expect, Fault, Golden, Plan, family_from_spec
from crashpoint.harness._checker import TrialFacts, run_checks
from crashpoint.harness._checker._divergence import check_replay_divergence
from crashpoint.harness._spec import plan_for, upgraded
from crashpoint.harness._spec._model import Attempt
from crashpoint.harness._spec._scenario import ScenarioError, load_scenario

V2 = ["{python}", "v2.py", "--state", "{state_dir}"]


# -- the families' options ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "option", "says"),
    [
        ({"upgrade": {}}, "to", "upgrade needs to:"),
        ({"upgrade": {"to": {}}}, "to", "must be a non-empty mapping"),
        ({"upgrade": {"to": {"comand": V2}}}, "to", "unknown key(s) comand"),
        ({"upgrade": {"to": {"command": V2, "entry": "m:f"}}}, "to", "not both"),
        ({"upgrade": {"to": {"command": ["{pyton}", "x"]}}}, "to", "unknown placeholder {pyton}"),
        ({"upgrade": {"to": {"command": V2, "args": ["x"]}}}, "to", "goes with entry"),
        ({"upgrade": {"to": {"entry": "not an entry"}}}, "to", "'module:function'"),
        ({"upgrade": {"to": {"env": {"1X": "y"}}}}, "to", "not a variable name"),
        ({"upgrade": {"to": {"timeout": "30"}}}, "to", "has no unit"),
        ({"upgrade": {"to": V2, "at": "time"}}, "at", "must be one of every-boundary, random"),
        ({"always_replay": {"count": 3}}, "count", "goes with at: random"),
        ({"always_replay": {"replay": "no"}}, "replay", "must be true or false"),
        ({"always_replay": {"within": 1}}, "within", "unknown option(s) within"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    spec: dict[str, Any], option: str, says: str
) -> None:
    with pytest.raises(FaultSpecError) as info:
        family_from_spec(spec)
    assert says in str(info.value), str(info.value)
    assert info.value.option == option


def test_neither_family_goes_in_a_chain() -> None:
    with pytest.raises(FaultSpecError, match="goes alone, not in a chain"):
        family_from_spec([{"kill": {"at": "random"}}, {"always_replay": None}])


def test_a_family_sweeps_every_boundary_unless_drawn_at_random() -> None:
    up = family_from_spec({"upgrade": {"to": {"command": V2}}})
    assert (up.name, up.systematic, up.needs) == (
        "upgrade@every-boundary",
        True,
        frozenset({"killreplay"}),
    )
    drawn = family_from_spec({"always_replay": {"at": "random", "count": 4, "replay": False}})
    assert (drawn.name, drawn.systematic, drawn.count, drawn.needs) == (
        "always_replay@random",
        False,
        4,
        frozenset(),
    )


# -- version B ----------------------------------------------------------------------------------


def test_version_b_is_the_agent_with_what_to_changes() -> None:
    a = AgentSpec(
        command=("{python}", "v1.py", "{state_dir}"),
        env=(("KEEP", "1"), ("MODE", "a")),
        timeout=9,
        warm=("json",),
    )
    b = upgraded(a, {"command": ["{python}", "v2.py", "{state_dir}"], "env": {"MODE": "b"}})
    assert b.command == ("{python}", "v2.py", "{state_dir}")
    assert dict(b.env) == {"KEEP": "1", "MODE": "b"}  # merged over A's
    assert (b.timeout, b.warm) == (9, None)  # never forked from A's warm interpreter
    argv = upgraded(a, {"python": "/opt/venv-b/bin/python"}).argv(
        state_dir="/s", workdir="/w", run_id="r"
    )
    assert argv == ["/opt/venv-b/bin/python", "v1.py", "/s"]  # {python} is B's interpreter
    entry = upgraded(a, {"entry": "pkg.agent:main", "args": ["{state_dir}"], "python": "/py"})
    assert entry.argv(state_dir="/s", workdir="/w", run_id="r") == [
        "/py",
        "-m",
        "crashpoint._entry",
        "pkg.agent:main",
        "/s",
    ]
    assert AgentSpec.from_json(entry.to_json()) == entry  # replay reads it back


# -- plans ---------------------------------------------------------------------------------------


def golden(*events: dict[str, Any], output: bytes = b"out\n") -> Golden:
    evs = [dict(e, i=k) for k, e in enumerate(events)]
    steps = [str(e["step"]) for e in evs if e["op"] == "step_started"]
    effects: Counter[tuple[str, str]] = Counter()
    return Golden(steps, evs, effects, output, 0.1)


def started(step: str) -> dict[str, Any]:
    return {"op": "step_started", "step": step}


def completed(step: str) -> dict[str, Any]:
    return {"op": "step_completed", "step": step}


def effect(kind: str, **payload: Any) -> dict[str, Any]:
    return {"op": "effect", "kind": kind, "payload": payload, "key": f"k:{kind}", "applied": True}


#: a run of three steps; ``charge`` and ``notify`` have effects (12 boundaries with in-doubt)
RUN = golden(
    started("load"),
    completed("load"),
    started("charge"),
    effect("charge_card", cents=5),
    completed("charge"),
    started("notify"),
    effect("email", to="a"),
    effect("sms", to="a"),
    completed("notify"),
)


def test_a_plan_is_a_kill_of_attempt_1_then_the_resumed_attempt() -> None:
    fam = family_from_spec({"upgrade": {"to": {"command": V2, "env": {"TOKEN": "secret-x"}}}})
    plans = [plan_for(fam, RUN, 7, k, boundary=k) for k in range(len(RUN.boundaries()))]
    assert len(plans) == 12
    kill, up = plans[3].faults
    assert (kill.kind, kill.attempt, kill.arg("op"), kill.arg("name")) == (
        "kill",
        1,
        "effect",
        "charge_card",
    )
    assert (up.kind, up.attempt, up.arg("to")["command"]) == ("upgrade", 2, V2)
    assert up.arg("label") == "{python} v2.py --state {state_dir}; env TOKEN"  # no value
    assert "resume under version B from attempt 2" in plans[3].describe()
    assert Plan.from_json(plans[3].to_json()) == plans[3]  # plan.json reads back
    again = family_from_spec({"always_replay": {"at": "random", "count": 2}})
    (k1, marker) = plan_for(again, RUN, 7, 0).faults
    assert (k1.kind, marker.kind, marker.attempt) == ("kill", "always_replay", 2)


# -- scenario files ------------------------------------------------------------------------------

SCENARIO = """\
name: x
agent:
  command: ["{python}", "{scenario_dir}/v1.py", "{state_dir}"]
  timeout: 5s
faults:
  - upgrade:
      to:
        TO
"""


def scenario(tmp_path: Path, to: str) -> Path:
    (tmp_path / "v1.py").write_text("")
    (tmp_path / "v2.py").write_text("")
    (tmp_path / "b").mkdir(exist_ok=True)
    path = tmp_path / "up.scenario.yaml"
    path.write_text(SCENARIO.replace("TO", to))
    return path


def test_a_scenario_resolves_version_b_as_it_does_the_agent(tmp_path: Path) -> None:
    py = tmp_path / "venv-b" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.symlink_to(sys.executable)
    sc = load_scenario(
        scenario(
            tmp_path,
            'command: ["{python}", "{scenario_dir}/v2.py", "{state_dir}"]\n'
            "        cwd: b\n"
            "        python: venv-b/bin/python\n"
            "        env: {HOME_OF: '{scenario_dir}/data'}",
        )
    )
    ((_kind, opts),) = sc.families[0].family.chain
    to = dict(opts)["to"]
    assert to["cwd"] == str(tmp_path / "b")  # from the scenario's folder
    assert to["python"] == str(py)
    assert to["env"] == {"HOME_OF": f"{tmp_path}/data"}
    assert sc.families[0].family.name == "upgrade@every-boundary"


@pytest.mark.parametrize(
    ("to", "line", "key", "says"),
    [
        ("comand: [x]", 7, "faults[0].upgrade.to", "unknown key(s) comand"),
        (
            'command: ["{python}", "{scenario_dir}/v3.py"]',
            8,
            "faults[0].upgrade.to.command",
            "v3.py does not exist",
        ),
        ("python: /no/such/python", 8, "faults[0].upgrade.to.python", "not an executable"),
        ("cwd: nowhere", 8, "faults[0].upgrade.to.cwd", "does not exist"),
        ('entry: "no_such_module_xyz:main"', 8, "faults[0].upgrade.to.entry", "not found"),
    ],
)
def test_a_bad_version_b_is_an_error_at_its_line(
    tmp_path: Path, to: str, line: int, key: str, says: str
) -> None:
    path = scenario(tmp_path, to)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    err = info.value
    assert (err.line, err.key) == (line, key), str(err)
    assert says in err.message, err.message
    assert "\n" not in str(err)


def test_a_resume_needs_a_restart(tmp_path: Path) -> None:
    path = scenario(tmp_path, 'env: {V: "2"}')
    path.write_text(path.read_text() + "restarts: 0\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert (info.value.line, info.value.key) == (9, "restarts")
    assert "raise restarts to 1 or more" in info.value.message


def test_expect_replay_divergence_is_a_switch(tmp_path: Path) -> None:
    path = scenario(tmp_path, 'env: {V: "2"}')
    path.write_text(path.read_text() + "expect:\n  replay_divergence: false\n")
    assert load_scenario(path).expect.replay_divergence is False
    path.write_text(path.read_text().replace("false", "maybe"))
    with pytest.raises(ScenarioError, match="must be true or false"):
        load_scenario(path)


# -- the check, on hand-made histories -----------------------------------------------------------


E = RUN.events


def attempt(n: int, code: int | None = 0) -> Attempt:
    return Attempt(n, [], code, None if code is not None else 9, False, 0.1, b"out\n", b"")


def facts(
    kill_at: int,
    resumed: list[dict[str, Any]],
    *,
    phase: str = "before",
    kind: str = "always_replay",
    code: int = 0,
    extra: dict[str, Any] | None = None,
) -> TrialFacts:
    """A trial whose attempt 1 ran RUN up to golden event ``kill_at`` (killed there) and whose
    attempt 2 sent ``resumed``."""
    op, name, nth = RUN.identity(kill_at)
    kill = Fault.make("kill", 1, op=op, name=name, nth=nth, phase=phase)
    more = {"to": {"env": {"V": "2"}}, "label": "env V"} if kind == "upgrade" else {}
    marker = Fault.make(kind, 2, **more)
    upto = kill_at + (1 if phase == "in_doubt" else 0)
    first = [dict(e, attempt=1, ai=k) for k, e in enumerate(RUN.events[:upto])]
    if phase == "before":
        first.append(dict(E[kill_at], attempt=1, ai=kill_at, killed="before", applied=False))
    else:
        first[-1]["killed"] = "in_doubt"
    second = [dict(e, attempt=2, ai=k) for k, e in enumerate(resumed)]
    return TrialFacts(
        RUN,
        Plan((kill, marker), kind, 1, 0),
        Expect(),
        [attempt(1, None), attempt(2, code)],
        first + second,
        Counter(),
        "canary",
        [],
        0,
        extra or {},
    )


def test_a_resume_that_continues_as_the_golden_run_passes() -> None:
    # killed before charge's effect: charge is re-run from its start
    c = check_replay_divergence(facts(3, E[2:]))
    assert c.ok, c
    assert not c.skipped
    assert "continued as the golden run did from golden event #2" in c.message
    # killed before load's completion, which was durable: the resume starts at charge
    assert check_replay_divergence(facts(1, E[2:])).ok
    # killed in charge_card's in-doubt window: made again (deduplicated) or skipped, both pass
    assert check_replay_divergence(facts(3, E[2:], phase="in_doubt")).ok
    assert check_replay_divergence(facts(3, [E[2], *E[4:]], phase="in_doubt")).ok
    # a step re-run is no divergence (resumes_from_last_completed judges it)
    assert check_replay_divergence(facts(5, E[0:])).ok


def test_two_effects_in_another_order_are_caught_with_a_diff() -> None:
    c = check_replay_divergence(facts(5, [E[5], E[7], E[6], E[8]]))
    assert not c.ok
    assert c.message.startswith(
        "replay diverged: attempt 2, resuming after the kill before golden event #5 "
        "(step_started notify), parted from the golden run's continuation after 1 matching "
        'event(s): expected \'effect email {"to":"a"}\' (golden event #6), got '
        '\'effect sms {"to":"a"}\' (its event #1)'
    ), c.message
    lines = c.message.splitlines()[1:]
    assert lines[:2] == [
        "    --- golden run, from golden event #5",
        "    +++ attempt 2 (resumed from attempt 1's crash)",
    ]
    assert '    +effect sms {"to":"a"}' in lines
    assert '    -effect sms {"to":"a"}' in lines
    assert "nondeterministic" not in c.hint
    assert "set or dict order" in c.hint


def test_a_renamed_step_is_caught_and_an_upgrade_says_whether_b_changed_its_workflow() -> None:
    renamed = [{**e, "step": "bill"} if e.get("step") == "charge" else e for e in E]
    b_golden = {"upgrade": {"agent": "v2", "golden": renamed}}
    c = check_replay_divergence(facts(2, renamed[2:], kind="upgrade", extra=b_golden))
    assert not c.ok
    assert "expected 'step_started charge' (golden event #2), got 'step_started bill'" in c.message
    assert "+++ attempt 2 (version B: env V)" in c.message
    assert "version B's own crash-free run parts from A's too, at golden event #2" in c.message
    assert "changed the workflow" in c.hint
    same = {"upgrade": {"agent": "v2", "golden": E}}
    c = check_replay_divergence(facts(2, renamed[2:], kind="upgrade", extra=same))
    assert "is the same as A's (9 events): B parts from A only when it resumes" in c.message
    assert "reads A's checkpoint differently" in c.hint


def test_an_attempt_that_did_not_finish_is_judged_as_far_as_it_went() -> None:
    c = check_replay_divergence(facts(5, E[5:7], code=1))
    assert c.ok, c.message
    assert "as far as it went" in c.message
    c = check_replay_divergence(facts(5, [E[5], E[7]], code=1))
    assert not c.ok
    c = check_replay_divergence(facts(5, E[5:7]))  # exit 0 and stopped short
    assert not c.ok
    assert "got nothing more (attempt 2: exit 0)" in c.message, c.message


def test_only_resumed_trials_are_judged() -> None:
    f = facts(5, E[5:])
    assert "replay_divergence" in {c.name for c in run_checks(f)}
    f.plan = Plan((f.plan.faults[0],), "kill", 1, 0)
    assert "replay_divergence" not in {c.name for c in run_checks(f)}
    assert check_replay_divergence(f).skipped
    off = facts(5, E[5:])
    off.expect = Expect(replay_divergence=False)
    assert "replay_divergence" not in {c.name for c in run_checks(off)}


def test_a_long_loop_is_compared_in_one_pass_per_start() -> None:
    """A step repeated 5,000 times (15,000 events): every ``step_started`` is a possible start,
    yet only those near the resume point are tried; the one changed payload is found."""
    n = 5000
    evs: list[dict[str, Any]] = []
    for j in range(n):
        evs += [started("s"), effect("e", j=j), completed("s")]
    loop = golden(*evs)
    i = 3 * (n // 2)  # killed before the 2,501st start
    kill = Fault.make("kill", 1, op="step_started", name="s", nth=n // 2 + 1)
    plan = Plan((kill, Fault.make("always_replay", 2)), "always_replay", 1, 0)
    first = [dict(e, attempt=1, ai=k) for k, e in enumerate(loop.events[:i])]
    rest = [dict(e, attempt=2, ai=k) for k, e in enumerate(loop.events[i:])]
    rest[3751] = dict(rest[3751], payload={"j": -1})
    f = TrialFacts(
        loop, plan, Expect(), [attempt(1, None), attempt(2)], first + rest, Counter(), "c", [], 0
    )
    t0 = time.monotonic()
    c = check_replay_divergence(f)
    assert time.monotonic() - t0 < 5
    assert not c.ok
    assert "after 3751 matching event(s): expected 'effect e {\"j\":3750}' (golden event " in (
        c.message
    )
    assert '    +effect e {"j":-1}' in c.message.splitlines()
