"""The single_writer check on hand-made histories: the rule without the timing of real runs."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from crashpoint.harness import Expect, Golden, Plan
from crashpoint.harness._checker._checks import TrialFacts, check_single_writer


def facts(events: list[tuple[int, str, str, float]], ended: dict[int, float]) -> TrialFacts:
    evs: list[dict[str, Any]] = [
        {"i": i, "attempt": a, "op": op, "step": step, "t": t}
        for i, (a, op, step, t) in enumerate(events)
    ]
    golden = Golden(["fetch", "notify"], [], Counter(), b"", 0.0)
    return TrialFacts(
        golden, Plan(()), Expect(), [], evs, Counter(), "canary", [], 0, {"ended": ended}
    )


def test_a_step_started_inside_another_live_attempts_step_fails() -> None:
    # attempt 2 starts fetch; attempt 1 starts fetch while 2 is inside it; 2 then dies
    f = facts(
        [
            (2, "step_started", "fetch", 0.0),
            (1, "step_started", "fetch", 0.1),
            (1, "step_completed", "fetch", 0.3),
        ],
        ended={2: 0.2, 1: 0.9},
    )
    result = check_single_writer(f)
    assert not result.ok
    assert "attempt 1 started 'fetch'" in result.message
    assert "attempt 2 was still inside 'fetch'" in result.message


def test_a_step_started_after_the_other_attempt_went_away_passes() -> None:
    # attempt 1 was killed inside fetch (its connection closed at 0.2); attempt 2 resumes
    f = facts(
        [
            (1, "step_started", "fetch", 0.0),
            (2, "step_started", "fetch", 0.5),
            (2, "step_completed", "fetch", 0.6),
        ],
        ended={1: 0.2, 2: 0.9},
    )
    assert check_single_writer(f).ok


@pytest.mark.parametrize("ended", [{}, {1: 5.0, 2: 5.0}])
def test_going_back_to_work_after_another_attempt_took_over_fails(ended: dict[int, float]) -> None:
    f = facts(
        [
            (1, "step_started", "fetch", 0.0),
            (1, "step_completed", "fetch", 0.1),
            (2, "step_started", "notify", 0.2),
            (2, "step_completed", "notify", 0.3),
            (1, "step_started", "notify", 0.4),
        ],
        ended=ended,
    )
    result = check_single_writer(f)
    assert not result.ok
    assert "went on" in result.message
