"""Power loss for any agent: crash states computed from a recorded syscall trace (ALICE-style).

A kill -9 keeps every byte the agent handed to the kernel (the page cache survives); a power
cut keeps only what a barrier made durable. This module turns a strace recording of a run
(:func:`crashpoint.faults._strace.wrap` with :data:`SYSCALLS`, ``strsize`` :data:`STRSIZE` and
``timestamps=True``) into a *logical operation log* of what the run did under its roots
(``{state_dir}``, ``{workdir}``), then computes, for any point of that log, the folders a
power cut there may leave under a persistence model:

- ``posix`` (the weakest a POSIX file system allows): file data is durable once the file is
  ``fsync``/``fdatasync``-ed; a name (create, rename, link, unlink, mkdir, rmdir) once its
  folder is fsynced; ``sync``/``syncfs`` make everything durable. Anything not synced may be
  lost, torn (a prefix of a write cut at a 512 B or 4 KiB boundary, or the new size filled
  with zeros), or persisted out of order (a rename or a create reaching the disk ahead of the
  data it points to).
- ``ext4-ordered`` (Linux's default, ``data=ordered``): as ``posix``, except that metadata
  operations reach the disk in order (the journal commits a prefix of them) and the data a
  file was given before a metadata operation on it that persisted persisted too (no rename
  ahead of its data for a new file); in-place overwrites may still be torn.

Model limits (documented in docs/concepts/power-loss.md): no lying device caches, no NFS, no
mmap'ed writes (not in a syscall trace), writes longer than :data:`STRSIZE` are known only by
length (their crash states are marked ``exact=False``).

Paths are kept relative to their root with the root's placeholder (``{state_dir}/a.json``),
so a log recorded in the golden run's folders is materialised into any trial's folders.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import posixpath
import random
import re
import stat
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crashpoint.errors import InvalidArgument
from crashpoint.faults import _strace
from crashpoint.faults._files import write_all

__all__ = [
    "MODELS",
    "MUTATIONS",
    "STRSIZE",
    "SYSCALLS",
    "CrashState",
    "LogOp",
    "Mutation",
    "OpLog",
    "crash_plan",
    "crash_states",
    "event_points",
    "kill_state",
    "materialize",
    "oplog",
    "rebuild",
    "recent_writes",
    "snapshot",
    "write_ranges",
]

#: The persistence models, weakest first.
MODELS = ("posix", "ext4-ordered")

#: What a crash state does to what was not synced at its point (see :class:`Mutation`).
MUTATIONS = ("synced_only", "drop", "torn", "zeros", "reorder")

#: The syscalls a power-loss recording traces (names strace does not know here are skipped).
SYSCALLS = (
    "open",
    "openat",
    "openat2",
    "creat",
    "write",
    "pwrite64",
    "writev",
    "pwritev",
    "pwritev2",
    "truncate",
    "ftruncate",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "unlink",
    "unlinkat",
    "mkdir",
    "mkdirat",
    "rmdir",
    "fsync",
    "fdatasync",
    "sync_file_range",
    "sync",
    "syncfs",
    "close",
    "lseek",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "fallocate",
    "clone",
    "clone3",
    "fork",
    "vfork",
    "chdir",
    "fchdir",
    "copy_file_range",
    "sendfile",
)

#: Bytes of each write's data strace prints (longer writes are known by length only).
STRSIZE = 1 << 20

#: Operations that change what a folder holds (names) or a file's bytes.
_NAME_KINDS = frozenset(
    {"creat", "rename", "exchange", "link", "symlink", "unlink", "mkdir", "rmdir"}
)
#: Operations the ext4 journal orders (names, and size changes by truncate).
_META_KINDS = _NAME_KINDS | {"trunc"}
_CHANGES = _META_KINDS | {"write"}
_BARRIERS = frozenset({"fsync", "fdatasync", "sync"})
_KINDS = _CHANGES | _BARRIERS
_SECTOR = 512
#: The longest ``call`` text kept as evidence (a write's data is in ``data`` anyway).
_CALL_MAX = 400


@dataclass(frozen=True, slots=True)
class LogOp:
    """One logical file-system operation under the roots, in the order the run made them.

    ``kind``: ``creat`` (a new empty file), ``write`` (``data`` at ``offset``; ``size`` is its
    length), ``trunc`` (the file's size set to ``size``), ``rename`` (``path`` -> ``path2``),
    ``exchange`` (``renameat2(RENAME_EXCHANGE)``: ``path`` and ``path2`` swap; ``file2`` is
    the file that was at ``path2``), ``link``, ``symlink`` (``path`` made, pointing to
    ``path2`` as the call gave it), ``unlink``, ``mkdir``,
    ``rmdir``, ``fsync`` / ``fdatasync`` (of ``path``: a file, or a folder for a folder
    fsync), ``sync`` (everything). ``path``/``path2``: relative with their root placeholder
    (``{state_dir}/x.json``). ``file``: the file's identity in the log (stable across renames,
    like an inode number; 0 for folders and ``sync``). ``time``: wall-clock seconds of the
    call (strace ``-ttt``): what places the ledger's events between operations. ``exact``:
    False when the data was longer than strace printed (``data`` then holds what was
    printed; the rest is taken as zeros). ``call``: the trace line it came from (evidence,
    cut to 400 characters), ``pid`` its process. ``seq``: its index in :attr:`OpLog.ops`.
    """

    seq: int
    kind: str
    path: str
    path2: str = ""
    file: int = 0
    offset: int = 0
    size: int = 0
    data: bytes = b""
    time: float = 0.0
    pid: int = 0
    exact: bool = True
    call: str = ""
    file2: int = 0
    #: the trace's call number (:attr:`Syscall.seq`) it came from; -1 when not known
    line: int = -1

    def to_json(self) -> dict[str, Any]:
        """JSON-able (``data`` as a latin-1 string: one character per byte, so a secret in
        the data is redacted from evidence like any other text)."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "path": self.path,
            "path2": self.path2,
            "file": self.file,
            "file2": self.file2,
            "offset": self.offset,
            "size": self.size,
            "data": self.data.decode("latin-1"),
            "time": self.time,
            "pid": self.pid,
            "exact": self.exact,
            "call": self.call,
            "line": self.line,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LogOp:
        """The operation :meth:`to_json` wrote. Raises ValueError on anything else."""
        try:
            kind = str(d["kind"])
            if kind not in _KINDS:
                raise InvalidArgument(f"unknown kind {kind!r} (one of {', '.join(sorted(_KINDS))})")
            return cls(
                seq=int(d["seq"]),
                kind=kind,
                path=str(d["path"]),
                path2=str(d.get("path2", "")),
                file=int(d.get("file", 0)),
                offset=int(d.get("offset", 0)),
                size=int(d.get("size", 0)),
                data=str(d.get("data", "")).encode("latin-1"),
                time=float(d.get("time", 0.0)),
                pid=int(d.get("pid", 0)),
                exact=bool(d.get("exact", True)),
                call=str(d.get("call", "")),
                file2=int(d.get("file2", 0)),
                line=int(d.get("line", -1)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidArgument(f"not a power-loss log operation: {e} in {dict(d)!r:.200}") from e

    def describe(self) -> str:
        """One line a developer reads: ``write 120 B at 0 to {state_dir}/state.json``."""
        k = self.kind
        if k == "write":
            more = "" if self.exact else " (data longer than the trace shows)"
            return f"write {self.size} B at {self.offset} to {self.path}{more}"
        if k == "trunc":
            return f"truncate {self.path} to {self.size} B"
        if k == "rename":
            return f"rename {self.path} to {self.path2}"
        if k == "exchange":
            return f"exchange {self.path} and {self.path2}"
        if k == "link":
            return f"link {self.path2} to {self.path}"
        if k == "symlink":
            return f"symlink {self.path} -> {self.path2}"
        if k == "creat":
            return f"create {self.path}"
        if k in ("fsync", "fdatasync"):
            return f"{k} {self.path}" + (" (folder)" if self.file == 0 else "")
        if k == "sync":
            return "sync (everything)"
        return f"{k} {self.path}"


@dataclass(frozen=True, slots=True)
class OpLog:
    """A run's logical operation log and what it started from.

    ``initial``: what was under the roots when the recording started (relative placeholder
    path -> bytes, None for a folder), taken as durable. ``ops``: the operations.
    ``notes``: what the recording could not model (a write longer than STRSIZE, an mmap, a
    call on a path outside the roots that moved a file in: one line each).
    ``ids``: the :attr:`LogOp.file` of each file of ``initial`` (files not listed get
    identities of their own, in path order).
    """

    ops: tuple[LogOp, ...] = ()
    initial: Mapping[str, bytes | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    ids: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "ops": [op.to_json() for op in self.ops],
            "initial": {
                p: None if b is None else b.decode("latin-1")
                for p, b in sorted(self.initial.items())
            },
            "ids": dict(sorted(self.ids.items())),
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OpLog:
        """The log :meth:`to_json` wrote. Raises ValueError (saying what is wrong) else."""
        if not isinstance(d, Mapping) or not isinstance(d.get("ops"), list):
            raise InvalidArgument(
                "not a power-loss operation log: expected a mapping with 'ops' "
                "(a list), as OpLog.to_json() writes it"
            )
        try:
            ops = tuple(LogOp.from_json(o) for o in d["ops"])
            initial = {
                str(p): None if b is None else str(b).encode("latin-1")
                for p, b in dict(d.get("initial") or {}).items()
            }
            ids = {str(p): int(i) for p, i in dict(d.get("ids") or {}).items()}
            notes = tuple(str(n) for n in d.get("notes") or ())
        except (TypeError, ValueError, AttributeError) as e:
            raise InvalidArgument(f"not a power-loss operation log: {e}") from e
        for i, op in enumerate(ops):
            if op.seq != i:
                raise InvalidArgument(
                    f"power-loss operation log: op {i} has seq {op.seq} "
                    "(ops must be numbered 0, 1, ... in order)"
                )
        return cls(ops=ops, initial=initial, notes=notes, ids=ids)


@dataclass(frozen=True, slots=True)
class Mutation:
    """What a crash state keeps of the operations not yet durable at its point.

    ``kind``:

    - ``synced_only``: only what barriers made durable (every pending operation lost);
    - ``drop``: every operation of the point persisted except ``op`` (and, under
      ``ext4-ordered``, what the model orders after it);
    - ``torn``: everything persisted, but write ``op`` only up to ``keep`` bytes (a 512 B or
      4 KiB boundary; 0 for a small write: the size not extended);
    - ``zeros``: everything persisted, but write ``op``'s bytes are zeros (size extended,
      data blocks never written; ``posix`` only: ``data=ordered`` writes data before the
      size that exposes it);
    - ``reorder``: rename/link/creat ``op`` persisted, the data of the file it names (written
      before it, not synced) lost: the name reached the disk before its data (``posix`` only).

    ``op``: the :attr:`LogOp.seq` it concerns (-1 for ``synced_only``).
    """

    kind: str
    op: int = -1
    keep: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "op": self.op, "keep": self.keep}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Mutation:
        return cls(str(d["kind"]), int(d.get("op", -1)), int(d.get("keep", 0)))


@dataclass(frozen=True, slots=True)
class CrashState:
    """One folder a power cut may leave.

    ``upto``: how many operations of the log were performed when the power went (0: before
    the first). ``model``, ``mutation``: how it was made (with ``upto`` and the log, enough
    to :func:`rebuild` it). ``files``: the durable tree, relative placeholder path -> bytes
    (None: a folder). ``pending``: the seqs of the operations not durable at ``upto``.
    ``lost``: one line per difference from what a kill -9 at the same point leaves (what the
    power cut took: ``{state_dir}/state.json: 0 of 120 bytes`` ...). ``explain``: the missing
    barrier, in words a developer acts on ("``state.json`` was replaced by rename before its
    data was fsynced: after power loss it can be empty"); "" when nothing was lost.
    ``exact``: False when an inexact write (see :class:`LogOp`) is part of it.
    """

    upto: int
    model: str
    mutation: Mutation
    files: Mapping[str, bytes | None]
    pending: tuple[int, ...] = ()
    lost: tuple[str, ...] = ()
    explain: str = ""
    exact: bool = True
    #: a short description of the last operation performed (for :meth:`label`)
    last: str = ""
    #: a short description of the operation the mutation concerns
    target: str = ""

    @property
    def digest(self) -> str:
        """A hash of ``files``: two states with the same digest leave the same folders."""
        return _digest(self.files)

    def label(self) -> str:
        """Short, for reports: ``after op 7 (write {state_dir}/state.json), torn at 512 B``
        (operations numbered from 1: "after op 7" is a cut once ``ops[6]`` was done)."""
        head = (
            f"after op {self.upto}" + (f" ({self.last})" if self.last else "")
            if self.upto
            else "before the first op"
        )
        m = self.mutation
        same = m.op == self.upto - 1
        who = "" if same else f" op {m.op + 1} ({self.target})"
        if m.kind == "synced_only":
            tail = "only what was synced"
        elif m.kind == "drop":
            tail = f"lost{who}" if who else "it was lost"
        elif m.kind == "torn":
            tail = f"torn{who} at {m.keep} B"
        elif m.kind == "zeros":
            tail = f"zeros{who}" if who else "zeros instead of its data"
        elif m.kind == "reorder":
            tail = f"name persisted before its data{who}"
        else:
            tail = m.kind
        return f"{head}, {tail}"


# == recording: strace trace -> operation log ==================================================


@dataclass(slots=True)
class _Ofd:
    """An open file description (shared by dup'ed descriptors and across fork)."""

    kind: str  # "file", "dir" or "other" (outside the roots, a pipe, a socket ...)
    file: int = 0
    path: str = ""  # a folder's relative path
    offset: int = 0
    append: bool = False


_OTHER = _Ofd("other")
_PROC_FD = re.compile(r"^/proc/(self|\d+)/fd/(\d+)$")
_IOV = re.compile(r'iov_base=("(?:[^"\\]|\\.)*")(\.\.\.)?, iov_len=(\d+)', re.S)
_NUM = re.compile(r"-?\d+")


def _flags_of(arg: str) -> set[str]:
    return set(re.findall(r"[A-Z][A-Z0-9_]+", arg))


def _int(arg: str) -> int | None:
    m = _NUM.search(arg)
    return int(m.group()) if m else None


def _quoted_bytes(arg: str) -> tuple[bytes, bool]:
    """(bytes, complete) of a quoted strace string argument (``"..."...`` is cut short)."""
    if not arg.startswith('"'):
        return b"", False
    return os.fsencode(_strace.decode(arg)), not arg.endswith('"...')


class _Recorder:
    def __init__(self, roots: Mapping[str, str], initial: Mapping[str, bytes | None]) -> None:
        pairs: list[tuple[str, str]] = []
        for name, folder in roots.items():
            absf = os.path.normpath(os.path.abspath(folder))
            pairs.append((absf, name))
            real = os.path.realpath(absf)
            if real != absf:
                pairs.append((real, name))
        self.roots = sorted(pairs, key=lambda p: -len(p[0]))
        self.root_keys = {"{" + n + "}" for n in roots}
        self.initial: dict[str, bytes | None] = dict(initial)
        self.names: dict[str, tuple[str, int]] = {}
        self.sizes: dict[int, int] = {}
        self.name_of: dict[int, str] = {}
        self.ids: dict[str, int] = {}
        self.next_id = 1
        for p in sorted(self.initial):
            b = self.initial[p]
            if b is None:
                self.names[p] = ("d", 0)
            else:
                f = self._new_id()
                self.ids[p] = f
                self.names[p] = ("f", f)
                self.sizes[f] = len(b)
                self.name_of[f] = p
        self.tables: dict[int, dict[int, _Ofd]] = {}
        self.ops: list[LogOp] = []
        self.notes: list[str] = []
        self.call: _strace.Syscall | None = None

    # -- helpers --------------------------------------------------------------------------------
    def _new_id(self) -> int:
        f = self.next_id
        self.next_id += 1
        return f

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def rel(self, path: str) -> str | None:
        if not path.startswith("/"):
            return None
        path = os.path.normpath(path)
        for folder, name in self.roots:
            if path == folder:
                return "{" + name + "}"
            if path.startswith(folder.rstrip("/") + "/"):
                return "{" + name + "}/" + path[len(folder.rstrip("/")) + 1 :]
        return None

    def is_root(self, rel: str) -> bool:
        return rel in self.root_keys

    def is_dir(self, rel: str) -> bool:
        return self.is_root(rel) or self.names.get(rel, ("", 0))[0] == "d"

    def ensure_parents(self, rel: str) -> None:
        parent = posixpath.dirname(rel)
        missing: list[str] = []
        while parent and not self.is_root(parent) and parent not in self.names:
            missing.append(parent)
            parent = posixpath.dirname(parent)
        for p in missing:  # it existed before the trace started
            self.names[p] = ("d", 0)
            self.initial[p] = None

    def unknown_file(self, rel: str) -> int:
        """A file the run found under the roots that ``initial`` does not list."""
        self.ensure_parents(rel)
        f = self._new_id()
        self.names[rel] = ("f", f)
        self.initial[rel] = b""
        self.ids[rel] = f
        self.sizes[f] = 0
        self.name_of[f] = rel
        self.note(
            f"`{rel}` was there before the trace but the initial state does not list it:"
            " its first content is unknown (taken as empty)"
        )
        return f

    def emit(self, kind: str, path: str, **kw: Any) -> None:
        c = self.call
        assert c is not None
        raw = c.raw if len(c.raw) <= _CALL_MAX else c.raw[:_CALL_MAX] + "..."
        self.ops.append(
            LogOp(
                seq=len(self.ops),
                kind=kind,
                path=path,
                time=c.time,
                pid=c.pid,
                call=raw,
                line=c.seq,
                **kw,
            )
        )

    def table(self, pid: int) -> dict[int, _Ofd]:
        t = self.tables.get(pid)
        if t is None:
            t = self.tables[pid] = {}
        return t

    def ofd(self, pid: int, arg: str) -> _Ofd:
        """The open file description of descriptor argument ``arg`` (``3</a/b>``)."""
        num, where, deleted = _strace.decoration(arg)
        if num is None:
            n = _int(arg)
            if n is None:
                return _OTHER
            num = n
        t = self.table(pid)
        o = t.get(num)
        rel = self.rel(where) if where.startswith("/") else None
        if o is not None:
            outside = rel is None
            stale = bool(where) and not deleted and outside != (o.kind == "other")
            if not stale:
                return o
        # a descriptor the trace did not open (inherited, or made by an untraced call)
        if rel is None or deleted:
            o = _OTHER
        elif self.is_dir(rel):
            o = _Ofd("dir", path=rel)
        else:
            entry = self.names.get(rel)
            f = entry[1] if entry and entry[0] == "f" else self.unknown_file(rel)
            o = _Ofd("file", file=f, offset=self.sizes.get(f, 0))
            self.note(
                f"descriptor {num} of process {pid} on `{rel}` was opened before the "
                "trace: its offset is taken as the end of the file"
            )
        t[num] = o
        return o

    def set_name(self, rel: str, entry: tuple[str, int]) -> None:
        old = self.names.get(rel)
        self.names[rel] = entry
        if entry[0] != "d":
            self.name_of[entry[1]] = rel
        if old and old[0] == "d" and entry[0] != "d":
            self.drop_tree(rel)

    def drop_tree(self, rel: str) -> None:
        for p in [p for p in self.names if p.startswith(rel + "/")]:
            del self.names[p]

    def move_tree(self, src: str, dst: str) -> None:
        moved = {p: e for p, e in self.names.items() if p == src or p.startswith(src + "/")}
        for p in moved:
            del self.names[p]
        for p, e in moved.items():
            q = dst + p[len(src) :]
            self.names[q] = e
            if e[0] != "d":
                self.name_of[e[1]] = q

    def file_name(self, f: int) -> str:
        return self.name_of.get(f, f"<file {f}>")

    # -- calls ----------------------------------------------------------------------------------
    def feed(self, c: _strace.Syscall) -> None:
        if c.result is None or c.result < 0 or c.errno:
            return
        self.call = c
        handler = getattr(self, "_c_" + c.name, None)
        if handler is not None:
            handler(c, c.args)

    def _c_clone(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        assert c.result is not None
        if c.result <= 0:
            return
        parent = self.table(c.pid)
        self.tables[c.result] = parent if "CLONE_FILES" in c.raw else dict(parent)

    _c_clone3 = _c_fork = _c_vfork = _c_clone

    def _open(self, c: _strace.Syscall, flags: set[str]) -> None:
        assert c.result is not None
        t = self.table(c.pid)
        rel = self.rel(c.path)
        if rel is None:
            t[c.result] = _OTHER
            return
        if "O_TMPFILE" in flags:  # an unnamed file in folder rel
            f = self._new_id()
            self.sizes[f] = 0
            self.name_of[f] = rel + "/<O_TMPFILE>"
            t[c.result] = _Ofd("file", file=f, append="O_APPEND" in flags)
            return
        if self.is_dir(rel) or "O_DIRECTORY" in flags:
            t[c.result] = _Ofd("dir", path=rel)
            return
        entry = self.names.get(rel)
        if entry is not None and entry[0] == "l":
            self.note(f"`{rel}` was opened through a symlink: what it points to is not modelled")
            t[c.result] = _OTHER
            return
        if entry is None and "O_CREAT" in flags:
            self.ensure_parents(rel)
            f = self._new_id()
            self.sizes[f] = 0
            self.set_name(rel, ("f", f))
            self.emit("creat", rel, file=f)
        else:
            f = entry[1] if entry is not None else self.unknown_file(rel)
            if "O_TRUNC" in flags and flags & {"O_WRONLY", "O_RDWR"}:
                self.sizes[f] = 0
                self.emit("trunc", rel, file=f, size=0)
        t[c.result] = _Ofd("file", file=f, append="O_APPEND" in flags)

    def _c_open(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        self._open(c, _flags_of(a[1]) if len(a) > 1 else set())

    def _c_openat(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        self._open(c, _flags_of(a[2]) if len(a) > 2 else set())

    def _c_openat2(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        m = re.search(r"flags=([A-Z0-9_|x]+)", a[2]) if len(a) > 2 else None
        self._open(c, _flags_of(m.group(1)) if m else set())

    def _c_creat(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        self._open(c, {"O_CREAT", "O_WRONLY", "O_TRUNC"})

    def _write(
        self, o: _Ofd, offset: int | None, data: bytes, exact: bool, n: int, *, noted: bool = False
    ) -> None:
        """A write of ``n`` bytes; ``offset`` None: at the descriptor's offset (advanced)."""
        if o.kind != "file" or n <= 0:
            return
        f = o.file
        size = self.sizes.get(f, 0)
        if o.append:  # Linux appends even for pwrite on an O_APPEND descriptor
            at = size
            if offset is None:
                o.offset = size + n
        elif offset is None:
            at = o.offset
            o.offset += n
        else:
            at = offset
        data = data[:n]
        exact = exact and len(data) == n
        if not exact and not noted:
            self.note(
                f"a write of {n} B to `{self.file_name(f)}` is longer than the trace shows"
                f" ({len(data)} B): the rest is taken as zeros (states marked inexact)"
            )
        self.sizes[f] = max(size, at + n)
        self.emit("write", self.file_name(f), file=f, offset=at, size=n, data=data, exact=exact)

    def _c_write(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        assert c.result is not None
        data, complete = _quoted_bytes(a[1]) if len(a) > 1 else (b"", False)
        self._write(self.ofd(c.pid, a[0]), None, data, complete, c.result)

    def _c_pwrite64(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        assert c.result is not None
        data, complete = _quoted_bytes(a[1]) if len(a) > 1 else (b"", False)
        off = _int(a[3]) if len(a) > 3 else None
        self._write(self.ofd(c.pid, a[0]), off or 0, data, complete, c.result)

    def _iov(self, arg: str) -> tuple[bytes, bool]:
        out = bytearray()
        complete = True
        for m in _IOV.finditer(arg):
            b = os.fsencode(_strace.decode(m.group(1)))
            n = int(m.group(3))
            if m.group(2) or len(b) < n:
                complete = False
            out += b[:n].ljust(n, b"\0")
        if re.search(r",\s*\.\.\.\s*\]$", arg.strip()):
            complete = False
        return bytes(out), complete

    def _c_writev(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        assert c.result is not None
        data, complete = self._iov(a[1]) if len(a) > 1 else (b"", False)
        self._write(self.ofd(c.pid, a[0]), None, data, complete, c.result)

    def _c_pwritev(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        assert c.result is not None
        data, complete = self._iov(a[1]) if len(a) > 1 else (b"", False)
        off = _int(a[3]) if len(a) > 3 else None
        o = self.ofd(c.pid, a[0])
        if c.name == "pwritev2" and len(a) > 4 and "RWF_APPEND" in a[4] and o.kind == "file":
            off = self.sizes.get(o.file, 0)
        self._write(o, None if off is None or off == -1 else off, data, complete, c.result)

    _c_pwritev2 = _c_pwritev

    def _c_copy_file_range(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        assert c.result is not None
        if len(a) < 4:
            return
        o = self.ofd(c.pid, a[2])
        off = None if a[3].strip() == "NULL" else _int(a[3])
        if o.kind == "file" and c.result > 0:
            self.note(
                f"{c.name} into `{self.file_name(o.file)}`: the data copied is not in the "
                "trace (taken as zeros; states marked inexact)"
            )
        self._write(o, off, b"", False, c.result, noted=True)

    def _c_sendfile(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        assert c.result is not None
        o = self.ofd(c.pid, a[0]) if a else _OTHER
        if o.kind == "file" and c.result > 0:
            self.note(
                f"sendfile into `{self.file_name(o.file)}`: the data copied is not in the "
                "trace (taken as zeros; states marked inexact)"
            )
        self._write(o, None, b"", False, c.result, noted=True)

    def _trunc(self, f: int, size: int) -> None:
        self.sizes[f] = size
        self.emit("trunc", self.file_name(f), file=f, size=size)

    def _c_truncate(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        rel = self.rel(c.path)
        size = _int(a[1]) if len(a) > 1 else None
        if rel is None or size is None or self.is_dir(rel):
            return
        entry = self.names.get(rel)
        if entry is not None and entry[0] == "l":
            self.note(f"truncate through the symlink `{rel}` is not modelled")
            return
        self._trunc(entry[1] if entry else self.unknown_file(rel), size)

    def _c_ftruncate(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        o = self.ofd(c.pid, a[0])
        size = _int(a[1]) if len(a) > 1 else None
        if o.kind == "file" and size is not None:
            self._trunc(o.file, size)

    def _c_fallocate(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        o = self.ofd(c.pid, a[0])
        if o.kind != "file" or len(a) < 4:
            return
        mode, off, ln = a[1].strip(), _int(a[2]), _int(a[3])
        if off is None or ln is None:
            return
        if mode == "0":
            if off + ln > self.sizes.get(o.file, 0):
                self._trunc(o.file, off + ln)
        elif mode != "FALLOC_FL_KEEP_SIZE":
            self.note(f"fallocate({mode}) on `{self.file_name(o.file)}` is not modelled")

    def _entry(self, rel: str) -> tuple[str, int]:
        e = self.names.get(rel)
        if e is None:
            return ("f", self.unknown_file(rel))
        return e

    def _rename(self, c: _strace.Syscall, flags: set[str]) -> None:
        src, dst = self.rel(c.path), self.rel(c.path2)
        if src is None and dst is None:
            return
        if src is None:
            assert dst is not None
            self.ensure_parents(dst)
            f = self._new_id()
            self.sizes[f] = 0
            self.set_name(dst, ("f", f))
            self.note(
                f"`{dst}` was moved in from outside the roots (`{c.path}`): its content "
                "is unknown (taken as empty)"
            )
            self.emit("creat", dst, file=f, exact=False)
            return
        if dst is None:
            e = self._entry(src)
            if e[0] == "d":
                self.drop_tree(src)
                del self.names[src]
                self.emit("rmdir", src)
            else:
                del self.names[src]
                self.emit("unlink", src, file=e[1])
            return
        e = self._entry(src)
        self.ensure_parents(dst)
        if "RENAME_EXCHANGE" in flags:
            e2 = self._entry(dst)
            tmp = "\0exchange"
            self.move_tree(src, tmp)
            self.move_tree(dst, src)
            self.move_tree(tmp, dst)
            self.emit("exchange", src, path2=dst, file=e[1], file2=e2[1])
            return
        old = self.names.get(dst)
        if e[0] == "d":
            if old is not None:
                del self.names[dst]
            self.move_tree(src, dst)
        else:
            del self.names[src]
            self.set_name(dst, e)
        if old is not None and old[0] != "d" and self.name_of.get(old[1]) == dst:
            others = [p for p, x in self.names.items() if x == old]
            self.name_of[old[1]] = others[0] if others else dst
        self.emit("rename", src, path2=dst, file=e[1])

    def _c_rename(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        self._rename(c, set())

    def _c_renameat(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        self._rename(c, _flags_of(a[4]) if len(a) > 4 else set())

    _c_renameat2 = _c_renameat

    def _link(self, c: _strace.Syscall, src_rel: str | None, f: int | None) -> None:
        dst = self.rel(c.path2)
        if dst is None:
            return
        self.ensure_parents(dst)
        if f is None:
            if src_rel is None:
                f = self._new_id()
                self.sizes[f] = 0
                self.set_name(dst, ("f", f))
                self.note(
                    f"`{dst}` was linked from outside the roots (`{c.path}`): its "
                    "content is unknown (taken as empty)"
                )
                self.emit("creat", dst, file=f, exact=False)
                return
            e = self._entry(src_rel)
            if e[0] == "d":
                return
            f = e[1]
        src = src_rel if src_rel is not None else self.file_name(f)
        self.set_name(dst, ("f", f))
        self.emit("link", src, path2=dst, file=f)

    def _c_link(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        m = _PROC_FD.match(c.path)
        if m:  # link("/proc/self/fd/N", ...): the descriptor's (maybe unnamed) file
            pid = c.pid if m.group(1) == "self" else int(m.group(1))
            o = self.table(pid).get(int(m.group(2)))
            if o is not None and o.kind == "file":
                self._link(c, None, o.file)
                return
        self._link(c, self.rel(c.path), None)

    def _c_linkat(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        if len(a) > 4 and "AT_EMPTY_PATH" in a[4] and c.path_arg == "":
            o = self.ofd(c.pid, a[0])
            if o.kind == "file":
                self._link(c, None, o.file)
            return
        self._c_link(c, a)

    def _c_symlink(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        rel = self.rel(c.path)
        if rel is None:
            return
        self.ensure_parents(rel)
        f = self._new_id()
        self.set_name(rel, ("l", f))
        self.note(f"the symlink `{rel}` is recorded but not materialised in crash states")
        self.emit("symlink", rel, path2=c.path2_arg, file=f)

    _c_symlinkat = _c_symlink

    def _remove(self, rel: str, folder: bool) -> None:
        e = self.names.get(rel)
        if folder or (e is not None and e[0] == "d"):
            if self.is_root(rel):
                self.note(f"the root `{rel}` itself was removed: not modelled")
                return
            self.drop_tree(rel)
            self.names.pop(rel, None)
            self.emit("rmdir", rel)
            return
        if e is None:
            e = ("f", self.unknown_file(rel))
        del self.names[rel]
        self.emit("unlink", rel, file=e[1])

    def _c_unlink(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        rel = self.rel(c.path)
        if rel is not None:
            self._remove(rel, False)

    def _c_unlinkat(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        rel = self.rel(c.path)
        if rel is not None:
            self._remove(rel, len(a) > 2 and "AT_REMOVEDIR" in a[2])

    def _c_rmdir(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        rel = self.rel(c.path)
        if rel is not None:
            self._remove(rel, True)

    def _c_mkdir(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        rel = self.rel(c.path)
        if rel is None or self.is_root(rel):
            return
        self.ensure_parents(rel)
        self.set_name(rel, ("d", 0))
        self.emit("mkdir", rel)

    _c_mkdirat = _c_mkdir

    def _c_fsync(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        o = self.ofd(c.pid, a[0])
        if o.kind == "file":
            self.emit(c.name, self.file_name(o.file), file=o.file)
        elif o.kind == "dir":
            self.emit(c.name, o.path)

    _c_fdatasync = _c_fsync

    def _c_sync(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        self.emit("sync", "")

    def _c_syncfs(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        if self.ofd(c.pid, a[0]).kind != "other":
            self.emit("sync", "")
        else:
            self.note("syncfs on a descriptor outside the roots: taken as not covering them")

    def _c_sync_file_range(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        o = self.ofd(c.pid, a[0])
        if o.kind == "file":
            self.note(
                f"sync_file_range on `{self.file_name(o.file)}` is not a durability "
                "barrier (no metadata, no device cache flush): ignored"
            )

    def _c_close(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        num = c.fd if c.fd >= 0 else _int(a[0]) if a else None
        if num is not None:
            self.table(c.pid).pop(num, None)

    def _dup(self, c: _strace.Syscall, old: str) -> None:
        assert c.result is not None
        self.table(c.pid)[c.result] = self.ofd(c.pid, old)

    def _c_dup(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        self._dup(c, a[0])

    _c_dup2 = _c_dup3 = _c_dup

    def _c_fcntl(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        if len(a) < 2:
            return
        cmd = a[1].strip()
        if cmd in ("F_DUPFD", "F_DUPFD_CLOEXEC"):
            self._dup(c, a[0])
        elif cmd == "F_SETFL" and len(a) > 2:
            o = self.ofd(c.pid, a[0])
            if o.kind == "file":
                o.append = "O_APPEND" in _flags_of(a[2])

    def _c_lseek(self, c: _strace.Syscall, a: Sequence[str]) -> None:
        assert c.result is not None
        o = self.ofd(c.pid, a[0])
        if o.kind == "file":
            o.offset = c.result


def oplog(
    trace: _strace.Trace,
    roots: Mapping[str, str],
    *,
    initial: Mapping[str, bytes | None] | None = None,
) -> OpLog:
    """The logical operation log of ``trace`` under ``roots`` (placeholder name -> absolute
    folder, e.g. ``{"state_dir": "/t/golden/state", "workdir": "/t/golden/work"}``).

    Follows descriptors (open/dup/fcntl F_DUPFD/close, inherited across fork/clone, shared
    offsets, O_APPEND, O_TRUNC, lseek) to place each write; a call that failed is left out;
    a call whose process was killed in it (result None) is left out. ``initial``: what the
    roots held when the trace started (see :class:`OpLog`); None: empty folders. A file or
    folder the run found there that ``initial`` does not list is added to the log's
    ``initial`` (a file as empty, with a note).
    """
    rec = _Recorder(roots, initial or {})
    for c in trace.calls:
        rec.feed(c)
    if trace.truncated:
        rec.note("the trace was cut short: operations after its end are missing")
    return OpLog(
        ops=tuple(rec.ops),
        initial=dict(sorted(rec.initial.items())),
        notes=tuple(rec.notes),
        ids=dict(sorted(rec.ids.items())),
    )


def snapshot(roots: Mapping[str, str], limit: int = 64 << 20) -> dict[str, bytes | None]:
    """What the folders of ``roots`` hold now, as :attr:`OpLog.initial` takes it (symlinks
    and special files are left out; no link is followed, nothing blocks on a FIFO swapped in).
    Raises ValueError past ``limit`` bytes read in all: too much to model a power cut over."""
    out: dict[str, bytes | None] = {}
    budget = [limit]
    for name, folder in sorted(roots.items()):
        key = "{" + name + "}"
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue

        def walk(path: str, rel: str) -> None:
            try:
                entries = sorted(os.scandir(path), key=lambda e: e.name)
            except OSError:
                return
            for e in entries:
                r = rel + "/" + e.name
                if e.is_dir(follow_symlinks=False):
                    out[r] = None
                    walk(e.path, r)
                elif e.is_file(follow_symlinks=False):
                    try:
                        fd = os.open(
                            e.path,
                            os.O_RDONLY
                            | os.O_NOFOLLOW
                            | os.O_NONBLOCK
                            | getattr(os, "O_CLOEXEC", 0),
                        )
                    except OSError:
                        continue
                    try:
                        if not stat.S_ISREG(os.fstat(fd).st_mode):
                            continue
                        chunks = []
                        while True:
                            chunk = os.read(fd, min(1 << 20, budget[0] + 1))
                            if not chunk:
                                break
                            chunks.append(chunk)
                            budget[0] -= len(chunk)
                            if budget[0] < 0:
                                raise InvalidArgument(
                                    f"the folders hold more than {limit} bytes: too much to "
                                    "model a power cut over"
                                )
                        out[r] = b"".join(chunks)
                    except OSError:
                        continue
                    finally:
                        os.close(fd)

        walk(folder, key)
    return out


# == crash states ==============================================================================

#: How :func:`_explain` names a lost name operation, and what a power cut then leaves.
_NAME_OPS = {
    "exchange": ("the exchange of `{path}` and `{path2}`", "both are back"),
    "creat": ("the creation of `{path}`", "it is missing"),
    "link": ("the link `{path2}` (to `{path}`)", "it is missing"),
    "symlink": ("the symlink `{path}`", "it is missing"),
    "unlink": ("the removal of `{path}`", "it is back"),
}


def _sqlite_journal(op: LogOp) -> str:
    """What a lost removal of a SQLite rollback journal means, said the way SQLite's own
    documentation says it; "" for any other operation."""
    if op.kind != "unlink" or not op.path.endswith("-journal"):
        return ""
    return (
        " (SQLite commits a transaction in its default DELETE journal mode by removing the "
        "journal, and syncs the folder after that only with PRAGMA synchronous=EXTRA: with "
        "FULL the journal can come back after a power cut and roll the commit back; use "
        "synchronous=EXTRA, or journal_mode=WAL with synchronous=FULL)"
    )


def _digest(files: Mapping[str, bytes | None]) -> str:
    h = hashlib.sha256()
    for p in sorted(files):
        b = files[p]
        h.update(p.encode("utf-8", "surrogateescape") + b"\0")
        if b is None:
            h.update(b"D\0")
        else:
            h.update(b"F" + str(len(b)).encode() + b"\0" + hashlib.sha256(b).digest())
    return h.hexdigest()


def _is_root_key(p: str) -> bool:
    return "/" not in p and p.startswith("{") and p.endswith("}")


def _apply_data(b: bytearray, op: LogOp, keep: int | None = None, zeros: bool = False) -> None:
    """Apply a write (``keep``: only its first bytes, a torn write; ``zeros``: zeros instead
    of its data) or a truncate to the content ``b`` of its file."""
    if op.kind == "trunc":
        if len(b) > op.size:
            del b[op.size :]
        else:
            b.extend(bytes(op.size - len(b)))
        return
    payload = op.data[: op.size].ljust(op.size, b"\0")
    if zeros:
        payload = bytes(op.size)
    if keep is not None:
        payload = payload[:keep]
    if not payload:
        return
    if len(b) < op.offset:
        b.extend(bytes(op.offset - len(b)))
    b[op.offset : op.offset + len(payload)] = payload


class _Tree:
    """The namespace and file contents a sequence of operations leaves (by file identity, so
    operations applied out of order still mean what they meant in the run)."""

    def __init__(self, log: OpLog, symlinks: frozenset[int]) -> None:
        self.data: dict[int, bytearray] = {}
        self.ns: dict[str, tuple[str, int]] = {}
        self.symlinks = symlinks
        ids = dict(log.ids)
        nxt = (
            max([0, *ids.values(), *(op.file for op in log.ops), *(op.file2 for op in log.ops)]) + 1
        )
        for p in sorted(log.initial):
            b = log.initial[p]
            if b is None:
                self.ns[p] = ("d", 0)
                continue
            f = ids.get(p)
            if f is None:
                f, nxt = nxt, nxt + 1
            self.ns[p] = ("f", f)
            self.data.setdefault(f, bytearray(b))

    def buf(self, f: int) -> bytearray:
        b = self.data.get(f)
        if b is None:
            b = self.data[f] = bytearray()
        return b

    def entry(self, f: int) -> tuple[str, int]:
        return ("l", f) if f in self.symlinks else ("f", f)

    def move(self, src: str, dst: str) -> None:
        moved = {p: e for p, e in self.ns.items() if p == src or p.startswith(src + "/")}
        for p in moved:
            del self.ns[p]
        for p, e in moved.items():
            self.ns[dst + p[len(src) :]] = e

    def copy(self) -> _Tree:
        """An independent copy (cheaper than a new tree from the log)."""
        t = _Tree.__new__(_Tree)
        t.data = {f: bytearray(b) for f, b in self.data.items()}
        t.ns = dict(self.ns)
        t.symlinks = self.symlinks
        return t

    def apply(self, op: LogOp, keep: int | None = None, zeros: bool = False) -> None:
        k = op.kind
        if k in ("write", "trunc"):
            _apply_data(self.buf(op.file), op, keep, zeros)
        elif k == "creat":
            self.data[op.file] = bytearray()
            self.ns[op.path] = ("f", op.file)
        elif k == "rename":
            if op.file == 0:
                if self.ns.get(op.path, ("",))[0] == "d":
                    self.ns.pop(op.path2, None)
                    self.move(op.path, op.path2)
                return
            e = self.entry(op.file)
            self.ns[op.path2] = e
            if self.ns.get(op.path) == e:
                del self.ns[op.path]
        elif k == "exchange":
            tmp = "\0exchange"
            self.move(op.path, tmp)
            self.move(op.path2, op.path)
            self.move(tmp, op.path2)
        elif k == "link":
            self.ns[op.path2] = ("f", op.file)
        elif k == "symlink":
            self.ns[op.path] = ("l", op.file)
        elif k == "unlink":
            if self.ns.get(op.path, ("", -1))[1] == op.file:
                del self.ns[op.path]
        elif k == "mkdir":
            self.ns[op.path] = ("d", 0)
        elif k == "rmdir" and self.ns.get(op.path, ("",))[0] == "d":
            del self.ns[op.path]

    def visible(self, p: str) -> bool:
        parent = posixpath.dirname(p)
        while parent and not _is_root_key(parent):
            if self.ns.get(parent, ("",))[0] != "d":
                return False
            parent = posixpath.dirname(parent)
        return bool(parent)

    def files(self) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for p in sorted(self.ns):
            kind, f = self.ns[p]
            if kind == "l" or not self.visible(p):
                continue
            out[p] = None if kind == "d" else bytes(self.data.get(f, b""))
        return out

    def names_of(self, f: int) -> list[str]:
        return sorted(p for p, e in self.ns.items() if e == ("f", f) and self.visible(p))


def _next(lst: Sequence[int], i: int) -> int:
    """The first entry of sorted ``lst`` after ``i``, or a number larger than any index."""
    k = bisect.bisect_right(lst, i)
    return lst[k] if k < len(lst) else 1 << 62


def _folders(op: LogOp) -> list[str]:
    if op.kind in ("rename", "exchange"):
        return sorted({posixpath.dirname(op.path), posixpath.dirname(op.path2)})
    if op.kind == "link":
        return [posixpath.dirname(op.path2)]
    return [posixpath.dirname(op.path)]


class _Model:
    """When each operation of a log becomes durable under a model (``durable_at[i]``: the
    index of the barrier that makes op ``i`` durable; it is durable at ``upto`` iff that
    index is below ``upto``)."""

    def __init__(self, log: OpLog, model: str) -> None:
        if model not in MODELS:
            raise InvalidArgument(f"unknown power-loss model {model!r}: one of {', '.join(MODELS)}")
        self.log, self.model = log, model
        self.ext4 = model == "ext4-ordered"
        ops = log.ops
        file_b: dict[int, list[int]] = {}
        dir_b: dict[str, list[int]] = {}
        syncs: list[int] = []
        anyb: list[int] = []
        meta_on: dict[int, list[int]] = {}
        for op in ops:
            if op.kind in ("fsync", "fdatasync"):
                anyb.append(op.seq)
                if op.file:
                    file_b.setdefault(op.file, []).append(op.seq)
                else:
                    dir_b.setdefault(op.path, []).append(op.seq)
            elif op.kind == "sync":
                anyb.append(op.seq)
                syncs.append(op.seq)
            elif op.kind in _META_KINDS and op.file:
                meta_on.setdefault(op.file, []).append(op.seq)
                if op.kind == "exchange" and op.file2:
                    meta_on.setdefault(op.file2, []).append(op.seq)
        self.meta_on = meta_on
        never = 1 << 62
        durable = [never] * len(ops)
        for op in ops:
            i = op.seq
            if op.kind not in _CHANGES:
                continue
            if self.ext4 and op.kind in _META_KINDS:
                durable[i] = _next(anyb, i)
            elif op.kind in ("write", "trunc"):
                durable[i] = min(_next(file_b.get(op.file, []), i), _next(syncs, i))
            else:
                durable[i] = min(
                    _next(syncs, i), max(_next(dir_b.get(d, []), i) for d in _folders(op))
                )
        if self.ext4:  # data=ordered: a durable metadata op on a file brings its earlier data
            for op in ops:
                if op.kind == "write":
                    m = _next(meta_on.get(op.file, []), op.seq)
                    if m < len(ops):
                        durable[op.seq] = min(durable[op.seq], durable[m])
        self.durable_at = durable
        self.symlinks = frozenset(op.file for op in ops if op.kind == "symlink")
        # for planning incrementally (see _Cursor): per file its writes and truncates, and
        # its truncates to 0 (after one, what came before no longer shows in the file); the
        # name operations; per barrier the changes it makes durable
        self.ops_of: dict[int, list[int]] = {}
        self.resets: dict[int, list[int]] = {}
        self.names: list[int] = []
        self.released: dict[int, list[int]] = {}
        created: set[int] = set()
        self.initial = _Tree(log, self.symlinks)
        #: False when the incremental planner's assumptions do not hold for this log (a file
        #: created twice, created after it was written, or created while in ``initial``; a
        #: file whose writes do not become durable in order): every state is then built from
        #: the start, as :meth:`state` does
        self.regular = True
        for op in ops:
            if op.kind not in _CHANGES:
                continue
            i = op.seq
            if op.kind in ("write", "trunc"):
                lst = self.ops_of.setdefault(op.file, [])
                if lst and durable[lst[-1]] > durable[i]:
                    self.regular = False
                lst.append(i)
                if op.kind == "trunc" and op.size == 0:
                    self.resets.setdefault(op.file, []).append(i)
            else:
                self.names.append(i)
                if op.kind == "creat":
                    if op.file in created or op.file in self.ops_of or op.file in self.initial.data:
                        self.regular = False
                    created.add(op.file)
            if durable[i] < len(ops):
                self.released.setdefault(durable[i], []).append(i)
        # per write and truncate: the file's size before it, its place in its file's list,
        # and where the run of writes it ends starts (a run: each write starting at or past
        # the end of the one before it, appends; see _appended)
        self.size_before: dict[int, int] = {}
        self.pos: dict[int, int] = {}
        self.run_start: dict[int, list[int]] = {}
        sizes = {f: len(b) for f, b in self.initial.data.items()}
        for f, lst in self.ops_of.items():
            starts: list[int] = []
            for p, i in enumerate(lst):
                op = ops[i]
                self.pos[i] = p
                self.size_before[i] = sizes.get(f, 0)
                if op.kind == "trunc":
                    sizes[f] = op.size
                elif op.size > 0:
                    sizes[f] = max(sizes.get(f, 0), op.offset + op.size)
                prev = ops[lst[p - 1]] if p else None
                chained = (
                    prev is not None
                    and op.kind == "write"
                    and op.size > 0
                    and prev.kind == "write"
                    and op.offset >= prev.offset + prev.size
                )
                starts.append(starts[-1] if chained else p)
            self.run_start[f] = starts

    def changes(self, upto: int) -> list[int]:
        return [op.seq for op in self.log.ops[:upto] if op.kind in _CHANGES]

    def pending(self, upto: int) -> list[int]:
        return [i for i in self.changes(upto) if self.durable_at[i] >= upto]

    def cascade(self, upto: int, hit: Iterable[int], keep: set[int]) -> None:
        """ext4-ordered: remove from ``keep`` the metadata ops a lost or damaged op ``hit``
        holds back (the journal commits a prefix; a file's metadata waits for its data)."""
        cut = 1 << 62
        ops = self.log.ops
        for i in hit:
            op = ops[i]
            if op.kind in _META_KINDS:
                cut = min(cut, i)
            elif op.kind == "write":
                cut = min(cut, _next(self.meta_on.get(op.file, []), i))
        for j in list(keep):
            if j >= cut and ops[j].kind in _META_KINDS:
                keep.discard(j)

    def cuts(self, op: LogOp) -> list[int]:
        """The torn lengths of write ``op``: the first and the last 512 B boundary inside it
        (0 when it crosses none: the size not extended)."""
        first = (op.offset // _SECTOR + 1) * _SECTOR
        last = ((op.offset + op.size - 1) // _SECTOR) * _SECTOR
        if op.size <= 0 or first >= op.offset + op.size:
            return [0]
        return sorted({first - op.offset, last - op.offset})

    def reorder_lost(self, upto: int, i: int, pending: set[int]) -> list[int]:
        op = self.log.ops[i]
        if op.kind not in ("rename", "link", "creat") or not op.file:
            return []
        return [
            j
            for j in range(i)
            if j in pending and self.log.ops[j].kind == "write" and self.log.ops[j].file == op.file
        ]

    def mutations(self, upto: int) -> list[Mutation]:
        pend = self.pending(upto)
        pset = set(pend)
        out: list[Mutation] = []
        for i in pend:
            op = self.log.ops[i]
            out.append(Mutation("drop", i))
            if op.kind == "write":
                out += [Mutation("torn", i, k) for k in self.cuts(op)]
                if not self.ext4:
                    out.append(Mutation("zeros", i))
            if not self.ext4 and self.reorder_lost(upto, i, pset):
                out.append(Mutation("reorder", i))
        if pend:
            out.append(Mutation("synced_only"))
        return out

    def candidates(self, cur: _Cursor) -> list[Mutation]:
        """:meth:`mutations` at the cursor's point, in the same order, without those that
        cannot lose anything under ``posix``: a write or truncate of a file followed by a
        truncate to 0 of that file before the point (the file's bytes then do not depend
        on it, and a posix mutation of it leaves that truncate in place)."""
        ops = self.log.ops
        if self.ext4:
            cand = list(cur.pending)
        else:
            cand = list(cur.pnames)
            for f, d in cur.pdata.items():
                rs = self.resets.get(f, [])
                k = bisect.bisect_left(rs, cur.upto)
                r = rs[k - 1] if k else -1
                for j in reversed(d):
                    if j < r:
                        break
                    cand.append(j)
            cand.sort()
        out: list[Mutation] = []
        for i in cand:
            op = ops[i]
            out.append(Mutation("drop", i))
            if op.kind == "write":
                out += [Mutation("torn", i, k) for k in self.cuts(op)]
                if not self.ext4:
                    out.append(Mutation("zeros", i))
            if not self.ext4 and self._gone(cur, i, first=True):
                out.append(Mutation("reorder", i))
        if cur.pending:
            out.append(Mutation("synced_only"))
        return out

    def _gone(self, cur: _Cursor, i: int, first: bool = False) -> list[int]:
        """:meth:`reorder_lost` at the cursor's point (``first``: the first one only)."""
        ops = self.log.ops
        op = ops[i]
        if op.kind not in ("rename", "link", "creat") or not op.file:
            return []
        out: list[int] = []
        for j in cur.pdata.get(op.file, ()):  # in log order
            if j >= i:
                break
            if ops[j].kind == "write":
                out.append(j)
                if first:
                    break
        return out

    def quick(self, cur: _Cursor, m: Mutation) -> dict[str, bytes | None]:
        """The files of crash state ``m`` at the cursor's point (``m`` one of
        :meth:`candidates`), derived from what a kill -9 leaves there: only the files the
        mutation touches are rebuilt, from their durable content or their last truncate to
        0 kept, and the names only when it touches a name operation."""
        ops = self.log.ops
        removed: set[int] = set()
        torn: dict[int, int] = {}
        zeroed: set[int] = set()
        synced = m.kind == "synced_only"
        if synced:
            pass  # every pending operation: cur.pending (below)
        elif m.kind == "drop":
            removed.add(m.op)
        elif m.kind == "torn":
            torn[m.op] = m.keep
        elif m.kind == "zeros":
            zeroed.add(m.op)
        else:
            removed.update(self._gone(cur, m.op))
        if self.ext4 and not synced:  # the journal commits a prefix (see cascade)
            op = ops[m.op]
            cut = 1 << 62
            if op.kind in _META_KINDS:
                cut = m.op
            elif op.kind == "write":
                cut = _next(self.meta_on.get(op.file, []), m.op)
            for j in reversed(cur.pmeta):
                if j < cut:
                    break
                removed.add(j)
        contents: dict[int, bytes] = {}
        if synced:  # every pending operation lost: the files as durable as they are
            names_hit = bool(cur.pnames)
            for f in cur.pdata:
                contents[f] = bytes(cur.dur.data.get(f, b""))
        else:
            names_hit = False
            hit: dict[int, list[int]] = {}  # file -> its writes and truncates affected
            for a in removed.union(torn, zeroed):
                op = ops[a]
                if op.kind in ("write", "trunc"):
                    hit.setdefault(op.file, []).append(a)
                else:
                    names_hit = True
            for f, mine in hit.items():
                quick = self._appended(cur, mine[0], torn, zeroed) if len(mine) == 1 else None
                contents[f] = (
                    quick if quick is not None else self._content(cur, f, removed, torn, zeroed)
                )
        if not names_hit:
            files = dict(cur.files())
            for f, b in contents.items():
                for p in cur.names_of(f):
                    files[p] = b
            return files
        t = _Tree.__new__(_Tree)
        t.ns, t.data, t.symlinks = dict(cur.nsdur.ns), {}, self.symlinks
        names = self.names
        lost: Container[int] = cur.pending if synced else removed
        for j in names[cur.nfront : bisect.bisect_left(names, cur.upto)]:
            if j not in lost:
                t.apply(ops[j])
        out: dict[str, bytes | None] = {}
        for p in sorted(t.ns):
            kind, f = t.ns[p]
            if kind == "l" or not t.visible(p):
                continue
            out[p] = None if kind == "d" else contents[f] if f in contents else cur.content(f)
        return out

    def _appended(
        self, cur: _Cursor, a: int, torn: Mapping[int, int], zeroed: set[int]
    ) -> bytes | None:
        """The bytes of write ``a``'s file when ``a`` alone of its file is lost (or torn, or
        zero-filled), without replaying the file, when ``a`` wrote at or past the end of the
        file and every later write and truncate of the file up to the cursor is a write past
        the one before it (appends): the file as a kill -9 leaves it with ``a``'s bytes
        replaced. None when that does not hold (the caller replays)."""
        ops = self.log.ops
        op = ops[a]
        before = self.size_before[a]
        if op.kind != "write" or before > op.offset:
            return None
        lst = self.ops_of[op.file]
        i, j = self.pos[a], bisect.bisect_left(lst, cur.upto) - 1
        if j > i and self.run_start[op.file][j] > i:
            return None
        if a in zeroed:
            payload = bytes(op.size)
        elif a in torn:
            payload = op.data[: op.size].ljust(op.size, b"\0")[: torn[a]]
        else:
            payload = b""  # lost
        k9 = cur.content(op.file)
        end = op.offset + op.size
        if j > i:  # later writes past a's end keep the file's length: the rest is a hole
            return k9[: op.offset] + payload + bytes(op.size - len(payload)) + k9[end:]
        if not payload:
            return k9[:before]
        return k9[: op.offset] + payload

    def _content(
        self,
        cur: _Cursor,
        f: int,
        removed: set[int],
        torn: Mapping[int, int],
        zeroed: set[int],
    ) -> bytes:
        """File ``f``'s bytes when the pending ops ``removed`` are lost and ``torn`` /
        ``zeroed`` are damaged: its durable content, then its pending writes and truncates
        kept (from the last truncate to 0 kept, if any: what came before it does not show)."""
        ops = self.log.ops
        todo: list[int] = []
        empty = False
        for j in reversed(cur.pdata.get(f, {})):
            if j in removed:
                continue
            todo.append(j)
            if ops[j].kind == "trunc" and ops[j].size == 0:
                empty = True
                break
        b = bytearray() if empty else bytearray(cur.dur.data.get(f, b""))
        for j in reversed(todo):
            _apply_data(b, ops[j], torn.get(j), j in zeroed)
        return bytes(b)

    def state(self, upto: int, m: Mutation) -> CrashState:
        ops = self.log.ops
        if not 0 <= upto <= len(ops):
            raise InvalidArgument(f"crash point {upto} is outside the log (0..{len(ops)})")
        changes = self.changes(upto)
        pend = self.pending(upto)
        pset = set(pend)
        keep = set(changes)
        torn: dict[int, int] = {}
        zeroed: set[int] = set()

        def bad(why: str) -> ValueError:
            return ValueError(
                f"mutation {m.to_json()} does not apply after op {upto} under {self.model}: {why}"
            )

        if m.kind == "synced_only":
            keep -= pset
        elif m.kind in ("drop", "torn", "zeros", "reorder"):
            if m.op not in pset:
                raise bad(
                    f"op {m.op} is not a pending operation at that point (pending: {pend[:20]})"
                )
            op = ops[m.op]
            if m.kind == "drop":
                keep.discard(m.op)
            elif m.kind == "torn":
                if op.kind != "write" or m.keep not in self.cuts(op):
                    raise bad(f"a torn write keeps one of {self.cuts(op)} bytes of a write")
                torn[m.op] = m.keep
            elif m.kind == "zeros":
                if op.kind != "write" or self.ext4:
                    raise bad("zeros apply to a write, under posix")
                zeroed.add(m.op)
            else:
                gone = self.reorder_lost(upto, m.op, pset)
                if self.ext4 or not gone:
                    raise bad(
                        "reorder applies under posix to a rename, link or create of a "
                        "file with unsynced data written before it"
                    )
                keep -= set(gone)
            if self.ext4:
                self.cascade(upto, [m.op], keep)
        else:
            raise bad(f"unknown mutation kind (one of {', '.join(MUTATIONS)})")
        if not keep >= (set(changes) - pset):  # cannot happen: durable sets are closed
            raise bad("it would lose an operation a barrier made durable")
        crash = _Tree(self.log, self.symlinks)
        kill = _Tree(self.log, self.symlinks)
        for i in changes:
            kill.apply(ops[i])
            if i in keep:
                crash.apply(ops[i], torn.get(i), i in zeroed)
        files, k9 = crash.files(), kill.files()
        lost = _lost(k9, files)
        affected = sorted((pset - keep) | set(torn) | zeroed)
        explain = (
            _explain(self, upto, affected, torn, zeroed, keep, kill, crash, lost) if lost else ""
        )
        last = ops[upto - 1].describe() if upto else ""
        target = ops[m.op].describe() if 0 <= m.op < len(ops) else ""
        exact = all(ops[i].exact for i in changes)
        return CrashState(
            upto=upto,
            model=self.model,
            mutation=m,
            files=files,
            pending=tuple(pend),
            lost=tuple(lost[1]),
            explain=explain,
            exact=exact,
            last=last,
            target=target,
        )


class _Cursor:
    """A crash point that moves forward one operation at a time: what a kill -9 leaves there
    (each operation applied once), what is durable, and what is pending, kept up to date as
    it moves, so that the crash states of a point are derived from it instead of replaying
    the log from the start for each of them."""

    def __init__(self, mdl: _Model) -> None:
        self.mdl = mdl
        self.upto = 0
        self.kill = mdl.initial.copy()
        #: the content of each file after its writes and truncates durable at this point
        #: (durability is in log order along a file's own writes, see _Model.regular)
        self.dur = mdl.initial.copy()
        self.front: dict[int, int] = {}  # file -> how many of mdl.ops_of[file] dur holds
        #: the names after every name operation before the first pending one
        self.nsdur = mdl.initial.copy()
        self.nfront = 0  # how many of mdl.names nsdur holds
        self.pending: dict[int, None] = {}  # the pending changes, in log order
        self.pdata: dict[int, dict[int, None]] = {}  # file -> its pending writes, truncates
        self.pnames: dict[int, None] = {}  # pending name operations
        self.pmeta: dict[int, None] = {}  # pending operations the ext4 journal orders
        self.exact = True
        self._files: dict[str, bytes | None] | None = None
        self._names: dict[int, list[str]] | None = None
        self._bytes: dict[int, bytes] = {}

    def advance(self) -> None:
        """Move past the next operation of the log."""
        mdl, i = self.mdl, self.upto
        ops = mdl.log.ops
        op = ops[i]
        if op.kind in _CHANGES:
            self.kill.apply(op)
            self.exact = self.exact and op.exact
            self.pending[i] = None
            if op.kind in ("write", "trunc"):
                self.pdata.setdefault(op.file, {})[i] = None
            else:
                self.pnames[i] = None
            if op.kind in _META_KINDS:
                self.pmeta[i] = None
        self.upto = i + 1
        touched: set[int] = set()
        for j in mdl.released.get(i, ()):
            del self.pending[j]
            self.pmeta.pop(j, None)
            if ops[j].kind in ("write", "trunc"):
                f = ops[j].file
                d = self.pdata[f]
                del d[j]
                if not d:
                    del self.pdata[f]
                touched.add(f)
            else:
                del self.pnames[j]
        for f in touched:
            lst, k = mdl.ops_of[f], self.front.get(f, 0)
            while k < len(lst) and mdl.durable_at[lst[k]] < self.upto:
                self.dur.apply(ops[lst[k]])
                k += 1
            self.front[f] = k
        names = mdl.names
        while (
            self.nfront < len(names)
            and names[self.nfront] < self.upto
            and names[self.nfront] not in self.pnames
        ):
            self.nsdur.apply(ops[names[self.nfront]])
            self.nfront += 1
        self._files = self._names = None
        self._bytes = {}

    def files(self) -> dict[str, bytes | None]:
        """What a kill -9 leaves here."""
        if self._files is None:
            self._files = self.kill.files()
        return self._files

    def names_of(self, f: int) -> list[str]:
        """The visible names of file ``f`` in what a kill -9 leaves here."""
        if self._names is None:
            idx: dict[int, list[str]] = {}
            for p, b in self.files().items():
                if b is not None:
                    idx.setdefault(self.kill.ns[p][1], []).append(p)
            self._names = idx
        return self._names.get(f, [])

    def content(self, f: int) -> bytes:
        """File ``f``'s bytes in what a kill -9 leaves here."""
        b = self._bytes.get(f)
        if b is None:
            b = self._bytes[f] = bytes(self.kill.data.get(f, b""))
        return b


#: byte 0 stays 0, any other byte becomes 0xFF (a mask of a content's non-zero bytes)
_NONZERO = bytes([0] + [255] * 255)


def _zeros_instead(a: bytes, b: bytes) -> bool:
    """Wherever ``b`` (as long as ``a``) differs from ``a``, it holds a zero byte (at C
    speed: ``a`` masked to ``b``'s non-zero bytes equals ``b``)."""
    return int.from_bytes(a, "big") & int.from_bytes(
        b.translate(_NONZERO), "big"
    ) == int.from_bytes(b, "big")


def _lost(
    k9: Mapping[str, bytes | None], files: Mapping[str, bytes | None]
) -> tuple[set[str], list[str]]:
    """(paths that differ, one line each) between a kill -9 tree and a crash tree."""
    diff: set[str] = set()
    lines: list[str] = []
    for p in sorted(set(k9) | set(files)):
        a, b = k9.get(p, ...), files.get(p, ...)
        if a == b:
            continue
        diff.add(p)
        if p not in files:
            lines.append(
                f"{p}: folder missing"
                if a is None
                else f"{p}: missing (kill -9 leaves {len(k9[p] or b'')} bytes)"
            )
        elif p not in k9:
            lines.append(
                f"{p}: folder still there (removed before the cut)"
                if b is None
                else f"{p}: still there with {len(files[p] or b'')} bytes (removed before the cut)"
            )
        elif a is None or b is None:
            lines.append(
                f"{p}: a {'folder' if b is None else 'file'} instead of a "
                f"{'folder' if a is None else 'file'}"
            )
        else:
            assert isinstance(a, bytes)
            assert isinstance(b, bytes)
            if a[: len(b)] == b:
                lines.append(f"{p}: {len(b)} of {len(a)} bytes")
            elif len(a) == len(b) and _zeros_instead(a, b):
                z = len(a) - (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(
                    len(a), "big"
                ).count(0)
                lines.append(f"{p}: {len(a)} bytes, {z} of them zeros instead of data")
            else:
                lines.append(
                    f"{p}: {len(b)} bytes of older or mixed content instead of the "
                    f"{len(a)} bytes kill -9 leaves"
                )
    return diff, lines


def _explain(
    mdl: _Model,
    upto: int,
    affected: Sequence[int],
    torn: Mapping[int, int],
    zeroed: set[int],
    keep: set[int],
    kill: _Tree,
    crash: _Tree,
    lost: tuple[set[str], list[str]],
) -> str:
    ops = mdl.log.ops
    diff = lost[0]
    sizes: dict[int, int] = {}
    size_before: dict[int, int] = {}
    truncated_at: dict[int, int] = {}  # file -> seq of its last trunc to 0 (open O_TRUNC)
    created: set[int] = set()
    trunc_before: dict[int, bool] = {}
    created_before: dict[int, bool] = {}
    init = _Tree(mdl.log, mdl.symlinks)
    for f, b in init.data.items():
        sizes[f] = len(b)
    for op in ops[:upto]:
        size_before[op.seq] = sizes.get(op.file, 0)
        trunc_before[op.seq] = op.file in truncated_at
        created_before[op.seq] = op.file in created
        if op.kind == "write":
            sizes[op.file] = max(sizes.get(op.file, 0), op.offset + op.size)
        elif op.kind == "trunc":
            sizes[op.file] = op.size
            if op.size == 0:
                truncated_at[op.file] = op.seq
        elif op.kind == "creat":
            created.add(op.file)
            sizes[op.file] = 0
        elif op.kind in _BARRIERS and op.file:
            truncated_at.pop(op.file, None)
            created.discard(op.file)

    def until(i: int) -> str:
        """Where the cut landed relative to the barrier that made op ``i`` durable later in
        the recording ("the cut came one operation before your folder fsync (`fsync
        {state_dir}`, op 9)"); "" when no later operation did (it was never made durable)."""
        d = mdl.durable_at[i]
        if d >= len(ops) or d < upto:
            return ""
        b = ops[d]
        n = d - upto + 1
        what = "folder fsync" if b.kind in ("fsync", "fdatasync") and not b.file else b.kind
        call = f"`{b.kind} {b.path}`, " if b.path else ""
        count = "one operation" if n == 1 else f"{n} operations"
        return f"the cut came {count} before your {what} ({call}op {d + 1})"

    def unsynced(i: int, done: str) -> str:
        """``done`` ("was written") and then either where the cut came relative to its fsync,
        or that it had none."""
        later = until(i)
        return f"{done} and {later}" if later else f"{done} without fsync"

    def not_durable(op: LogOp) -> str:
        """ "was not yet durable: the cut came ... before your folder fsync ...", or "was
        not made durable (no fsync of its folder ...)" when the recording has none after."""
        later = until(op.seq)
        if later:
            return f"was not yet durable: {later}"
        fs = _folders(op)
        which = (
            f"its folder `{fs[0]}`"
            if len(fs) == 1
            else "its folders " + " and ".join(f"`{d}`" for d in fs)
        )
        if mdl.ext4:
            return f"was not made durable (no fsync of {which} or of any file after it)"
        return f"was not made durable (no fsync of {which})"

    sentences: list[tuple[set[str], str]] = []
    for i in affected:
        op = ops[i]
        names = set(kill.names_of(op.file) + crash.names_of(op.file)) if op.file else set()
        touched = {op.path, op.path2} | names
        if op.kind == "write":
            how = "torn" if i in torn else "zero-filled" if i in zeroed else "empty"
            renames = [
                r
                for r in ops[i + 1 : upto]
                if r.kind == "rename" and r.file == op.file and r.seq in keep
            ]
            p = sorted(names)[0] if names else op.path
            if renames:
                r = renames[-1]
                touched.add(r.path2)
                later = until(i)
                fsync_after = f" ({later})" if later else ""
                sentences.append(
                    (
                        touched,
                        f"`{r.path2}` was replaced by rename before its data "
                        f"was fsynced{fsync_after}: after power loss it can be {how}"
                        if how == "empty"
                        else f"`{r.path2}` was replaced by rename before its data was "
                        f"fsynced{fsync_after}: after power loss it can be empty or {how}",
                    )
                )
            elif trunc_before.get(i):
                sentences.append(
                    (
                        touched,
                        unsynced(i, f"`{p}` was rewritten in place (open with O_TRUNC, write)")
                        + ": after power loss it can be empty or torn",
                    )
                )
            elif created_before.get(i) and op.offset <= size_before.get(i, 0):
                sentences.append(
                    (
                        touched,
                        unsynced(i, f"`{p}` was written")
                        + ": after power loss it can be empty or torn",
                    )
                )
            elif op.offset >= size_before.get(i, 0):
                later = until(i)
                sentences.append(
                    (
                        touched,
                        f"`{p}` append was not fsynced"
                        + (f" yet ({later})" if later else "")
                        + ": after power loss it can be lost or torn",
                    )
                )
            else:
                sentences.append(
                    (
                        touched,
                        unsynced(i, f"`{p}` was overwritten in place")
                        + ": after power loss it can be torn or hold old data",
                    )
                )
        elif op.kind == "trunc":
            p = sorted(names)[0] if names else op.path
            if op.size == 0:
                sentences.append(
                    (
                        touched,
                        unsynced(i, f"`{p}` was rewritten in place (open with O_TRUNC, write)")
                        + ": after power loss it can be empty or torn",
                    )
                )
            else:
                sentences.append(
                    (
                        touched,
                        unsynced(i, f"`{p}` was resized to {op.size} B")
                        + ": after power loss its old size is back",
                    )
                )
        elif op.kind == "rename":
            back = (
                f"the old `{op.path2}` is back"
                if op.path2 in crash.files()
                else f"`{op.path2}` is missing"
            )
            sentences.append(
                (
                    touched,
                    f"the rename of `{op.path}` to `{op.path2}` {not_durable(op)}: "
                    f"after power loss {back}",
                )
            )
        elif op.kind in _NAME_OPS:
            what, after = _NAME_OPS[op.kind]
            sentences.append(
                (
                    touched,
                    f"{what.format(path=op.path, path2=op.path2)} {not_durable(op)}: "
                    f"after power loss {after}" + _sqlite_journal(op),
                )
            )
        elif op.kind == "mkdir":
            touched |= {p for p in diff if p.startswith(op.path + "/")}
            sentences.append(
                (
                    touched,
                    f"the folder `{op.path}` {not_durable(op)}: after power loss it is "
                    "missing with all it holds",
                )
            )
        elif op.kind == "rmdir":
            sentences.append(
                (
                    touched,
                    f"the removal of the folder `{op.path}` {not_durable(op)}: after power "
                    "loss it is back",
                )
            )
    relevant = [s for t, s in sentences if t & diff]
    out: list[str] = []
    for s in relevant or [s for _, s in sentences]:
        if s not in out:
            out.append(s)
    if len(out) > 3:
        out = [*out[:3], f"and {len(out) - 3} more"]
    return "; ".join(out)


def crash_states(
    log: OpLog, model: str, upto: int, *, rng: random.Random | None = None, limit: int | None = None
) -> list[CrashState]:
    """The crash states of a power cut after ``upto`` operations of ``log`` under ``model``.

    Systematic (``rng`` None): every mutation of every pending operation (bounded: at most
    two torn cuts per write, the first and the last boundary), plus ``synced_only``; states
    equal to what a kill -9 leaves (nothing lost) and duplicates (same digest) are left out,
    so a point with nothing pending yields no state. With ``rng``: the same list, shuffled
    and cut to ``limit`` by ``rng`` (the choice depends on the seed only).
    Raises ValueError for an unknown model or an ``upto`` outside ``0..len(log.ops)``.
    """
    mdl = _Model(log, model)
    if not 0 <= upto <= len(log.ops):
        raise InvalidArgument(f"crash point {upto} is outside the log (0..{len(log.ops)})")
    out: list[CrashState] = []
    seen: set[str] = set()
    if mdl.regular:
        cur = _Cursor(mdl)
        while cur.upto < upto:
            cur.advance()
        kill = cur.files()
        for m in mdl.candidates(cur):
            files = mdl.quick(cur, m)
            if files == kill:
                continue
            d = _digest(files)
            if d in seen:
                continue
            seen.add(d)
            out.append(mdl.state(upto, m))  # the whole state: what it lost, and why
    else:
        for m in mdl.mutations(upto):
            s = mdl.state(upto, m)
            if not s.lost:
                continue
            d = s.digest
            if d in seen:
                continue
            seen.add(d)
            out.append(s)
    if rng is not None:
        rng.shuffle(out)
    return out if limit is None else out[: max(0, limit)]


def crash_plan(
    log: OpLog,
    model: str,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[tuple[int, int, list[CrashState]]]:
    """The crash states of every point of ``log`` under ``model``, point by point: ``(upto,
    first, states)`` for ``upto`` = 0, 1, ... len(log.ops), where ``states`` are those of
    ``crash_states(log, model, upto)`` and ``first`` the first operation pending there
    (``upto`` when none is).

    Incremental: each operation is applied once to a running tree (what a kill -9 leaves),
    and each state is derived from it and from what is pending there, so the time grows
    with the operations and the states, not with their product. The states carry their
    files and ``lost``, not ``pending`` (the same for every state of a point: ``first``
    gives where it starts) nor ``explain``; :func:`rebuild` gives the whole state.
    With ``deadline`` (a time of ``clock``), it stops as soon as the deadline has passed,
    after the last whole point: the caller sees fewer points than ``len(log.ops) + 1``.
    Raises ValueError for an unknown model.
    """
    mdl = _Model(log, model)
    ops = log.ops
    if not mdl.regular:  # the long way, one point at a time
        for upto in range(len(ops) + 1):
            if deadline is not None and clock() >= deadline:
                return
            found = crash_states(log, model, upto)
            yield upto, min(found[0].pending, default=upto) if found else upto, found
        return
    cur = _Cursor(mdl)
    for upto in range(len(ops) + 1):
        if upto:
            cur.advance()
        if deadline is not None and clock() >= deadline:
            return
        kill = cur.files()
        seen: set[str] = set()
        out: list[CrashState] = []
        last = ops[upto - 1].describe() if upto else ""
        first = next(iter(cur.pending), upto)
        for n, m in enumerate(mdl.candidates(cur)):
            if deadline is not None and n % 64 == 63 and clock() >= deadline:
                return
            files = mdl.quick(cur, m)
            if files == kill:
                continue
            d = _digest(files)
            if d in seen:
                continue
            seen.add(d)
            out.append(
                CrashState(
                    upto=upto,
                    model=model,
                    mutation=m,
                    files=files,
                    lost=tuple(_lost(kill, files)[1]),
                    exact=cur.exact,
                    last=last,
                    target=ops[m.op].describe() if 0 <= m.op < len(ops) else "",
                )
            )
        yield upto, first, out


def rebuild(log: OpLog, model: str, upto: int, mutation: Mutation) -> CrashState:
    """The crash state ``(upto, mutation)`` of ``log`` under ``model`` again (a replay).
    Raises ValueError if the mutation does not apply at that point (e.g. a hand-edited plan)."""
    return _Model(log, model).state(upto, mutation)


def kill_state(log: OpLog, upto: int) -> CrashState:
    """What a kill -9 after the first ``upto`` operations of ``log`` leaves: every one of them
    performed (the page cache outlives the process), nothing lost, nothing pending. Its
    ``mutation`` is ``kill``; ``exact`` is False when an inexact write is part of it.
    Raises ValueError for an ``upto`` outside ``0..len(log.ops)``."""
    if not 0 <= upto <= len(log.ops):
        raise InvalidArgument(f"kill point {upto} is outside the log (0..{len(log.ops)})")
    mdl = _Model(log, "posix")
    tree = _Tree(log, mdl.symlinks)
    exact = True
    for op in log.ops[:upto]:
        if op.kind in _CHANGES:
            tree.apply(op)
            exact = exact and op.exact
    return CrashState(
        upto=upto,
        model="kill",
        mutation=Mutation("kill"),
        files=tree.files(),
        exact=exact,
        last=log.ops[upto - 1].describe() if upto else "",
    )


def write_ranges(log: OpLog, upto: int) -> dict[str, list[tuple[int, int]]]:
    """Per file (its name at ``upto``), the byte ranges ``(offset, length)`` written in the
    first ``upto`` operations, newest last: what an aimed corruption targets (ranges cut to
    the file's size at ``upto``; a file without a name then is left out)."""
    mdl = _Model(log, "posix")
    tree = _Tree(log, mdl.symlinks)
    ranges: dict[int, list[tuple[int, int]]] = {}
    for op in log.ops[: max(0, upto)]:
        if op.kind in _CHANGES:
            tree.apply(op)
        if op.kind == "write" and op.size > 0:
            ranges.setdefault(op.file, []).append((op.offset, op.size))
    out: dict[str, list[tuple[int, int]]] = {}
    for f, rs in sorted(ranges.items()):
        size = len(tree.data.get(f, b""))
        cut = [(o, min(n, size - o)) for o, n in rs if o < size]
        if not cut:
            continue
        for name in tree.names_of(f):
            out[name] = list(cut)
    return dict(sorted(out.items()))


def recent_writes(log: OpLog, upto: int, limit: int = 16) -> list[tuple[str, int, int]]:
    """The last ``limit`` writes of the first ``upto`` operations, across files, newest last:
    ``(name at upto, offset, length)``, cut to the file's size at ``upto`` (a write since
    overwritten by a truncate, or to a file without a name, is left out). What an aimed
    corruption hits: the agent's last record, a WAL's last frames."""
    mdl = _Model(log, "posix")
    tree = _Tree(log, mdl.symlinks)
    writes: list[tuple[int, int, int]] = []
    for op in log.ops[: max(0, upto)]:
        if op.kind in _CHANGES:
            tree.apply(op)
        if op.kind == "write" and op.size > 0:
            writes.append((op.file, op.offset, op.size))
    out: list[tuple[str, int, int]] = []
    for f, off, n in reversed(writes):
        size = len(tree.data.get(f, b""))
        names = tree.names_of(f)
        if off >= size or not names:
            continue
        out.append((sorted(names)[0], off, min(n, size - off)))
        if len(out) >= limit:
            break
    return out[::-1]


def event_points(log: OpLog, times: Sequence[float]) -> list[int]:
    """For each event time (wall clock, ascending), how many operations came before it (the
    operations that started at or before it, counted as a prefix of the log)."""
    peak: list[float] = []
    top = float("-inf")
    for op in log.ops:
        top = max(top, op.time)
        peak.append(top)
    return [bisect.bisect_right(peak, t) for t in times]


# == materialise ===============================================================================


def _split_placeholder(path: str, roots: Mapping[str, str]) -> tuple[str, list[str]] | None:
    """(root folder, path components) of ``{name}/a/b``; None for a placeholder not in
    ``roots``. Raises ValueError for a path that could leave its root."""
    if "\0" in path:
        raise InvalidArgument(f"refused crash-state path {path!r}: it holds a NUL byte")
    m = re.fullmatch(r"\{([A-Za-z_][A-Za-z0-9_]*)\}(/.*)?", path, re.S)
    if not m:
        raise InvalidArgument(
            f"refused crash-state path {path!r}: it must start with a root "
            "placeholder such as {state_dir}/ (an absolute or bare path could "
            "write outside the trial's folders)"
        )
    if m.group(1) not in roots:
        return None
    parts = (m.group(2) or "").split("/")[1:]
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidArgument(
                f"refused crash-state path {path!r}: an empty, '.' or '..' "
                "component could leave its root"
            )
    return roots[m.group(1)], parts


def _empty_folder(fd: int) -> None:
    """Remove everything in the open folder ``fd`` without following a link."""
    for name in os.listdir(fd):
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                _empty_folder(sub)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)


def _open_root(folder: str) -> int:
    os.makedirs(folder, exist_ok=True)
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)


def materialize(state: CrashState, roots: Mapping[str, str]) -> list[str]:
    """Make the folders of ``roots`` hold exactly ``state.files`` (what was there is removed;
    nothing is written outside the roots, no symlink is followed; a path whose placeholder is
    not in ``roots`` is skipped). Returns the absolute paths written.

    Raises ValueError, before anything is changed, for a path that could leave its root (an
    absolute path, ``..``, an empty component, no placeholder); OSError if a root is itself
    a symlink.
    """
    plan: list[tuple[str, list[str], bytes | None]] = []
    for p in sorted(state.files):
        where = _split_placeholder(p, roots)
        if where is not None:
            plan.append((where[0], where[1], state.files[p]))
    written: list[str] = []
    fds: dict[str, int] = {}
    try:
        for name in sorted(roots):
            folder = roots[name]
            if folder not in fds:
                fds[folder] = _open_root(folder)
                _empty_folder(fds[folder])
        for folder, parts, content in plan:
            if not parts:
                continue  # the root itself
            dfd = os.dup(fds[folder])
            try:
                for part in parts[:-1]:
                    try:
                        os.mkdir(part, 0o755, dir_fd=dfd)
                    except FileExistsError:
                        pass
                    nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
                    os.close(dfd)
                    dfd = nfd
                last = parts[-1]
                if content is None:
                    try:
                        os.mkdir(last, 0o755, dir_fd=dfd)
                    except FileExistsError:
                        st = os.stat(last, dir_fd=dfd, follow_symlinks=False)
                        if not stat.S_ISDIR(st.st_mode):
                            raise
                else:
                    ffd = os.open(
                        last,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                        0o644,
                        dir_fd=dfd,
                    )
                    try:
                        write_all(ffd, content)
                    finally:
                        os.close(ffd)
                written.append(os.path.join(folder, *parts))
            finally:
                os.close(dfd)
    finally:
        for fd in fds.values():
            os.close(fd)
    return written
