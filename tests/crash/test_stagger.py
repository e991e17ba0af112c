"""``resumers: {stagger: N}``: the resumers released one after the other at chosen boundaries
instead of together: each is held at its first boundary until all have arrived, then the first
goes on and the next only once the one before it has sent N events (a redelivered job that
lands while the first worker is in the middle of the run, not at its start).

``tests/agents/no_lock.py`` (no lock): released when attempt 1 is inside its second step, the
second attempt's steps interleave with it (fired: overlapped) and ``single_writer`` fails.
``good_agent.py`` (an flock) makes the second wait: fired, and it passes. The release is in
the trial's race.json; the plan says where each one is released.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crashpoint.errors import FaultSpecError
from crashpoint.harness import AgentSpec, Campaign, CheckResult, TrialResult, family_from_spec

AGENTS = Path(__file__).resolve().parents[1] / "agents"


def trial(tmp_path: Path, name: str, fault: dict[str, Any], pace: str = "") -> TrialResult:
    agent = AgentSpec(
        command=("{python}", str(AGENTS / f"{name}.py"), "--state", "{state_dir}"),
        timeout=30,
        env=(("AGENT_STEP_SECONDS", pace),) if pace else (),
    )
    result = Campaign(
        agent,
        [family_from_spec(fault)],
        report_dir=str(tmp_path / "report"),
        name=name,
        seed=1,
        keep_passing=True,
    ).run()
    (t,) = result.trials
    return t


def check(t: TrialResult, name: str = "single_writer") -> CheckResult:
    return next(c for c in t.checks if c.name == name)


def releases(t: TrialResult) -> dict[str, Any]:
    barrier: dict[str, Any] = json.loads((Path(t.folder) / "race.json").read_text())["barrier"]
    assert barrier["how"] == "staggered"
    return dict(barrier["releases"])


def test_a_staggered_second_resumer_lands_mid_run_and_a_lockless_agent_fails(
    tmp_path: Path,
) -> None:
    # each step takes 0.2 s: attempt 1 is still working when attempt 2 is released. At full
    # speed attempt 1 finished its whole run in 5 ms after its event #3, before a loaded machine
    # scheduled attempt 2 (0.1 s later): then nothing overlapped, and rightly no fault fired
    t = trial(tmp_path, "no_lock", {"resumers": {"stagger": 3, "count": 1}}, pace="0.2")
    assert t.plan.describe() == (
        "resumers: attempts 1 to 2, each released when the one before reached its event #3"
    )
    assert releases(t)["2"][1] == "attempt 1 reached its event #3"
    mine = [(e["attempt"], e["ai"]) for e in t.events]
    # attempt 2's first event comes after attempt 1's third, not before
    assert mine.index((2, 0)) > mine.index((1, 2))
    (o,) = t.outcomes
    assert o.fired, o.why_not
    assert "worked at the same time" in o.where
    assert not check(t).ok


def test_a_locking_agent_makes_the_staggered_one_wait_and_passes(tmp_path: Path) -> None:
    t = trial(tmp_path, "good_agent", {"resumers": {"stagger": 2, "count": 1}})
    (o,) = t.outcomes
    assert o.fired, o.why_not
    assert t.ok, [str(c) for c in t.failed]
    assert check(t).ok


@pytest.mark.parametrize(
    ("opts", "says"),
    [
        ({"stagger": 0}, "each from 1 to 100000"),
        ({"stagger": "3"}, "a whole number"),
        ({"processes": 3, "stagger": [2]}, "got 1 number(s)"),
        ({"processes": 3, "stagger": [2, True]}, "each from 1"),
    ],
)
def test_bad_stagger_options_say_what(opts: dict[str, Any], says: str) -> None:
    with pytest.raises(FaultSpecError) as info:
        family_from_spec({"resumers": opts})
    assert says in str(info.value)
    assert info.value.option == "stagger"


def test_the_family_is_named_by_its_stagger() -> None:
    fam = family_from_spec({"resumers": {"processes": 3, "stagger": [2, 4]}})
    assert fam.name == "resumers@processes=3:stagger=2,4"
    assert family_from_spec({"resumers": {"stagger": 5}}).name == "resumers@stagger=5"


def test_the_stagger_holds_the_next_until_the_one_before_reaches_its_event() -> None:
    """The Stagger itself, with a counter for the events sent: attempt 2 waits at its first
    boundary until attempt 1 has sent 3 events, attempt 3 until attempt 2 has sent 2."""
    import threading
    import time

    from crashpoint.harness._engine._races import Stagger

    sent = {1: 0, 2: 0, 3: 0}
    stagger = Stagger((1, 2, 3), 5.0, lambda n: True, (3, 2), sent.__getitem__)
    order: list[int] = []

    def arrive(n: int) -> None:
        stagger.wait(n)
        order.append(n)

    def until(want: list[int]) -> None:
        deadline = time.monotonic() + 10
        while order != want and time.monotonic() < deadline:
            time.sleep(0.01)
        assert order == want

    threads = [threading.Thread(target=arrive, args=(n,)) for n in (3, 2, 1)]
    for t in threads:
        t.start()
    until([1])  # all arrived: the first went on, the others are held
    sent[1] = 2
    time.sleep(0.1)
    assert order == [1]  # one event short
    sent[1] = 3
    until([1, 2])
    sent[2] = 2
    for t in threads:
        t.join(10)
    assert order == [1, 2, 3]
    note = stagger.note()
    assert note["how"] == "staggered"
    assert note["gate"] == "together"
    assert note["releases"][2][1] == "attempt 1 reached its event #3"
    assert note["releases"][3][1] == "attempt 2 reached its event #2"
