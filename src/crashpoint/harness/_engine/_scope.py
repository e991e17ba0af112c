"""What a trial keeps while it runs: its private temp folders, its secrets, its evidence.

One :class:`TrialScope` per trial (and per golden run): the attempts' private TMPDIRs (measured
and removed after), the system temp folders' entries before it and when each attempt ran (what
the trial's own processes wrote outside is reported), the secrets evidence must never hold, and
the evidence budget its crash copies and outputs share.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from crashpoint._proc import Writers, WriterWatch
from crashpoint.harness._engine._outside import (
    PrivateTmp,
    Snapshot,
    Window,
    attempt_window,
    temp_entries,
    temp_writers,
)
from crashpoint.harness._report import EvidenceBudget, copy_tree_bounded, tree_size

__all__ = ["TrialScope", "copy_state", "dir_size"]


def dir_size(path: str) -> int:
    """Bytes of the regular files under ``path`` (what a state folder holds now)."""
    total = 0
    for dirpath, _d, files in os.walk(path):
        for n in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, n)).st_size
    return total


def copy_state(src: str, dst: str, scope: TrialScope | None = None) -> None:
    """Copy the state folder ``src`` to ``dst`` (a ``crash-N`` folder of the trial): links as
    links, folders 0700, files 0600, and within what is left of the trial's evidence limit
    (what does not fit is left out and listed in the trial's result). A plan with a stale-copy
    corruption needs its copies whole (they are the fault's input): they are bounded only
    when the trial's evidence is written."""
    allowance = scope.allowance(dst) if scope is not None else 1 << 62
    budget = scope.budget if scope is not None else EvidenceBudget(allowance)
    with contextlib.suppress(OSError):
        copy_tree_bounded(src, dst, allowance, budget, os.path.basename(dst) + "/")


@dataclass
class TrialScope:
    """What the runner keeps for the trial (or golden run) under way: the attempts' private
    TMPDIRs, the system temp folders' entries before it, when its attempts ran (``windows``),
    its secrets, its evidence budget."""

    folder: str
    secrets: dict[str, str]
    budget: EvidenceBudget
    whole_copies: bool = False  # a stale-copy corruption reads the copies
    watch_writes: bool = True  # False: a scope only for writing evidence
    tmp: PrivateTmp = field(init=False)
    temp_before: Snapshot = field(init=False)
    windows: list[Window] = field(init=False)
    watch: WriterWatch | None = field(init=False)  # who writes there (as root)
    began: float = field(init=False)
    key: object = field(init=False)

    def __post_init__(self) -> None:
        self.tmp = PrivateTmp(os.path.join(self.folder, "tmp"))
        self.key = object()
        self.began = time.time()
        self.watch = temp_writers() if self.watch_writes else None
        if self.watch is not None:
            self.watch.begin(self.key)
        self.temp_before = temp_entries()
        self.windows = []

    def started(self, leader: int) -> None:
        """An attempt started as ``leader`` (in a session of its own): what its processes
        write in the system temp folders is the trial's."""
        if self.watch is not None:
            self.watch.track(self.key, leader)

    def writers(self) -> Writers | None:
        """What the trial's processes were seen writing in the system temp folders (None
        without a watch); asked once, when the trial ends."""
        if self.watch is None:
            return None
        watch, self.watch = self.watch, None
        return watch.take(self.key, self.began)

    def release(self) -> None:
        """Stop keeping what is written outside for it (a trial that ended early)."""
        if self.watch is not None:
            self.watch.forget(self.key)
            self.watch = None

    def ran(self, start: float, end: float, argv: Sequence[str] | None, cwd: str) -> None:
        """An attempt ran from ``start`` to ``end`` (wall clock) as ``argv`` in ``cwd`` (None:
        it did not end normally, its trace is not read): see :func:`attempt_window`."""
        self.windows.append(attempt_window(start, end, argv, cwd))

    def allowance(self, dst: str) -> int:
        """Bytes a new copy at ``dst`` may take: the limit minus the evidence already there
        (the live state, work and tmp folders are not evidence yet)."""
        if self.whole_copies:
            return 1 << 62
        used = 0
        with contextlib.suppress(OSError):
            for name in os.listdir(self.folder):
                if name not in ("state", "work", "tmp") and os.path.join(self.folder, name) != dst:
                    used += tree_size(os.path.join(self.folder, name))
        return max(0, self.budget.limit - used)
