"""Persistent faults on paper: ``every_attempt`` is validated where it is written, a plan marks
the fault and :func:`persist` repeats it for every attempt at the same point, and
``expect.crash_loop`` is checked against the restarts (a ``within`` no trial can reach is an
error at its line, never a check that cannot fail)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crashpoint.errors import FaultSpecError
from crashpoint.harness import Expect, Fault, Golden, Plan, family_from_spec, plan_for
from crashpoint.harness._spec import persist
from crashpoint.harness._spec._scenario import ScenarioError, load_scenario

EVENTS = [
    {"op": "step_started", "step": "update"},
    {"op": "effect", "kind": "POST /update", "payload": {}, "key": "u"},
    {"op": "step_completed", "step": "update"},
    {"op": "step_started", "step": "reboot"},
    {"op": "effect", "kind": "POST /reboot", "payload": {}, "key": "r"},
    {"op": "step_completed", "step": "reboot"},
]


def golden() -> Golden:
    events = [{**e, "attempt": 1, "i": i} for i, e in enumerate(EVENTS)]
    return Golden(["update", "reboot"], events, Counter(), b"ok\n", 0.1)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"corrupt": {"every_attempt": True}}, "only kill, signal, hang, network"),
        ({"disk_full": {"every_attempt": True}}, "only kill, signal, hang, network"),
        ({"kill": {"at": "recovery", "every_attempt": True}}, "does not go with at: recovery"),
        ({"kill": {"every_attempt": "yes"}}, "must be true or false"),
        ([{"kill": {"every_attempt": True}}, {"kill": {}}], "put the persistent fault last"),
    ],
)
def test_every_attempt_is_refused_where_it_cannot_mean_the_same_fault_again(
    spec: Any, says: str
) -> None:
    with pytest.raises(FaultSpecError, match=says) as info:
        family_from_spec(spec)
    assert info.value.option == "every_attempt"


def test_a_persistent_family_is_named_and_kills_for_real() -> None:
    fam = family_from_spec({"kill": {"at": "every-boundary", "every_attempt": True}})
    assert fam.name == "kill@every-boundary@every_attempt"
    assert fam.systematic  # one trial per boundary, as without it
    assert "killreplay" not in fam.needs  # every attempt is a real process
    assert family_from_spec({"hang": {"every_attempt": False}}).to_json() == [{"hang": {}}]


def test_persist_repeats_a_kill_at_the_same_event_counted_from_where_a_resume_begins() -> None:
    fam = family_from_spec({"kill": {"at": "every-boundary", "every_attempt": True}})
    plan = plan_for(fam, golden(), 1, 0, boundary=6)  # the reboot's in-doubt window
    (f,) = plan.faults
    assert f.arg("every") is True
    assert f.arg("replay") is None
    ran, origin = persist(plan, golden(), restarts=3)
    assert [g.attempt for g in ran.faults] == [1, 2, 3, 4]
    assert origin == [0, 0, 0, 0]
    for g in ran.faults:
        assert (g.arg("op"), g.arg("name"), g.arg("nth"), g.arg("phase")) == (
            "effect",
            "POST /reboot",
            1,
            "in_doubt",
        )
    assert persist(ran, golden(), 0)[0].faults[0].attempt == 1


def test_persist_leaves_other_faults_alone() -> None:
    plan = Plan(
        (
            Fault.make("signal", 1, sig="TERM", seconds=0.1, every=True),
            Fault.make("corrupt", 2, how="zero", path="{state_dir}/**", seed=1),
        )
    )
    ran, origin = persist(plan, golden(), restarts=2)
    assert [(g.kind, g.attempt) for g in ran.faults] == [
        ("signal", 1),
        ("signal", 2),
        ("signal", 3),
        ("corrupt", 2),
    ]
    assert origin == [0, 0, 0, 1]
    quiet = Plan((Fault.make("kill", 1, index=2),))
    assert persist(quiet, golden(), restarts=3) == (quiet, [0])


BASE = """\
name: x
agent:
  command: ["{python}", "-c", "pass"]
restarts: 2
faults:
  - kill: {at: random, every_attempt: true}
expect:
  crash_loop: VALUE
"""


def load(tmp_path: Path, value: str) -> Any:
    path = tmp_path / "x.scenario.yaml"
    path.write_text(BASE.replace("VALUE", value))
    return load_scenario(path)


def test_crash_loop_within_is_read_and_checked_against_the_restarts(tmp_path: Path) -> None:
    assert load(tmp_path, "{within: 3}").expect.crash_loop_within == 3
    assert load(tmp_path, "false").expect.crash_loop is False
    assert load(tmp_path, "true").expect == Expect(required=("crash_loop",))
    for value, says in (
        ("{within: 4}", "with restarts: 2 a trial runs at most 3 attempts"),
        ("{within: 1}", "must be from 2 to"),
        ("{inside: 3}", "unknown key"),
        ("sometimes", "use true"),
    ):
        with pytest.raises(ScenarioError) as info:
            load(tmp_path, value)
        assert info.value.line == 8, str(info.value)
        assert "crash_loop" in info.value.key
        assert says in str(info.value)


def test_expect_refuses_a_within_below_two() -> None:
    with pytest.raises(ValueError, match="a whole number from 2"):
        Expect(crash_loop_within=1)
    assert Expect.from_json(Expect(crash_loop_within=3).to_json()).crash_loop_within == 3


def test_the_docs_crash_loop_example_is_the_shipped_scenario() -> None:
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "concepts" / "harness.md").read_text()
    section = page.split("### Crash loops: a fault on every attempt", 1)[1].split("\n### ", 1)[0]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    shipped = root / "scenarios" / "crash-loop.scenario.yaml"
    assert block in shipped.read_text()
    sc = load_scenario(shipped)
    kill, exit_ = sc.families
    assert kill.family.name == "kill@random@every_attempt"
    assert exit_.family.name == "exit@random:3@every_attempt"
    assert sc.expect.crash_loop_within == 3


def facts(ends: list[tuple[int | None, int | None, bytes]], **expect: Any) -> Any:
    """A trial under a kill on every attempt whose attempts ended as ``ends`` (returncode,
    signal, stderr); no ``hits`` from the engine: a killed attempt counts as hit."""
    from crashpoint.harness import Attempt, TrialFacts

    plan = Plan((Fault.make("kill", 1, index=0, every=True),))
    attempts = [
        Attempt(n, [], rc, sig, False, 0.1, b"", err) for n, (rc, sig, err) in enumerate(ends, 1)
    ]
    return TrialFacts(golden(), plan, Expect(**expect), attempts, [], Counter(), "c", [], 0)


def test_crash_loop_judges_from_exits_alone_and_can_be_switched_off() -> None:
    from crashpoint.harness._checker import run_checks
    from crashpoint.harness._checker._loop import check_crash_loop, gave_up

    looped = facts([(None, 9, b"")] * 4)
    assert not check_crash_loop(looped).ok
    assert "hit 4 of 4 attempts up to attempt 4" in check_crash_loop(looped).message
    stopped = facts([(None, 9, b""), (69, None, b"dead-lettered\n"), (69, None, b"x\n")])
    assert check_crash_loop(stopped).ok
    assert gave_up(stopped).startswith("attempt 2 stopped")
    names = {c.name: c for c in run_checks(stopped)}
    assert names["completes"].ok
    off = facts([(None, 9, b""), (69, None, b"dead-lettered\n")], crash_loop=False)
    names = {c.name: c for c in run_checks(off)}
    assert "crash_loop" not in names
    assert not names["completes"].ok  # off: a stop is judged as any other exit
    quiet = Plan((Fault.make("kill", 1, index=0),))
    plain = facts([(0, None, b"")])
    plain.plan = quiet
    assert "crash_loop" not in {c.name for c in run_checks(plain)}
