"""A resumer turned away by the lock the other held fired the race, whatever the times of its
end and of the other's work; one the lock never turned away stays "did not fire".

The timeline of a CI failure: the first attempt takes the run's lock and does its work in
0.1 s; the second is refused by the lock (EWOULDBLOCK) while the first still holds it, but its
interpreter takes 0.1 s more to exit, so its end (what the older rule compared) falls after
the first's last activity: "ran at the same time ... but their work never overlapped".
"""

from __future__ import annotations

from typing import Any

from crashpoint.harness import Attempt
from crashpoint.harness._engine._races import race_note

LOCK = "{state_dir}/lock"


def wr(attempt: int, t: float) -> dict[str, Any]:
    return {"attempt": attempt, "t": t, "op": "write", "path": "{state_dir}/state.json"}


def fl(
    attempt: int, t: float, mode: str = "ex", errno: str = "", path: str = LOCK
) -> dict[str, Any]:
    """One flock call as the recorder keeps it (``errno``: refused)."""
    return {
        "attempt": attempt,
        "t": t,
        "path": path,
        "pid": 100 + attempt,
        "mode": mode,
        "ok": not errno,
        "errno": errno,
    }


def att(n: int, code: int | None = 0, *, signal: int | None = None, hung: bool = False) -> Attempt:
    return Attempt(n, [], code, signal, hung, 1.0, b"", b"crashpoint: run 'demo' is locked\n")


#: attempt 1 works 0.1-0.2 and ends at 0.6; attempt 2 did nothing and ended at 0.33
LIVE = {1: (0.0, 0.6), 2: (0.0, 0.33)}
WORK = [wr(1, 0.1), wr(1, 0.15), wr(1, 0.2)]


def note(
    locks: list[dict[str, Any]] | None,
    *,
    second: Attempt | None = None,
    live: dict[int, tuple[float, float]] = LIVE,
    writes: list[dict[str, Any]] = WORK,
) -> tuple[bool, str, str]:
    attempts = {1: att(1), 2: second or att(2, 73)}
    return race_note((1, 2), live, [], list(writes), {"how": "ended"}, 1.0, attempts, locks)


def test_the_ci_timeline_without_a_trace_of_the_lock_did_not_fire() -> None:
    """What the accounting had: no proof of a race (the rule that stays for the audit hook)."""
    fired, _, why = note(None)
    assert not fired
    assert "their work never overlapped" in why


def test_a_resumer_refused_by_the_lock_the_other_held_fired() -> None:
    fired, where, why = note([fl(1, 0.05), fl(2, 0.21, errno="EWOULDBLOCK"), fl(1, 0.55, "un")])
    assert fired, why
    assert where == (
        "attempt 2 was refused by the lock attempt 1 held: its flock on {state_dir}/lock failed "
        "(EWOULDBLOCK) 0.160s after attempt 1 took it, and then it exited 73 "
        "(\"crashpoint: run 'demo' is locked\")"
    )


def test_either_attempt_may_be_the_one_refused() -> None:
    live = {1: (0.0, 0.33), 2: (0.0, 0.6)}
    attempts = {1: att(1, 73), 2: att(2)}
    locks = [fl(2, 0.05), fl(1, 0.21, errno="EAGAIN")]
    writes = [wr(2, 0.1), wr(2, 0.2)]
    fired, where, _ = race_note((1, 2), live, [], writes, {}, 1.0, attempts, locks)
    assert fired
    assert where.startswith("attempt 1 was refused by the lock attempt 2 held")


def test_refused_after_the_other_released_its_lock_did_not_fire() -> None:
    # the kernel's refusal was someone else's lock: the other attempt no longer held it
    fired, _, _ = note([fl(1, 0.05), fl(1, 0.2, "un"), fl(2, 0.21, errno="EAGAIN")])
    assert not fired


def test_refused_after_the_other_ended_did_not_fire() -> None:
    live = {1: (0.0, 0.25), 2: (0.0, 0.4)}
    fired, _, _ = note([fl(1, 0.05), fl(2, 0.3, errno="EAGAIN")], live=live)
    assert not fired


def test_a_lock_the_other_never_took_did_not_fire() -> None:
    fired, _, _ = note([fl(2, 0.21, errno="EAGAIN")])
    assert not fired
    other_file = [fl(1, 0.05, path="{state_dir}/other.lock"), fl(2, 0.21, errno="EAGAIN")]
    assert not note(other_file)[0]


def test_two_shared_locks_do_not_turn_each_other_away() -> None:
    fired, _, _ = note([fl(1, 0.05, "sh"), fl(2, 0.21, "sh", errno="EAGAIN")])
    assert not fired
    assert note([fl(1, 0.05, "sh"), fl(2, 0.21, "ex", errno="EAGAIN")])[0]


def test_refused_then_let_in_or_at_work_is_left_to_the_other_rules() -> None:
    # it tried again and took the lock once the other let go: no refusal
    later = [fl(1, 0.05), fl(2, 0.21, errno="EAGAIN"), fl(1, 0.25, "un"), fl(2, 0.3)]
    _, where, _ = note(later, second=att(2, 0))
    assert not where.startswith("attempt 2 was refused by the lock")
    # it went on working after the refusal (its lock was not what kept it off the run)
    writes = [*WORK, wr(2, 0.3)]
    _, where, _ = note([fl(1, 0.05), fl(2, 0.21, errno="EAGAIN")], writes=writes)
    assert not where.startswith("attempt 2 was refused by the lock")


def test_a_refused_resumer_killed_or_hung_is_not_a_refusal() -> None:
    locks = [fl(1, 0.05), fl(2, 0.21, errno="EAGAIN")]
    assert not note(locks, second=att(2, None, signal=9))[0]
    assert not note(locks, second=att(2, None, hung=True))[0]


def test_k_resumers_name_the_one_the_lock_refused() -> None:
    live = {1: (0.0, 0.6), 2: (0.0, 0.33), 3: (0.7, 1.0)}
    attempts = {1: att(1), 2: att(2, 73), 3: att(3)}
    writes = [*WORK, wr(3, 0.8), wr(3, 0.9)]
    locks = [fl(1, 0.05), fl(2, 0.21, errno="EAGAIN"), fl(1, 0.55, "un"), fl(3, 0.75)]
    fired, where, _ = race_note((1, 2, 3), live, [], writes, {}, 1.0, attempts, locks)
    assert fired
    assert where.startswith("2 of 3 attempts raced (refused: attempt 2); first: attempt 2 was ")


def test_the_accounting_counts_a_lock_refusal_as_fired() -> None:
    from collections import Counter

    from crashpoint.harness import Fault, Golden
    from crashpoint.harness._engine._accounting import _resumers

    f = Fault.make("resumers", 1)
    golden = Golden([], [], Counter(), b"", 0.0)
    race = note([fl(1, 0.05), fl(2, 0.21, errno="EAGAIN")])
    notes = {"spans": [LIVE[1], LIVE[2]], "race": race}
    out = _resumers(0, f, [att(1), att(2, 73)], [], [], notes, golden)
    assert out.fired
    assert out.where.startswith("attempt 2 was refused by the lock attempt 1 held")
