"""Injected by the crashpoint harness (on PYTHONPATH) into a Python agent not built on crashpoint.

An audit hook sees the agent's file-mutating operations (open for writing, rename/replace,
remove, truncate, mkdir, rmdir, link, symlink) just before they happen. Three uses, by
environment variable:

- ``CRASHPOINT_FILEOP_RECORD=<file>``: append one JSON line per operation,
  ``{"op": "open(w)", "path": "/abs", "path2": "", "pid": 123, "t": 1700000000.5}`` (``t``:
  the wall-clock time; ``"trunc": true`` on an open that replaces the file's content): the
  golden run's file operations, and each resumer's, when strace is unavailable. With
  ``CRASHPOINT_FILEOP_LOCKS=1`` (a resumer's record) it also holds each ``fcntl.flock`` taken
  or tried (``"op": "flock"``), and, ``fcntl.flock`` being wrapped, how each call ended
  (``"op": "flock_done"``, with ``"mode"`` ex/sh/un, ``"ok"`` and ``"errno"``: a refusal
  by a lock another holds is ``EWOULDBLOCK``).
- ``CRASHPOINT_FILEOP_AT=<json {"op", "paths", "n"}>`` with ``CRASHPOINT_FILEOP_LOG=<file>``:
  just before the n-th ``op`` on one of ``paths`` (counted in this process), write a landing
  line to the log and kill this process with SIGKILL.
- ``CRASHPOINT_FILEOP_KILL=N``: SIGKILL just before the N-th operation, whatever its file.

Writes, fsyncs and anything done in C (SQLite) raise no audit event: strace sees those. The
harness's own files are never counted. Another sitecustomize later on sys.path is still
imported. Standard library only, and cheap when no variable is set.
"""

import os
import sys

_N = int(os.environ.get("CRASHPOINT_FILEOP_KILL", "0") or 0)
_RECORD = os.environ.get("CRASHPOINT_FILEOP_RECORD", "")
_AT = os.environ.get("CRASHPOINT_FILEOP_AT", "")
_LOG = os.environ.get("CRASHPOINT_FILEOP_LOG", "")
_LOCKS = _RECORD and os.environ.get("CRASHPOINT_FILEOP_LOCKS", "") == "1"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_OPS = {
    "os.rename": "rename",
    "os.remove": "unlink",
    "os.truncate": "truncate",
    "os.mkdir": "mkdir",
    "os.rmdir": "rmdir",
    "os.link": "link",
    "os.symlink": "symlink",
}
_count = 0
_seen: "dict[tuple[str, str], int]" = {}
_target_op = ""
_target_paths: "frozenset[str]" = frozenset()
_target_n = 0
_own = frozenset(os.path.abspath(p) for p in (_RECORD, _LOG) if p)


def _op(event: str, args: "tuple[object, ...]") -> str:
    """The operation's name ("open(w)", "rename", ...), "" if the event mutates nothing."""
    if event == "open":
        mode = args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 else 0
        if isinstance(mode, str):
            return "open(w)" if any(c in mode for c in "wax+") else ""
        return "open(w)" if isinstance(flags, int) and flags & _WRITE_FLAGS else ""
    return _OPS.get(event, "")


def _truncates(args: "tuple[object, ...]") -> bool:
    """An open that replaces the file's content (mode "w"/"x", O_TRUNC or O_EXCL): a write
    the hook can see (writes into a file opened for append or update it cannot)."""
    mode = args[1] if len(args) > 1 else None
    flags = args[2] if len(args) > 2 else 0
    if isinstance(mode, str):
        return "w" in mode or "x" in mode
    return isinstance(flags, int) and bool(flags & (os.O_TRUNC | os.O_EXCL))


def _abs(p: object, dir_fd: object = None) -> str:
    """``p`` as an absolute path (a descriptor: the file it refers to); "" if unknown."""
    try:
        if isinstance(p, int):
            return os.readlink(f"/proc/self/fd/{p}")
        s = os.fsdecode(os.fspath(p))  # type: ignore[call-overload]
        if not os.path.isabs(s) and isinstance(dir_fd, int):
            s = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), s)
        return os.path.abspath(s)
    except (OSError, TypeError, ValueError):
        return ""


def _paths(event: str, args: "tuple[object, ...]") -> "tuple[str, str]":
    """(the file the operation is about, the second path of a rename/link/symlink)."""

    def at(i: int) -> object:
        return args[i] if len(args) > i else None

    if event in ("os.rename", "os.link"):
        return _abs(at(0), at(2)), _abs(at(1), at(3))
    if event == "os.symlink":  # (target, link, dir_fd): the file created is the link
        target = at(0)
        return _abs(at(1), at(2)), os.fsdecode(target) if isinstance(target, (str, bytes)) else ""
    if event in ("os.remove", "os.rmdir"):
        return _abs(at(0), at(1)), ""
    if event == "os.mkdir":
        return _abs(at(0), at(2)), ""
    return _abs(at(0)), ""


def _append(path: str, line: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line.encode("utf-8", "surrogateescape") + b"\n")
        finally:
            os.close(fd)
    except OSError:
        pass


def _hook(event: str, args: "tuple[object, ...]") -> None:
    global _count
    if event == "fcntl.flock":
        if _LOCKS:
            _flock(args)
        return
    op = _op(event, args)
    if not op:
        return
    if _RECORD or _target_op:
        path, path2 = _paths(event, args)
        if path in _own:  # our own record and log
            return
        if _RECORD:
            import json
            import time

            line = {"op": op, "path": path, "path2": path2, "pid": os.getpid(), "t": time.time()}
            if event == "open" and _truncates(args):
                line["trunc"] = True
            _append(_RECORD, json.dumps(line))
        if op == _target_op and path in _target_paths:
            key = (op, path)
            _seen[key] = k = _seen.get(key, 0) + 1
            if k == _target_n:
                import json

                _append(_LOG, json.dumps({"op": op, "path": path, "n": k, "pid": os.getpid()}))
                _die()
    if _N > 0:
        _count += 1
        if _count == _N:
            _die()


def _flock(args: "tuple[object, ...]") -> None:
    """Record a lock taken (or tried) on a file: ``{"op": "flock", "path", "pid", "t"}``."""
    import fcntl

    fd, how = (*args, None, None)[:2]
    if not _LOCKS or not isinstance(how, int) or not how & (fcntl.LOCK_SH | fcntl.LOCK_EX):
        return
    path = _abs(fd)
    if path and path not in _own:
        import json
        import time

        line = {"op": "flock", "path": path, "pid": os.getpid(), "t": time.time()}
        _append(_RECORD, json.dumps(line))


def _flock_done(fd: object, how: object, errno_name: str) -> None:
    """Record how a ``fcntl.flock`` call ended (after it: the audit event comes before)."""
    import fcntl

    if not isinstance(how, int):
        return
    mode = "un" if how & fcntl.LOCK_UN else "ex" if how & fcntl.LOCK_EX else "sh"
    path = _abs(fd if isinstance(fd, int) else getattr(fd, "fileno", lambda: None)())
    if path and path not in _own:
        import json
        import time

        line = {
            "op": "flock_done",
            "path": path,
            "pid": os.getpid(),
            "t": time.time(),
            "mode": mode,
            "ok": not errno_name,
            "errno": errno_name,
        }
        _append(_RECORD, json.dumps(line))


def _wrap_flock() -> None:
    """Wrap ``fcntl.flock`` so that how each call ended is recorded (:func:`_flock_done`)."""
    import errno
    import fcntl

    real = fcntl.flock

    def flock(fd: object, operation: int) -> None:
        try:
            real(fd, operation)  # type: ignore[arg-type]
        except OSError as e:
            _flock_done(fd, operation, errno.errorcode.get(e.errno or 0, "") or "EIO")
            raise
        _flock_done(fd, operation, "")

    flock.__doc__ = real.__doc__
    fcntl.flock = flock


def _die() -> None:
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def _arm() -> None:
    global _target_op, _target_paths, _target_n
    import json

    try:
        at = json.loads(_AT)
        _target_op = str(at["op"])
        _target_paths = frozenset(os.path.abspath(str(p)) for p in at["paths"])
        _target_n = int(at["n"])
    except (ValueError, KeyError, TypeError) as e:
        sys.stderr.write(f"crashpoint: ignoring a malformed CRASHPOINT_FILEOP_AT ({e})\n")
        _target_op = ""


if _AT:
    _arm()
if _RECORD:
    _append(_RECORD, "")  # an empty line: the record exists, so this hook ran (blank lines skipped)
if _N > 0 or _RECORD or _target_op:
    sys.addaudithook(_hook)
if _LOCKS:
    _wrap_flock()

# chain to a sitecustomize further along sys.path, if the agent has one
_here = os.path.dirname(os.path.abspath(__file__))
for _p in sys.path:
    if _p and os.path.abspath(_p) != _here and os.path.isfile(os.path.join(_p, "sitecustomize.py")):
        import importlib.util as _u

        _spec = _u.spec_from_file_location(
            "_crashpoint_chained_sitecustomize", os.path.join(_p, "sitecustomize.py")
        )
        if _spec and _spec.loader:
            _spec.loader.exec_module(_u.module_from_spec(_spec))
        break
