"""The golden run's recording: what the fault families must learn from it.

One syscall trace (strace) gives both the file operations (kill at each of them) and the write
points (a full disk at each), and the logical operation log of a power cut; without strace a
Python agent's file operations come from the audit hook injected into it, and write points
and crash states are not available (:attr:`GoldenRecording.how` says so, and the trials that
needed them do not pass).
"""

from __future__ import annotations

import bisect
import contextlib
import os
from typing import Any

from crashpoint.faults import (
    FILEOP_SYSCALLS,
    KILL_REPLAY_SYSCALLS,
    POWER_STRSIZE,
    POWER_SYSCALLS,
    WRITE_SYSCALLS,
    Armed,
    build_oplog,
    event_points,
    explain_no_fileops,
    fileop_record,
    fileop_recorder,
    kill_calls_after,
    kill_points,
    parse_trace,
    read_fileop_trace,
    read_trace,
    strace_available,
    strace_wrap,
    write_points,
)

__all__ = ["GoldenRecording"]


class GoldenRecording:
    """What the golden run is recorded with: one syscall trace for both file operations and
    write points when strace works here, else the audit hook of a Python agent for its file
    operations (and no write points). :attr:`how` says which, or why nothing."""

    def __init__(
        self, needs: frozenset[str] | set[str], prefix: str, cwd: str, python: bool
    ) -> None:
        self.needs, self.prefix, self.cwd = frozenset(needs), prefix, cwd
        self.trace = ""
        self.armed: Armed | None = None
        self.how = ""
        if not self.needs:
            return
        ok, why = strace_available()
        if ok:
            self.trace = prefix + ".strace"
            self.how = "strace"
        elif "fileops" in self.needs and python:
            self.armed = fileop_recorder(prefix, use_strace=False, cwd=cwd)
            self.how = f"audit hook (no strace: {why})"
        else:
            self.how = f"not recorded: strace is unavailable ({why})" + (
                "; the audit hook only sees a Python agent started with {python}"
                if "fileops" in self.needs
                else ""
            )

    def wrap(self, argv: list[str]) -> list[str]:
        if self.trace:
            replay = "killreplay" in self.needs
            plog = "plog" in self.needs or replay
            calls = sorted(
                {
                    c.lstrip("?")
                    for c in (
                        *WRITE_SYSCALLS,
                        *FILEOP_SYSCALLS,
                        *(POWER_SYSCALLS if plog else ()),
                        *(KILL_REPLAY_SYSCALLS if replay else ()),
                    )
                }
            )
            return strace_wrap(
                argv,
                self.trace,
                syscalls=calls,
                strsize=POWER_STRSIZE if plog else 0,
                # times place the file operations among the events (reports' crash map)
                timestamps=plog or "fileops" in self.needs,
            )
        return argv

    def environ(self, env: dict[str, str]) -> dict[str, str]:
        return self.armed.environ(env) if self.armed is not None else env

    def learn(
        self,
        state: str,
        work: str,
        walls: list[float],
        *,
        private: tuple[str, ...] = (),
        refuse: str = "",
    ) -> dict[str, Any]:
        """What the recording holds (JSON for :class:`Golden`); its files are then removed.
        ``walls``: the wall-clock times of the golden run's events (placed among its file
        operations for ``plog``; and, with strace, ``fileop_events``: how many events came
        before each file operation). For ``killreplay``: ``fileop_replay``, how a kill before
        each file operation is replayed from the recorded state, or why not (``private``:
        folders outside the roots the run may change; ``refuse``: why no kill can be)."""
        out: dict[str, Any] = {}
        roots = {"state_dir": state, "workdir": work}
        try:
            trace = None
            log = None
            if ("plog" in self.needs or "killreplay" in self.needs) and self.trace:
                trace = read_trace(self.trace, cwd=self.cwd)
                log = build_oplog(trace, roots)
                out["plog"] = log.to_json()
                out["plog_events"] = event_points(log, walls)
            if "killreplay" in self.needs and trace is not None and log is not None:
                # per golden event: a kill there (before it, or in its in-doubt window: the
                # agent is blocked on its reply either way) replayed from the trace, or why not
                out["boundary_replay"] = kill_points(
                    trace,
                    log,
                    kill_calls_after(trace, walls),
                    list(range(len(walls))),
                    roots,
                    private=private,
                    refuse=refuse,
                )
            if "plog" in self.needs and log is not None:
                if not log.ops:
                    self.how += (
                        "; the golden run made no file operation under {state_dir} "
                        "or {workdir}: a power cut there loses nothing"
                    )
            elif "plog" in self.needs:
                self.how += "; no syscall trace, so no power-loss crash state"
            if "fileops" in self.needs and (self.trace or self.armed is not None):
                source: Armed | str = self.armed if self.armed is not None else self.trace
                parsed = None
                if self.trace:  # parsed once: the trace above, unless its cwd mattered
                    reuse = trace is not None and not trace.cwd_given
                    parsed = trace if reuse else read_fileop_trace(source)
                ops, times, seqs = fileop_record(source, roots, trace=parsed)
                out["fileops"] = [op.to_json() for op in ops]
                if parsed is None:
                    times = []
                if len(times) == len(ops):
                    ordered = sorted(walls)
                    out["fileop_events"] = [bisect.bisect_right(ordered, t) for t in times]
                if "killreplay" in self.needs and trace is not None and log is not None:
                    out["fileop_replay"] = kill_points(
                        trace,
                        log,
                        seqs,
                        out.get("fileop_events", []),
                        roots,
                        private=private,
                        refuse=refuse,
                    )
                if not ops:
                    self.how += "; " + explain_no_fileops(
                        self.armed or Armed(via="strace", trace=self.trace, cwd=self.cwd),
                        roots,
                    )
            if "writes" in self.needs and self.trace:
                # the same parse as the trace above (same file, same cwd)
                calls = trace.calls if trace is not None else parse_trace(self.trace, cwd=self.cwd)
                out["writes"] = {
                    "tmpfs": [w.to_json() for w in write_points(calls, state, "tmpfs")],
                    "rlimit": [
                        w.to_json()
                        for w in write_points(calls, state, "rlimit", within=(state, work))
                    ],
                }
                if not any(out["writes"].values()):
                    self.how += (
                        "; the golden run wrote no file under {state_dir}: nothing "
                        "for a full disk to refuse"
                    )
        finally:
            for f in (self.trace, *(self.armed.files if self.armed else ())):
                with contextlib.suppress(OSError):
                    if f:
                        os.unlink(f)
        return out
