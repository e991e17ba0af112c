"""Syscall traces of a real child with strace: capability probe, argv wrapper, parser.

Used to learn what an agent in any language does to its files (the golden run's file
operations and write sequence), to kill it at an exact file operation (strace's fault
injection), and to confirm that a disk fault reached it (a write that failed with ENOSPC or
EFBIG). Where strace is missing or ptrace is not allowed, :func:`available` says why and the
callers fall back or skip with that reason.

INTERFACE STUB (issue 10): the lead committed the record type and signatures; the "trace"
helper implements them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Syscall", "available", "parse", "wrap"]


@dataclass(frozen=True, slots=True)
class Syscall:
    """One finished (or killed) system call of a trace, in trace order.

    ``args``: the top-level arguments exactly as strace printed them (strings still quoted,
    ``-y`` fd decorations kept, e.g. ``3</state/a.json>``). ``result``: the return value, None
    when the call never returned (``= ?``: the process was killed in it). ``errno``: the error
    name when it failed (``ENOSPC``), else "". ``path``: the file the call is about, absolute:
    its first path argument (relative ones resolved against the ``-y`` decoded dirfd) or, for
    a call on a file descriptor, the file that descriptor refers to; "" if none (a pipe, a
    socket). ``path2``: the second path (rename/link target), absolute, else "". ``fd``: the
    first argument as a descriptor number when it is one, else -1.
    """

    seq: int
    pid: int
    name: str
    args: tuple[str, ...]
    result: int | None
    errno: str = ""
    path: str = ""
    path2: str = ""
    fd: int = -1
    raw: str = ""


def available() -> tuple[bool, str]:
    """(True, "") if strace can trace a child here, else (False, why): not on PATH, or ptrace
    refused (a container without CAP_SYS_PTRACE, Yama ptrace_scope 3)."""
    raise NotImplementedError


def wrap(argv: Sequence[str], output: str, *, syscalls: Sequence[str],
         inject: Sequence[str] = (), paths: Sequence[str] = ()) -> list[str]:
    """``argv`` run under strace, following forks, writing the trace to ``output``.

    ``syscalls``: the calls to record; ``inject``: strace ``-e inject=...`` expressions (e.g.
    ``openat:signal=KILL:when=3``); ``paths``: only calls on these files are traced (and
    counted by ``when``): strace ``-P``.
    """
    raise NotImplementedError


def parse(output: str, *, max_lines: int = 1_000_000) -> list[Syscall]:
    """The syscalls of a trace file written by :func:`wrap` (resumed calls merged, signals and
    exit lines left out). A truncated last line is ignored; never raises on odd input."""
    raise NotImplementedError
