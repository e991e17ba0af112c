"""What an agent writes outside its state and work folders: measured, reported, cleaned up.

Every attempt gets a private temporary folder (``TMPDIR``, ``TEMP`` and ``TMP`` point at
``<trial>/tmp/attempt-N``); when the attempt has ended its size is measured and it is removed
(:class:`PrivateTmp`). An agent that writes to ``/tmp`` by name instead is only seen: the
system's temporary folders are listed before and after each trial (:func:`temp_entries`), and of
the top-level entries that appeared or changed (an entry whose size, time or inode changed counts
too, so a file rewritten by every attempt is seen) only those the trial's own processes wrote
are reported, with their size and how that is known (:func:`new_temp_entries`):

- an attempt that ran under a syscall trace of all its processes (a full disk, a power cut in
  recovery, two resumers) names what it created or wrote there (:data:`BY_TRACE`), and rules
  out what its trace would have shown;
- else, where fanotify can name the writer (as root: :mod:`crashpoint._proc._writers`), an
  entry a process of the trial's attempts created, wrote, renamed or removed something in
  (:data:`BY_WRITER`); an entry the watch saw only other processes change is another's;
- else (no watch, or the writer was gone before it could be told apart, or the change was not
  seen) an entry owned by the agent's user whose inode changed (its ``ctime``, which no process
  can set back) while one of the trial's attempts ran, from just before its start to just after
  its whole tree was gone, is counted as the trial's (:data:`BY_OWNER_TIME`). A process of the
  same user writing there during that time is taken for the agent.

What other processes changed meanwhile (a log, pip's unpacking, another job) is only counted.
Nothing there is ever removed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from crashpoint._proc import Writers, WriterWatch, writer_watch
from crashpoint.faults import Syscall, read_trace, strace_output_of
from crashpoint.harness._report import DIR_MODE, human_size, secure_dir

__all__ = [
    "BY_OWNER_TIME",
    "BY_TRACE",
    "BY_WRITER",
    "Entry",
    "OutsideWrites",
    "PrivateTmp",
    "Snapshot",
    "Window",
    "attempt_window",
    "attribute",
    "new_temp_entries",
    "sized",
    "temp_entries",
    "temp_writers",
    "traced_writes",
]

_ATTEMPT = re.compile(r"attempt-(\d+)")
#: The harness's own temporary names (ledger sockets, tmpfs side folders, zygote logs).
OWN_PREFIXES = ("cp-", "crashpoint-", "pytest-of-")
#: At most this many files are looked at to size one new entry of a system temp folder.
SIZE_SCAN_LIMIT = 100_000
#: Files counted in a new or changed temp-folder entry (reported "at least" past it): every
#: trial pays this scan, and another job's folder changing in /tmp can be large.
NEW_SCAN_LIMIT = 5_000


def _rmtree(path: str) -> None:
    """Remove a tree an agent left, even with folders it made unwritable (never follows a
    link: shutil.rmtree works on descriptors where the platform allows)."""
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path):
        return
    for dirpath, dirs, _files in os.walk(path):  # a folder made read-only: open it up
        for d in [dirpath, *(os.path.join(dirpath, x) for x in dirs)]:
            with contextlib.suppress(OSError):
                if not os.path.islink(d):
                    os.chmod(d, DIR_MODE)
    shutil.rmtree(path, ignore_errors=True)


def sized(path: str, limit: int = SIZE_SCAN_LIMIT) -> tuple[int, bool]:
    """(bytes of regular files under ``path``, True if every file was counted): stops after
    ``limit`` files, so a folder of millions of files costs a bounded time."""
    total = 0
    seen = 0
    try:
        st = os.lstat(path)
    except OSError:
        return 0, True
    if not stat.S_ISDIR(st.st_mode):
        return (st.st_size if stat.S_ISREG(st.st_mode) else 0), True
    for dirpath, _dirs, files in os.walk(path):
        for n in files:
            seen += 1
            if seen > limit:
                return total, False
            with contextlib.suppress(OSError):
                fst = os.lstat(os.path.join(dirpath, n))
                if stat.S_ISREG(fst.st_mode):
                    total += fst.st_size
    return total, True


class PrivateTmp:
    """The private temporary folders of one trial's attempts, under ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.sizes: dict[int, int] = {}

    def for_attempt(self, attempt: int) -> str:
        """The folder of ``attempt`` (created 0700). The folders of earlier attempts are
        measured and removed first: attempts start in order, so those have ended."""
        self.sweep(before=attempt)
        return secure_dir(os.path.join(self.root, f"attempt-{attempt}"), root=self.root)

    def sweep(self, before: int | None = None) -> None:
        """Measure and remove the folders of the attempts before ``before`` (None: all)."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        for name in names:
            m = _ATTEMPT.fullmatch(name)
            if not m or (before is not None and int(m.group(1)) >= before):
                continue
            path = os.path.join(self.root, name)
            self.sizes[int(m.group(1))] = self.sizes.get(int(m.group(1)), 0) + sized(path)[0]
            _rmtree(path)

    def finish(self) -> dict[int, int]:
        """Measure and remove every attempt's folder, then the root; bytes per attempt."""
        self.sweep()
        if os.path.isdir(self.root) and not os.path.islink(self.root):
            _rmtree(self.root)
        return dict(self.sizes)


# -- the system temporary folders ---------------------------------------------------------------


def _temp_forms() -> dict[str, str]:
    """Each system temporary folder as a path may name it (as given, and resolved) -> its real
    path: ``tempfile.gettempdir()``, ``/tmp``, ``/var/tmp``, ``/dev/shm``, where they exist."""
    out: dict[str, str] = {}
    for d in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        real = os.path.realpath(d)
        if os.path.isdir(real):
            out.setdefault(os.path.normpath(os.path.abspath(d)), real)
            out.setdefault(real, real)
    return out


def _temp_dirs() -> list[str]:
    return list(dict.fromkeys(_temp_forms().values()))


def temp_writers() -> WriterWatch | None:
    """This process's fanotify watch over the system temp folders (None where there is none:
    not root, no fanotify); :func:`~crashpoint._proc._writers.writer_watch_unavailable` says
    why."""
    return writer_watch(_temp_dirs(), OWN_PREFIXES)


class Entry(NamedTuple):
    """One top-level entry of a system temporary folder, as :func:`temp_entries` saw it."""

    ino: int
    mtime_ns: int
    size: int
    uid: int  # its owner
    ctime_ns: int  # when its inode last changed (no process can set it back)
    kind: str  # "file", "dir", "symlink" or "other" (a socket, a FIFO, a device)

    def same(self, before: Entry | None) -> bool:
        """Unchanged since ``before``: the same inode, modification time and size (a change of
        owner or mode alone does not count)."""
        return before is not None and (self.ino, self.mtime_ns, self.size) == (
            before.ino,
            before.mtime_ns,
            before.size,
        )


Snapshot = dict[str, dict[str, Entry]]


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "symlink" if stat.S_ISLNK(mode) else "other"


def temp_entries() -> Snapshot:
    """Each system temporary folder's top-level entries (real folder path -> name ->
    :class:`Entry`), from one ``scandir`` and one ``lstat`` per entry."""
    out: Snapshot = {}
    for d in _temp_dirs():
        entries: dict[str, Entry] = {}
        with contextlib.suppress(OSError), os.scandir(d) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    st = e.stat(follow_symlinks=False)
                    entries[e.name] = Entry(
                        st.st_ino,
                        st.st_mtime_ns,
                        st.st_size,
                        st.st_uid,
                        st.st_ctime_ns,
                        _kind(st.st_mode),
                    )
        out[d] = entries
    return out


# -- the trial's attempts, as the temp folders can tell them --------------------------------------

#: Seconds added before an attempt's start and after its end when an entry's change time is
#: compared with them: the kernel stamps inodes from a clock that may lag the wall clock by
#: a tick (up to 10 ms).
CTIME_SLACK = 0.05

_OPENS = frozenset({"open", "openat", "openat2"})
_RENAMES = frozenset({"rename", "renameat", "renameat2"})
_LINKS = frozenset({"link", "linkat"})
_MKDIRS = frozenset({"mkdir", "mkdirat"})
_SYMLINKS = frozenset({"symlink", "symlinkat"})
#: (kind, new) -> the calls a trace must record to show the ways a traced process makes an
#: entry of that kind (new, or replaced by another inode) or changes it in place; the trace
#: then decides (:meth:`Window.rules_out`). A folder changes in place when a name in it is
#: made or removed (a socket bound or a FIFO made there is not in any trace: such a change
#: is missed). New sockets, FIFOs and devices are never ruled out: no trace records ``bind``.
_SEEN_BY: dict[tuple[str, bool], frozenset[str]] = {
    ("file", True): _OPENS | {"creat"} | _RENAMES | _LINKS,
    ("file", False): _OPENS | {"creat", "truncate"},
    ("dir", True): _MKDIRS | _RENAMES,
    ("dir", False): _OPENS
    | _MKDIRS
    | _RENAMES
    | _LINKS
    | _SYMLINKS
    | {"creat", "rmdir", "unlink", "unlinkat"},
    ("symlink", True): _SYMLINKS | _RENAMES,
}
#: Calls that change a file, or a folder's entries, at their path(s) (successful or cut short).
_CHANGES = frozenset(
    {
        "creat",
        "truncate",
        "truncate64",
        "ftruncate",
        "ftruncate64",
        "fallocate",
        "write",
        "pwrite64",
        "writev",
        "pwritev",
        "pwritev2",
        "sendfile",
        "sendfile64",
        "mkdir",
        "mkdirat",
        "rmdir",
        "unlink",
        "unlinkat",
        "mknod",
        "mknodat",
        "symlink",
        "symlinkat",
        *_LINKS,
        *_RENAMES,
    }
)
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
#: What an strace command line traces when it names no ``-e trace=`` list: every call.
_EVERY_CALL = frozenset().union(*_SEEN_BY.values())


@dataclass(frozen=True)
class Window:
    """One attempt of a trial as the system temp folders can tell it: when it ran (wall clock,
    seconds; from before its start to after its whole tree was gone) and, when it ran under a
    syscall trace of every one of its processes, the top-level temp entries the trace shows it
    changing (``wrote``, absolute paths) and the calls the trace recorded (``calls``: what the
    trace can rule out; empty when it was cut short or untraced)."""

    start: float
    end: float
    traced: bool = False
    wrote: frozenset[str] = frozenset()
    calls: frozenset[str] = frozenset()

    def holds(self, ctime_ns: int) -> bool:
        """A change at ``ctime_ns`` (an inode's change time) may have happened while it ran."""
        t = ctime_ns / 1e9
        return self.start - CTIME_SLACK <= t <= self.end + CTIME_SLACK

    def rules_out(self, entry: Entry, new: bool) -> bool:
        """Its trace records every call that could have made this change to ``entry`` (``new``:
        made, or replaced by another inode): had the attempt made it, ``wrote`` would hold it."""
        need = _SEEN_BY.get((entry.kind, new))
        return self.traced and need is not None and need <= self.calls


def _traced_calls(argv: Sequence[str]) -> frozenset[str] | None:
    """The calls an ``strace`` in ``argv`` records for every process of the command (``-f``,
    no ``-P`` path filter); None if it does not trace them all (or there is no strace)."""
    k = next((i for i, a in enumerate(argv[:40]) if os.path.basename(a) == "strace"), None)
    if k is None:
        return None
    opts = list(argv[k + 1 :])
    opts = opts[: opts.index("--")] if "--" in opts else opts
    if "-f" not in opts or "-P" in opts:
        return None
    names: set[str] = set()
    listed = False
    for a, b in itertools.pairwise(opts):
        if a == "-e" and b.startswith("trace="):
            listed = True
            names.update(n.lstrip("?") for n in b.removeprefix("trace=").split(","))
    return frozenset(names) if listed else _EVERY_CALL


def _top_entry(path: str, forms: dict[str, str]) -> str:
    """The top-level entry of a system temp folder that ``path`` lies in (its real folder +
    name), or ""."""
    for form, real in forms.items():
        if path.startswith(form.rstrip("/") + "/"):
            name = path[len(form.rstrip("/")) + 1 :].split("/", 1)[0]
            if name and name not in (".", ".."):
                return os.path.join(real, name)
    return ""


def traced_writes(calls: Sequence[Syscall]) -> frozenset[str]:
    """The top-level entries of the system temp folders that these calls (of a parsed trace)
    made or changed: opened to write, written, truncated, created, linked, renamed from or to,
    removed (a removal inside a folder changes the folder). Failed calls do not count; a call
    its process was killed in does."""
    forms = _temp_forms()
    out: set[str] = set()
    for c in calls:
        if c.errno:
            continue
        if c.name in _OPENS:
            if not any(f in " ".join(c.args[1:]) for f in _WRITE_FLAGS):
                continue
            paths: tuple[str, ...] = (c.path,)
        elif c.name in _CHANGES:
            paths = (c.path,) if c.name.startswith("symlink") else (c.path, c.path2)
        else:
            continue
        out.update(filter(None, (_top_entry(p, forms) for p in paths if p)))
    return frozenset(out)


def attempt_window(start: float, end: float, argv: Sequence[str] | None, cwd: str) -> Window:
    """The :class:`Window` of an attempt that ran from ``start`` to ``end`` (wall clock) as
    ``argv`` in ``cwd``. Where ``argv`` runs it under an strace that records every process and
    no path filter, the trace (read now: some are removed soon after) says what it wrote in the
    system temp folders. ``argv`` None: the attempt did not end normally; its trace is not read."""
    out = strace_output_of(argv) if argv else None
    calls = _traced_calls(argv) if argv and out else None
    if out is None or calls is None:
        return Window(start, end)
    trace = read_trace(out, cwd=cwd)
    # complete only if it saw each of its processes end: strace ended early (the agent
    # exited and a helper it left was still traced, see Detacher) saw nothing after
    pids = {c.pid for c in trace.calls}
    complete = not trace.truncated and bool(trace.exits) and pids <= set(trace.exits)
    return Window(
        start,
        end,
        traced=complete,
        wrote=traced_writes(trace.calls),
        calls=calls if complete else frozenset(),
    )


# -- what the trial wrote there ----------------------------------------------------------------

#: How an entry was attributed to the trial's own processes.
BY_TRACE = "syscall trace"
BY_WRITER = "writer's process"
BY_OWNER_TIME = "owner and time"


@dataclass(frozen=True)
class OutsideWrites:
    """What changed in the system temp folders during a trial. ``attributed``: the entries the
    trial's own processes wrote, each as ``"/tmp/name (10.0 MiB, new; by syscall trace)"``
    (or ``by owner and time``); ``unattributed``: how many other new or changed entries were
    seen meanwhile (another process's: not listed)."""

    attributed: list[str] = field(default_factory=list)
    unattributed: int = 0


def attribute(
    before: Snapshot,
    now: Snapshot,
    windows: Sequence[Window],
    uid: int,
    writers: Writers | None = None,
) -> tuple[list[tuple[str, bool, str]], int]:
    """Which entries that appeared or changed between ``before`` and ``now`` (the harness's own
    names skipped) the trial's attempts (``windows``) wrote: ``([(path, new, how)], how many
    were not attributed)``.

    An entry is the trial's when a traced attempt's trace shows it changing it
    (:data:`BY_TRACE`); else when ``writers`` (what a fanotify watch saw during the trial)
    names one of its processes as a writer (:data:`BY_WRITER`), and not when the watch saw
    only other, live processes change it (and lost no event); else when it belongs to ``uid``
    (the agent's user) and its inode changed while an attempt ran (:data:`BY_OWNER_TIME`),
    unless that attempt's trace would have shown the change (:meth:`Window.rules_out`).
    Anything else is another process's."""
    found: list[tuple[str, bool, str]] = []
    others = 0
    for d, entries in now.items():
        old = before.get(d, {})
        for name in sorted(entries):
            e = entries[name]
            if name.startswith(OWN_PREFIXES) or e.same(old.get(name)):
                continue
            path = os.path.join(d, name)
            new = name not in old or old[name].ino != e.ino
            how = ""
            if any(path in w.wrote for w in windows):
                how = BY_TRACE
            elif writers is not None and path in writers.mine:
                how = BY_WRITER
            elif (
                writers is not None
                and writers.complete
                and path in writers.seen
                and path not in writers.unknown
            ):
                how = ""  # the watch saw who changed it: others, all alive to be asked
            elif e.uid == uid and any(
                w.holds(e.ctime_ns) and not w.rules_out(e, new) for w in windows
            ):
                how = BY_OWNER_TIME
            if how:
                found.append((path, name not in old, how))
            else:
                others += 1
    return found, others


def new_temp_entries(
    before: Snapshot,
    windows: Sequence[Window],
    uid: int | None = None,
    writers: Writers | None = None,
) -> OutsideWrites:
    """The entries of the system temp folders that the trial's own processes made or changed
    since ``before`` (:func:`attribute`; ``uid``: the agent's user, by default ours;
    ``writers``: what a fanotify watch saw), each with its size and how it is known to be
    theirs, and the count of the others; nothing is removed."""
    found, others = attribute(
        before, temp_entries(), windows, os.geteuid() if uid is None else uid, writers
    )
    out: list[str] = []
    for path, new, how in found:
        size, complete = sized(path, NEW_SCAN_LIMIT)
        what = "new" if new else "changed"
        size_text = ("" if complete else "at least ") + human_size(size)
        out.append(f"{path} ({size_text}, {what}; by {how})")
    return OutsideWrites(out, others)
