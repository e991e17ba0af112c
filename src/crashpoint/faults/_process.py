"""Agent processes: start in their own session, capture output, time out, kill the whole tree.

Every process started here is reaped: :func:`kill_tree` snapshots the tree with psutil before
killing (a child that re-parents itself is still found), kills the process group and every
snapshotted process, waits for them, and reports any survivor.

Each attempt also carries a marker in its environment, ``CRASHPOINT_REAP_TOKEN=<32 hex>``
(:data:`REAP_VAR`, one fresh token per attempt), which every process it starts inherits. At the
end of an attempt the reaper also finds, in one pass over ``/proc``, the live processes whose
initial environment (``/proc/PID/environ``) holds that exact entry (:func:`marked`): a process
that left the attempt's session (``setsid``, a daemon's double fork) and whose parent is gone is
neither a descendant nor a session member, but it still carries the marker. A process that
cleared its environment at exec (``env -i``) carries no marker and still escapes.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import psutil

__all__ = ["PLACEHOLDER_TOKEN", "REAP_VAR", "AgentProcess", "Exit", "kill_tree", "leftovers",
           "marked", "new_reap_token", "session_members", "with_reap_token"]

#: The environment variable that marks every process of one attempt (see :func:`marked`).
REAP_VAR = "CRASHPOINT_REAP_TOKEN"
#: A token's shape: fixed length, so a fork-mode child can write its own in place of the
#: zygote's placeholder (crashpoint.harness._zygote).
_TOKEN = re.compile(r"[0-9a-f]{32}")
#: The fork-mode zygote's placeholder token; never a real attempt's.
PLACEHOLDER_TOKEN = "0" * 32


@dataclass(frozen=True, slots=True)
class Exit:
    """How an attempt ended."""

    returncode: int | None  # None: still running when we gave up (should not happen)
    signal: int | None  # the signal that killed it, if any
    timed_out: bool
    duration: float
    stdout: bytes
    stderr: bytes
    orphans: tuple[int, ...] = ()  # processes of its tree that outlived it (then killed)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        if self.timed_out:
            return f"timed out after {self.duration:.1f}s (killed)"
        if self.signal is not None:
            return f"killed by {signal.Signals(self.signal).name}"
        return f"exit {self.returncode}"


def session_members(sid: int) -> list[psutil.Process]:
    """Live processes whose session id is ``sid`` (the agent's session)."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return out


def new_reap_token() -> str:
    """A fresh, unguessable token for one attempt's :data:`REAP_VAR`."""
    return secrets.token_hex(16)


def with_reap_token(env: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """``env`` with a usable :data:`REAP_VAR`: the one it has, or a fresh one; and the token.

    A token inherited from this very process's environment (we run inside an attempt of some
    other harness) is replaced: scanning for it would find our own siblings.
    """
    out = dict(env)
    token = out.get(REAP_VAR, "")
    if not _TOKEN.fullmatch(token) or token == PLACEHOLDER_TOKEN \
            or token == os.environ.get(REAP_VAR):
        token = new_reap_token()
    out[REAP_VAR] = token
    return token, out


def marked(token: str) -> list[psutil.Process]:
    """Live processes whose environment holds ``REAP_VAR=token``: one pass over ``/proc``.

    Reads each ``/proc/PID/environ`` (the environment the process was started with, as bytes);
    skips processes it cannot read (another user's, a zombie's is empty), and never returns this
    process or one of its ancestors. About 2 ms with 300 processes.
    """
    if not token:
        return []
    entry = f"{REAP_VAR}={token}".encode()
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        data = _read_environ(name)
        if entry in data and entry in data.split(b"\0"):
            found.append(int(name))
    if not found:
        return []
    skip = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        skip.update(p.pid for p in psutil.Process().parents())
    out = []
    for pid in found:
        if pid in skip:
            continue
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _read_environ(pid: str) -> bytes:
    """``/proc/PID/environ`` as bytes; empty if it cannot be read (raw fds: half the cost of
    ``open()`` over a few hundred processes)."""
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError:
        return b""
    finally:
        os.close(fd)
    return b"".join(chunks)


def _members(sid: int, token: str | None) -> list[psutil.Process]:
    """The session's live members and, with ``token``, the live marked processes."""
    procs = {p.pid: p for p in session_members(sid)}
    if token:
        for p in marked(token):
            procs.setdefault(p.pid, p)
    return list(procs.values())


def leftovers(sid: int, settle: float = 0.5, *, token: str | None = None) -> tuple[int, ...]:
    """Pids of session ``sid`` still alive after the ones already dying have had ``settle``
    seconds to finish: once an attempt's leader is reaped.

    A process SIGKILLed together with its group (a planned kill) can still be exiting when the
    leader has been reaped (seen here: half the time right after the wait, 4% of attempts
    through :meth:`AgentProcess.wait`); it is not an orphan. With ``token``, the live processes
    marked with it (:func:`marked`) count too: one that left the session is found there.
    """
    return tuple(p.pid for p in _wait_dead(_members(sid, token), settle))


def kill_tree(root: int, *, sid: int | None = None, token: str | None = None,
              grace: float = 0.0, sig: int = signal.SIGKILL) -> list[int]:
    """Kill ``root``'s whole tree (its group, its descendants, its session, and with ``token``
    every process marked with it); return survivors.

    With ``grace`` > 0 send SIGTERM first and wait that long before SIGKILL.
    """
    procs: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        r = psutil.Process(root)
        procs[r.pid] = r
        for c in r.children(recursive=True):
            procs[c.pid] = c
    if sid is not None:
        for p in session_members(sid):
            procs[p.pid] = p
    if token:
        for p in marked(token):
            procs.setdefault(p.pid, p)
    if grace > 0:
        _signal_all(root, procs, signal.SIGTERM)
        procs = {p.pid: p for p in _wait_dead(procs.values(), grace)}
    _signal_all(root, procs, sig)
    return [p.pid for p in _wait_dead(procs.values(), 5.0)]


def _wait_dead(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until each process has died; return those still alive after ``timeout``.

    A zombie counts as dead: it only awaits its parent's wait, and an orphan's new parent (a
    container's PID 1) may take seconds to reap it. Reaps nothing (psutil.wait_procs would reap
    a child of ours, and the caller's Popen would then read "exit 0" instead of the signal).
    """
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.005)
        alive = [p for p in alive if _alive(p)]
    return alive


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_all(root: int, procs: Mapping[int, psutil.Process], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, sig)
    for p in procs.values():
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


@dataclass
class AgentProcess:
    """One attempt of an agent: started in its own session; :meth:`wait` always reaps it.

    Its environment gets a :data:`REAP_VAR` (``env``'s own, or a fresh one: ``reap_token``), so
    a process it detaches into a new session is still found, killed and reported.
    """

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str | None = None
    timeout: float = 60.0
    stdin: bytes = b""
    rlimit_fsize: int | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    reap_token: str = field(default="", init=False)

    def start(self) -> AgentProcess:
        limit = self.rlimit_fsize

        def preexec() -> None:  # runs in the child between fork and exec
            if limit is not None:
                import resource

                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        self.reap_token, env = with_reap_token(self.env)
        self._t0 = time.monotonic()
        self.proc = subprocess.Popen(
            list(self.argv), env=env, cwd=self.cwd, start_new_session=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=preexec if limit is not None else None)
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self._readers = [
            threading.Thread(target=self._drain, args=(self.proc.stdout, self._out), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stderr, self._err), daemon=True),
        ]
        for t in self._readers:
            t.start()
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(self.stdin)
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        return self

    @staticmethod
    def _drain(stream: object, sink: list[bytes]) -> None:
        read = getattr(stream, "read1", None) or getattr(stream, "read")  # noqa: B009
        while True:
            chunk = read(65536)
            if not chunk:
                break
            sink.append(chunk)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the attempt's whole process group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def wait(self, timeout: float | None = None) -> Exit:
        """Wait for the attempt to end (killing its tree on timeout); reap everything."""
        assert self.proc is not None
        limit = self.timeout if timeout is None else timeout
        timed_out = False
        try:
            self.proc.wait(timeout=max(0.0, limit - (time.monotonic() - self._t0)))
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(self.pid, sid=self.pid, token=self.reap_token)
            self.proc.wait()
        duration = time.monotonic() - self._t0
        orphans = leftovers(self.pid, token=self.reap_token)
        if orphans:
            kill_tree(self.pid, sid=self.pid, token=self.reap_token)
        for t, stream in zip(self._readers, (self.proc.stdout, self.proc.stderr), strict=True):
            t.join(timeout=5)
            if not t.is_alive() and stream is not None:
                stream.close()  # else every attempt leaks two fds (and a ResourceWarning)
        rc = self.proc.returncode
        return Exit(rc if rc is None or rc >= 0 else None, -rc if rc is not None and rc < 0
                    else None, timed_out, duration, b"".join(self._out), b"".join(self._err),
                    orphans)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            kill_tree(self.pid, sid=self.pid, token=self.reap_token)
