"""Power-loss planning (``crash_plan``): incremental, the same states, and within a deadline.

``crash_plan`` walks the operation log once, keeping what a kill -9 leaves and what is durable
up to date, and derives each crash state from them; these tests check that it gives exactly
the states that building each one from the start gives (on random logs, under both models),
that the work it does is linear in the operations and states (counted as operations applied
to the model, not as seconds), and that planning stops at a deadline and the campaign says so
and runs nothing it did not plan.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crashpoint.faults import CrashState, LogOp, OpLog, crash_plan, crash_states
from crashpoint.faults import _powercut as pc
from crashpoint.harness import AgentSpec, Campaign, Golden, family_from_spec
from crashpoint.harness._spec import _power

S = "{state_dir}"


def append_log(n: int) -> OpLog:
    """``n`` records appended to ``log.jsonl``, never synced."""
    ops = [LogOp(0, "creat", f"{S}/log.jsonl", file=1)]
    end = 0
    for k in range(n):
        rec = json.dumps({"step": k}).encode() + b"\n"
        ops.append(
            LogOp(len(ops), "write", f"{S}/log.jsonl", file=1, offset=end, size=len(rec), data=rec)
        )
        end += len(rec)
    return OpLog(ops=tuple(ops))


def naive_log(n: int, *, fixed: bool = False) -> OpLog:
    """``n`` steps, each rewriting ``state.json`` in place (``open(path, "w")``: a truncate
    to 0, then a write), never synced: the naive agent's trace."""
    ops: list[LogOp] = []
    done: list[str] = []
    for k in range(n):
        done.append(f"s{k}")
        data = json.dumps({"step": k, "pad": "x" * 100} if fixed else {"done": done}).encode()
        if k == 0:
            ops.append(LogOp(len(ops), "creat", f"{S}/state.json", file=1, time=len(ops)))
        else:
            ops.append(LogOp(len(ops), "trunc", f"{S}/state.json", file=1, time=len(ops)))
        ops.append(
            LogOp(
                len(ops),
                "write",
                f"{S}/state.json",
                file=1,
                size=len(data),
                data=data,
                time=len(ops),
            )
        )
    return OpLog(ops=tuple(ops))


def naive_golden(n: int) -> Golden:
    """A golden run of :func:`naive_log`: each step started, its state written, completed."""
    log = naive_log(n)
    events: list[dict[str, Any]] = []
    at: list[int] = []
    for k in range(n):
        for op in ("step_started", "step_completed"):
            events.append({"i": len(events), "attempt": 1, "op": op, "step": f"s{k}"})
            at.append(2 * k + (2 if op == "step_completed" else 0))
    return Golden(
        [f"s{k}" for k in range(n)],
        events,
        Counter(),
        b"",
        0.1,
        recorded_by="strace",
        plog=log.to_json(),
        plog_events=at,
    )


def random_log(rng: random.Random, n: int) -> OpLog:
    """A random log over a few files and folders: creates, writes (small, sector-crossing,
    past the end), truncates, renames, links, unlinks, mkdirs, file and folder fsyncs, syncs."""
    ops: list[LogOp] = []
    names: dict[str, int] = {f"{S}/old": 1}
    dirs = [S]
    nxt = 10

    def add(kind: str, path: str, **kw: Any) -> None:
        ops.append(LogOp(len(ops), kind, path, time=float(len(ops)), **kw))

    for _ in range(n):
        r = rng.random()
        if r < 0.15:
            p = f"{rng.choice(dirs)}/f{rng.randrange(4)}"
            if p in names:
                add("trunc", p, file=names[p], size=0)
            else:
                names[p], nxt = nxt, nxt + 1
                add("creat", p, file=names[p])
        elif not names:
            continue
        elif r < 0.45:
            p = rng.choice(sorted(names))
            size = rng.choice([3, 100, 600, 1500])
            data = bytes(rng.randrange(256) for _ in range(size))
            off = rng.choice([0, 0, rng.randrange(2000)])
            add("write", p, file=names[p], offset=off, size=size, data=data)
        elif r < 0.52:
            p = rng.choice(sorted(names))
            add("trunc", p, file=names[p], size=rng.choice([0, 10, 700]))
        elif r < 0.6:
            p, q = rng.choice(sorted(names)), f"{rng.choice(dirs)}/f{rng.randrange(4)}"
            if q != p:
                names[q] = names.pop(p)
                add("rename", p, path2=q, file=names[q])
        elif r < 0.64:
            p, q = rng.choice(sorted(names)), f"{rng.choice(dirs)}/l{rng.randrange(3)}"
            if q not in names:
                names[q] = names[p]
                add("link", p, path2=q, file=names[p])
        elif r < 0.68:
            p = rng.choice(sorted(names))
            add("unlink", p, file=names.pop(p))
        elif r < 0.71 and len(dirs) < 3:
            dirs.append(f"{S}/d{len(dirs)}")
            add("mkdir", dirs[-1])
        elif r < 0.85:
            p = rng.choice(sorted(names))
            add(rng.choice(["fsync", "fdatasync"]), p, file=names[p])
        elif r < 0.95:
            add("fsync", rng.choice(dirs))
        else:
            add("sync", "")
    return OpLog(ops=tuple(ops), initial={f"{S}/old": b"OLD-CONTENT " * 60}, ids={f"{S}/old": 1})


def from_scratch(log: OpLog, model: str, upto: int) -> list[CrashState]:
    """The states of one point, each built by replaying the log from the start (the model's
    own definition: every mutation, those that lose nothing and duplicates left out)."""
    mdl = pc._Model(log, model)
    out: list[CrashState] = []
    seen: set[str] = set()
    for m in mdl.mutations(upto):
        s = mdl.state(upto, m)
        if s.lost and s.digest not in seen:
            seen.add(s.digest)
            out.append(s)
    return out


def same(log: OpLog, model: str) -> None:
    plan = list(crash_plan(log, model))
    assert [u for u, _, _ in plan] == list(range(len(log.ops) + 1))
    for upto, first, found in plan:
        want = from_scratch(log, model, upto)
        key = [(s.mutation, s.digest, s.label(), s.lost, s.exact) for s in want]
        assert [(s.mutation, s.digest, s.label(), s.lost, s.exact) for s in found] == key, upto
        if want:
            assert first == min(want[0].pending)
        got = crash_states(log, model, upto)
        assert [(s.mutation, s.digest, s.pending, s.lost, s.explain) for s in got] == [
            (s.mutation, s.digest, s.pending, s.lost, s.explain) for s in want
        ], upto


@pytest.mark.parametrize("model", pc.MODELS)
def test_incremental_planning_gives_exactly_the_states_built_from_the_start(model: str) -> None:
    for seed in range(25):
        rng = random.Random(seed)
        same(random_log(rng, rng.randrange(3, 25)), model)
    same(naive_log(6), model)
    same(append_log(6), model)


def test_a_log_the_incremental_planner_does_not_model_is_planned_the_long_way() -> None:
    # a file created after it was written (not something the recorder emits): the planner
    # falls back to building each state from the start, with the same result
    ops = (
        LogOp(0, "write", f"{S}/a", file=5, size=3, data=b"abc"),
        LogOp(1, "creat", f"{S}/a", file=5),
        LogOp(2, "write", f"{S}/a", file=5, size=2, data=b"xy"),
    )
    log = OpLog(ops=ops)
    assert not pc._Model(log, "posix").regular
    same(log, "posix")


def _applied(log: OpLog, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(operations applied to the model's trees and file contents, states planned)."""
    count = [0]
    tree_apply, data_apply = pc._Tree.apply, pc._apply_data

    def counted_tree(self: Any, *a: Any, **kw: Any) -> None:
        count[0] += 1
        tree_apply(self, *a, **kw)

    def counted_data(*a: Any, **kw: Any) -> None:
        count[0] += 1
        data_apply(*a, **kw)

    monkeypatch.setattr(pc._Tree, "apply", counted_tree)
    monkeypatch.setattr(pc, "_apply_data", counted_data)
    states = sum(len(found) for _, _, found in crash_plan(log, "posix"))
    monkeypatch.undo()
    return count[0], states


@pytest.mark.parametrize("shape", ["growing", "fixed", "append"])
def test_planning_applies_each_operation_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    # Counted, not timed: rebuilding the tree for every state applies O(ops x states)
    # operations (about 2 x 200 x 1,300 here); the incremental planner a few per operation
    # and per state, the same number per state at 50 and at 200 writes (an append-only log
    # never synced has O(writes^2) states: each lost record is one).
    if shape == "append":
        small, big = append_log(30), append_log(120)
    else:
        small, big = naive_log(50, fixed=shape == "fixed"), naive_log(200, fixed=shape == "fixed")
    applied_small, states_small = _applied(small, monkeypatch)
    applied_big, states_big = _applied(big, monkeypatch)
    assert states_big > 3 * states_small
    for applied, log, states in (
        (applied_small, small, states_small),
        (applied_big, big, states_big),
    ):
        assert applied <= 2 * len(log.ops) + 3 * states, (applied, len(log.ops), states)
    per_small = applied_small / (len(small.ops) + states_small)
    per_big = applied_big / (len(big.ops) + states_big)
    assert per_big < 1.2 * per_small


def test_planning_stops_at_its_deadline_with_whole_points() -> None:
    log = naive_log(40)
    full = list(crash_plan(log, "posix"))
    assert list(crash_plan(log, "posix", deadline=time.monotonic() - 1)) == []
    calls = [0]

    def clock() -> float:  # the deadline passes on the 20th look at the clock
        calls[0] += 1
        return float(calls[0])

    part = list(crash_plan(log, "posix", deadline=20.0, clock=clock))
    assert 0 < len(part) < len(full)
    for (u, f, found), (u2, f2, found2) in zip(part, full, strict=False):
        assert (u, f, [s.digest for s in found]) == (u2, f2, [s.digest for s in found2])


def test_a_campaign_whose_planning_reaches_the_deadline_says_so_and_runs_nothing_unplanned(
    tmp_path: Path,
) -> None:
    golden = naive_golden(300)
    fam = family_from_spec({"power_loss": {"model": "posix"}})
    camp = Campaign(AgentSpec(("true",)), [fam], str(tmp_path / "rep"), seed=1)
    plans = camp.plans(golden, deadline=time.monotonic() - 1)  # already past
    assert "planning stopped at the budget after 0 of 600 operations" in camp.planning_stopped
    assert camp.planning_stopped in camp.notes
    assert _power.stopped(golden, "posix") == camp.planning_stopped
    assert len(plans) == 1  # one trial, which says why there was nothing to draw from
    assert plans[0].faults[0].arg("label") == camp.planning_stopped

    golden = naive_golden(300)  # planned afresh: a tiny budget runs out while planning
    camp = Campaign(AgentSpec(("true",)), [fam], str(tmp_path / "rep2"), seed=1, budget=1e-6)
    res = camp.run(golden=golden)
    assert "planning stopped at the budget" in res.incomplete
    assert "ran out" in res.incomplete
    assert not res.ok
    assert res.trials == []  # nothing ran, nothing passed
    summary = res.summary()
    assert summary["not_run"] == len(res.not_run) > 0
    assert summary["passed"] == 0
    assert any("planning stopped at the budget" in n for n in summary["notes"])


def test_planning_without_a_deadline_is_whole_and_says_nothing(tmp_path: Path) -> None:
    golden = naive_golden(20)
    fam = family_from_spec({"power_loss": {"model": "posix"}})
    camp = Campaign(AgentSpec(("true",)), [fam], str(tmp_path / "rep"), seed=1)
    plans = camp.plans(golden, deadline=time.monotonic() + 600)
    assert camp.planning_stopped == ""
    assert len(plans) == len(_power.states(golden, "posix")) > 20


def test_one_plan_per_state_costs_no_pass_over_all_states_or_events(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Each trial's plan used to copy the whole list of states and list every boundary of
    # the golden run: O(trials x states) for a sweep. Counted: listing boundaries (none
    # for power cuts) and shuffling the draw order (once per family, not per trial).
    from crashpoint.harness._spec import _plans

    golden = naive_golden(150)
    calls = {"boundaries": 0}
    real = Golden.boundaries

    def counted(self: Golden) -> Any:
        calls["boundaries"] += 1
        return real(self)

    monkeypatch.setattr(Golden, "boundaries", counted)
    sweep = family_from_spec({"power_loss": {"model": "posix"}})
    drawn = family_from_spec({"power_loss": {"model": "posix", "count": 50}})
    camp = Campaign(AgentSpec(("true",)), [sweep, drawn], str(tmp_path / "rep"), seed=3)
    plans = camp.plans(golden)
    assert len(plans) == len(_power.states(golden, "posix")) + 50
    assert calls["boundaries"] == 0
    states = _power._planned(golden, "posix")
    order = _plans._fileop_order(states, 3, drawn.name)
    assert _plans._fileop_order(states, 3, drawn.name) is order  # shuffled once
    labels = [p.faults[0].arg("label") for p in plans[-50:]]
    assert labels == [states[order[k]]["label"] for k in range(50)]


def test_the_golden_runs_log_is_read_once_and_a_new_one_again() -> None:
    """Every power-cut and replayed-kill trial asks for the golden run's log: it is read from
    the golden's JSON once and kept (frozen); another golden run, or a golden whose ``plog``
    was replaced, gets its own."""
    golden = naive_golden(3)
    log = _power.oplog_of(golden)
    assert log == naive_log(3)
    assert _power.oplog_of(golden) is log
    other = naive_golden(3)
    assert _power.oplog_of(other) == log
    assert _power.oplog_of(other) is not log
    golden.plog = naive_log(2).to_json()
    assert _power.oplog_of(golden) == naive_log(2)
