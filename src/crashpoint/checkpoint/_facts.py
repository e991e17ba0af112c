"""What a store reports about a run: :class:`RunInfo` (one run as ``list`` shows it) and
:class:`Recovery` (what opening a run repaired or rolled back).

Dataclasses (``dataclasses.replace`` works on them), kept apart from ``_store`` so that opening
a run, what every lifecycle command does once per step of a shell agent, imports neither
``dataclasses`` nor ``inspect``: ``_store`` loads this module when a run is listed or a
recovery is asked for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any

    from crashpoint.checkpoint._journal import Damage, TornTail

__all__ = ["Recovery", "RunInfo"]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run as ``crashpoint checkpoints list`` shows it."""

    run_id: str
    path: str
    status: str
    size: int
    updated: float
    generation: int
    locked: bool
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def age(self) -> float:
        return max(0.0, time.time() - self.updated)


@dataclass(frozen=True, slots=True)
class Recovery:
    """What opening a run repaired or rolled back. Falsy when nothing was found."""

    torn_tail: TornTail | None = None
    damage: tuple[Damage, ...] = ()
    lost_from_seq: int | None = None
    moved_aside: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.torn_tail is not None or bool(self.damage)

    def describe(self) -> str:
        parts = []
        if self.torn_tail:
            parts.append(f"repaired a torn tail: {self.torn_tail}")
        for d in self.damage:
            parts.append(f"rolled back past damage: {d}")
        if self.lost_from_seq is not None:
            parts.append(f"records from #{self.lost_from_seq} on were not recovered")
        for p in self.moved_aside:
            parts.append(f"moved aside {p}")
        return "; ".join(parts) or "clean"
