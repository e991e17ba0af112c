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

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crashpoint.faults import _strace

__all__ = [
    "MODELS",
    "MUTATIONS",
    "STRSIZE",
    "SYSCALLS",
    "CrashState",
    "LogOp",
    "Mutation",
    "OpLog",
    "crash_states",
    "materialize",
    "oplog",
    "rebuild",
]

#: The persistence models, weakest first.
MODELS = ("posix", "ext4-ordered")

#: What a crash state does to what was not synced at its point (see :class:`Mutation`).
MUTATIONS = ("synced_only", "drop", "torn", "zeros", "reorder")

#: The syscalls a power-loss recording traces (names strace does not know here are skipped).
SYSCALLS = ("open", "openat", "openat2", "creat", "write", "pwrite64", "writev", "pwritev",
            "pwritev2", "truncate", "ftruncate", "rename", "renameat", "renameat2", "link",
            "linkat", "symlink", "symlinkat", "unlink", "unlinkat", "mkdir", "mkdirat",
            "rmdir", "fsync", "fdatasync", "sync_file_range", "sync", "syncfs", "close",
            "lseek", "dup", "dup2", "dup3", "fcntl", "fallocate", "clone", "clone3", "fork",
            "vfork", "chdir", "fchdir", "copy_file_range", "sendfile")

#: Bytes of each write's data strace prints (longer writes are known by length only).
STRSIZE = 1 << 20


@dataclass(frozen=True, slots=True)
class LogOp:
    """One logical file-system operation under the roots, in the order the run made them.

    ``kind``: ``creat`` (a new empty file), ``write`` (``data`` at ``offset``; ``size`` is its
    length), ``trunc`` (the file's size set to ``size``), ``rename`` (``path`` -> ``path2``),
    ``link``, ``symlink`` (``path`` made, pointing to ``path2``), ``unlink``, ``mkdir``,
    ``rmdir``, ``fsync`` / ``fdatasync`` (of ``path``: a file, or a folder for a folder
    fsync), ``sync`` (everything). ``path``/``path2``: relative with their root placeholder
    (``{state_dir}/x.json``). ``file``: the file's identity in the log (stable across renames,
    like an inode number; 0 for folders and ``sync``). ``time``: wall-clock seconds of the
    call (strace ``-ttt``): what places the ledger's events between operations. ``exact``:
    False when the data was longer than strace printed (``data`` then holds what was
    printed). ``call``: the trace line it came from (evidence), ``pid`` its process.
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

    def to_json(self) -> dict[str, Any]:
        """JSON-able (``data`` base64-encoded)."""
        raise NotImplementedError

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LogOp:
        raise NotImplementedError

    def describe(self) -> str:
        """One line a developer reads: ``write 120 B at 0 to {state_dir}/state.json``."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class OpLog:
    """A run's logical operation log and what it started from.

    ``initial``: what was under the roots when the recording started (relative placeholder
    path -> bytes, None for a folder), taken as durable. ``ops``: the operations.
    ``notes``: what the recording could not model (a write longer than STRSIZE, an mmap, a
    call on a path outside the roots that moved a file in: one line each).
    """

    ops: tuple[LogOp, ...] = ()
    initial: Mapping[str, bytes | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OpLog:
        raise NotImplementedError


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
      data blocks never written);
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

    @property
    def digest(self) -> str:
        """A hash of ``files``: two states with the same digest leave the same folders."""
        raise NotImplementedError

    def label(self) -> str:
        """Short, for reports: ``after op 7 (write {state_dir}/state.json), torn at 512 B``."""
        raise NotImplementedError


def oplog(trace: _strace.Trace, roots: Mapping[str, str], *,
          initial: Mapping[str, bytes | None] | None = None) -> OpLog:
    """The logical operation log of ``trace`` under ``roots`` (placeholder name -> absolute
    folder, e.g. ``{"state_dir": "/t/golden/state", "workdir": "/t/golden/work"}``).

    Follows descriptors (open/dup/fcntl F_DUPFD/close, inherited across fork/clone, shared
    offsets, O_APPEND, O_TRUNC, lseek) to place each write; a call that failed is left out;
    a call whose process was killed in it (result None) is left out. ``initial``: what the
    roots held when the trace started (see :class:`OpLog`); None: empty folders.
    """
    raise NotImplementedError


def crash_states(log: OpLog, model: str, upto: int, *, rng: random.Random | None = None,
                 limit: int | None = None) -> list[CrashState]:
    """The crash states of a power cut after ``upto`` operations of ``log`` under ``model``.

    Systematic (``rng`` None): every mutation of every pending operation (bounded: at most
    two torn cuts per write, the first and the last boundary), plus ``synced_only``; states
    equal to what a kill -9 leaves (nothing lost) and duplicates (same digest) are left out,
    so a point with nothing pending yields no state. With ``rng``: the same list, shuffled
    and cut to ``limit`` by ``rng`` (the choice depends on the seed only).
    Raises ValueError for an unknown model or an ``upto`` outside ``0..len(log.ops)``.
    """
    raise NotImplementedError


def rebuild(log: OpLog, model: str, upto: int, mutation: Mutation) -> CrashState:
    """The crash state ``(upto, mutation)`` of ``log`` under ``model`` again (a replay).
    Raises ValueError if the mutation does not apply at that point (e.g. a hand-edited plan)."""
    raise NotImplementedError


def materialize(state: CrashState, roots: Mapping[str, str]) -> list[str]:
    """Make the folders of ``roots`` hold exactly ``state.files`` (what was there is removed;
    nothing is written outside the roots, no symlink is followed; a path whose placeholder is
    not in ``roots`` is skipped). Returns the absolute paths written."""
    raise NotImplementedError


def write_ranges(log: OpLog, upto: int) -> dict[str, list[tuple[int, int]]]:
    """Per file (its name at ``upto``), the byte ranges ``(offset, length)`` written in the
    first ``upto`` operations, newest last: what an aimed corruption targets."""
    raise NotImplementedError


def event_points(log: OpLog, times: Sequence[float]) -> list[int]:
    """For each event time (wall clock, ascending), how many operations came before it."""
    raise NotImplementedError
