"""The ``memory`` fault of one attempt: its memory cgroup, the limit, and whether it bit.

The attempt runs in a memory cgroup of its own (:func:`crashpoint._proc.memory_cgroup`). A
fault ``at: start`` sets the limit before the agent starts; one at a boundary leaves it unlimited
and squeezes it when the agent reaches the planned event, before it is answered (the ledger's
``before_reply``), so its next allocations past the limit meet the kernel's OOM killer. It
fired only when the cgroup's own counters show an OOM kill (or, where the kernel keeps no such
count, refused charges and an attempt ended by SIGKILL); the cgroup is removed when the attempt
ends, whatever ended it.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

from crashpoint._proc import Exit, MemoryCgroup, MemoryUse, memory_cgroup_support
from crashpoint.harness._engine._accounting import kill_at
from crashpoint.harness._spec import Fault, KillAt, size_text

__all__ = ["MEMORY_CGROUP_VAR", "Squeeze", "memory_unavailable"]

#: In an attempt's environment under a ``memory`` fault: its memory cgroup's folder. Only a
#: fresh process joins a cgroup by its argv, so such an attempt is never forked.
MEMORY_CGROUP_VAR = "CRASHPOINT_MEMORY_CGROUP"


def memory_unavailable() -> str | None:
    """Why an attempt cannot have a memory cgroup here (not root, no memory controller, a
    read-only cgroupfs), or None: a ``memory`` fault's trials are skipped with it."""
    return memory_cgroup_support() or None


#: What a memory cgroup's limit is while unlimited (set before a squeeze at a boundary)
UNLIMITED = 1 << 50


@dataclass
class Squeeze:
    """Fault ``index`` (``fault``, a ``memory`` fault) of one attempt, in cgroup ``cgroup``."""

    index: int
    fault: Fault
    cgroup: MemoryCgroup
    point: KillAt | None = None  # None: the limit is set from the start
    where: str = ""  # where the limit was put in place ("" while not yet)
    set_to: int = 0
    error: str = ""
    use: MemoryUse | None = None
    _done: bool = field(default=False, repr=False)

    @classmethod
    def arm(cls, index: int, fault: Fault, cgroup: MemoryCgroup) -> Squeeze:
        """The fault's limit in place (``at: start``) or armed for its event."""
        limit = int(fault.arg("limit", 0))
        sq = cls(index, fault, cgroup)
        if fault.arg("op"):
            sq.point = kill_at(Fault.make("kill", fault.attempt, **dict(fault.args)))
            sq.cgroup.set_limit(UNLIMITED)
        else:
            sq.set_to = sq.cgroup.set_limit(limit)
            sq.where, sq._done = "from its start", True
        return sq

    def before_reply(self, ev: dict[str, Any]) -> None:
        """The ledger is about to answer ``ev``: at the planned event, squeeze the limit."""
        if self._done or self.point is None or not self.point.matches(ev, int(ev.get("nth", 1))):
            return
        self._done = True
        try:
            self.set_to = self.cgroup.set_limit(int(self.fault.arg("limit", 0)))
            self.where = f"at event #{ev.get('i')} {self.point.describe()}"
        except OSError as exc:
            self.error = f"the limit could not be set at {self.point.describe()}: {exc}"

    def finish(self) -> None:
        """The attempt is over: read the cgroup's counters, then remove it."""
        self.use = self.cgroup.use()
        self.cgroup.close()

    def verdict(self, ex: Exit | None) -> tuple[bool, str, str]:
        """(fired, where, why not) for the accounting."""
        limit = size_text(self.set_to or int(self.fault.arg("limit", 0)))
        n = self.fault.attempt
        if not self.where:
            why = self.error or (
                f"attempt {n} never reached {self.point.describe() if self.point else 'its start'}"
                ", so its memory limit was never squeezed"
            )
            return False, "", why
        use = self.use or MemoryUse(0, 0, 0, 0)
        where = f"attempt {n}: a {limit} memory limit {self.where}"
        killed = ex is not None and (ex.signal == signal.SIGKILL or ex.returncode == -9)
        if use.oom_kills or (use.failcnt and killed):
            counted = (
                f"oom_kill {use.oom_kills}" if use.oom_kills else "no oom_kill count kept"
            ) + f", {use.failcnt} charges refused"
            return True, f"{where}; the kernel OOM-killed it ({counted})", ""
        peak = f", its peak use {use.peak / (1 << 20):.1f} MiB" if use.peak else ""
        return (
            False,
            where,
            f"{where}, but the kernel never OOM-killed it (the cgroup counted no OOM kill"
            f"{peak}): lower memory.limit, or squeeze it before a step that allocates more",
        )
