"""A plan is a function of the seed and of what the golden run did, never of its timings; kills
are aimed at an event's identity, and a family sweeps what it says it sweeps."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from crashpoint.harness import (
    AgentSpec,
    Campaign,
    Fault,
    Golden,
    HarnessResult,
    NoBoundaries,
    family_from_spec,
    plan_for,
)
from crashpoint.pytest_plugin._summary import summary_table

EVENTS = [
    {"op": "step_started", "step": "fetch"},
    {"op": "step_completed", "step": "fetch"},
    {"op": "step_started", "step": "send"},
    {"op": "effect", "kind": "email", "payload": {"to": "a"}, "key": "k"},
    {"op": "step_completed", "step": "send"},
    {"op": "step_started", "step": "send"},  # a loop: the same step again
    {"op": "effect", "kind": "email", "payload": {"to": "b"}, "key": "k2"},
    {"op": "step_completed", "step": "send"},
]


def golden(**kw: Any) -> Golden:
    return Golden(
        ["fetch", "send", "send"],
        [dict(e) for e in EVENTS],
        Counter(),
        b"ok\n",
        **{"duration": 0.12, **kw},
    )


@pytest.mark.parametrize(
    "spec",
    [
        {"kill": {"at": "time", "count": 1}},
        {"signal": {"sig": "TERM", "count": 1}},
        {"signal": {"sig": "STOP", "within": "2s", "count": 1}},
        {"kill": {"at": "random"}},
        {"kill": {"at": "recovery"}},
        {"corrupt": {"how": ["stale-copy"]}},
    ],
)
def test_a_plan_does_not_depend_on_how_long_the_golden_run_took(spec: dict[str, Any]) -> None:
    fam = family_from_spec(spec)
    fast, slow = golden(duration=0.12, span=0.05), golden(duration=0.27, span=0.2)
    for index in range(20):
        assert plan_for(fam, fast, 7, index) == plan_for(fam, slow, 7, index)
    # and the seed does decide it
    assert {plan_for(fam, fast, 7, i) for i in range(20)} != {
        plan_for(fam, fast, 8, i) for i in range(20)
    }


def test_instants_are_drawn_within_the_window_after_the_first_event() -> None:
    fam = family_from_spec({"kill": {"at": "time", "within": "250ms", "count": 1}})
    seconds = [plan_for(fam, golden(), 1, i).faults[0].arg("seconds") for i in range(200)]
    assert all(0 <= s < 0.25 for s in seconds)
    assert max(seconds) > 0.2  # the whole window is used
    assert plan_for(fam, golden(), 1, 0).faults[0].arg("anchor") is None  # first event
    silent = replace(golden(), events=[], steps=[])
    assert plan_for(fam, silent, 1, 0).faults[0].arg("anchor") == "start"


def test_every_boundary_kill_names_its_event_by_op_name_and_occurrence() -> None:
    fam = family_from_spec({"kill": {"at": "every-boundary"}})
    g = golden()
    camp = Campaign(AgentSpec(("true",)), [fam], "/nonexistent-report")
    plans = camp.plans(g)
    assert len(plans) == len(g.boundaries()) == len(EVENTS) + 2
    idents = [
        (f.arg("op"), f.arg("name"), f.arg("nth"), f.arg("phase")) for p in plans for f in p.faults
    ]
    assert idents[6] == ("step_started", "send", 2, "before")  # the loop's second "send"
    assert ("effect", "email", 2, "in_doubt") in idents
    assert all(f.arg("index") is None for p in plans for f in p.faults)
    assert str(plans[6].faults[0]) == "kill attempt 1 at step_started:send #2 (before)"


def test_a_golden_run_with_no_event_and_no_file_operation_is_an_error() -> None:
    camp = Campaign(
        AgentSpec(("true",)), [family_from_spec({"kill": {"at": "time"}})], "/nonexistent-report"
    )
    with pytest.raises(NoBoundaries, match="Add probe calls"):
        camp.plans(replace(golden(), events=[], steps=[]))
    # file operations alone are boundaries enough (for kill at fileop)
    fileops = [{"op": "write", "path": "{state_dir}/x", "n": 1}]
    assert camp.plans(replace(golden(), events=[], steps=[], fileops=fileops))


def test_sweeps_have_one_trial_per_recorded_point_and_say_when_there_is_none() -> None:
    ops = [
        {"op": "write", "path": "{state_dir}/x", "n": k, "label": f"write x #{k}"}
        for k in (1, 2, 3)
    ]
    fam = family_from_spec({"kill": {"at": "fileop"}})
    camp = Campaign(AgentSpec(("true",)), [fam], "/nonexistent-report")
    plans = camp.plans(replace(golden(), fileops=ops))
    assert [p.faults[0].arg("fileop") for p in plans] == ops  # each once, in order
    assert str(plans[0].faults[0]) == "kill attempt 1 before write x #1"
    capped = Campaign(
        AgentSpec(("true",)),
        [family_from_spec({"kill": {"at": "fileop", "max": 2}})],
        "/nonexistent-report",
    )
    assert len(capped.plans(replace(golden(), fileops=ops))) == 2
    # nothing recorded: one trial that cannot pass (it says why), never zero trials
    [empty] = camp.plans(golden())
    assert empty.faults[0].arg("fileop") == {}


def test_an_unknown_fault_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        Fault.make("explode")


def _fileops(n: int) -> list[dict[str, Any]]:
    return [
        {"op": "write", "path": "{state_dir}/x", "n": k, "label": f"write x #{k}"}
        for k in range(1, n + 1)
    ]


def test_fileop_kills_with_a_count_hit_distinct_operations() -> None:
    """Drawn file-operation kills are drawn without replacement: 6 trials over 8 recorded
    operations hit 6 different ones (drawn with replacement, this seed hits one twice)."""
    g = replace(golden(), fileops=_fileops(8))
    fam = family_from_spec({"kill": {"at": "fileop", "count": 6}})
    camp = Campaign(AgentSpec(("true",)), [fam], "/nonexistent-report", seed=3)
    plans = camp.plans(g)
    hit = [p.faults[0].arg("fileop")["n"] for p in plans]
    assert len(hit) == 6
    assert len(set(hit)) == 6, hit
    assert camp.notes == []
    # the same plans on every call (a pure function of seed, family and the trial's place)
    assert camp.plans(g) == plans
    # and the old per-trial draw (what plan_for without draw= does) repeats for this seed
    old = [plan_for(fam, g, 3, i).faults[0].arg("fileop")["n"] for i in range(6)]
    assert len(set(old)) < 6, old


def test_operations_a_kill_lands_on_reliably_are_drawn_first() -> None:
    """A recorded operation other threads also made on the file (``shared``: strace's count
    may land on another thread's call) is drawn only once the others are used up."""
    ops = _fileops(8)
    for k in (0, 2, 3, 5, 6, 7):
        ops[k]["shared"] = True
    g = replace(golden(), fileops=ops)
    fam = family_from_spec({"kill": {"at": "fileop", "count": 4}})
    hit = [
        p.faults[0].arg("fileop")["n"]
        for p in Campaign(AgentSpec(("true",)), [fam], "/nonexistent-report", seed=3).plans(g)
    ]
    assert sorted(hit[:2]) == [2, 5], hit  # the two unshared ones (n = index + 1) first
    assert len(set(hit)) == 4


def test_a_count_above_the_recorded_operations_runs_each_once_and_says_so() -> None:
    g = replace(golden(), fileops=_fileops(3))
    fam = family_from_spec({"kill": {"at": "fileop", "count": 7}})
    camp = Campaign(AgentSpec(("true",)), [fam], "/nonexistent-report", seed=11)
    plans = camp.plans(g)
    assert sorted(p.faults[0].arg("fileop")["n"] for p in plans) == [1, 2, 3]
    [note] = camp.notes
    assert "asked for 7 trials" in note
    assert "3 distinct file operation(s)" in note
    assert "each runs once (3 trials)" in note
    # the result carries it to the summary, the report and the gate's table
    result = camp._result(g, [], plans, 0.0, "", "")
    summary = {**result.summary(), "scenario": "s"}
    assert summary["notes"] == [note]
    assert f"NOTE: {note}" in HarnessResult(result).report()
    assert f"note s: {note}" in summary_table([summary])
    # `max` narrows what counts as distinct
    capped = Campaign(
        AgentSpec(("true",)),
        [family_from_spec({"kill": {"at": "fileop", "max": 2, "count": 5}})],
        "/nonexistent-report",
    )
    assert len(capped.plans(g)) == 2
    assert capped.notes


def test_boundary_kills_of_a_run_without_boundaries_run_no_trial_and_say_so() -> None:
    """A starter's every-boundary family on an agent that only writes files: no trial, and a
    note says why (never a silent absence beside the families that did run)."""
    silent = replace(golden(), events=[], steps=[], fileops=_fileops(2))
    camp = Campaign(
        AgentSpec(("true",)),
        [
            family_from_spec({"kill": {"at": "every-boundary"}}),
            family_from_spec({"kill": {"at": "fileop"}}),
        ],
        "/nonexistent-report",
    )
    plans = camp.plans(silent)
    assert [p.family for p in plans] == ["kill@fileop", "kill@fileop"]
    [note] = camp.notes
    assert note.startswith("family kill@every-boundary: no trial: the golden run had no boundary")


def test_power_cuts_that_lose_what_was_reported_done_are_drawn_first() -> None:
    """Of a power-loss family's drawn trials, the first take crash states whose lost
    operations the agent had reported done after (a step completed on an unsynced write),
    the others once those are used up; and no state is drawn twice before all were."""
    from crashpoint.faults import LogOp, OpLog
    from crashpoint.harness._spec import _power

    a, b = "{state_dir}/a.log", "{state_dir}/b.log"
    ops = (
        LogOp(0, "creat", a, file=1, time=1.0),
        LogOp(1, "write", a, file=1, size=4, data=b"aaaa", time=2.0),  # then reported done
        LogOp(2, "creat", b, file=2, time=4.0),
        LogOp(3, "write", b, file=2, size=4, data=b"bbbb", time=5.0),  # never reported
    )
    events = [
        {"i": 0, "attempt": 1, "op": "step_started", "step": "one", "wall": 0.5},
        {"i": 1, "attempt": 1, "op": "step_completed", "step": "one", "wall": 3.0},
    ]
    g = replace(
        golden(),
        events=events,
        steps=["one"],
        plog=OpLog(ops=ops).to_json(),
        plog_events=[0, 2],
    )
    every = _power.states(g, "posix")
    loud = [s for s in every if not s[_power.QUIET]]
    assert loud, every
    assert len(loud) < len(every), every
    fam = family_from_spec({"power_loss": {"count": len(every)}})
    camp = Campaign(AgentSpec(("true",)), [fam], "/nonexistent-report", seed=5)
    labels = [p.faults[0].arg("label") for p in camp.plans(g)]
    assert sorted(labels[: len(loud)]) == sorted(s["label"] for s in loud)
    assert len(set(labels)) == len(every)  # without replacement
    assert all(_power.QUIET not in dict(p.faults[0].args) for p in camp.plans(g))
