"""Named failpoints compiled into the reference library, armed by ``CRASHPOINT_FAILPOINTS``.

The harness arms them in a child's environment to crash or fail the library at exact places
that no outside observer can reach (between a write and its fdatasync, between a temp write and
its rename, ...). Unarmed, a failpoint costs one dict lookup.

Armed only inside the harness: the environment is read at a failpoint's first use (never at
import), and only a process that also carries the harness's per-attempt token
(``CRASHPOINT_REAP_TOKEN``, 32 hex digits, set in every attempt) is armed. A value leaked into
a production process or a developer's shell does nothing there, and a malformed one cannot
break ``import crashpoint`` (or pytest, which loads the plugin): inside an attempt it is a
:class:`FailpointSpecError` at the first failpoint reached, naming the variable; elsewhere it is
ignored. :func:`reload` with an explicit spec arms this process whatever its environment (the
tests and the fork-mode zygote's children use it).

Syntax: ``NAME=ACTION[@N][;NAME=ACTION[@N]...]``; the action fires on the N-th hit (default 1)
of that failpoint in this process, once.

When ``CRASHPOINT_FAILPOINTS_LOG`` names a file, a failpoint that fires first appends one line
to it (``NAME ACTION N PID``, then its path if it has one): the harness's evidence that the
fault was hit.

Actions: ``kill`` (SIGKILL self), ``exit`` / ``exit(CODE)`` (``os._exit``), ``enospc``,
``eio``, ``efbig`` (raise that ``OSError``), ``abort`` (SIGABRT self).

Failpoints in the library:

=============================  ===========================================================
``journal.write``              before a journal record is written (ENOSPC/EIO go here)
``journal.after_write``        after a record's bytes are written, before its fdatasync
``journal.after_sync``         after the fdatasync, before ``append`` returns
``atomic.after_temp``          after a temp file is written and synced, before the rename
``atomic.after_rename``        after ``os.replace``, before the folder is fsynced
``effect.after_call``          after an effect's function returned, before its result record
``step.after_complete``        after a step's record is durable, before the probe is told
=============================  ===========================================================
"""

from __future__ import annotations

import errno
import os
import re

from crashpoint.errors import FailpointSpecError

__all__ = [
    "ENV",
    "FAILPOINTS",
    "LOG_ENV",
    "TOKEN_ENV",
    "FailpointSpecError",
    "armed_here",
    "failpoint",
    "parse",
    "reload",
]

ENV = "CRASHPOINT_FAILPOINTS"
LOG_ENV = "CRASHPOINT_FAILPOINTS_LOG"
#: The harness's per-attempt token (``crashpoint._proc._process.REAP_VAR``; the library does
#: not import the harness): failpoints in the environment are armed only where it is set.
TOKEN_ENV = "CRASHPOINT_REAP_TOKEN"  # noqa: S105 (a variable name, not a secret)
# patterns, compiled on first use (by re's cache): the store imports this module in every
# lifecycle command, where no failpoint is ever armed
_TOKEN_PATTERN = r"[0-9a-f]{32}"  # noqa: S105 (a pattern, not a secret)

FAILPOINTS = (
    "journal.write",
    "journal.after_write",
    "journal.after_sync",
    "atomic.after_temp",
    "atomic.after_rename",
    "effect.after_call",
    "step.after_complete",
)

_ACTION = r"(kill|abort|enospc|eio|efbig|exit(?:\((\d{1,3})\))?)"
_ERRNOS = {"enospc": errno.ENOSPC, "eio": errno.EIO, "efbig": errno.EFBIG}


_armed: dict[str, tuple[str, int]] | None = None  # None: the environment not read yet
_pending: FailpointSpecError | None = None  # a malformed spec, raised at first use
_hits: dict[str, int] = {}


def parse(spec: str) -> dict[str, tuple[str, int]]:
    """Parse a failpoint spec into ``{name: (action, nth)}``; raise on anything unknown."""
    out: dict[str, tuple[str, int]] = {}
    for raw in spec.split(";"):
        item = raw.strip()
        if not item:
            continue
        name, sep, rest = item.partition("=")
        name = name.strip()
        if not sep or name not in FAILPOINTS:
            raise FailpointSpecError(
                f"{ENV}: {item!r} is not NAME=ACTION[@N]; known names: {', '.join(FAILPOINTS)}"
            )
        action, _, nth_s = rest.strip().partition("@")
        if not re.fullmatch(_ACTION, action):
            raise FailpointSpecError(
                f"{ENV}: unknown action {action!r} for {name}; use kill, abort, exit, exit(CODE), "
                "enospc, eio or efbig"
            )
        try:
            nth = int(nth_s) if nth_s else 1
        except ValueError:
            nth = 0
        if nth < 1:
            raise FailpointSpecError(f"{ENV}: {item!r}: the count after @ must be an integer >= 1")
        out[name] = (action, nth)
    return out


def armed_here(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """Whether failpoints in the environment apply to this process: it runs inside a harness
    attempt (it carries the attempt's token)."""
    env = os.environ if environ is None else environ
    return bool(re.fullmatch(_TOKEN_PATTERN, env.get(TOKEN_ENV, "")))


def reload(spec: str | None = None) -> None:
    """Re-arm and reset the hit counters (used after fork). With ``spec``, arm that (raising
    :class:`FailpointSpecError` if it does not parse); without, the environment is read again
    at the next failpoint (lazily: see the module's doc)."""
    global _armed, _pending
    _hits.clear()
    _pending = None
    _armed = None if spec is None else parse(spec)


def _from_environment() -> dict[str, tuple[str, int]]:
    global _armed, _pending
    spec = os.environ.get(ENV, "")
    _armed = {}
    if spec.strip() and armed_here():
        try:
            _armed = parse(spec)
        except FailpointSpecError as exc:
            _pending = exc
    return _armed


def failpoint(name: str, path: str = "") -> None:
    """Fire the action armed for ``name`` if this is its N-th hit; otherwise do nothing.

    Raises :class:`FailpointSpecError` if the harness armed a spec that does not parse."""
    armed = _from_environment() if _armed is None else _armed
    if _pending is not None:
        raise _pending
    if not armed:
        return
    plan = armed.get(name)
    if plan is None:
        return
    n = _hits.get(name, 0) + 1
    _hits[name] = n
    action, nth = plan
    if n != nth:
        return
    _log(f"{name} {action} {nth} {os.getpid()} {path}".rstrip())
    if action in ("kill", "abort"):
        import signal  # only when a failpoint fires: the store imports this module

        os.kill(os.getpid(), signal.SIGKILL if action == "kill" else signal.SIGABRT)
    elif action.startswith("exit"):
        m = re.fullmatch(_ACTION, action)
        code = int(m.group(2)) if m and m.group(2) else 70
        os._exit(code)
    else:
        err = _ERRNOS[action]
        raise OSError(err, f"{os.strerror(err)} (failpoint {name})", path or None)


def _log(line: str) -> None:
    """Append ``line`` to the hit log, if there is one (never fails the caller)."""
    where = os.environ.get(LOG_ENV)
    if not where:
        return
    try:
        fd = os.open(where, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, (line.replace("\n", " ") + "\n").encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass
