"""The resumers' race rule and single_writer's file rule on hand-made timelines (the rules
without the timing of real runs; tests/crash/test_races.py runs them on real processes)."""

from __future__ import annotations

import socket
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from crashpoint.harness import Attempt, Expect, Golden, Plan
from crashpoint.harness._checker._checks import TrialFacts, check_single_writer
from crashpoint.harness._checker._verdict import explain
from crashpoint.harness._engine._races import race_note
from crashpoint.harness._standins._peer import attempt_of

if TYPE_CHECKING:
    from conftest import Children

PAIR = (1, 2)


def ev(attempt: int, t: float, op: str = "effect", i: int = 0, **kw: Any) -> dict[str, Any]:
    return {"attempt": attempt, "t": t, "op": op, "i": i, **kw}


def wr(attempt: int, t: float, path: str = "{state_dir}/state.json") -> dict[str, Any]:
    return {"attempt": attempt, "t": t, "op": "write", "path": path, "pid": 100 + attempt}


def att(n: int, code: int = 0, err: bytes = b"") -> Attempt:
    return Attempt(n, [], code, None, False, 1.0, b"", err)


def note(
    live: dict[int, tuple[float, float]],
    events: list[dict[str, Any]] = (),  # type: ignore[assignment]
    writes: list[dict[str, Any]] = (),  # type: ignore[assignment]
    how: str = "",
    codes: tuple[int, int] = (0, 0),
) -> tuple[bool, str, str]:
    barrier = {"how": how, "patience": 1.0} if how else {}
    attempts = {1: att(1, codes[0], b"busy\n"), 2: att(2, codes[1], b"busy\n")}
    return race_note(PAIR, live, list(events), list(writes), barrier, 1.0, attempts)


def test_work_that_interleaves_fired() -> None:
    fired, where, _ = note(
        {1: (0.0, 2.0), 2: (0.0, 2.0)},
        writes=[wr(1, 0.5), wr(2, 0.7), wr(1, 0.9)],
        how="together",
    )
    assert fired
    assert "attempt 2's write {state_dir}/state.json came while attempt 1 was at work" in where
    assert "released together" in where


def test_an_attempt_that_exits_while_the_other_works_was_refused() -> None:
    fired, where, _ = note(
        {1: (0.0, 2.0), 2: (0.0, 0.3)}, writes=[wr(1, 0.5), wr(1, 1.0)], how="ended", codes=(0, 73)
    )
    assert fired
    assert where.startswith("attempt 2 was refused: it exited 73 ('busy') without doing anything")


def test_released_together_then_silent_until_the_other_is_done_waited() -> None:
    # both reached the barrier at 0.2; attempt 2 then blocked (a lock taken after its first
    # event) and went on only after attempt 1's last write
    events = [ev(1, 0.2), ev(2, 0.2, i=1)]
    writes = [wr(1, 0.3), wr(1, 0.5), wr(2, 0.9)]
    fired, where, _ = note({1: (0.0, 0.6), 2: (0.0, 1.0)}, events, writes, how="together")
    assert fired
    assert "attempt 2 waited" in where


def test_silent_from_its_start_for_longer_than_the_patience_waited() -> None:
    writes = [wr(1, 1.2), wr(1, 1.3)]  # held 1 s at the barrier (patience), attempt 2 never came
    fired, where, _ = note({1: (0.0, 1.4), 2: (0.0, 1.5)}, writes=writes, how="patience")
    assert fired
    assert where.startswith("attempt 2 waited: live and silent for 1.500s")


def test_two_that_only_ran_at_the_same_time_did_not_race() -> None:
    # attempt 1 did its work in 0.1 s; attempt 2 started to work 0.2 s later (start-up)
    writes = [wr(1, 0.2), wr(1, 0.3), wr(2, 0.5), wr(2, 0.6)]
    fired, _, why = note({1: (0.0, 0.35), 2: (0.0, 0.7)}, writes=writes)
    assert not fired
    assert "their work never overlapped" in why
    assert "after 0.500s of silence (a wait would be 1.0s)" in why


def test_nothing_done_by_either_is_not_a_race() -> None:
    fired, _, why = note({1: (0.0, 0.3), 2: (0.0, 0.3)})
    assert not fired
    assert "nothing shows that they raced" in why


# -- single_writer from files -------------------------------------------------------------------


def facts(
    events: list[dict[str, Any]],
    writes: list[dict[str, Any]] | None,
    live: dict[int, tuple[float, float]] | None = None,
) -> TrialFacts:
    golden = Golden([], [], Counter(), b"", 0.0)
    extra: dict[str, Any] = {"ended": {}}
    if writes is not None:
        extra["race"] = {
            "pair": [1, 2],
            "live": {n: list(s) for n, s in (live or {1: (0.0, 2.0), 2: (0.0, 2.0)}).items()},
            "writes": writes,
            "by": "strace",
        }
    return TrialFacts(golden, Plan(()), Expect(), [], events, Counter(), "c", [], 0, extra)


def test_both_changing_one_file_while_both_work_fails_naming_it() -> None:
    r = check_single_writer(facts([], [wr(1, 0.5), wr(2, 0.6), wr(1, 0.7)]))
    assert not r.ok
    assert r.message.startswith(
        "attempts 1 and 2 both changed {state_dir}/state.json while both were at work: "
        "attempt 2 write at +0.600s, attempt 1 write at +0.700s"  # 0.5: before 2 was at work
    ), r.message
    hint = explain(facts([], [wr(1, 0.5), wr(2, 0.6), wr(1, 0.7)]), [r])[0].hint
    assert hint.startswith("two live processes changed {state_dir}/state.json at once"), hint


@pytest.mark.parametrize(
    ("live", "writes"),
    [
        # a waiter: its writes come once the holder has ended
        ({1: (0.0, 1.0), 2: (0.0, 2.0)}, [wr(1, 0.5), wr(1, 0.8), wr(2, 1.2)]),
        # the holder unlocked before exiting: its writes end before the other's work begins
        ({1: (0.0, 1.0), 2: (0.0, 2.0)}, [wr(1, 0.5), wr(2, 0.9), wr(2, 1.5)]),
        # two different files: each its own
        ({1: (0.0, 1.0), 2: (0.0, 1.0)}, [wr(1, 0.5), wr(2, 0.6, "{state_dir}/other.json")]),
    ],
)
def test_changes_not_made_while_both_work_pass(
    live: dict[int, tuple[float, float]], writes: list[dict[str, Any]]
) -> None:
    r = check_single_writer(facts([], writes, live))
    assert r.ok, r
    assert not r.skipped, r
    assert "no file was changed by both while both were at work" in r.message


def test_a_database_is_named_by_its_log_and_its_shared_index_is_not_judged() -> None:
    db = "{state_dir}/checkpoints.sqlite"
    shm = [wr(1, 0.5, db + "-shm"), wr(2, 0.6, db + "-shm")]
    assert check_single_writer(facts([], shm)).ok  # every connection maps the index
    wal = [wr(n, t, db + "-wal") for n, t in ((1, 0.7), (2, 0.8), (1, 0.9), (2, 1.0))]
    r = check_single_writer(facts([], [*shm, wr(1, 0.65, db), wr(2, 0.66, db), *wal]))
    assert not r.ok
    assert r.message.startswith(f"attempts 1 and 2 both changed {db}-wal while both"), r.message
    assert f"(and 1 more file(s): {db})" in r.message


def test_no_step_and_no_file_change_is_not_judged() -> None:
    r = check_single_writer(facts([ev(1, 0.1), ev(2, 0.2)], []))
    assert r.skipped
    assert r.ok
    assert r.message.startswith("not judged: no attempt reported a step, and neither attempt 1")


def test_outside_a_resumers_trial_steps_of_one_attempt_are_not_judged() -> None:
    events = [ev(1, 0.1, "step_started", step="fetch"), ev(1, 0.2, "step_completed", i=1)]
    r = check_single_writer(facts(events, None))
    assert r.skipped, r
    assert r.message == (
        "not judged: step events came from attempt 1 only, and file operations are recorded "
        "in resumers trials only"
    )


# -- which attempt sent a request that does not say -------------------------------------------


def test_a_loopback_connection_is_attributed_to_the_session_that_holds_it(
    children: Children,
) -> None:
    """Two processes in their own sessions (two attempts) connect to one server: each
    connection is found in /proc and named by the session of the process that holds it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = (
        "import socket,sys,time\n"
        f"s=socket.create_connection(('127.0.0.1',{port}))\n"
        "print(s.getsockname()[1], flush=True)\n"
        "time.sleep(30)\n"
    )
    try:
        kids = [children.spawn([sys.executable, "-c", client]) for _ in range(2)]
        ports = [int(str(k.read_line(10)).strip()) for k in kids]
        groups = {7: kids[0].pid, 8: kids[1].pid}
        assert attempt_of(ports[0], port, groups) == 7
        assert attempt_of(ports[1], port, groups) == 8
        assert attempt_of(ports[0], port, {9: 1}) is None  # not a process of any attempt
    finally:
        server.close()


# -- k resumers: resumers: {processes: k} -------------------------------------------------------


def test_k_resumers_are_planned_as_one_fault_and_two_stay_the_plan_of_today() -> None:
    from crashpoint.harness import Fault, family_from_spec, plan_for

    golden = Golden(["s"], [{"op": "step_started", "step": "s"}], Counter(), b"", 0.1)
    assert plan_for(family_from_spec({"resumers": {}}), golden, 1, 0).faults == (
        Fault.make("resumers", 1),
    )
    assert plan_for(family_from_spec({"resumers": {"processes": 2}}), golden, 1, 0).faults == (
        Fault.make("resumers", 1),
    )
    fam = family_from_spec({"resumers": {"processes": 8, "count": 2}})
    assert fam.name == "resumers@processes=8"
    (f,) = plan_for(fam, golden, 1, 0).faults
    assert (f.processes, str(f)) == (8, "resumers: attempts 1 to 8 at once")
    # in a chain, what follows the group hits the attempt after all of it
    chain = family_from_spec([{"resumers": {"processes": 3}}, {"kill": {"at": "random"}}])
    assert [x.attempt for x in plan_for(chain, golden, 1, 0).faults] == [1, 4]


def k_note(
    live: dict[int, tuple[float, float]],
    events: list[dict[str, Any]] = (),  # type: ignore[assignment]
    writes: list[dict[str, Any]] = (),  # type: ignore[assignment]
    codes: dict[int, int] | None = None,
) -> tuple[bool, str, str]:
    attempts = {n: att(n, (codes or {}).get(n, 0), b"locked\n") for n in live}
    barrier = {"how": "together", "patience": 1.0}
    return race_note(tuple(live), live, list(events), list(writes), barrier, 1.0, attempts)


def test_k_resumers_fired_when_two_of_them_raced_and_the_note_says_how_each_took_part() -> None:
    live = {1: (0.0, 2.0), 2: (0.0, 0.2), 3: (0.0, 2.0), 4: (0.0, 0.2)}
    fired, where, _ = k_note(
        live,
        events=[ev(1, 0.5), ev(1, 0.9), ev(3, 0.7), ev(3, 1.0)],
        codes={2: 73, 4: 73},
    )
    assert fired
    assert where.startswith(
        "4 of 4 attempts raced (overlapped: attempts 1, 3; refused: attempts 2, 4); first: "
    ), where


def test_k_resumers_that_never_worked_at_once_are_not_exercised() -> None:
    live = {1: (0.0, 1.0), 2: (1.0, 2.0), 3: (2.0, 3.0)}
    fired, _, why = k_note(
        live, events=[ev(1, 0.2), ev(1, 0.3), ev(2, 1.2), ev(2, 1.3), ev(3, 2.2), ev(3, 2.3)]
    )
    assert not fired
    assert why.startswith("no two of the 3 attempts raced: attempts 1 and 2 ran at the same"), why
    fired, _, why = k_note({1: (0.0, 1.0), 2: (0.0, 1.0), 3: (0.0, 1.0)})
    assert not fired
    assert why.startswith("none of the 3 attempts 1 to 3 sent an event or changed a file"), why


def test_k_resumers_accounting_needs_two_of_them_at_once() -> None:
    from crashpoint.harness import Fault
    from crashpoint.harness._engine._accounting import _resumers

    f = Fault.make("resumers", 1, processes=3)
    golden = Golden([], [], Counter(), b"", 0.0)
    apart = {"spans": [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]}
    out = _resumers(0, f, [att(1), att(2), att(3)], [], [], apart, golden)
    assert not out.fired
    assert out.why_not == "no two of attempts 1 to 3 ran at the same time"
    raced = {"spans": [(0.0, 1.0), (2.0, 3.0), (2.5, 4.0)], "race": (True, "raced", "")}
    assert _resumers(0, f, [att(1), att(2), att(3)], [], [], raced, golden).fired


def k_facts(writes: list[dict[str, Any]], live: dict[int, tuple[float, float]]) -> TrialFacts:
    f = facts([], writes, live)
    f.extra["race"]["attempts"] = sorted(live)
    del f.extra["race"]["pair"]
    return f


def test_k_resumers_two_of_which_change_one_file_at_once_fail_naming_them() -> None:
    live = {1: (0.0, 1.0), 2: (1.0, 3.0), 3: (1.0, 3.0)}
    writes = [wr(1, 0.5), wr(2, 1.2), wr(3, 1.3, "{state_dir}/other"), wr(3, 1.5), wr(2, 1.6)]
    r = check_single_writer(k_facts(writes, live))
    assert not r.ok
    assert r.message.startswith(
        "attempts 2 and 3 both changed {state_dir}/state.json while both were at work: attempt "
        "3 write at +1.500s, attempt 2 write at +1.600s"  # 1.2: before 3 was at work (1.3)
    ), r.message
    assert r.message.endswith(
        "of the 3 attempts started at once, 2 changed a file another was changing while both "
        "were at work: 2, 3"
    ), r.message


def test_k_resumers_taking_turns_at_one_file_pass() -> None:
    live = {1: (0.0, 1.0), 2: (0.0, 2.0), 3: (0.0, 3.0)}
    writes = [wr(1, 0.5), wr(2, 1.5), wr(3, 2.5)]  # each waited for the one before to end
    r = check_single_writer(k_facts(writes, live))
    assert r.ok, r
    assert r.message == (
        "judged from file operations (strace): files changed per attempt (attempt 1: 1, "
        "attempt 2: 1, attempt 3: 1); no file was changed by two while both were at work"
    )
