"""Agent processes: start in their own session, capture output, time out, kill the whole tree.

Containment. Where the machine allows (:func:`crashpoint._proc._cgroup.containment`: a cgroup
v2 we may create, Linux 5.14+), each attempt runs in a cgroup of its own, which every process it
starts inherits whatever it does to its session, group or environment; at the end its live
members are the attempt's orphans and ``cgroup.kill`` ends them all at once. Elsewhere (the
reason is recorded in :attr:`Exit.containment`) the reaper below does what it can:

:func:`kill_tree` snapshots the tree with psutil before killing (a child that re-parents itself
is still found), kills the process group and every snapshotted process, waits for them, and
reports any survivor. Each attempt also carries a marker in its environment,
``CRASHPOINT_REAP_TOKEN=<32 hex>`` (:data:`REAP_VAR`, one fresh token per attempt), which every
process it starts inherits. At the end of an attempt the reaper also finds, in one pass over
``/proc``, the live processes whose initial environment (``/proc/PID/environ``) holds that exact
entry (:func:`marked`): a process that left the attempt's session (``setsid``, a daemon's double
fork) and whose parent is gone is neither a descendant nor a session member, but it still
carries the marker. Without a cgroup, a process that cleared its environment at exec
(``env -i``) and left the session carries no marker and escapes.

Output. stdout and stderr are pipes read by one thread per attempt into :class:`CappedOutput`:
the first ``keep_head`` and last ``keep_tail`` bytes of each stream are kept (in memory and, with
a path, in a file), the rest is counted and hashed, never held, so the harness's memory does not
grow with what an agent prints. A stream that was cut reads ``HEAD``, one line
``... N bytes cut (whole stream T bytes, sha256 H) ...``, ``TAIL``: two such views are equal
exactly when the streams are (same head, tail, length and hash). Capture ends when the attempt
has ended and its processes are gone, not on end-of-file: a straggler that holds the pipe (where
there is no cgroup to kill it) does not hold the attempt.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import math
import os
import re
import resource
import secrets
import select
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import psutil

from crashpoint._forkserver import PLACEHOLDER_TOKEN, REAP_VAR
from crashpoint._proc._cgroup import AttemptCgroup, attempt_cgroup
from crashpoint.errors import AgentNotExecutable, AgentNotFound, AgentStartError, InvalidArgument

__all__ = [
    "KEEP_HEAD",
    "KEEP_TAIL",
    "PLACEHOLDER_TOKEN",
    "REAP_VAR",
    "AgentProcess",
    "BusyWatch",
    "CappedOutput",
    "Exit",
    "OutputCapture",
    "end_attempt",
    "kill_tree",
    "leftovers",
    "marked",
    "new_reap_token",
    "running",
    "session_members",
    "signal_children",
    "start_error",
    "wait_exit",
    "with_reap_token",
]

#: REAP_VAR: the environment variable that marks every process of one attempt (see
#: :func:`marked`); PLACEHOLDER_TOKEN: the fork-mode zygote's, never a real attempt's (both
#: defined in the base, which the zygote alone imports: :mod:`crashpoint._forkserver`).
#: A token's shape: fixed length, so a fork-mode child can write its own in place of the
#: zygote's placeholder (crashpoint.harness._engine._zygote).
_TOKEN = re.compile(r"[0-9a-f]{32}")
#: Bytes kept from the start and from the end of each captured stream (the rest is cut).
KEEP_HEAD = 1 << 20
KEEP_TAIL = 1 << 20
_READ = 1 << 20  # largest read from an output pipe


@dataclass(frozen=True, slots=True)
class Exit:
    """How an attempt ended."""

    returncode: int | None  # None: still running when we gave up (should not happen)
    signal: int | None  # the signal that killed it, if any
    timed_out: bool
    duration: float
    stdout: bytes  # the whole stream, or its head and tail around a line saying what was cut
    stderr: bytes
    orphans: tuple[int, ...] = ()  # processes of its tree that outlived it (then killed)
    stdout_total: int = 0  # bytes the stream really had
    stderr_total: int = 0
    containment: str = ""  # "cgroup", or "session (why no cgroup)"

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
    if (
        not _TOKEN.fullmatch(token)
        or token == PLACEHOLDER_TOKEN
        or token == os.environ.get(REAP_VAR)
    ):
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


def kill_tree(
    root: int,
    *,
    sid: int | None = None,
    token: str | None = None,
    grace: float = 0.0,
    sig: int = signal.SIGKILL,
) -> list[int]:
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


def running(pid: int) -> bool:
    """True while process ``pid`` runs (exists and is not a zombie waiting to be reaped)."""
    try:
        return _alive(psutil.Process(pid))
    except psutil.Error:
        return False


def signal_children(sig: int) -> None:
    """Send ``sig`` to this process's direct children (pytest-xdist's workers, when a signal
    reached only the controller); one that is gone already is skipped."""
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            child.send_signal(sig)


def _signal_all(root: int, procs: Mapping[int, psutil.Process], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, sig)
    for p in procs.values():
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


# -- output ------------------------------------------------------------------------------------


class CappedOutput:
    """One captured stream: its first ``head`` and last ``tail`` bytes, its length, its sha256.

    With ``path`` the same view is written there: the head as it arrives, then (at
    :meth:`finish`) the line saying what was cut and the tail. Memory stays under
    ``head + 2 * tail`` bytes whatever the stream's size.
    """

    def __init__(
        self, path: str | None = None, head: int = KEEP_HEAD, tail: int = KEEP_TAIL
    ) -> None:
        if head < 0 or tail < 0:
            raise InvalidArgument(f"output caps must be >= 0 bytes, got head={head}, tail={tail}")
        self.head_max, self.tail_max = head, tail
        self.total = 0
        self._head = bytearray()
        self._tail = bytearray()
        self._sha = hashlib.sha256()
        self._fd = -1
        self._view: bytes | None = None
        self._cut = -1  # known once finished
        if path is not None:
            self._fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
            )

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self._sha.update(chunk)
        room = self.head_max - len(self._head)
        if room > 0:
            part = chunk[:room]
            self._head += part
            self._write(part)
            chunk = chunk[room:]
        if chunk and self.tail_max:
            self._tail += chunk
            if len(self._tail) > 2 * self.tail_max:
                del self._tail[: len(self._tail) - self.tail_max]

    @property
    def cut(self) -> int:
        """Bytes of the stream kept in neither the head nor the tail."""
        if self._cut >= 0:
            return self._cut
        return max(0, self.total - len(self._head) - min(len(self._tail), self.tail_max))

    def finish(self) -> bytes:
        """The view (the whole stream if nothing was cut); closes the file. Idempotent."""
        if self._view is None:
            if len(self._tail) > self.tail_max:
                del self._tail[: len(self._tail) - self.tail_max]
            middle = b""
            if self.cut:
                middle = (
                    f"\n... {self.cut:,} bytes cut (whole stream {self.total:,} bytes, "
                    f"sha256 {self._sha.hexdigest()}) ...\n"
                ).encode()
            self._write(middle + bytes(self._tail))
            self._view = bytes(self._head) + middle + bytes(self._tail)
            self._cut = self.cut
            self._head.clear()
            self._tail.clear()
            self.close()
        return self._view

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while self._fd >= 0 and view:
            try:
                view = view[os.write(self._fd, view) :]
            except OSError:  # evidence is best effort: a full disk must not stop the attempt
                self.close()

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


class OutputCapture:
    """Reads an attempt's stdout and stderr pipes (one thread) into two :class:`CappedOutput`.

    :meth:`finish` ends the capture once the attempt's processes are gone: what is already in
    the pipes is read, then the pipes are closed, end-of-file or not (a straggler that kept a
    copy of the write end does not hold the attempt).
    """

    def __init__(self, out: int, err: int, sinks: tuple[CappedOutput, CappedOutput]) -> None:
        self.sinks = sinks
        self._fds = [out, err]
        self._wake_r, self._wake_w = os.pipe()
        for fd in (out, err):
            os.set_blocking(fd, False)
            with contextlib.suppress(OSError, AttributeError):  # fewer wake-ups for big output
                import fcntl

                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _READ)
        self._done = False
        self._thread = threading.Thread(target=self._loop, name="crashpoint-output", daemon=True)
        self._thread.start()

    @classmethod
    def pipes(
        cls,
        stdout_path: str | None = None,
        stderr_path: str | None = None,
        head: int = KEEP_HEAD,
        tail: int = KEEP_TAIL,
    ) -> tuple[tuple[int, int], tuple[int, int], tuple[CappedOutput, CappedOutput]]:
        """Two pipes ``(out_r, out_w), (err_r, err_w)`` and their sinks: give the write ends to
        the child, close them here, then ``OutputCapture(out_r, err_r, sinks)``."""
        sinks: list[CappedOutput] = []
        fds: list[int] = []
        try:
            sinks.append(CappedOutput(stdout_path, head, tail))
            sinks.append(CappedOutput(stderr_path, head, tail))
            fds.extend(os.pipe())
            fds.extend(os.pipe())
        except BaseException:
            for sink in sinks:
                sink.close()
            for fd in fds:
                os.close(fd)
            raise
        return (fds[0], fds[1]), (fds[2], fds[3]), (sinks[0], sinks[1])

    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            for fd, sink in zip(self._fds, self.sinks, strict=True):
                sel.register(fd, selectors.EVENT_READ, sink)
            sel.register(self._wake_r, selectors.EVENT_READ, None)
            live = 2
            while live:
                for key, _ in sel.select():
                    if key.data is None:  # finish(): read what is there, then stop
                        for k in list(sel.get_map().values()):
                            if k.data is not None:
                                self._drain(k.fd, k.data)
                        return
                    if not self._read(key.fd, key.data):
                        sel.unregister(key.fd)
                        live -= 1
        finally:
            sel.close()

    @staticmethod
    def _read(fd: int, sink: CappedOutput) -> bool:
        """One read; False at end-of-file."""
        try:
            chunk = os.read(fd, _READ)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not chunk:
            return False
        sink.feed(chunk)
        return True

    def _drain(self, fd: int, sink: CappedOutput) -> None:
        for _ in range(64):  # bounded: a straggler still writing must not keep us here
            try:
                chunk = os.read(fd, _READ)
            except OSError:
                return
            if not chunk:
                return
            sink.feed(chunk)

    def finish(self) -> tuple[CappedOutput, CappedOutput]:
        """Stop reading (see the class doc), close the pipes; return the two sinks."""
        if not self._done:
            self._done = True
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
            self._thread.join()
            for fd in (*self._fds, self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            for sink in self.sinks:
                sink.finish()
        return self.sinks


# -- starting ----------------------------------------------------------------------------------


def start_error(
    exc: OSError, argv: Sequence[str], cwd: str | None, env: Mapping[str, str]
) -> AgentStartError:
    """One clear line for an agent that could not be started (``exc`` from Popen): what, where
    (the program and the working folder) and how to fix it."""
    argv0 = str(argv[0]) if argv else ""
    where = cwd or os.getcwd()
    start = f"cannot start the agent in {where}"
    if not argv0:
        return AgentNotFound(
            errno.ENOENT,
            f"{start}: its command is empty; give agent.command a program to run",
            "",
            where,
        )
    if cwd is not None and (str(exc.filename) == str(cwd) or not os.path.isdir(cwd)):
        return AgentNotFound(
            exc.errno or errno.ENOENT,
            f"cannot start the agent {argv0!r}: its working folder {cwd} does "
            "not exist or is not a folder; create it, or fix agent.cwd",
            argv0,
            where,
        )
    path = ""
    if "/" in argv0:
        path = os.path.join(where, argv0)
        what = repr(argv0) if os.path.isabs(argv0) else f"{argv0!r} (relative to that folder)"
    else:
        search = env.get("PATH", os.defpath)
        for folder in search.split(os.pathsep):
            candidate = os.path.join(where, folder or ".", argv0)
            if os.path.exists(candidate):
                path = candidate
                break
        what = f"{argv0!r} (looked up on the agent's PATH={search})"
    if isinstance(exc, PermissionError):
        return AgentNotExecutable(
            exc.errno or errno.EACCES,
            f"{start}: {what} is not executable; make it executable (chmod +x) or start it "
            f'through its interpreter, e.g. command: ["{{python}}", "{argv0}"]',
            argv0,
            where,
        )
    if isinstance(exc, FileNotFoundError):
        if path and os.path.isfile(path):
            return AgentNotFound(
                exc.errno or errno.ENOENT,
                f"{start}: {what} exists but its interpreter (its #! line) was not found; fix "
                "the #! line or start it through its interpreter",
                argv0,
                where,
            )
        return AgentNotFound(
            exc.errno or errno.ENOENT,
            f"{start}: {what} was not found; give an absolute path, a path relative to the "
            "working folder, or a program on the agent's PATH (agent.env)",
            argv0,
            where,
        )
    return AgentStartError(exc.errno or 0, f"{start}: {what}: {exc.strerror or exc}", argv0, where)


def end_attempt(
    pid: int, token: str, cgroup: AttemptCgroup | None, capture: OutputCapture
) -> tuple[int, ...]:
    """An attempt whose leader ``pid`` is reaped: what is left of it (its cgroup's members, or
    its session's and token's), killed; its output capture stopped. Returns the orphans."""
    if cgroup is not None:
        orphans: tuple[int, ...] = tuple(cgroup.leftovers())
        cgroup.close()
    else:
        orphans = leftovers(pid, token=token)
        if orphans:
            kill_tree(pid, sid=pid, token=token)
    capture.finish()
    return orphans


@dataclass
class AgentProcess:
    """One attempt of an agent: started in its own session (and, where the machine allows, its
    own cgroup); :meth:`wait` always reaps it and everything it started.

    Its environment gets a :data:`REAP_VAR` (``env``'s own, or a fresh one: ``reap_token``), so
    without a cgroup a process it detaches into a new session is still found, killed and
    reported. Its stdout and stderr are streamed to ``stdout_path`` / ``stderr_path`` (if given)
    and kept, capped to ``keep_head`` + ``keep_tail`` bytes each, in the :class:`Exit`.
    A program that cannot be started raises :class:`~crashpoint.errors.AgentStartError`.
    """

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str | None = None
    timeout: float = 60.0
    stdin: bytes = b""
    rlimit_fsize: int | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None
    keep_head: int = KEEP_HEAD
    keep_tail: int = KEEP_TAIL
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    reap_token: str = field(default="", init=False)
    containment: str = field(default="", init=False)  # "cgroup" or "session (why)"

    def start(self) -> AgentProcess:
        self.reap_token, env = with_reap_token(self.env)
        self._exit: Exit | None = None
        self._cgroup: AttemptCgroup | None
        self._cgroup, why = attempt_cgroup()
        self.containment = "cgroup" if self._cgroup is not None else f"session ({why})"
        (out_r, out_w), (err_r, err_w), sinks = OutputCapture.pipes(
            self.stdout_path, self.stderr_path, self.keep_head, self.keep_tail
        )
        join = -1
        try:
            if self._cgroup is not None:
                join = os.open(self._cgroup.procs, os.O_WRONLY | os.O_CLOEXEC)
            preexec = _preexec(join, self.rlimit_fsize)
            self._t0 = time.monotonic()
            self.proc = subprocess.Popen(
                list(self.argv),
                env=env,
                cwd=self.cwd,
                start_new_session=True,
                stdin=subprocess.PIPE,
                stdout=out_w,
                stderr=err_w,
                preexec_fn=preexec,
            )
        except BaseException as exc:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            for sink in sinks:
                sink.close()
            if self._cgroup is not None:
                self._cgroup.close()
            if isinstance(exc, subprocess.SubprocessError) and join >= 0:
                raise AgentStartError(
                    0,
                    f"cannot start the agent: {self.argv[0]!r} could not "
                    f"join its cgroup {self._cgroup}: {exc}",
                ) from None
            if isinstance(exc, OSError) and not isinstance(exc, AgentStartError):
                raise start_error(exc, self.argv, self.cwd, env) from None
            raise
        finally:
            if join >= 0:
                os.close(join)
        os.close(out_w)
        os.close(err_w)
        self._capture = OutputCapture(out_r, err_r, sinks)
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(self.stdin)
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        return self

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
        if self._exit is not None:
            return self._exit
        limit = self.timeout if timeout is None else timeout
        timed_out = False
        try:
            wait_exit(self.proc, max(0.0, limit - (time.monotonic() - self._t0)))
        except subprocess.TimeoutExpired:
            timed_out = True
            self._kill_all()
            self.proc.wait()
        except BaseException:
            self._kill_all()
            self.proc.wait()
            self._end()
            raise
        duration = time.monotonic() - self._t0
        orphans = self._end()
        out, err = self._capture.finish()
        rc = self.proc.returncode
        self._exit = Exit(
            rc if rc is None or rc >= 0 else None,
            -rc if rc is not None and rc < 0 else None,
            timed_out,
            duration,
            out.finish(),
            err.finish(),
            orphans,
            out.total,
            err.total,
            self.containment,
        )
        return self._exit

    def _end(self) -> tuple[int, ...]:
        """The leader is reaped: report what is left of the attempt, kill it, stop capture."""
        return end_attempt(self.pid, self.reap_token, self._cgroup, self._capture)

    def _kill_all(self) -> None:
        if self._cgroup is not None:
            self._cgroup.kill()
        kill_tree(self.pid, sid=self.pid, token=self.reap_token)

    def kill(self) -> None:
        """Kill the attempt's processes, all of them (its cgroup), whether or not it ended."""
        if self.proc is None:
            return
        if self._cgroup is not None:
            self._cgroup.kill()
        if self.proc.poll() is None:
            kill_tree(self.pid, sid=self.pid, token=self.reap_token)


class BusyWatch:
    """Watches process ``pid`` from outside, every ``every`` seconds until :meth:`stop`, for
    what makes a kill of it depend on more than its files: a second thread, a child process,
    an event loop (an epoll descriptor). :attr:`busy`: the first such thing seen, in words
    ("" if none was). A sample can miss what lives between two looks: a hint, not proof."""

    def __init__(self, pid: int, every: float = 0.005) -> None:
        self.pid, self.every = pid, every
        self.busy = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="crashpoint-busy", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.busy and not self._stop.is_set():
            self.busy = self._look()
            self._stop.wait(self.every)

    def _look(self) -> str:
        base = f"/proc/{self.pid}"
        try:
            tasks = os.listdir(base + "/task")
        except OSError:
            return ""
        if len(tasks) > 1:
            return "it runs threads"
        for t in tasks:
            with contextlib.suppress(OSError), open(f"{base}/task/{t}/children") as f:
                if f.read().split():
                    return "it starts processes"
        with contextlib.suppress(OSError):
            for fd in os.listdir(base + "/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"{base}/fd/{fd}") == "anon_inode:[eventpoll]":
                        return "it runs an event loop (epoll)"
        return ""

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """``proc.wait(timeout)`` woken by the exit itself: a pidfd polled (Linux >= 5.3), not
    ``Popen.wait``'s sleep loop, whose naps grow to 50 ms (each attempt's end was noticed up
    to 50 ms late). Raises :class:`subprocess.TimeoutExpired` as ``Popen.wait`` does."""
    if proc.returncode is not None:  # reaped: its pid may be someone else's by now
        return
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here, or the process is already reaped
        proc.wait(timeout=timeout)
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        end = time.monotonic() + timeout
        while not poller.poll(max(0, math.ceil((end - time.monotonic()) * 1000))):
            if time.monotonic() >= end:
                raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    proc.wait()


def _preexec(join: int, fsize: int | None) -> Callable[[], None] | None:
    """What the child does between fork and exec: join its cgroup (before it can start
    anything), set RLIMIT_FSIZE and ignore SIGXFSZ (Popen resets it to its default, which kills
    a non-Python agent at the limit instead of giving it EFBIG). Only os calls on objects made
    beforehand (no import, no lock)."""
    if join < 0 and fsize is None:
        return None

    def preexec() -> None:
        if join >= 0:
            os.write(join, b"0")
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return preexec
