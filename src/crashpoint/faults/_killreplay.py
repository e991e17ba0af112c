"""A kill -9 replayed from a recorded run instead of re-run up to the kill.

A SIGKILL just before a file operation leaves, on disk, exactly what the operations before it
did (the page cache outlives the process): with the golden run's syscall trace turned into its
operation log (:func:`crashpoint.faults._powercut.oplog`), that state is the log's first
``upto`` operations applied (:func:`crashpoint.faults._powercut.kill_state`), where ``upto``
counts the operations whose trace call came before the killed one. A kill trial can then start
from that state and run only the restart, as a power-cut trial does.

That holds only when the trace says everything the kill would leave. :func:`kill_points` says,
for each recorded file operation, either ``{"upto": k}`` or ``{"why": ...}`` (the trial must
kill a real run there), and refuses from the first call on which any of these holds:

- the log could not model something it saw (its ``notes``), or a write longer than the trace
  shows (an inexact state);
- a symbolic link was made under the folders (a materialised state holds no links);
- a file outside the trial's folders was changed (a replay restores only the folders);
- a process or thread the run started is alive at the kill (a real kill shows whether the
  process dies or is left behind; a thread may have had a request or write under way), or
  the run has an event loop (``epoll_ctl``: requests may be under way at any kill);
- two processes or threads took turns changing files under the folders (the state at the
  kill is then not one prefix of the trace);
- a file under the folders was mapped shared and writable (``mmap`` writes are not in a trace;
  SQLite's ``-shm`` index is exempt: SQLite rebuilds it when it is the only one to open it);
- a write put the run's own folder path into a file (a replayed state would point into the
  golden run's folders, not the trial's).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from crashpoint.faults._fileops import op_of
from crashpoint.faults._powercut import OpLog
from crashpoint.faults._strace import Syscall, Trace, decoration

__all__ = ["SYSCALLS", "calls_after", "kill_points"]

#: Traced besides the power-loss log's calls: shared writable mappings, event loops.
SYSCALLS: tuple[str, ...] = ("mmap", "epoll_ctl")
#: A call an event loop makes (asyncio, libuv register their descriptors): requests may be
#: under way at any kill after it. Not ``epoll_create``: importing Python's ``selectors``
#: (as ``subprocess`` does) makes one to see that epoll works, and closes it.
_LOOPS = frozenset({"epoll_ctl"})

#: Paths a run may change without making its state unreplayable (devices, kernel files).
_HARMLESS = ("/dev/", "/proc/", "/sys/")


def _under(path: str, folders: Iterable[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _forms(folders: Iterable[str]) -> list[str]:
    out: set[str] = set()
    for f in folders:
        if f:
            a = os.path.normpath(os.path.abspath(f))
            out.update({a, os.path.realpath(a)})
    return sorted(out)


def _barriers(
    trace: Trace, log: OpLog, roots: Sequence[str], private: Sequence[str]
) -> list[tuple[int, str]]:
    """``(call number, why)``: from that call on, a kill cannot be replayed."""
    out: list[tuple[int, str]] = []
    # links and inexact writes are placed below, at the call that made them
    notes = [n for n in log.notes if "symlink" not in n and "inexact" not in n]
    if notes:
        out.append((-1, "the trace could not model everything the run did: " + notes[0]))
    for op in log.ops:
        if op.line < 0:
            out.append((-1, "the recording does not tie its operations to the trace"))
            break
    for op in log.ops:
        if not op.exact:
            out.append((op.line, f"a write longer than the trace shows ({op.describe()})"))
            break
    for op in log.ops:
        if op.kind == "symlink":
            out.append((op.line, f"a symbolic link was made ({op.describe()})"))
            break
    secrets = [f.encode() for f in roots if len(f) > 1]
    for op in log.ops:
        if op.kind == "write" and any(s in op.data for s in secrets):
            out.append(
                (
                    op.line,
                    f"the run wrote its own folder's path into a file ({op.describe()}): "
                    "a replayed state would point into the golden run's folders",
                )
            )
            break
    mine: list[Syscall] = []  # the calls that changed something under the folders
    for c in trace.calls:
        if c.result is None or c.result < 0 or c.errno:
            continue
        change = op_of(c)
        if c.name in _LOOPS:
            out.append(
                (
                    c.seq,
                    f"it runs an event loop ({c.name}): a request it had sent may land after "
                    "the kill, which only a real kill shows",
                )
            )
            continue
        if c.name == "mmap":
            a = c.args
            mapped = decoration(a[4])[1] if len(a) > 4 else ""
            if (
                "PROT_WRITE" in a[2]
                and "MAP_SHARED" in a[3]
                and _under(mapped, roots)
                and not mapped.endswith("-shm")
            ):
                out.append((c.seq, f"{mapped} was mapped shared and writable (mmap)"))
            continue
        if not change:
            continue
        for p in (c.path, c.path2):
            if not p or not p.startswith("/"):
                continue
            if _under(p, roots):
                if not mine or mine[-1] is not c:
                    mine.append(c)
            elif not (p.startswith(_HARMLESS) or _under(p, private)):
                out.append((c.seq, f"the run changed {p} outside the trial's folders ({c.name})"))
    clash = _concurrent(mine, trace.ended)
    if clash is not None:
        out.append(clash)
    return sorted(out, key=lambda b: b[0])


def calls_after(trace: Trace, times: Sequence[float]) -> list[int]:
    """For each time (an event's wall clock, ascending), the call number of the first call
    of ``trace`` that started after it (one past the last call when none did): where a kill
    at that event stops the run, for :func:`kill_points`. An agent blocked on the event's
    reply makes no call until it is answered, so every call before it was done."""
    peak: list[float] = []
    top = float("-inf")
    for c in trace.calls:
        top = max(top, c.time)
        peak.append(top)
    end = (trace.calls[-1].seq + 1) if trace.calls else 0
    out = []
    for t in times:
        k = bisect.bisect_right(peak, t)
        out.append(trace.calls[k].seq if k < len(trace.calls) else end)
    return out


def _concurrent(mine: list[Syscall], ended: Mapping[int, float]) -> tuple[int, str] | None:
    """The first change under the folders by a process or thread X made after another one, Y,
    changed something there since X's previous change while Y is still alive (by the trace's
    exit lines): X and Y then take turns, and what a kill leaves is not one prefix of the
    trace. A shell script's parent that writes, starts a child that writes and waits for it,
    then writes again is not concurrent: the child has exited by then. Without times, any
    such turn counts."""
    since: dict[int, set[int]] = {}  # X -> who changed something since X's last change
    for c in mine:
        for other in sorted(since.get(c.pid, ())):
            gone = ended.get(other)
            if not c.time or gone is None or gone > c.time:
                return (
                    c.seq,
                    "two processes or threads took turns changing files under the trial's folders",
                )
        since[c.pid] = set()
        for pid, seen in since.items():
            if pid != c.pid:
                seen.add(c.pid)
    return None


def kill_points(
    trace: Trace,
    log: OpLog,
    seqs: Sequence[int],
    events: Sequence[int],
    roots: Mapping[str, str],
    *,
    private: Iterable[str] = (),
    refuse: str = "",
) -> list[dict[str, Any]]:
    """For each recorded file operation (``seqs``: its trace call number; ``events``: how many
    of the run's events came before it), how a kill -9 just before it is replayed:
    ``{"upto": k, "events": e}`` (the first ``k`` operations of ``log`` are what it leaves),
    or ``{"why": ...}`` when only a real kill tells (see the module docstring).
    ``trace``: the run's trace (``log`` was built from it, with call numbers); ``roots``: the
    run's folders by placeholder name; ``private``: folders outside them the run may change
    (its private TMPDIR, the bytecode cache); ``refuse``: a reason that applies to every
    point (e.g. the agent keeps state outside its folders by name)."""
    if refuse:
        return [{"why": refuse} for _ in seqs]
    if len(events) != len(seqs):
        return [{"why": "the trace has no times to place the events among its operations"}] * len(
            seqs
        )
    barriers = _barriers(trace, log, _forms(roots.values()), _forms(private))
    running = _children(trace)
    lines = [op.line for op in log.ops]
    out: list[dict[str, Any]] = []
    for s, e in zip(seqs, events, strict=True):
        live = next((r for r in running if r[0] < s < r[1]), None)
        if barriers and barriers[0][0] < s:  # the first barrier came before the killed call
            out.append({"why": barriers[0][1]})
        elif live is not None:
            out.append({"why": live[2]})
        else:
            out.append({"upto": bisect.bisect_left(lines, s), "events": int(e)})
    return out


def _children(trace: Trace) -> list[tuple[int, int, str]]:
    """``(from, to, why)`` call numbers between which a process or a thread the run started
    was alive. A process: a kill there would kill it too, or leave it behind (an orphan the
    harness must see), and a replay starts no such process. A thread: it may have had a
    request or a write under way that the kill lets land (or not) after the planned point,
    which the golden run's order of events does not say. Either way only a real kill tells."""
    calls = trace.calls
    if not calls:
        return []
    end = calls[-1].seq + 1
    peak: list[float] = []
    top = float("-inf")
    for c in calls:
        top = max(top, c.time)
        peak.append(top)
    out: list[tuple[int, int, str]] = []
    for c in calls:
        if c.name not in ("clone", "clone3", "fork", "vfork") or not c.result or c.result < 0:
            continue
        gone = trace.ended.get(c.result)
        k = len(calls) if gone is None else bisect.bisect_right(peak, gone)
        until = calls[k].seq if k < len(calls) else end
        why = (
            "a thread it started was running: a request or a write it had under way may "
            "land after the kill, which only a real kill shows"
            if "CLONE_THREAD" in c.raw
            else "a process it started was running: a real kill shows whether it dies with "
            "the agent or is left behind"
        )
        out.append((c.seq, until, why))
    return out
