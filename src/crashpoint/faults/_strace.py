"""Syscall traces of a real child with strace: capability probe, argv wrapper, parser.

Used to learn what an agent in any language does to its files (the golden run's file
operations and write sequence), to kill it at an exact file operation (strace's fault
injection), and to confirm that a disk fault reached it (a write that failed with ENOSPC or
EFBIG). Where strace is missing or ptrace is not allowed, :func:`available` says why and the
callers fall back or skip with that reason.

What strace 6.1 does, checked here (and relied on):

- ``-o FILE`` is written line by line as calls finish: a trace can be read while the agent
  runs. A call still in progress is not in the file yet (or is an ``<unfinished ...>`` line
  when another process interleaves); a last line without its newline is ignored.
- ``-y`` decorates descriptors with their path, ``3</state/a.json>``, ``AT_FDCWD</cwd>``; in
  the decoration ``<`` and ``>`` are escaped (``\\74``, ``\\76``) like other odd bytes, and a
  file removed while open is ``3</state/a.json>(deleted)``.
- ``-P PATH`` traces only calls on PATH (a path argument equal to it, as given, or a
  descriptor that refers to it), and ``-e inject=NAME:...:when=N`` counts only those calls,
  per tracee (each process and each thread counts from 1 on its own). A relative path
  argument (``openat(AT_FDCWD, "x.json")``) does not match an absolute ``-P``.
- ``inject=NAME:signal=KILL`` kills the tracee when it enters the call: the call is not
  carried out (a write writes nothing, an ``openat(O_TRUNC)`` truncates nothing) and the
  trace shows ``NAME(...) = ?`` then ``+++ killed by SIGKILL +++``. strace then exits as if
  killed by SIGKILL itself.
- ``-e signal=none`` would also hide the ``+++ killed by SIG... +++`` lines, so signals are
  traced (``--- SIGCHLD ... ---`` lines are skipped by the parser).
- If strace itself is killed its tracees are detached, not killed: kill the whole tree.
- ``--seccomp-bpf`` (used when it works, to stop the tracee only at traced calls) silently
  disables ``inject=...:signal=`` in strace 6.1, so :func:`wrap` leaves it out when injecting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import re
import shutil
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crashpoint.errors import CrashpointError, InvalidArgument

if TYPE_CHECKING:
    from crashpoint._proc._process import Exit

__all__ = [
    "Detacher",
    "Syscall",
    "Trace",
    "available",
    "decode",
    "decoration",
    "output_of",
    "parse",
    "parse_lines",
    "read",
    "wrap",
]

#: Environment variable that makes :func:`available` say no (to exercise the fallbacks).
NO_STRACE_VAR = "CRASHPOINT_NO_STRACE"


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

    Added by the implementation: ``injected`` (strace's ``(INJECTED)`` mark: the result was
    made up by ``-e inject=...:error=``); ``deleted`` (the descriptor's file had been removed,
    ``(deleted)``); ``path_arg``/``path2_arg``: the path strings as the call passed them
    (decoded, maybe relative), "" where the path came from a descriptor. For
    ``symlink``/``symlinkat`` ``path`` is the link created and ``path2`` what it points to.
    ``time``: when the call started, seconds since the epoch (``wrap(timestamps=True)``,
    strace ``-ttt``), else 0.0; an ``<unfinished ...>`` call keeps its first line's time.
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
    injected: bool = False
    deleted: bool = False
    path_arg: str = ""
    path2_arg: str = ""
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class Trace:
    """A parsed trace: its calls in order, and how each traced process ended.

    ``exits``: pid -> ``"exited with 0"``, ``"killed by SIGKILL"`` (``+++ ... +++`` lines).
    ``truncated``: the file ended inside a line, or ``max_lines`` was reached.
    """

    calls: list[Syscall] = field(default_factory=list)
    exits: dict[int, str] = field(default_factory=dict)
    truncated: bool = False
    #: pid -> when its ``+++`` line was written (a timed trace, ``-ttt``; else not listed)
    ended: dict[int, float] = field(default_factory=dict)
    #: some process's folder was taken from ``cwd`` (the parse's argument), not from the trace:
    #: parsed with another ``cwd``, its paths may differ (when False, they cannot)
    cwd_given: bool = False

    def killed(self, pid: int) -> bool:
        """True if process ``pid`` is known to have been killed by SIGKILL."""
        return self.exits.get(pid, "").startswith("killed by SIGKILL")


# -- capability ---------------------------------------------------------------------------------

_probe: tuple[bool, str, bool] | None = None  # (ok, why not, --seccomp-bpf works)


def _run_probe(strace: str, *extra: str) -> tuple[int, str]:
    true = shutil.which("true") or "/bin/true"
    try:
        done = subprocess.run(
            [strace, "-f", "-qq", *extra, "-o", os.devnull, true],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return -1, str(e)
    return done.returncode, done.stderr.decode("utf-8", "replace").strip()


def _probed() -> tuple[bool, str, bool]:
    global _probe
    if _probe is None:
        strace = shutil.which("strace")
        if strace is None:
            _probe = (False, "strace is not on PATH (Debian/Ubuntu: apt-get install strace)", False)
        else:
            rc, err = _run_probe(strace)
            if rc != 0:
                last = err.splitlines()[-1] if err else f"exit status {rc}"
                _probe = (
                    False,
                    f"strace cannot trace a child here ({last}): ptrace is not "
                    "allowed (a container needs CAP_SYS_PTRACE, e.g. docker run "
                    "--cap-add SYS_PTRACE; or kernel.yama.ptrace_scope is 3)",
                    False,
                )
            else:
                rc2, err2 = _run_probe(strace, "--seccomp-bpf", "-e", "trace=write")
                _probe = (True, "", rc2 == 0 and not err2)
    return _probe


def available() -> tuple[bool, str]:
    """(True, "") if strace can trace a child here, else (False, why): not on PATH, or ptrace
    refused (a container without CAP_SYS_PTRACE, Yama ptrace_scope 3).

    The probe runs once per process; ``CRASHPOINT_NO_STRACE=1`` (read at every call) makes it
    report (False, "disabled by CRASHPOINT_NO_STRACE").
    """
    if os.environ.get(NO_STRACE_VAR, "") not in ("", "0"):
        return False, f"disabled by {NO_STRACE_VAR}"
    ok, why, _ = _probed()
    return ok, why


def wrap(
    argv: Sequence[str],
    output: str,
    *,
    syscalls: Sequence[str],
    inject: Sequence[str] = (),
    paths: Sequence[str] = (),
    strsize: int = 0,
    timestamps: bool = False,
) -> list[str]:
    """``argv`` run under strace, following forks, writing the trace to ``output``.

    ``syscalls``: the calls to record (a name strace does not know on this machine, e.g.
    ``open`` on arm64, is skipped, not an error); ``inject``: strace ``-e inject=...``
    expressions (e.g. ``openat:signal=KILL:when=3``); ``paths``: only calls on these files are
    traced (and counted by ``when``): strace ``-P``. ``strsize``: how many bytes of each data
    string to print (paths are always printed whole). ``timestamps``: each line starts with
    the wall-clock time of the call (``-ttt``: what :attr:`Syscall.time` holds).

    Raises :class:`CrashpointError` if strace cannot run here (check :func:`available` first).
    """
    ok, why = available()
    strace = shutil.which("strace")
    if not ok or strace is None:
        raise CrashpointError(f"cannot run the agent under strace: {why or 'strace not found'}")
    if not syscalls:
        raise InvalidArgument("wrap() needs at least one syscall to trace")
    out = [strace, "-f", "-q", "-y", "-s", str(max(0, int(strsize))), "-o", output]
    if timestamps:
        out.append("-ttt")
    if _probed()[2] and not inject:
        # only the traced calls stop the tracee: much cheaper. Not with inject: strace 6.1
        # then never delivers an injected signal (error injection still works).
        out.append("--seccomp-bpf")
    out += ["-e", "trace=" + ",".join(s if s.startswith("?") else "?" + s for s in syscalls)]
    for p in paths:
        out += ["-P", p]
    for expr in inject:
        out += ["-e", "inject=" + expr]
    return [*out, "--", *argv]


# -- parsing ------------------------------------------------------------------------------------

_PREFIX = re.compile(r"^(?:\[pid\s+(\d+)\]|(\d+))?\s*(?:\d+:\d+:\d+(?:\.\d+)?\s+|(\d+\.\d+)\s+)?")
_CALL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*|\?+)\(")
_RESUMED = re.compile(r"^<\.\.\. ([A-Za-z_][A-Za-z0-9_]*) resumed>\s?")
_EXIT = re.compile(
    r"^\+\+\+ (exited with -?\d+|killed by SIG[A-Z0-9]+(?: \(core dumped\))?|"
    r"superseded by execve in pid \d+) \+\+\+$"
)
_UNFINISHED = " <unfinished ...>"
_RESULT = re.compile(
    r"\s*=\s*(\?|-?\d+|0x[0-9a-fA-F]+)(<[^\n]*?>(?:\(deleted\))?)?"
    r"(?:\s+([A-Z][A-Z0-9_]+)(?=\s|$))?"
)
_DECORATED = re.compile(r"^(-?\d+|AT_FDCWD)<(.*)>(\(deleted\))?$", re.S)
_DIGITS = re.compile(r"\d+")
_NOT_DECORATED: tuple[int | None, str, bool] = (None, "", False)
_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)", re.S)
#: The characters :func:`_split` acts on.
_SPECIAL = re.compile(r'["/<(\[{)\]},]')
#: The rest of a quoted string, to its closing quote (a backslash escapes the next character).
_STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SIMPLE_ESC = {
    b"n": b"\n",
    b"t": b"\t",
    b"r": b"\r",
    b"v": b"\v",
    b"f": b"\f",
    b"a": b"\a",
    b"b": b"\b",
    b"e": b"\x1b",
}

#: calls whose first argument is a path
_PATH0 = frozenset(
    {
        "open",
        "creat",
        "truncate",
        "truncate64",
        "unlink",
        "mkdir",
        "rmdir",
        "chdir",
        "stat",
        "lstat",
        "stat64",
        "lstat64",
        "access",
        "chmod",
        "chown",
        "lchown",
        "utime",
        "utimes",
        "readlink",
        "statfs",
        "statfs64",
        "mknod",
        "execve",
        "chroot",
        "setxattr",
        "lsetxattr",
        "getxattr",
        "lgetxattr",
        "listxattr",
        "llistxattr",
        "removexattr",
        "lremovexattr",
        "acct",
        "swapon",
        "swapoff",
        "uselib",
        "inotify_add_watch",
    }
)
#: calls (dirfd, path, ...)
_AT1 = frozenset(
    {
        "openat",
        "openat2",
        "mkdirat",
        "unlinkat",
        "mknodat",
        "fchownat",
        "futimesat",
        "newfstatat",
        "fstatat64",
        "faccessat",
        "faccessat2",
        "fchmodat",
        "fchmodat2",
        "readlinkat",
        "utimensat",
        "statx",
        "name_to_handle_at",
        "execveat",
        "open_tree",
        "mount_setattr",
    }
)
#: calls (oldpath, newpath)
_TWO = frozenset({"rename", "link"})
#: calls (olddirfd, oldpath, newdirfd, newpath, ...)
_TWO_AT = frozenset({"renameat", "renameat2", "linkat"})
#: calls whose first argument is a descriptor (used when -y did not decorate it)
_FD0 = frozenset(
    {
        "write",
        "pwrite64",
        "writev",
        "pwritev",
        "pwritev2",
        "read",
        "pread64",
        "readv",
        "preadv",
        "preadv2",
        "ftruncate",
        "ftruncate64",
        "fsync",
        "fdatasync",
        "fallocate",
        "sync_file_range",
        "close",
        "fchdir",
        "fstat",
        "fstat64",
        "lseek",
        "_llseek",
        "fcntl",
        "fcntl64",
        "flock",
        "fchmod",
        "fchown",
        "fstatfs",
        "getdents",
        "getdents64",
        "ioctl",
        "syncfs",
        "fadvise64",
        "dup",
        "dup2",
        "dup3",
        "copy_file_range",
        "sendfile",
        "splice",
    }
)
_FORKS = frozenset({"clone", "clone3", "fork", "vfork"})


def decode(quoted: str) -> str:
    """A string as strace printed it (with or without its double quotes, C escapes, octal
    bytes) back to a str (undecodable bytes as surrogates, like :func:`os.fsdecode`)."""
    s = quoted
    if len(s) >= 2 and s[0] == '"':
        end = s.rfind('"')
        s = s[1:end] if end > 0 else s[1:]
    if "\\" not in s and s.isascii():  # most paths: nothing to undo
        return s
    data = s.encode("latin-1", "surrogateescape")
    return os.fsdecode(_ESCAPE.sub(_unescape, data))


def _unescape(m: re.Match[bytes]) -> bytes:
    e = m.group(1)
    if e[:1] == b"x" and len(e) > 1:
        return bytes([int(e[1:], 16)])
    if e[:1].isdigit():
        return bytes([int(e, 8) & 0xFF])
    return _SIMPLE_ESC.get(e, e)


def _split(text: str, start: int) -> tuple[list[str], int]:
    """Split the arguments of a call starting at ``text[start]`` (just after its ``(``).
    Returns (args, index just after the closing ``)``), index -1 if the text ends first."""
    args: list[str] = []
    depth = 0
    cur = start
    i = start
    n = len(text)
    special = _SPECIAL.search
    while i < n:
        m = special(text, i)  # the next character that matters (the rest are copied as is)
        if m is None:
            break
        i = m.start()
        c = text[i]
        if c == '"':
            q = _STRING_REST.match(text, i + 1)  # to its closing quote (escapes skipped)
            i = n if q is None else q.end() - 1
        elif c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 1
        elif (
            c == "<"
            and i + 1 < n
            and text[i + 1] != "<"
            and i > start
            and (text[i - 1].isdigit() or text.endswith("AT_FDCWD", start, i))
        ):
            end = text.find(">", i + 1)  # a literal '>' inside a decoration is escaped
            i = n if end < 0 else end
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                if c == ")":
                    last = text[cur:i].strip()
                    if last or args:
                        args.append(last)
                    return args, i + 1
            else:
                depth -= 1
        elif c == "," and depth == 0:
            args.append(text[cur:i].strip())
            cur = i + 1
        i += 1
    return args, -1


def decoration(arg: str) -> tuple[int | None, str, bool]:
    """(number, decoded path or "", deleted) of a ``-y`` decorated descriptor ``3</a>``;
    (None, "", False) if ``arg`` is not one."""
    m = _DECORATED.match(arg)
    if not m:
        return None, "", False
    num = None if m.group(1) == "AT_FDCWD" else int(m.group(1))
    return num, decode(m.group(2)), bool(m.group(3))


def _normal(path: str) -> str:
    """``os.path.normpath`` of an absolute path; one already normal (no ``//``, no ``/.``
    component start, no trailing ``/``: most paths of a trace) is returned as is."""
    if "//" in path or "/." in path or (path.endswith("/") and path != "/"):
        return os.path.normpath(path)
    return path


def _join(base: str, path: str) -> str:
    if not path:
        return ""
    if path.startswith("/"):
        return _normal(path)
    if not base.startswith("/"):
        return ""
    return _normal(os.path.join(base, path))


def _path_arg(arg: str) -> str | None:
    """The decoded string of a quoted path argument; None for NULL or anything else."""
    if arg.startswith('"'):
        return decode(arg)
    return None


class _Parser:
    def __init__(self, cwd: str) -> None:
        self.cwd0 = cwd
        self.cwd: dict[int, str] = {}
        self.slots: list[Syscall | tuple[int, str, float] | None] = []  # (pid, text, time)
        self.pending: dict[int, int] = {}  # pid -> slot of its unfinished call
        self.exits: dict[int, str] = {}
        self.ended: dict[int, float] = {}
        self.cwd_given = False  # a process's folder was taken from cwd0

    def feed(self, line: str) -> None:
        m = _PREFIX.match(line)
        pid = int(m.group(1) or m.group(2) or 0) if m else 0
        t = float(m.group(3)) if m and m.group(3) else 0.0
        rest = line[m.end() :] if m else line
        if rest.startswith("+++"):
            em = _EXIT.match(rest.strip())
            if em:
                self.exits[pid] = em.group(1)
                if t:
                    self.ended[pid] = t
                self._close_pending(pid)
            return
        if rest.startswith("---"):
            return
        rm = _RESUMED.match(rest)
        if rm:
            slot = self.pending.pop(pid, None)
            entry = self.slots[slot] if slot is not None else None
            if (
                slot is not None
                and isinstance(entry, tuple)
                and entry[1].startswith(rm.group(1) + "(")
            ):
                text = entry[1] + rest[rm.end() :]
                self.slots[slot] = self._call(pid, text, entry[2])
            else:
                if slot is not None:
                    self._finish_slot(slot)
                # the start of this call is not in the trace: keep what is there
                self.slots.append(self._call(pid, rm.group(1) + "(" + rest[rm.end() :], t))
            return
        cm = _CALL.match(rest)
        if not cm:
            return
        if rest.endswith(_UNFINISHED):
            self._close_pending(pid)
            self.pending[pid] = len(self.slots)
            self.slots.append((pid, rest[: -len(_UNFINISHED)], t))
            return
        self._close_pending(pid)
        self.slots.append(self._call(pid, rest, t, cm=cm))

    def _close_pending(self, pid: int) -> None:
        slot = self.pending.pop(pid, None)
        if slot is not None:
            self._finish_slot(slot)

    def _finish_slot(self, slot: int) -> None:
        entry = self.slots[slot]
        if isinstance(entry, tuple):  # never resumed: the process died in it
            self.slots[slot] = self._call(entry[0], entry[1], entry[2], unfinished=True)

    def finish(self) -> list[Syscall]:
        for pid in list(self.pending):
            self._close_pending(pid)
        calls = [s for s in self.slots if isinstance(s, Syscall)]
        return [_renumber(c, i) for i, c in enumerate(calls)]

    def _call(
        self,
        pid: int,
        text: str,
        t: float = 0.0,
        *,
        unfinished: bool = False,
        cm: re.Match[str] | None = None,
    ) -> Syscall | None:
        """``cm``: ``_CALL.match(text)`` if the caller has it already."""
        if cm is None:
            cm = _CALL.match(text)
        if not cm:
            return None
        name = cm.group(1)
        args, end = _split(text, cm.end())
        if end < 0 and not unfinished:
            return None
        result: int | None = None
        errno = ""
        injected = False
        if end >= 0:
            rm = _RESULT.match(text, end)
            if rm is None:
                if not unfinished:
                    return None
            else:
                tok = rm.group(1)
                result = None if tok == "?" else int(tok, 0)
                errno = rm.group(3) or ""
                injected = "(INJECTED)" in text[rm.end() :]
        return self._resolve(pid, name, tuple(args), result, errno, text, injected, t)

    def _cwd(self, pid: int) -> str:
        """The folder a relative path of ``pid`` resolves against (``cwd0`` if the trace has
        not shown it: then :attr:`Trace.cwd_given`)."""
        if pid in self.cwd:
            return self.cwd[pid]
        self.cwd_given = True
        return self.cwd0

    def _path(self, pid: int, given: str) -> str:
        return _join(self._cwd(pid) if given and not given.startswith("/") else "", given)

    def _at(self, pid: int, dirfd: str, dec: tuple[int | None, str, bool], path: str | None) -> str:
        """The absolute path of a (``dirfd``, path) pair: ``dec`` is ``decoration(dirfd)``,
        ``path`` the decoded path argument (``_path_arg``), each computed once by the caller."""
        num, where, _ = dec
        if num is None and where:  # AT_FDCWD</cwd>: learn the cwd
            self.cwd[pid] = where
        if path is None or path == "":
            return where if where.startswith("/") else ""
        if path.startswith("/"):
            return _join("", path)
        if dirfd.startswith("AT_FDCWD") and not where:
            where = self._cwd(pid)
        return _join(where, path)

    def _resolve(
        self,
        pid: int,
        name: str,
        a: tuple[str, ...],
        result: int | None,
        errno: str,
        raw: str,
        injected: bool,
        t: float,
    ) -> Syscall:
        """The call with its paths resolved (one Syscall made per call: each is frozen, and
        making one sets every field)."""
        path = path2 = ""
        given = given2 = ""
        fd = -1
        deleted = False
        dec0 = decoration(a[0]) if a else _NOT_DECORATED
        num, where, gone = dec0
        if num is not None:
            fd = num
        elif a and name in _FD0 and _DIGITS.fullmatch(a[0]):
            fd = int(a[0])
        if name in _AT1 and len(a) >= 2:
            p1 = _path_arg(a[1])
            path, given = self._at(pid, a[0], dec0, p1), p1 or ""
        elif name in _TWO_AT and len(a) >= 4:
            p1, p3 = _path_arg(a[1]), _path_arg(a[3])
            path, given = self._at(pid, a[0], dec0, p1), p1 or ""
            path2, given2 = self._at(pid, a[2], decoration(a[2]), p3), p3 or ""
        elif name == "symlinkat" and len(a) >= 3:
            p2 = _path_arg(a[2])
            path, given = self._at(pid, a[1], decoration(a[1]), p2), p2 or ""
            given2 = _path_arg(a[0]) or ""
            path2 = _join(os.path.dirname(path), given2) if path else ""
        elif name == "symlink" and len(a) >= 2:
            given, given2 = _path_arg(a[1]) or "", _path_arg(a[0]) or ""
            path = self._path(pid, given)
            path2 = _join(os.path.dirname(path), given2) if path else ""
        elif name in _TWO and len(a) >= 2:
            given, given2 = _path_arg(a[0]) or "", _path_arg(a[1]) or ""
            path = self._path(pid, given)
            path2 = self._path(pid, given2)
        elif name in _PATH0 and a:
            given = _path_arg(a[0]) or ""
            path = self._path(pid, given)
        elif num is not None:
            path = where if where.startswith("/") else ""
            deleted = gone
        # what the call teaches about the process's folder
        if result == 0 and name in ("chdir", "fchdir") and path:
            self.cwd[pid] = path
        elif name in _FORKS and result is not None and result > 0 and pid in self.cwd:
            # (a parent whose folder is not known leaves its child's unknown too: cwd0)
            self.cwd.setdefault(result, self.cwd[pid])
        # positional, in the order of Syscall's fields (a fifth cheaper than keywords, one
        # Syscall per line of a trace; test_strace_parse pins every field of a parse)
        return Syscall(
            0,
            pid,
            name,
            a,
            result,
            errno,
            path,
            path2,
            fd,
            raw,
            injected,
            deleted,
            given,
            given2,
            t,
        )


def _renumber(c: Syscall, seq: int) -> Syscall:
    # a call just parsed, referenced nowhere else: numbered in place (dataclasses.replace
    # copies every field, a fifth of the parse)
    object.__setattr__(c, "seq", seq)
    return c


def _feed(p: _Parser, line: str) -> None:
    try:
        p.feed(line.rstrip("\n"))
    except Exception:
        return


def parse_lines(
    lines: Iterable[str], *, cwd: str = "", max_lines: int = 1_000_000, complete: bool = True
) -> Trace:
    """Parse trace lines (without or with their newline). ``cwd``: the folder the traced
    command started in (resolves relative paths of calls that take no dirfd before the trace
    shows the process's folder). ``complete=False``: the last line may be cut short (a live
    file or a killed strace) and is dropped if it has no newline."""
    p = _Parser(cwd)
    truncated = False
    pending_line: str | None = None
    for count, line in enumerate(lines, 1):
        if pending_line is not None:
            _feed(p, pending_line)
        if count > max_lines:
            truncated = True
            pending_line = None
            break
        pending_line = line
    if pending_line is not None:
        if complete or pending_line.endswith("\n"):
            _feed(p, pending_line)
        else:
            truncated = True
    try:
        calls = p.finish()
    except Exception:
        calls = []
    return Trace(
        calls=calls,
        exits=dict(p.exits),
        truncated=truncated,
        ended=dict(p.ended),
        cwd_given=p.cwd_given,
    )


#: Traces up to this size are read whole and their parse kept (see :func:`read`); the parses
#: kept are of at most this many bytes of trace together (the latest one always).
MEMO_BYTES = 32 << 20
#: At most this many parses are kept, the ones read last.
MEMO_TRACES = 4
# the traces read whole last: (cwd, max_lines, their bytes' digest) -> (bytes, the parse)
_MEMO: OrderedDict[tuple[str, int, bytes], tuple[int, Trace]] = OrderedDict()
_MEMO_LOCK = threading.Lock()


def read(output: str, *, cwd: str = "", max_lines: int = 1_000_000) -> Trace:
    """:func:`parse` with the exit status of each process; a missing file is an empty trace.

    A trace read again with the same bytes (a golden run's: once for what it wrote in the
    temp folders, once for what the harness learns from it; a race's two attempts, each read
    for its temp-folder writes and then for its writes under the roots) is parsed once while
    it is among the :data:`MEMO_TRACES` read last: the parse is a function of the bytes,
    ``cwd`` and ``max_lines`` alone, and each caller gets its own lists (the calls
    themselves are frozen)."""
    try:
        with open(output, "rb") as f:
            data = f.read(MEMO_BYTES + 1)
            if len(data) > MEMO_BYTES:  # a big one: streamed, not kept
                f.seek(0)
                text = io.TextIOWrapper(f, encoding="latin-1", newline="\n")
                return parse_lines(text, cwd=cwd, max_lines=max_lines, complete=False)
    except OSError:
        return Trace()
    key = (cwd, max_lines, hashlib.blake2b(data, digest_size=16).digest())
    with _MEMO_LOCK:
        hit = _MEMO.get(key)
        if hit is not None:
            _MEMO.move_to_end(key)
    if hit is None:
        lines = io.StringIO(data.decode("latin-1"), newline="\n")
        hit = (len(data), parse_lines(lines, cwd=cwd, max_lines=max_lines, complete=False))
        with _MEMO_LOCK:
            _MEMO[key] = hit
            _MEMO.move_to_end(key)
            kept = sum(n for n, _t in _MEMO.values())
            while len(_MEMO) > 1 and (len(_MEMO) > MEMO_TRACES or kept > MEMO_BYTES):
                kept -= _MEMO.popitem(last=False)[1][0]
    got = hit[1]
    return dataclasses.replace(
        got, calls=list(got.calls), exits=dict(got.exits), ended=dict(got.ended)
    )


def parse(output: str, *, max_lines: int = 1_000_000, cwd: str = "") -> list[Syscall]:
    """The syscalls of a trace file written by :func:`wrap` (resumed calls merged, signals and
    exit lines left out). A truncated last line is ignored; never raises on odd input.

    A call interrupted by the death of its process has ``result`` None; calls are in the order
    they started (an ``<unfinished ...>`` call takes the place of its first line)."""
    return read(output, cwd=cwd, max_lines=max_lines).calls


def output_of(argv: Sequence[str]) -> str | None:
    """The trace file of an ``argv`` that runs its command under strace (as :func:`wrap`
    makes it, directly or after nsenter), else None."""
    for k, a in enumerate(argv[:40]):
        if os.path.basename(a) != "strace":
            continue
        rest = list(argv[k + 1 :])
        for j, b in enumerate(rest):
            if b == "--":
                return None
            if b == "-o" and j + 1 < len(rest):
                return rest[j + 1]
    return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _all_pids() -> list[int]:
    """The pids in ``/proc`` now."""
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` now."""
    kids = []
    for p in _all_pids():
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                if int(f.read().rpartition(b")")[2].split()[1]) == pid:
                    kids.append(p)
        except (OSError, IndexError, ValueError):
            continue
    return kids


def _traced_by(pid: int, tracer: int) -> bool:
    """Process ``pid`` runs, traced by ``tracer`` (so a pid reused by another process since
    the trace named it is never taken for the agent's)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"TracerPid:"):
                    return int(line.split()[1]) == tracer and _alive(pid)
    except (OSError, ValueError, IndexError):
        pass
    return False


class Detacher:
    """Ends a ``strace -f`` run when its command has exited.

    strace follows every process the command starts and exits only when the last one has:
    a helper the agent leaves running would keep the run (and so its attempt) alive until its
    timeout, and the trial would fail as a hang instead of showing the orphan. Once the
    command (the first process of the trace ``output``) has exited and strace is still
    running, every process strace still traces is killed (while traced: untraced, their
    filtered calls would fail under strace's seccomp filter and they would die before the
    harness's orphan sweep saw them) and strace, with nothing left, ends; if it does not it
    is killed (it blocks SIGTERM while it runs a command with ``-o``). :attr:`exit_code` is
    then the command's own exit status, from its exit line, and :attr:`left` the processes
    it left behind (a helper that re-forks or double-forks is found too): they count as the
    attempt's orphans. A command killed by a signal needs none of this: strace then
    re-raises that signal on itself.
    """

    def __init__(self, strace_pid: int, output: str, interval: float = 0.05) -> None:
        import threading

        self.pid, self.output, self.interval = strace_pid, output, interval
        self.detached = False
        self.exit_code: int | None = None
        self.left: tuple[int, ...] = ()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="crashpoint-strace-detach", daemon=True)
        self._t.start()

    def _main_exited(self, state: dict[str, Any]) -> bool:
        """Read what strace appended; True once the first process's exit line is there."""
        try:
            with open(self.output, "rb") as f:
                f.seek(state["offset"])
                chunk = f.read(1 << 20)
        except OSError:
            return False
        state["offset"] += len(chunk)
        if state["main"] is None:  # strace's own child: the command (it runs, or lines wait)
            kids = _children(self.pid)
            if kids:
                state["main"] = b"%d" % min(kids)
        lines = (state["tail"] + chunk).split(b"\n")
        state["tail"] = lines.pop()
        done = False
        for line in lines:
            pid, _, rest = line.partition(b" ")
            if not pid.isdigit():
                continue
            if state["main"] is None:  # it had ended already: the first to show is it
                state["main"] = pid
            rest = rest.strip()
            stamp, _, after_stamp = rest.partition(b" ")
            if stamp.replace(b".", b"", 1).isdigit():  # -ttt: the time comes first
                rest = after_stamp.strip()
            if rest.startswith((b"+++ exited with", b"+++ killed by")):
                state["pids"].discard(int(pid))
            else:
                state["pids"].add(int(pid))
            if pid == state["main"] and rest.startswith(b"+++ exited with"):
                state["code"] = int(rest.split()[3])
                done = True
        return done

    def _loop(self) -> None:
        state: dict[str, Any] = {
            "offset": 0,
            "tail": b"",
            "main": None,
            "code": None,
            "pids": set(),
        }
        try:
            while not self._stop.wait(self.interval):
                if not self._main_exited(state):
                    continue
                if self._stop.wait(0.2):  # strace ends by itself when nothing is left
                    return
                if not _alive(self.pid):  # it ended by itself
                    return
                self.exit_code = int(state["code"])
                self._end_the_rest(state)
                return
        except (OSError, IndexError, ValueError):
            return

    def _end_the_rest(self, state: dict[str, Any]) -> None:
        """Kill, while strace still traces them, the processes the command left, and count them.

        A helper's calls need not show in the trace at all (``-P`` keeps only the trial's
        paths), and one that re-forks is between pids now and then, so a single look misses
        it; and once strace is gone a helper's next filtered call fails (ENOSYS), so it dies
        before any later sweep can see it. Hence, round after round: every process strace
        traces (``TracerPid`` in ``/proc``, which a forked child has from its first
        instruction; nothing else is ever signalled, so a pid reused by another process is
        safe) is killed, until strace, with nothing left to trace, ends by itself. If it does
        not, strace is killed after a few seconds.
        """
        import signal
        import time

        main = int(state["main"])
        left: set[int] = set()
        deadline = time.monotonic() + 5.0
        idle = 0
        while _alive(self.pid) and time.monotonic() < deadline and idle < 50:
            self._main_exited(state)  # what it traced since
            now = {
                p for p in {*_all_pids(), *state["pids"]} if p != main and _traced_by(p, self.pid)
            }
            for pid in now:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            left |= now
            idle = 0 if now else idle + 1
            time.sleep(0.01)
        if left or _alive(self.pid):
            self.detached = True
            self.left = tuple(sorted(left))
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)

    def exit(self, ex: Exit) -> Exit:
        """``ex`` (the strace process's end) as the command's own, if strace was killed: its
        exit status, and the processes it left as orphans (they outlived it). Call it once
        strace has ended: it waits for this Detacher to finish (strace may have ended because
        the last process it traced was just killed, and the count is not complete before)."""
        self.stop()
        if not self.detached or self.exit_code is None:
            return ex
        return dataclasses.replace(
            ex,
            returncode=self.exit_code,
            signal=None,
            orphans=tuple(sorted({*ex.orphans, *self.left})),
        )

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=15)  # (it kills strace itself after 5 s)
