"""Write points: where a full disk can hit an agent, learned from its golden run's syscalls.

A ``disk_full`` fault with a fixed capacity only fires if the agent happens to write more than
that; a small agent never does, and its trials "pass" without ever seeing ENOSPC. Instead, from
the syscall trace of the golden run (:mod:`crashpoint.faults._strace`, recorded with
:data:`TRACE_SYSCALLS`; ``-y`` makes every descriptor carry its path) this module replays the
agent's file writes and finds its **write points**: each write that needs more space than any
write before it. Setting the disk to the space used just before a point makes exactly that write
the first one to fail; one trial per point sweeps them all, like every-boundary kills.

Two mechanisms, two notions of "space":

- **tmpfs** (ENOSPC): the state folder is a tmpfs, which counts whole 4 KiB pages per file
  (directories and names take none). The replay keeps, per file, the set of pages written:
  ``open`` with ``O_CREAT``/``O_TRUNC``/``O_APPEND``, ``write``/``writev`` at the descriptor's
  position (shared by ``dup``/``dup2``/``dup3``/``fcntl(F_DUPFD)`` and ``fork``), ``pwrite64``/
  ``pwritev(2)`` at their offsets, ``sendfile``/``copy_file_range`` into a file, ``lseek``,
  ``ftruncate``/``truncate`` (pages past the new end freed), ``fallocate`` (allocate, punch
  hole), ``rename``/``renameat(2)`` (a replaced file freed; a file moved out of the folder no
  longer counts), ``link``, ``unlink(at)`` and ``close`` (an unlinked file's pages are freed at
  its last close), ``execve`` (``O_CLOEXEC`` descriptors closed) and ``exit_group``. A write
  point is a write that raises the folder's high-water page count; point k leaves as free space
  the pages that high-water mark before it used, above what the folder held when the run
  started (:class:`~crashpoint.faults._disk.TmpfsNamespace` with ``free=``, ballast included).
- **rlimit** (EFBIG): ``RLIMIT_FSIZE`` bounds the end offset of every write to any regular file
  (not only the state folder; pipes, sockets and ``/dev``, ``/proc``, ``/sys`` excepted). A
  write point is a write (or a size-extending ``ftruncate``/``fallocate``) that raises the
  largest end offset written so far; point k's limit is that previous high-water mark.

Invisible to a syscall trace, hence to the replay: writes through a shared ``mmap`` (pages
dirtied in memory), ``splice``/``vmsplice``/``io_uring``, and writes by processes the trace
does not follow. A file moved into the folder from another file system is a page count the
replay adds, but under a tmpfs that ``rename`` fails with EXDEV. A file opened before the trace
started has an unknown position: writes to it are taken as appends.

A write that crosses the limit part-way is *short* (the kernel writes what fits and returns the
count); the retry of the rest then fails with ENOSPC/EFBIG. :func:`disk_errors` reports both, and
a planned point counts as hit when the first of them is the planned write.

Identity of a write: its syscall, its path (``{state_dir}/...`` inside the state folder), its
``occurrence`` (the n-th write-like call on that path) and its ``ordinal`` (the n-th write-like
call under the state folder, whatever the file: stable when temp files get random names).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from crashpoint._units import format_size
from crashpoint.errors import InvalidArgument
from crashpoint.faults._strace import Syscall, decode

if TYPE_CHECKING:
    from crashpoint.faults._disk import UsageSample

__all__ = [
    "DISK_ERRNOS",
    "MECHANISMS",
    "PAGE",
    "TRACE_SYSCALLS",
    "DiskError",
    "Fired",
    "WritePoint",
    "WriteUsage",
    "confirm",
    "disk_errors",
    "folder_sizes",
    "refused",
    "rlimit_argv",
    "write_points",
    "write_usage",
]

PAGE = 4096
MECHANISMS = ("tmpfs", "rlimit")
#: The errors a full disk or a file-size limit gives a write.
DISK_ERRNOS = ("ENOSPC", "EFBIG", "EDQUOT")
#: What the golden (and the disk_full) trace must record: pass as ``_strace.wrap(syscalls=...)``.
#: A leading ``?`` tells strace not to fail where the call does not exist (aarch64 has no
#: ``open``, x86_64 no ``_llseek``).
TRACE_SYSCALLS: tuple[str, ...] = (
    "?open",
    "openat",
    "?openat2",
    "?creat",
    "write",
    "writev",
    "?pwrite64",
    "?pwritev",
    "?pwritev2",
    "?sendfile",
    "?sendfile64",
    "?copy_file_range",
    "lseek",
    "?_llseek",
    "?truncate",
    "?truncate64",
    "ftruncate",
    "?ftruncate64",
    "?fallocate",
    "?rename",
    "?renameat",
    "?renameat2",
    "?link",
    "?linkat",
    "?unlink",
    "unlinkat",
    "close",
    "?close_range",
    "dup",
    "?dup2",
    "?dup3",
    "fcntl",
    "?fcntl64",
    "?clone",
    "?clone3",
    "?fork",
    "?vfork",
    "execve",
    "?execveat",
    "exit_group",
)

_WRITES = frozenset(
    {
        "write",
        "writev",
        "pwrite64",
        "pwrite",
        "pwritev",
        "pwritev2",
        "sendfile",
        "sendfile64",
        "copy_file_range",
    }
)
_SIZERS = frozenset({"ftruncate", "ftruncate64", "truncate", "truncate64", "fallocate"})
#: Calls that count as writes for a write's identity (occurrence, ordinal).
WRITE_LIKE = _WRITES | _SIZERS
_OPENS = frozenset({"open", "openat", "openat2", "creat"})
_RENAMES = frozenset({"rename", "renameat", "renameat2"})
_NOT_FILES = ("/dev/", "/proc/", "/sys/")
_FD = re.compile(r"^\s*(-?\d+)(?:<(.*)>)?(?:\(deleted\))?\s*$", re.S)
_RESULT_PATH = re.compile(r"=\s+\d+<(.*)>(?:\(deleted\))?\s*$", re.S)
_IOV_LEN = re.compile(r"iov_len=(\d+)")
_INT = re.compile(r"^\s*\[?\s*(-?\d+)")
_DELETED = " (deleted)"
_DOTS = re.compile(r'"(?:[^"\\]|\\.)*"')  # quoted strings, removed before looking for "..."


# -- the records -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WritePoint:
    """One planned disk fault: make write ``ordinal`` (``syscall`` of ``size`` bytes to
    ``path``, its ``occurrence``-th write) the first to fail.

    ``value``: for ``tmpfs`` the free bytes to leave above the folder's content (whole pages;
    ``TmpfsNamespace(folder, free=value)``); for ``rlimit`` the RLIMIT_FSIZE in bytes.
    ``path`` is ``{state_dir}/...`` inside the state folder, else absolute. ``ordinal`` counts
    write-like calls under the state folder (0 for a file outside it).
    """

    index: int
    mechanism: str
    value: int
    syscall: str
    path: str
    occurrence: int
    ordinal: int
    size: int

    def label(self) -> str:
        """One line for reports: ``tmpfs#2: write of 4.4 KiB to {state_dir}/s.tmp (its 1st
        write; 3rd under {state_dir}) with 8 KiB free``."""
        size = format_size(self.size) if self.size >= 0 else "? B"
        under = f"; {_nth(self.ordinal)} under {{state_dir}}" if self.ordinal else ""
        room = (
            f"with {format_size(self.value)} free"
            if self.mechanism == "tmpfs"
            else f"with RLIMIT_FSIZE {format_size(self.value)}"
        )
        return (
            f"{self.mechanism}#{self.index}: {self.syscall} of {size} to {self.path} "
            f"(its {_nth(self.occurrence)} write{under}) {room}"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: object, *, where: str = "write point") -> WritePoint:
        """A point from :meth:`to_json`'s output; ``ValueError`` naming the bad key."""
        if not isinstance(obj, Mapping):
            raise InvalidArgument(f"{where}: expected a mapping, got {type(obj).__name__}")
        want: dict[str, type] = {
            "index": int,
            "mechanism": str,
            "value": int,
            "syscall": str,
            "path": str,
            "occurrence": int,
            "ordinal": int,
            "size": int,
        }
        missing = sorted(set(want) - set(obj))
        extra = sorted(set(obj) - set(want))
        if missing or extra:
            raise InvalidArgument(
                f"{where}: missing keys {missing}, unknown keys {extra}; a write "
                f"point has exactly {sorted(want)}"
            )
        for key, typ in want.items():
            v = obj[key]
            if not isinstance(v, typ) or isinstance(v, bool):
                raise InvalidArgument(f"{where}: key {key!r} must be {typ.__name__}, got {v!r}")
        if obj["mechanism"] not in MECHANISMS:
            raise InvalidArgument(
                f"{where}: key 'mechanism' must be one of {MECHANISMS}, got {obj['mechanism']!r}"
            )
        if obj["value"] < 0 or obj["index"] < 1 or obj["occurrence"] < 1 or obj["ordinal"] < 0:
            raise InvalidArgument(
                f"{where}: value/ordinal must be >= 0, index/occurrence >= 1: {dict(obj)}"
            )
        return cls(**{k: obj[k] for k in want})

    def matches(self, err: DiskError) -> bool:
        """Whether ``err`` (from the faulty run's trace) is this point's write: same call, and
        the same file and occurrence, or (a temp file named at random) the same ordinal under
        the state folder in the same sub-folder."""
        if err.syscall != self.syscall:
            return False
        if err.path == self.path and err.occurrence == self.occurrence:
            return True
        return (
            bool(self.ordinal)
            and err.ordinal == self.ordinal
            and os.path.dirname(err.path) == os.path.dirname(self.path)
        )


@dataclass(frozen=True, slots=True)
class DiskError:
    """A write that the disk refused: ``errno`` ENOSPC/EFBIG/EDQUOT, or "" for a short write
    (``written`` of ``requested`` bytes: the kernel wrote what fit). Identity as for
    :class:`WritePoint` (``path`` is ``{state_dir}/...`` inside the state folder)."""

    seq: int
    pid: int
    syscall: str
    path: str
    occurrence: int
    ordinal: int
    errno: str
    requested: int = -1
    written: int = -1

    @property
    def short(self) -> bool:
        return not self.errno

    def describe(self) -> str:
        size = format_size(self.requested) if self.requested >= 0 else "? B"
        what = self.errno or f"short write ({format_size(self.written)} of {size})"
        under = f", {_nth(self.ordinal)} under {{state_dir}}" if self.ordinal else ""
        return (
            f"{what} at {self.syscall} of {size} to {self.path} (its "
            f"{_nth(self.occurrence)} write{under}; pid {self.pid})"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class WriteUsage(NamedTuple):
    """What a trace's writes took: under the state folder the peak in tmpfs pages (bytes) and
    in file bytes (both including the folder's initial content), and anywhere the largest end
    offset written (and where). ``writes``: write-like calls under the state folder."""

    peak_pages: int
    peak_bytes: int
    largest_end: int
    largest_path: str
    writes: int


class Fired(NamedTuple):
    """Did the disk fault take effect: where (the write that failed) or why not (with a fix)."""

    fired: bool
    where: str
    why_not: str


# -- the replay ------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Inode:
    names: set[str]
    size: int = 0
    pages: set[int] = field(default_factory=set)
    opens: int = 0
    inside: bool = False

    @property
    def alive(self) -> bool:
        return bool(self.names) or self.opens > 0


@dataclass(eq=False, slots=True)
class _Ofd:
    """An open file description: shared by dup'ed descriptors and forked children."""

    inode: _Inode | None  # None: not a regular file we follow (a pipe, a directory, a read)
    pos: int = 0
    append: bool = False
    refs: int = 0


@dataclass(eq=False, slots=True)
class _Fd:
    ofd: _Ofd
    cloexec: bool = False


class _Replay:
    """The files of one trace, under a state folder, as a tmpfs and an RLIMIT_FSIZE see them."""

    def __init__(self, state_dir: str, initial: Mapping[str, int] | None) -> None:
        self.roots = tuple(
            {os.path.normpath(os.path.abspath(state_dir)), os.path.realpath(state_dir)}
        )
        self.names: dict[str, _Inode] = {}
        self.tables: dict[int, dict[int, _Fd]] = {}
        self.pages = 0  # pages of live files inside the folder
        self.bytes = 0  # their sizes
        self.occurrence: dict[str, int] = {}
        self.ordinal = 0
        for path, size in (initial or {}).items():
            p = os.path.normpath(path)
            if _regular(p):
                ino = self._new(p)
                with self._track(ino):
                    ino.size = max(0, int(size))
                    ino.pages = set(range(-(-ino.size // PAGE)))
        self.start_pages = self.pages

    # -- helpers -----------------------------------------------------------------------------

    def inside(self, path: str) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in self.roots)

    def show(self, path: str) -> str:
        """``{state_dir}/rel`` inside the folder, else the absolute path."""
        for r in self.roots:
            if path == r:
                return "{state_dir}"
            if path.startswith(r.rstrip("/") + "/"):
                return "{state_dir}/" + path[len(r.rstrip("/")) + 1 :]
        return path

    def _new(self, path: str) -> _Inode:
        ino = _Inode({path}, inside=self.inside(path))
        self.names[path] = ino
        return ino

    @contextlib.contextmanager
    def _track(self, ino: _Inode) -> Iterator[None]:
        """``with self._track(ino):`` around any change to ``ino``: keeps the folder's totals."""
        self._count(ino, -1)
        try:
            yield
        finally:
            if ino.names:
                ino.inside = any(self.inside(n) for n in ino.names)
            self._count(ino, +1)

    def _count(self, ino: _Inode, sign: int) -> None:
        if ino.inside and ino.alive:
            self.pages += sign * len(ino.pages)
            self.bytes += sign * ino.size

    def table(self, pid: int) -> dict[int, _Fd]:
        return self.tables.setdefault(pid, {})

    def inode_at(self, path: str, *, create: bool) -> _Inode | None:
        path = _clean(path)
        if not _regular(path):
            return None
        ino = self.names.get(path)
        if ino is None and create:
            ino = self._new(path)
        return ino

    def ofd(self, call: Syscall, fd: int, path: str) -> _Ofd | None:
        """The open file behind ``fd`` of ``call.pid`` (``path``: its ``-y`` decoration).

        A descriptor we never saw open (inherited from before the trace, or a missed event)
        gets one made from its path, its position at the end of the file."""
        table = self.table(call.pid)
        path = _clean(path)
        entry = table.get(fd)
        if entry is not None:
            ino = entry.ofd.inode
            if ino is None or not path or path in ino.names or not ino.names or not _regular(path):
                return entry.ofd
            self.close(call.pid, fd)  # stale: the fd now names another file
        ino = self.inode_at(path, create=True) if path else None
        if ino is None:
            return None
        ofd = _Ofd(ino, pos=ino.size)
        self.install(call.pid, fd, ofd, cloexec=False)
        return ofd

    def install(self, pid: int, fd: int, ofd: _Ofd, *, cloexec: bool) -> None:
        table = self.table(pid)
        if fd in table:
            self.close(pid, fd)
        ofd.refs += 1
        if ofd.refs == 1 and ofd.inode is not None:
            with self._track(ofd.inode):
                ofd.inode.opens += 1
        table[fd] = _Fd(ofd, cloexec)

    def close(self, pid: int, fd: int) -> None:
        entry = self.table(pid).pop(fd, None)
        if entry is None:
            return
        ofd = entry.ofd
        ofd.refs -= 1
        if ofd.refs == 0 and ofd.inode is not None:
            with self._track(ofd.inode):
                ofd.inode.opens -= 1

    def unlink(self, path: str) -> None:
        path = _clean(path)
        ino = self.names.pop(path, None)
        if ino is not None:
            with self._track(ino):
                ino.names.discard(path)

    # -- what a call does to the files ---------------------------------------------------------

    def write_at(self, ino: _Inode, pos: int, n: int) -> int:
        """Bytes ``[pos, pos + n)`` written to ``ino``; returns the end offset."""
        end = pos + max(0, n)
        with self._track(ino):
            if n > 0:
                ino.pages.update(range(pos // PAGE, -(-end // PAGE)))
            ino.size = max(ino.size, end)
        return end

    def resize(self, ino: _Inode, length: int) -> None:
        with self._track(ino):
            if length < ino.size:
                keep = -(-length // PAGE)
                ino.pages = {p for p in ino.pages if p < keep}
            ino.size = length

    def apply(self, call: Syscall) -> tuple[_Inode | None, int]:
        """Replay one successful call; returns (the file it wrote, its end offset) for the
        write-like calls, (None, -1) otherwise."""
        name = call.name
        if name in _OPENS:
            self._open(call)
        elif name in _WRITES:
            return self._write(call)
        elif name in ("lseek", "_llseek"):
            ofd = self.ofd(call, call.fd, call.path)
            if ofd is not None:
                pos = call.result if name == "lseek" else _int(_arg(call, 3))
                if pos is not None and pos >= 0:
                    ofd.pos = pos
        elif name in _SIZERS:
            return self._size(call)
        elif name in _RENAMES:
            self._rename(call)
        elif name in ("link", "linkat"):
            src, dst = _clean(call.path), _clean(call.path2)
            ino = self.names.get(src)
            if ino is not None and dst and _regular(dst):
                self.unlink(dst)
                with self._track(ino):
                    ino.names.add(dst)
                self.names[dst] = ino
        elif name in ("unlink", "unlinkat"):
            if "AT_REMOVEDIR" not in " ".join(call.args):
                self.unlink(call.path)
        elif name == "close":
            self.close(call.pid, call.fd)
        elif name == "close_range":
            self._close_range(call)
        elif name in ("dup", "dup2", "dup3"):
            ofd = self.ofd(call, call.fd, call.path) or _Ofd(None)
            if call.result is not None and call.result >= 0 and call.result != call.fd:
                self.install(
                    call.pid, call.result, ofd, cloexec="O_CLOEXEC" in " ".join(call.args[2:])
                )
        elif name in ("fcntl", "fcntl64"):
            self._fcntl(call)
        elif name in ("clone", "clone3", "fork", "vfork"):
            self._fork(call)
        elif name in ("execve", "execveat"):
            table = self.table(call.pid)
            for fd in [fd for fd, e in table.items() if e.cloexec]:
                self.close(call.pid, fd)
        elif name == "exit_group":
            for fd in list(self.table(call.pid)):
                self.close(call.pid, fd)
        return None, -1

    def _open(self, call: Syscall) -> None:
        fd = call.result
        if fd is None or fd < 0:
            return
        if call.name == "creat":
            flags = {"O_CREAT", "O_WRONLY", "O_TRUNC"}
        else:
            flags = set(re.findall(r"O_[A-Z]+", " ".join(call.args[1:3])))
        m = _RESULT_PATH.search(call.raw) if call.raw else None
        path = _clean(decode(m.group(1)) if m else call.path)
        writing = bool(flags & {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"})
        ino = None
        if "O_DIRECTORY" not in flags and path:
            ino = self.inode_at(path, create=writing)
        ofd = _Ofd(ino, append="O_APPEND" in flags)
        if ino is not None and "O_TRUNC" in flags:
            self.resize(ino, 0)
        self.install(call.pid, fd, ofd, cloexec="O_CLOEXEC" in flags)

    def _write(self, call: Syscall) -> tuple[_Inode | None, int]:
        n = call.result
        if call.name == "copy_file_range":
            fd, path = _fd_arg(_arg(call, 2))
            ofd = self.ofd(call, fd, path) if fd >= 0 else None
            offset = _int(_arg(call, 3))  # [N] (printed on entry) or NULL
        else:
            ofd = self.ofd(call, call.fd, call.path)
            offset = None
            if call.name in ("pwrite64", "pwrite", "pwritev", "pwritev2"):
                offset = _int(_arg(call, 3))
                if offset is not None and offset < 0:  # pwritev2 with -1: the file position
                    offset = None
        if ofd is None or ofd.inode is None or n is None or n < 0:
            return None, -1
        ino = ofd.inode
        appending = ofd.append or "RWF_APPEND" in _arg(call, 4)
        if appending:  # O_APPEND: at the end, whatever the offset (pwrite too, on Linux)
            pos = ino.size
        elif offset is not None:
            pos = offset
        else:
            pos = ofd.pos
        end = self.write_at(ino, pos, n)
        if offset is None or appending:
            ofd.pos = end
        return ino, end

    def _size(self, call: Syscall) -> tuple[_Inode | None, int]:
        if call.name.startswith("truncate"):
            ino = self.inode_at(call.path, create=True)
        else:
            ofd = self.ofd(call, call.fd, call.path)
            ino = ofd.inode if ofd is not None else None
        if ino is None:
            return None, -1
        if call.name == "fallocate":
            mode = _arg(call, 1)
            off, length = _int(_arg(call, 2)), _int(_arg(call, 3))
            if off is None or length is None or length <= 0:
                return None, -1
            end = off + length
            if "PUNCH_HOLE" in mode:
                with self._track(ino):
                    first, last = -(-off // PAGE), end // PAGE
                    ino.pages = {p for p in ino.pages if not first <= p < last}
                return None, -1
            if mode.strip() not in ("0", "FALLOC_FL_KEEP_SIZE"):
                return None, -1  # zero/collapse/insert range: not modelled (tmpfs lacks them)
            keep = "KEEP_SIZE" in mode
            grows = end > ino.size
            with self._track(ino):
                ino.pages.update(range(off // PAGE, -(-end // PAGE)))
                if not keep:
                    ino.size = max(ino.size, end)
            return ino, (end if grows and not keep else -1)
        length = _int(_arg(call, 1))
        if length is None or length < 0:
            return None, -1
        grows = length > ino.size
        self.resize(ino, length)
        return ino, (length if grows else -1)

    def _rename(self, call: Syscall) -> None:
        src, dst = _clean(call.path), _clean(call.path2)
        if not src or not dst or src == dst:
            return
        if "RENAME_EXCHANGE" in " ".join(call.args[4:]):
            a, b = self.names.pop(src, None), self.names.pop(dst, None)
            for ino, old, new in ((a, src, dst), (b, dst, src)):
                if ino is not None:
                    with self._track(ino):
                        ino.names.discard(old)
                        ino.names.add(new)
                    self.names[new] = ino
            return
        moves = [(src, dst)] if src in self.names else []
        prefix = src.rstrip("/") + "/"  # a folder renamed: every file under it moves
        moves += [
            (n, dst.rstrip("/") + "/" + n[len(prefix) :])
            for n in list(self.names)
            if n.startswith(prefix)
        ]
        for old, new in moves:
            ino = self.names.pop(old)
            if self.names.get(new) is not ino:
                self.unlink(new)
            with self._track(ino):
                ino.names.discard(old)
                if _regular(new):
                    ino.names.add(new)
            if _regular(new):
                self.names[new] = ino

    def _close_range(self, call: Syscall) -> None:
        first = _int(_arg(call, 0))
        last = _int(_arg(call, 1))
        if first is None:
            return
        hi = last if last is not None and last >= 0 else 1 << 62
        table = self.table(call.pid)
        cloexec_only = "CLOSE_RANGE_CLOEXEC" in _arg(call, 2)
        for fd in [fd for fd in table if first <= fd <= hi]:
            if cloexec_only:
                table[fd].cloexec = True
            else:
                self.close(call.pid, fd)

    def _fcntl(self, call: Syscall) -> None:
        cmd = _arg(call, 1).strip()
        if cmd in ("F_DUPFD", "F_DUPFD_CLOEXEC"):
            if call.result is not None and call.result >= 0:
                ofd = self.ofd(call, call.fd, call.path) or _Ofd(None)
                self.install(call.pid, call.result, ofd, cloexec=cmd == "F_DUPFD_CLOEXEC")
        elif cmd == "F_SETFD":
            entry = self.table(call.pid).get(call.fd)
            if entry is not None:
                entry.cloexec = "FD_CLOEXEC" in _arg(call, 2)
        elif cmd == "F_SETFL":
            flagged = self.ofd(call, call.fd, call.path)
            if flagged is not None:
                flagged.append = "O_APPEND" in _arg(call, 2)

    def _fork(self, call: Syscall) -> None:
        child = call.result
        if child is None or child <= 0:
            return
        parent = self.table(call.pid)
        if "CLONE_FILES" in " ".join(call.args):
            mine = self.tables.get(child)
            self.tables[child] = parent  # one table, shared (threads)
            for fd, entry in (mine or {}).items():  # its calls were printed before the clone
                parent.setdefault(fd, entry)
            return
        table = self.tables.setdefault(child, {})  # its own calls may have come first
        for fd, entry in parent.items():
            if fd not in table:
                entry.ofd.refs += 1
                table[fd] = _Fd(entry.ofd, entry.cloexec)


# -- the public functions --------------------------------------------------------------------


def write_points(
    calls: Sequence[Syscall],
    state_dir: str,
    mechanism: str,
    *,
    initial: Mapping[str, int] | None = None,
    within: Sequence[str] = (),
) -> list[WritePoint]:
    """The write points of a golden run's trace ``calls`` (see the module doc), in order.

    ``state_dir``: the golden run's state folder (absolute). ``initial``: sizes of the files
    there before the run (absolute path -> bytes; :func:`folder_sizes`), and of files outside
    it the agent appends to, if known. ``within`` (rlimit only): folders whose writes may be
    targeted (e.g. the state and work folders, so a cache written only on the first run, such
    as Python's ``__pycache__``, is no target); default: every file. Every file's writes still
    count towards the limit.
    """
    if mechanism not in MECHANISMS:
        raise InvalidArgument(
            f"unknown disk_full mechanism {mechanism!r}; write points exist for "
            f"{', '.join(MECHANISMS)}"
        )
    replay = _Replay(state_dir, initial)
    roots = [os.path.normpath(os.path.abspath(w)) for w in within]
    points: list[WritePoint] = []
    high_pages = replay.pages
    high_end = 0
    for call in calls:
        ident = _identify(replay, call)
        if call.result is None or call.errno or (call.result < 0):
            continue
        ino, end = replay.apply(call)
        if ident is None:
            high_pages = max(high_pages, replay.pages)
            continue
        path, occurrence, ordinal, size = ident
        if mechanism == "tmpfs":
            if replay.pages > high_pages and ino is not None and ino.inside:
                points.append(
                    WritePoint(
                        len(points) + 1,
                        "tmpfs",
                        (high_pages - replay.start_pages) * PAGE,
                        call.name,
                        replay.show(path),
                        occurrence,
                        ordinal,
                        size,
                    )
                )
            high_pages = max(high_pages, replay.pages)
        elif end > high_end:
            if not roots or any(path == r or path.startswith(r + "/") for r in roots):
                points.append(
                    WritePoint(
                        len(points) + 1,
                        "rlimit",
                        high_end,
                        call.name,
                        replay.show(path),
                        occurrence,
                        ordinal,
                        size,
                    )
                )
            high_end = end
    return points


def disk_errors(calls: Sequence[Syscall], state_dir: str) -> list[DiskError]:
    """The write-like calls of a trace that the disk refused, in trace order: failed with
    ENOSPC, EFBIG or EDQUOT, or short (fewer bytes written than asked: the kernel wrote what
    fit, the retry fails). Regular files only; ``path`` is ``{state_dir}/...`` inside the
    state folder. Works on any prefix of a trace: a trace still being written gives the
    errors so far, with the same identities."""
    replay = _Replay(state_dir, None)
    out: list[DiskError] = []
    for call in calls:
        ident = _identify(replay, call)
        if ident is not None:
            path, occurrence, ordinal, size = ident
            shown = replay.show(path)
            if call.errno in DISK_ERRNOS:
                out.append(
                    DiskError(
                        call.seq,
                        call.pid,
                        call.name,
                        shown,
                        occurrence,
                        ordinal,
                        call.errno,
                        size,
                        -1,
                    )
                )
            elif call.name in _WRITES and call.result is not None and 0 <= call.result < size:
                out.append(
                    DiskError(
                        call.seq,
                        call.pid,
                        call.name,
                        shown,
                        occurrence,
                        ordinal,
                        "",
                        size,
                        call.result,
                    )
                )
        if call.result is not None and not call.errno and call.result >= 0:
            replay.apply(call)
    return out


def refused(calls: Sequence[Syscall], state_dir: str, mechanism: str) -> list[DiskError]:
    """The :func:`disk_errors` that ``mechanism`` causes: for ``tmpfs`` ENOSPC/EDQUOT and short
    writes under the state folder, for ``rlimit`` EFBIG and short writes anywhere. The first is
    where the fault landed (``point.matches(refused(...)[0])``: where it was planned)."""
    return [e for e in disk_errors(calls, state_dir) if _relevant(e, mechanism)]


def write_usage(
    calls: Sequence[Syscall], state_dir: str, *, initial: Mapping[str, int] | None = None
) -> WriteUsage:
    """How much the writes of ``calls`` took (see :class:`WriteUsage`)."""
    replay = _Replay(state_dir, initial)
    peak_pages, peak_bytes = replay.pages, replay.bytes
    largest, where = 0, ""
    for call in calls:
        ident = _identify(replay, call)
        if call.result is None or call.errno or call.result < 0:
            continue
        _ino, end = replay.apply(call)
        peak_pages = max(peak_pages, replay.pages)
        peak_bytes = max(peak_bytes, replay.bytes)
        if ident is not None and end > largest:
            largest, where = end, replay.show(ident[0])
    return WriteUsage(peak_pages * PAGE, peak_bytes, largest, where, replay.ordinal)


def confirm(
    mechanism: str,
    state_dir: str,
    *,
    point: WritePoint | None = None,
    capacity: int | None = None,
    calls: Sequence[Syscall] | None = None,
    sample: UsageSample | None = None,
    initial: Mapping[str, int] | None = None,
    untraced: str = "",
) -> Fired:
    """Did a disk fault of ``mechanism`` take effect in an attempt?

    Give the planned ``point`` (write-point mode) or the fixed ``capacity`` (tmpfs size or
    RLIMIT_FSIZE), and what was observed: the attempt's trace ``calls`` (best: says which write
    failed), else for a tmpfs a ``sample`` (:class:`~crashpoint.faults._disk.UsageSample`,
    ``peak_used``/``min_free``) of the namespace's usage. ``initial``: the folder's sizes
    before the attempt (for the peak reported). ``untraced``: why there is no trace.
    """
    if mechanism not in MECHANISMS:
        raise InvalidArgument(f"unknown disk_full mechanism {mechanism!r}; one of {MECHANISMS}")
    planned = (
        point.label()
        if point is not None
        else (f"capacity {format_size(capacity)}" if capacity is not None else "the disk fault")
    )
    fix = (
        "lower it or use the write-point mode (disk_full without capacity)"
        if point is None
        else "the agent's writes differ from its golden run (sizes or order change between runs: "
        "make them deterministic), or it stopped before that write (another fault, an "
        "error: see its stderr)"
    )
    if calls is not None:
        errs = refused(calls, state_dir, mechanism)
        if errs:
            first = errs[0]
            where = first.describe()
            if point is not None and not point.matches(first):
                where += f"; planned {point.label()}"
            return Fired(True, where, "")
        use = write_usage(calls, state_dir, initial=initial)
        if mechanism == "tmpfs":
            took = (
                f"the agent's files under {{state_dir}} took at most "
                f"{format_size(use.peak_bytes)} ({format_size(use.peak_pages)} in tmpfs "
                f"pages) in {use.writes} write{'' if use.writes == 1 else 's'}"
            )
        else:
            took = f"the agent wrote at most {format_size(use.largest_end)} into one file" + (
                f" ({use.largest_path})" if use.largest_path else ""
            )
        if point is not None:
            return Fired(
                False,
                "",
                f"no write failed with {_err(mechanism)}: {took}; planned {planned}: {fix}",
            )
        never = "never filled" if mechanism == "tmpfs" else "never reached"
        return Fired(False, "", f"{took}; {planned} {never}: {fix}")
    if sample is not None and mechanism == "tmpfs":
        peak, low = sample.peak_used, sample.min_free
        if low < PAGE:
            return Fired(
                True,
                f"the tmpfs filled (free space fell to {format_size(low)}, "
                f"{format_size(peak)} used at the peak; no trace to name the "
                "write" + (f": {untraced}" if untraced else "") + ")",
                "",
            )
        return Fired(
            False,
            "",
            f"the tmpfs never filled: {format_size(peak)} used at the "
            f"peak, never less than {format_size(low)} free (sampled, so "
            f"a brief peak can be missed); {planned}: {fix}",
        )
    return Fired(
        False,
        "",
        f"cannot tell whether {planned} took effect: no syscall trace"
        + (f" ({untraced})" if untraced else "")
        + (" and no usage samples" if mechanism == "tmpfs" else "")
        + "; install strace (and allow ptrace) so the harness can see the "
        "write that failed",
    )


def folder_sizes(folder: str) -> dict[str, int]:
    """Absolute path -> size of each regular file under ``folder`` (symlinks not followed):
    the ``initial`` of :func:`write_points` for a run that starts from this content."""
    out: dict[str, int] = {}
    root = os.path.abspath(folder)
    for dp, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dp, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not os.path.islink(p):
                out[p] = st.st_size
    return out


#: Runs between ``strace`` and the agent: RLIMIT_FSIZE for the agent only (strace writing its
#: trace under the limit would get EFBIG itself), SIGXFSZ ignored so a write past the limit
#: fails with EFBIG instead of killing the agent, SIGPIPE back to its default (Python ignores
#: it; an ignored signal stays ignored across exec). Then exec: the same pid.
_RLIMIT_EXEC = (
    "import os, resource, signal, sys\n"
    "signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    "n = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))\n"
    "try:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "except OSError as exc:\n"
    "    sys.stderr.write(f'crashpoint: cannot start {sys.argv[2]!r}: {exc}\\n')\n"
    "    os._exit(127)\n"
)


def rlimit_argv(argv: Sequence[str], limit: int) -> list[str]:
    """``argv`` with RLIMIT_FSIZE ``limit`` (bytes) and SIGXFSZ ignored, set by a small exec
    wrapper (this interpreter, ``-I -S``). Use it *inside* a trace:
    ``_strace.wrap(rlimit_argv(argv, n), ...)``; without a trace, ``AgentProcess(...,
    rlimit_fsize=n)`` does the same between fork and exec."""
    if limit < 0:
        raise InvalidArgument(f"RLIMIT_FSIZE must be >= 0 bytes, got {limit}")
    return [sys.executable, "-I", "-S", "-c", _RLIMIT_EXEC, str(int(limit)), *argv]


# -- parsing helpers -------------------------------------------------------------------------


def _identify(replay: _Replay, call: Syscall) -> tuple[str, int, int, int] | None:
    """For a write-like call on a regular file: (its path, occurrence, ordinal, bytes asked);
    counts it (every attempt counts, failed or not, so a faulty run's numbering matches the
    golden run's up to the failure). None for other calls."""
    if call.name not in WRITE_LIKE:
        return None
    if call.name == "copy_file_range":
        fd, path = _fd_arg(_arg(call, 2))
        entry = replay.table(call.pid).get(fd)
        if not path and entry is not None and entry.ofd.inode is not None:
            path = next(iter(sorted(entry.ofd.inode.names)), "")
    else:
        path = call.path
    path = _clean(path)
    if not _regular(path):
        return None
    occurrence = replay.occurrence[path] = replay.occurrence.get(path, 0) + 1
    ordinal = 0
    if replay.inside(path):
        replay.ordinal += 1
        ordinal = replay.ordinal
    return path, occurrence, ordinal, _requested(call)


def _requested(call: Syscall) -> int:
    """Bytes a write asked for (-1: unknown, e.g. an abbreviated iovec array)."""
    name = call.name
    if name in ("write", "pwrite64", "pwrite"):
        return _intd(_arg(call, 2), -1)
    if name in ("writev", "pwritev", "pwritev2"):
        iov, count = _arg(call, 1), _intd(_arg(call, 2), -1)
        lens = [int(x) for x in _IOV_LEN.findall(iov)]
        if len(lens) == count and "..." not in _DOTS.sub("", iov):
            return sum(lens)
        return -1
    if name in ("sendfile", "sendfile64"):
        return _intd(_arg(call, 3), -1)
    if name == "copy_file_range":
        return _intd(_arg(call, 4), -1)
    if name == "fallocate":
        return _intd(_arg(call, 3), -1)
    if name in _SIZERS:
        return _intd(_arg(call, 1), -1)
    return -1


def _relevant(err: DiskError, mechanism: str) -> bool:
    if mechanism == "tmpfs":
        return err.path.startswith("{state_dir}") and err.errno in ("", "ENOSPC", "EDQUOT")
    return err.errno in ("", "EFBIG")


def _err(mechanism: str) -> str:
    return "ENOSPC" if mechanism == "tmpfs" else "EFBIG"


def _arg(call: Syscall, i: int) -> str:
    return call.args[i] if len(call.args) > i else ""


def _int(text: str) -> int | None:
    m = _INT.match(text)
    return int(m.group(1)) if m else None


def _intd(text: str, default: int) -> int:
    n = _int(text)
    return default if n is None else n


def _fd_arg(text: str) -> tuple[int, str]:
    """``4</st/b>`` -> (4, "/st/b"); (-1, "") if it is no descriptor."""
    m = _FD.match(text)
    if not m:
        return -1, ""
    return int(m.group(1)), decode(m.group(2) or "")


def _clean(path: str) -> str:
    if path.endswith(_DELETED):
        path = path[: -len(_DELETED)]
    return os.path.normpath(path) if path.startswith("/") else path


def _regular(path: str) -> bool:
    """A path that names a file RLIMIT_FSIZE and a tmpfs count (not a pipe, socket, device,
    ``/proc`` or ``/sys`` entry)."""
    return path.startswith("/") and not path.startswith(_NOT_FILES) and path != "/"


def _nth(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
