"""Containment of an attempt's processes: a cgroup v2 per attempt where the machine allows.

Every process an attempt starts is in the attempt's cgroup, whatever it does to its session, its
process group or its environment (``setsid``, a double fork, ``env -i``, a helper that keeps
re-forking to new pids): a process cannot leave its cgroup without writing to another cgroup's
``cgroup.procs`` (root, on purpose). At the end of the attempt the cgroup's members are its
orphans, and one write to ``cgroup.kill`` (Linux 5.14+) SIGKILLs all of them at once, forks in
flight included. The agent's own view does not change: same pids, same session and group, same
``/proc``, exit status and signals as without a cgroup.

Layout: ``<the harness's own cgroup>/crashpoint-<pid ns>-<harness pid>-<hex>/a-<n>-<hex>``. A
watcher process per harness process (started with the first attempt, detached from the harness
so it is nobody's child) waits for the harness to end; when it does, however it does (SIGKILL
included), the watcher kills and removes the harness's cgroups. A later harness also removes
the folders of harnesses that are gone (:func:`reap_stale`).

Where no cgroup v2 can be used (no cgroup2 mount, not root and no delegation, a read-only
cgroupfs, a kernel without ``cgroup.kill``) or ``CRASHPOINT_CONTAINMENT=session``, attempts fall
back to the session + reap-token reaper (:mod:`crashpoint._proc._process`);
:func:`containment` says which and why.

This module is stdlib-only: it also runs as the watcher, ``python -I -S _cgroup.py --watch
FOLDER``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

__all__ = [
    "CONTAINMENT_VAR",
    "AttemptCgroup",
    "Containment",
    "attempt_cgroup",
    "containment",
    "reap_stale",
]

#: ``session`` forces the fallback reaper; ``auto`` (or unset) uses a cgroup where possible;
#: ``cgroup`` insists on one (an attempt fails to start with the reason where it cannot).
CONTAINMENT_VAR = "CRASHPOINT_CONTAINMENT"
CGROUP, SESSION = "cgroup", "session"
_PREFIX = "crashpoint-"


@dataclass(frozen=True, slots=True)
class Containment:
    """How attempts are contained on this machine: ``mechanism`` is ``cgroup`` or ``session``;
    ``reason`` says why not ``cgroup``; ``root`` is the cgroup folder attempts' cgroups go
    under."""

    mechanism: str
    reason: str = ""
    root: str = ""

    def describe(self) -> str:
        if self.mechanism == CGROUP:
            return f"one cgroup v2 per attempt under {self.root} (cgroup.kill at its end)"
        return f"session + reap token (no cgroup: {self.reason})"


class _Unusable(Exception):
    """Why a cgroup v2 cannot be used here."""


def _cgroup2_mount() -> tuple[str, str]:
    """(mount point, root of the hierarchy mounted there) of the first cgroup2 mount."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    fields = left.split()
                    return _unescape(fields[4]), _unescape(fields[3])
    except OSError as exc:
        raise _Unusable(f"cannot read /proc/self/mountinfo: {exc.strerror}") from None
    raise _Unusable("no cgroup v2 hierarchy is mounted (cgroup v1 only)")


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are octal escapes."""
    return (
        field.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def _own_cgroup() -> str:
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].rstrip("\n")
    except OSError as exc:
        raise _Unusable(f"cannot read /proc/self/cgroup: {exc.strerror}") from None
    raise _Unusable("this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)")


def _base() -> str:
    """The folder of this process's own cgroup v2."""
    mount, mroot = _cgroup2_mount()
    own = _own_cgroup()
    if own.endswith(" (deleted)") or "/.." in own or own.startswith(".."):
        raise _Unusable(f"this process's cgroup {own!r} is outside the cgroup v2 mount")
    if mroot != "/":
        if own != mroot and not own.startswith(mroot.rstrip("/") + "/"):
            raise _Unusable(
                f"this process's cgroup {own!r} is not under the cgroup v2 mount "
                f"{mount} (which shows {mroot})"
            )
        own = own[len(mroot.rstrip("/")) :]
    base = os.path.normpath(os.path.join(mount, own.lstrip("/")))
    if not os.path.isfile(os.path.join(base, "cgroup.procs")):
        raise _Unusable(f"{base} is not a cgroup folder")
    return base


@functools.lru_cache(maxsize=1)
def containment() -> Containment:
    """Probe once what this machine allows (about 15 ms: one throwaway child joins a cgroup)."""
    forced = os.environ.get(CONTAINMENT_VAR, "").strip().lower()
    if forced == SESSION:
        return Containment(SESSION, f"{CONTAINMENT_VAR}=session")
    if forced not in ("", "auto", CGROUP):
        # here, not at the top: this module also runs as its own watcher, ``python -I -S
        # _cgroup.py``, where nothing but the standard library can be imported
        from crashpoint.errors import InvalidArgument

        raise InvalidArgument(f"{CONTAINMENT_VAR}={forced!r}: use auto, cgroup or session")
    try:
        base = _base()
        _probe(base)
    except _Unusable as exc:
        if forced == CGROUP:
            raise OSError(f"{CONTAINMENT_VAR}=cgroup, but {exc}") from None
        return Containment(SESSION, str(exc))
    with contextlib.suppress(OSError):
        reap_stale(base)
    return Containment(CGROUP, "", base)


def _probe(base: str) -> None:
    folder = os.path.join(base, f"{_PREFIX}probe-{_owner_name()}")
    try:
        os.mkdir(folder)
    except OSError as exc:
        raise _Unusable(
            f"cannot create a cgroup under {base}: {exc.strerror} (needs root, or "
            "a cgroup delegated to this user)"
        ) from None
    try:
        if not os.path.exists(os.path.join(folder, "cgroup.kill")):
            raise _Unusable("this kernel has no cgroup.kill (needs Linux 5.14+)")
        code = "import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY); os.write(fd, b'0')"
        try:
            r = subprocess.run(
                [sys.executable, "-I", "-S", "-c", code, os.path.join(folder, "cgroup.procs")],
                env={},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise _Unusable(f"cannot start a probe process: {exc}") from None
        if r.returncode != 0:
            last = (r.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
            raise _Unusable(f"a process cannot join a cgroup under {base}: {last[:200]}")
    finally:
        _remove(folder, 5.0)


# -- one attempt ---------------------------------------------------------------------------------


class AttemptCgroup:
    """The cgroup of one attempt; made by :func:`attempt_cgroup`, ended by :meth:`close`."""

    def __init__(self, folder: str) -> None:
        os.mkdir(folder, 0o755)
        self.folder = folder
        self.procs = os.path.join(folder, "cgroup.procs")

    def pids(self) -> list[int]:
        """Live members (a zombie is no member), in sub-cgroups the agent made too."""
        out: list[int] = []
        for dirpath, _dirs, _files in os.walk(self.folder):
            with (
                contextlib.suppress(OSError),
                open(os.path.join(dirpath, "cgroup.procs"), "rb") as f,
            ):
                out.extend(int(x) for x in f.read().split())
        return sorted(set(out))

    def leftovers(self, settle: float = 0.5) -> tuple[int, ...]:
        """Members still alive after those already dying have had ``settle`` seconds."""
        deadline = time.monotonic() + settle
        pids = self.pids()
        while pids and time.monotonic() < deadline:
            time.sleep(0.005)
            pids = self.pids()
        return tuple(pids)

    def kill(self) -> None:
        """SIGKILL every member (and every member of its sub-cgroups) at once."""
        _kill(self.folder)

    def close(self, timeout: float = 5.0) -> list[int]:
        """Kill every member, wait until they are gone, remove the cgroup; return the pids
        still there after ``timeout`` (then the cgroup stays, for the watcher)."""
        return _remove(self.folder, timeout)

    def __repr__(self) -> str:
        return f"<AttemptCgroup {self.folder}>"


def _kill(folder: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(os.path.join(folder, "cgroup.kill"), os.O_WRONLY)
        try:
            os.write(fd, b"1")
        finally:
            os.close(fd)


def _populated(folder: str) -> bool:
    try:
        with open(os.path.join(folder, "cgroup.events"), "rb") as f:
            return b"populated 1" in f.read()
    except OSError:
        return False


def _remove(folder: str, timeout: float) -> list[int]:
    """Kill the cgroup ``folder`` (its sub-cgroups too), wait for it to empty, remove it all."""
    if not os.path.isdir(folder):
        return []
    _kill(folder)
    deadline = time.monotonic() + timeout
    while _populated(folder) and time.monotonic() < deadline:
        time.sleep(0.002)
        _kill(folder)  # a process a fork in flight made before the kill landed
    for dirpath, _dirs, _files in os.walk(folder, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)
    if not os.path.isdir(folder):
        return []
    left: list[int] = []
    for dirpath, _dirs, _files in os.walk(folder):
        with (
            contextlib.suppress(OSError, ValueError),
            open(os.path.join(dirpath, "cgroup.procs"), "rb") as f,
        ):
            left.extend(int(x) for x in f.read().split())
    return sorted(set(left))


# -- the harness's cgroup folder and its watcher ------------------------------------------------


class _Owner:
    """This process's folder of attempt cgroups, and the watcher that removes it once we end."""

    def __init__(self, base: str) -> None:
        self.pid = os.getpid()
        self.folder = os.path.join(base, _PREFIX + _owner_name())
        os.mkdir(self.folder, 0o755)
        try:
            watcher = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), "--watch", self.folder],
                env={},
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                cwd="/",
            )
        except BaseException:
            _remove(self.folder, 1.0)
            raise
        # the watcher forks at once and its first process exits: what remains is nobody's child
        # (not a leak of ours) and holds the read end of the pipe until we are gone
        watcher.wait()
        assert watcher.stdin is not None
        self.lifeline = watcher.stdin
        self.count = 0
        atexit.register(self.release)

    def release(self) -> None:
        """We are done: the watcher removes what is left (the pipe's end is its signal)."""
        with contextlib.suppress(OSError, ValueError):
            self.lifeline.close()


_owner: _Owner | None = None
_owner_error = ""
_owner_lock = threading.Lock()


def attempt_cgroup() -> tuple[AttemptCgroup | None, str]:
    """A new, empty cgroup for one attempt, or None and why not (then use the reaper)."""
    global _owner, _owner_error
    c = containment()
    if c.mechanism != CGROUP:
        return None, c.reason
    with _owner_lock:
        if _owner is None or _owner.pid != os.getpid():  # first use, or a forked harness
            try:
                _owner, _owner_error = _Owner(c.root), ""
            except (OSError, subprocess.SubprocessError) as exc:
                _owner, _owner_error = None, f"the cgroup watcher could not start: {exc}"
        if _owner is None:
            return None, _owner_error
        _owner.count += 1
        folder = os.path.join(_owner.folder, f"a-{_owner.count}-{secrets.token_hex(3)}")
    try:
        return AttemptCgroup(folder), ""
    except OSError as exc:
        if os.environ.get(CONTAINMENT_VAR, "").strip().lower() == CGROUP:
            raise
        return None, f"cannot create the attempt's cgroup: {exc.strerror}"


def _pid_ns() -> str:
    """This process's pid namespace (a pid names a process only within one)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _owner_name() -> str:
    return f"{_pid_ns()}-{os.getpid()}-{secrets.token_hex(4)}"


def reap_stale(base: str) -> list[str]:
    """Kill and remove the cgroup folders of harnesses (of our pid namespace) that are gone:
    SIGKILLed together with their watcher, or a machine that lost power mid-run. Returns the
    folders removed."""
    removed = []
    ns = _pid_ns()
    for name in os.listdir(base):
        if not name.startswith(_PREFIX):
            continue
        parts = name[len(_PREFIX) :].split("-")
        if parts and parts[0] == "probe":
            parts = parts[1:]
        if len(parts) != 3 or parts[0] != ns or not parts[1].isdigit() or _pid_alive(int(parts[1])):
            continue
        folder = os.path.join(base, name)
        if not _remove(folder, 5.0):
            removed.append(folder)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(folder: str) -> None:
    """The watcher: detach, wait for the harness to close our stdin, remove ``folder``."""
    if os.fork():
        os._exit(0)
    while True:
        try:
            if not os.read(0, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    _remove(folder, 30.0)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--watch":
        _watch(sys.argv[2])
