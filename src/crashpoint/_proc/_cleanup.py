"""Clean interruption: what the harness has running, torn down on a signal or reaped later.

Three parts, all process-wide:

- **The registry** (:data:`LIVE`): every resource the harness holds outside its report folder
  while it runs: each running attempt's reap token (:data:`~crashpoint._proc._process.REAP_VAR`,
  which every process of the attempt inherits), each tmpfs namespace's holder process (pid and
  start time), and each temporary folder (``cp-ledger-*``, ``cp-side-*``, ``cp-probe-*``).
  :func:`cleanup_all` kills and removes all of it. The registry is mirrored in a small file,
  ``<tmp>/crashpoint-<uid>/live/<pid>.json`` (folder 0700, ours, never a symlink), rewritten on
  each change (in place, padded with blanks: it never shrinks).
- **The reaper** (:func:`reap_stale`): a harness killed with SIGKILL runs no clean-up, but its
  file stays. The next run (``crashpoint run``, a pytest session with the plugin) reads the files
  whose harness is dead (pid gone, or reused: start time differs) and kills the processes marked
  with its tokens, the holders that are still the same process, and removes its folders (only
  folders whose names carry our prefixes, directly inside the temporary folder or one of
  :data:`SHORT_TEMP_ROOTS`, owned by us, not symlinks: nothing else is ever deleted).
- **Socket folders** (:func:`socket_folder`): a Unix socket's path must fit the kernel's
  ``sun_path`` (:data:`SOCKET_PATH_MAX` bytes); under a long ``TMPDIR`` (pytest's basetemp
  under xdist) the folder is made in a short system folder instead.
- **Signals** (:func:`install_signal_handlers`): SIGINT and SIGTERM raise :class:`Interrupted`
  (a ``KeyboardInterrupt``) in the main thread, so the ``finally`` blocks of the trial, the
  campaign and pytest run as for Ctrl-C; :func:`received` says which signal came (exit status
  128 + signal: 130, 143). :class:`shielded` defers a signal while a resource is being acquired
  and registered, or torn down, so it is never half-registered or half-removed.

Imports only the standard library at module level (the pytest plugin imports it in its hooks);
psutil and the process helpers are imported when processes are killed.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

from crashpoint.errors import Interrupted

__all__ = [
    "FOLDER_PREFIXES",
    "LIVE",
    "SHORT_TEMP_ROOTS",
    "SOCKET_PATH_MAX",
    "Interrupted",
    "Reaped",
    "Registry",
    "cleanup_all",
    "exit_status",
    "install_signal_handlers",
    "kill_marked",
    "live_dir",
    "reap_stale",
    "received",
    "shielded",
    "signal_name",
    "socket_folder",
]

#: Prefixes of the temporary folders the harness makes with ``tempfile.mkdtemp``.
FOLDER_PREFIXES = ("cp-ledger-", "cp-side-", "cp-probe-")
#: The exact names ``mkdtemp(prefix=...)`` gives them: nothing else is ever removed.
_FOLDER_NAME = re.compile(r"cp-(?:ledger|side|probe)-[a-z0-9_]{8}")
_TOKEN = re.compile(r"[0-9a-f]{32}")
_ENTRY = re.compile(r"([0-9]{1,10})\.json")
_MAX_ENTRY = 1 << 20  # a registry file is a few hundred bytes; refuse to read a huge one
#: The longest path a Unix socket can be bound at: ``sun_path`` holds 108 bytes with its NUL.
SOCKET_PATH_MAX = 107
#: Short system folders a socket's folder falls back to when the temporary folder's path is
#: too long for the socket (the reaper removes a dead harness's folders there too).
SHORT_TEMP_ROOTS = ("/tmp", "/dev/shm")


# -- signals ------------------------------------------------------------------------------------


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15: a signal's name for messages (``signal N`` for one without a name)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class _SignalState:
    def __init__(self) -> None:
        self.depth = 0  # nested installs (a pytester session inside a session)
        self.received: int | None = None  # the first signal of the outermost install
        self.pending: int | None = None  # a signal deferred by a shield
        self.shield = 0
        self.raised_at = -1.0  # time.monotonic() of the last Interrupted raised


_SIGNALS = _SignalState()
_HANDLED = (signal.SIGINT, signal.SIGTERM)
#: The same signal again within this many seconds is one request delivered twice (Ctrl-C
#: reaches a whole process group, and an xdist controller forwards it to its workers too).
_REPEAT = 1.0


def _handler(signum: int, frame: FrameType | None) -> None:
    now = time.monotonic()
    if _SIGNALS.received is None:
        _SIGNALS.received = signum
    elif signum == _SIGNALS.received and now - _SIGNALS.raised_at < _REPEAT:
        return
    if _SIGNALS.shield > 0:
        _SIGNALS.pending = _SIGNALS.pending or signum
        return
    _SIGNALS.raised_at = now
    raise Interrupted(signum)


def install_signal_handlers() -> Callable[[], None]:
    """Make SIGINT and SIGTERM raise :class:`Interrupted`; return the function that puts the
    previous handlers back. Only from the main thread (elsewhere: does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {s: signal.getsignal(s) for s in _HANDLED}
    if _SIGNALS.depth == 0:
        _SIGNALS.received = _SIGNALS.pending = None
    _SIGNALS.depth += 1
    for s in _HANDLED:
        signal.signal(s, _handler)
    done = [False]

    def restore() -> None:
        if done[0]:
            return
        done[0] = True
        _SIGNALS.depth -= 1
        for s, h in previous.items():
            with contextlib.suppress(TypeError, ValueError):
                signal.signal(s, h if h is not None else signal.SIG_DFL)

    return restore


def received() -> int | None:
    """The first SIGINT/SIGTERM that reached the handlers since they were installed."""
    return _SIGNALS.received


def exit_status(default: int) -> int:
    """128 + the signal received (130 SIGINT, 143 SIGTERM), else ``default``."""
    return 128 + _SIGNALS.received if _SIGNALS.received is not None else default


class shielded:  # a context manager used like a function: ``with shielded():``
    """Defer SIGINT/SIGTERM (as handled here) until the block ends: acquire-and-register and
    tear-down run whole. If the block ends normally, the deferred signal is raised then; if it
    ends with an exception, that exception goes on (an :class:`Interrupted` replaces anything
    but a ``KeyboardInterrupt``). Only the main thread is shielded (signals run there)."""

    def __enter__(self) -> None:
        self._main = threading.current_thread() is threading.main_thread()
        if self._main:
            _SIGNALS.shield += 1

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._main:
            return
        _SIGNALS.shield -= 1
        if _SIGNALS.shield or _SIGNALS.pending is None:
            return
        sig, _SIGNALS.pending = _SIGNALS.pending, None
        if et is None or not issubclass(et, KeyboardInterrupt):
            _SIGNALS.raised_at = time.monotonic()
            raise Interrupted(sig) from ev


# -- the registry -------------------------------------------------------------------------------


def live_dir(tmpdir: str | None = None, *, create: bool = False) -> str | None:
    """``<tmp>/crashpoint-<uid>/live``, if it is a real folder of ours that only we can use
    (made 0700 with ``create``); None otherwise (nothing is then read or written there)."""
    base = os.path.join(tmpdir or tempfile.gettempdir(), f"crashpoint-{os.getuid()}")
    path = os.path.join(base, "live")
    for folder in (base, path):
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o700)
        try:
            st = os.lstat(folder)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
    return path


@dataclass
class Reaped:
    """What a clean-up or a reaper pass removed."""

    harnesses: int = 0
    processes: int = 0
    folders: int = 0

    def __bool__(self) -> bool:
        return bool(self.processes or self.folders)

    def describe(self) -> str:
        return f"{self.processes} process(es) killed, {self.folders} temporary folder(s) removed"


class Registry:
    """The live resources of this harness process (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a fork starts with nothing of ours

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.tokens: set[str] = set()
        self.holders: dict[int, float] = {}
        self.folders: set[str] = set()
        self._file: str | None = None
        self._file_tried = False
        self._at_exit = False
        self._create_time: float | None = None
        self._size = 0  # bytes of the mirror file (0: none yet, or to be truncated)

    # -- adding and dropping ------------------------------------------------------------------

    def add_token(self, token: str) -> None:
        """A running attempt's reap token (before the attempt starts)."""
        with self._lock:
            self.tokens.add(token)
            self._save()

    def drop_token(self, token: str) -> None:
        with self._lock:
            if token in self.tokens:
                self.tokens.discard(token)
                self._save()

    def add_holder(self, pid: int) -> None:
        """A helper process of ours (a tmpfs namespace's holder) to kill if we are stopped."""
        ct = _create_time(pid)
        with self._lock:
            self.holders[pid] = ct if ct is not None else 0.0
            self._save()

    def drop_holder(self, pid: int) -> None:
        with self._lock:
            if self.holders.pop(pid, None) is not None:
                self._save()

    def add_folder(self, path: str) -> None:
        """A temporary folder of ours (one of :data:`FOLDER_PREFIXES`)."""
        with self._lock:
            self.folders.add(os.path.abspath(path))
            self._save()

    def drop_folder(self, path: str) -> None:
        with self._lock:
            p = os.path.abspath(path)
            if p in self.folders:
                self.folders.discard(p)
                self._save()

    def __bool__(self) -> bool:
        return bool(self.tokens or self.holders or self.folders)

    # -- tearing down -------------------------------------------------------------------------

    def cleanup(self) -> Reaped:
        """Kill every registered process, remove every registered folder; forget them all."""
        with shielded(), self._lock:
            out = Reaped()
            if os.getpid() != self.pid:
                self._reset()
                return out
            out.processes = _kill(self.tokens, list(self.holders.items()))
            for folder in sorted(self.folders):
                if os.path.lexists(folder):
                    out.folders += _remove_folder(folder, os.path.dirname(folder))
            self.tokens.clear()
            self.holders.clear()
            self.folders.clear()
            self._save()
            return out

    # -- the mirror file ----------------------------------------------------------------------

    def _save(self) -> None:
        """Rewrite ``live/<pid>.json`` (or remove it once nothing is registered)."""
        if os.getpid() != self.pid:
            self._reset()
        if not self._at_exit:
            self._at_exit = True
            atexit.register(self._exit)
        if not self and self._file is None:
            return
        if self._file is None:
            if self._file_tried:
                return
            self._file_tried = True
            folder = live_dir(create=True)
            if folder is None:
                return  # not ours or not private: keep the registry in memory only
            self._file = os.path.join(folder, f"{self.pid}.json")
        if not self:
            with contextlib.suppress(OSError):
                os.unlink(self._file)
            self._size = 0
            return
        if self._create_time is None:
            self._create_time = _create_time(self.pid)
        data = {
            "pid": self.pid,
            "create_time": self._create_time,
            "tmpdir": tempfile.gettempdir(),
            "tokens": sorted(self.tokens),
            "holders": sorted(self.holders.items()),
            "folders": sorted(self.folders),
        }
        # Rewritten in place, padded with blanks to the longest text so far (valid JSON; the
        # file never shrinks, so it is never truncated): a write of a few hundred bytes is
        # whole by the time any other process can read it (only once this one is dead: a
        # SIGKILL ends it between system calls). A temp file renamed over the entry costs
        # milliseconds on ext4 (a rename over a file flushes the new one) at every attempt.
        text = json.dumps(data).encode()
        text += b" " * (self._size - len(text))
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self._file, flags | (0 if self._size else os.O_TRUNC), 0o600)
        except OSError:
            return
        try:
            done = 0
            while done < len(text):
                done += os.pwrite(fd, text[done:], done)
            self._size = len(text)
        except OSError:
            self._size = 0  # truncated afresh next time
        finally:
            os.close(fd)

    def _exit(self) -> None:
        if os.getpid() == self.pid and self:
            with contextlib.suppress(Exception):
                self.cleanup()


#: The registry of this process.
LIVE = Registry()


def cleanup_all() -> Reaped:
    """Tear down everything this process still has registered (see :class:`Registry`)."""
    return LIVE.cleanup()


def socket_folder(prefix: str, leaf: str) -> str:
    """Make a private folder (``mkdtemp``: mode 0700, named ``<prefix>XXXXXXXX``) for a Unix
    socket named ``leaf`` and return it: in the temporary folder where ``<folder>/<leaf>`` fits
    :data:`SOCKET_PATH_MAX`, else in the first of :data:`SHORT_TEMP_ROOTS` where it fits and
    can be made. The caller registers it (:meth:`Registry.add_folder`) and removes it.

    Raises ``OSError(ENAMETOOLONG)`` with a one-line message (the path, its length, how to fix
    it) where no folder can be had."""
    tmp = tempfile.gettempdir()
    name = prefix + "x" * 8  # what mkdtemp gives: the prefix and 8 characters

    def length(root: str) -> int:
        return len(os.fsencode(os.path.join(root, name, leaf)))

    if length(tmp) <= SOCKET_PATH_MAX:
        return tempfile.mkdtemp(prefix=prefix)
    tried = []
    for root in SHORT_TEMP_ROOTS:
        if length(root) > SOCKET_PATH_MAX:
            tried.append(f"{root}: too long")
            continue
        try:
            return tempfile.mkdtemp(prefix=prefix, dir=root)
        except OSError as exc:
            tried.append(f"{root}: {exc.strerror or exc}")
    path = os.path.join(tmp, name, leaf)
    raise OSError(
        errno.ENAMETOOLONG,
        f"the Unix socket path {path} is {length(tmp)} bytes, over the {SOCKET_PATH_MAX} the "
        f"kernel allows, and no short folder could be made instead ({'; '.join(tried)}): "
        "set TMPDIR to a shorter folder (e.g. TMPDIR=/tmp)",
        path,
    )


# -- killing and removing -----------------------------------------------------------------------


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def kill_marked(tokens: Iterable[str]) -> int:
    """Kill every live process marked with one of ``tokens``; return how many."""
    return _kill(tokens, ())


def _kill(tokens: Iterable[str], holders: Iterable[tuple[int, float]]) -> int:
    """SIGKILL (then SIGCONT: a stopped process is then reaped at once by its parent) every
    live process marked with one of ``tokens`` and every holder that is still the same process
    (same start time); wait for them; return how many were killed."""
    # psutil and the process helpers only when something is left to kill: the plugin installs
    # this module's signal handlers in every session, most of which kill nothing
    import psutil

    from crashpoint._proc._process import _wait_dead, marked

    procs: dict[int, psutil.Process] = {}
    for token in tokens:
        for p in marked(token):
            procs.setdefault(p.pid, p)
    for pid, ct in holders:
        try:
            p = psutil.Process(pid)
            if ct and abs(p.create_time() - ct) > 0.01:
                continue  # the pid was reused: not ours
            procs.setdefault(pid, p)
            for c in p.children(recursive=True):
                procs.setdefault(c.pid, c)
        except psutil.Error:
            continue
    for sig in (signal.SIGKILL, signal.SIGCONT):
        for p in procs.values():
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
    _wait_dead(procs.values(), 5.0)  # a zombie counts as dead: its parent reaps it
    return len(procs)


def _remove_folder(path: str, *parents: str) -> int:
    """Remove ``path`` if it is one of our temporary folders directly inside one of
    ``parents``: a name of :data:`FOLDER_PREFIXES` as ``mkdtemp`` makes it, a real folder (not
    a symlink), owned by us. Return 1 if removed."""
    parent, name = os.path.split(os.path.normpath(path))
    allowed = {os.path.normpath(p) for p in parents}
    if os.path.normpath(parent) not in allowed or not _FOLDER_NAME.fullmatch(name):
        return 0
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return 0
    # rmtree removes symlinks inside, never their targets (fd-based on Linux)
    shutil.rmtree(path, ignore_errors=True)
    return 0 if os.path.lexists(path) else 1


def reap_stale(tmpdir: str | None = None) -> Reaped:
    """Reap what harnesses that died without cleaning up (SIGKILL, OOM) left: see the module
    docstring. Entries of live harnesses (this one included) are left alone."""
    tmp = tmpdir or tempfile.gettempdir()
    out = Reaped()
    folder = live_dir(tmp)
    if folder is None:
        return out
    try:
        names = sorted(n for n in os.listdir(folder) if _ENTRY.fullmatch(n))
    except OSError:
        return out
    for name in names:
        pid = int(_ENTRY.fullmatch(name).group(1))  # type: ignore[union-attr]
        if pid == os.getpid():
            continue
        path = os.path.join(folder, name)
        data = _read_entry(path)
        if data is None or _alive(pid, data.get("create_time")):
            continue
        claimed = f"{path}.reaping-{os.getpid()}"
        try:
            os.rename(path, claimed)  # one reaper per entry, even with several runs starting
        except OSError:
            continue
        tokens = [
            t
            for t in data.get("tokens", [])
            if isinstance(t, str) and _TOKEN.fullmatch(t) and t != "0" * 32
        ]
        holders = [
            (int(h[0]), float(h[1]))
            for h in data.get("holders", [])
            if isinstance(h, list)
            and len(h) == 2
            and isinstance(h[0], int)
            and isinstance(h[1], (int, float))
            and h[1] > 0
        ]
        out.harnesses += 1
        out.processes += _kill(tokens, holders)
        for f in data.get("folders", []):
            if isinstance(f, str):
                out.folders += _remove_folder(f, tmp, *SHORT_TEMP_ROOTS)
        with contextlib.suppress(OSError):
            os.unlink(claimed)
    return out


def _read_entry(path: str) -> dict[str, Any] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            raw = f.read(_MAX_ENTRY + 1)
    except OSError:
        return None
    if len(raw) > _MAX_ENTRY:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _alive(pid: int, create_time: Any) -> bool:
    ct = _create_time(pid)
    if ct is None:
        return False
    if not isinstance(create_time, (int, float)):
        return True  # cannot tell: leave it
    return abs(ct - float(create_time)) <= 0.01
