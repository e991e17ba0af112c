"""What a check may look at: the facts of one trial, gathered by the engine."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from crashpoint.harness._spec import Attempt, Expect, Golden, Plan

__all__ = ["TrialFacts"]


@dataclass
class TrialFacts:
    """Everything a check may look at."""

    golden: Golden
    plan: Plan
    expect: Expect
    attempts: list[Attempt]
    events: list[dict[str, Any]]
    applied: Counter[tuple[str, str]]
    canary: str
    state_dirs: list[str]  # the live state folder and every copy taken at a crash
    max_state_bytes: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def completed(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].returncode == 0

    @property
    def refused(self) -> bool:
        """The last attempt refused damaged state clearly (after a corruption): see
        :meth:`Expect.refusal` (a refuse code, or a refuse pattern on its stderr)."""
        f = self.final
        return (
            f is not None
            and self.plan.corrupts
            and bool(self.expect.refusal(f.returncode, f.stderr))
        )
