"""The fork server's own side: what runs inside the fork-mode zygote and its forked children.

The harness side (:class:`crashpoint.harness._engine._zygote.Zygote`, whose docstring describes
the protocol and how a child is made) starts an interpreter that imports only this module,
the base (the probe, the entry runner, the fail points) and the agent's own preload: not the
harness, its scenario model, yaml or psutil. That start is paid once per campaign (or scenario
file), beside the golden run, and every forked attempt inherits only what the agent needs.

Standard library and the base only (it is base, layer 1).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import random
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from crashpoint import _failpoints, probe
from crashpoint._entry import call, resolve, run_main
from crashpoint.errors import ZygoteError

if TYPE_CHECKING:
    from crashpoint._entry import EntryFunction

__all__ = [
    "LEARN_VAR",
    "MAX_LEARNED",
    "MAX_MESSAGE",
    "PLACEHOLDER_TOKEN",
    "REAP_VAR",
    "main",
]

#: The environment variable that marks every process of an attempt (and the zygote's
#: placeholder value, overwritten in each child: see ``_stamp_environ``); process control
#: (:mod:`crashpoint._proc`) uses the same names.
REAP_VAR = "CRASHPOINT_REAP_TOKEN"
PLACEHOLDER_TOKEN = "0" * 32
#: Largest control message (a spawn carries the attempt's whole environment).
MAX_MESSAGE = 1 << 20
#: Set in a forked golden run's environment: the file it writes the modules it imported to
#: (beyond the zygote's), so the zygote can import them before the trials (:meth:`Zygote.learn`).
LEARN_VAR = "CRASHPOINT_LEARN_IMPORTS"
#: At most this many learned modules are kept.
MAX_LEARNED = 5000
#: At most this many children vet one set of learned modules: after one that a module killed
#: (or that found a thread), the next vets the rest without it.
MAX_VETTERS = 4
_CHILD_FAILED = 70  # EX_SOFTWARE: the child could not be set up (the reason is on its stderr)
_POLL_S = 0.01  # reaping interval when pidfds are not available


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the harness is gone: the loop sees EOF next
        sock.send(json.dumps(msg).encode())


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _pidfd(pid: int) -> int:
    opener: Callable[[int], int] | None = getattr(os, "pidfd_open", None)
    if opener is None:
        return -1
    try:
        return opener(pid)
    except OSError:
        return -1


class _Vet:
    """One vetting of learned modules (a ``vet`` request), over one or more forked children
    (a plain class: the zygote does not import dataclasses)."""

    __slots__ = ("children", "deadline", "dropped", "fd", "out", "pid", "pidfd", "rid", "todo")

    def __init__(self, rid: Any, todo: list[str], deadline: float) -> None:
        self.rid = rid  # the request's id
        self.todo = todo  # what the current child imports, in order
        self.deadline = deadline  # time.monotonic() by which it is answered
        self.pid = 0  # the current child
        self.fd = -1  # the read end of its report pipe
        self.pidfd = -1  # its pidfd (-1: none; then its pipe's end, or the deadline, ends it)
        self.out = b""  # its report so far
        self.children = 0  # how many children vetted it so far
        self.dropped: list[list[str]] = []  # [module, why] left out


def _vet_child(names: list[str], report: int, close: list[int]) -> NoReturn:
    """The vetting child (forked from the zygote, so with all it imported): import each of
    ``names`` in order as the zygote would, and write to ``report`` a line a module, before
    (``> NAME``) and after: ``+ NAME`` imported without starting a thread (none in Python,
    none in the process), ``- NAME`` raised (any exception, ``SystemExit`` included), ``! NAME``
    started a thread (then stop: what follows cannot be judged in a threaded interpreter);
    ``=`` at the end. A module that kills or hangs its importer leaves ``> NAME`` last. Exits
    with ``os._exit``: no atexit handler of what it imported runs."""
    me = os.getpid()
    code = 0
    try:
        os.setsid()  # its own session: the zygote kills what a module started, with it
        for fd in close:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDWR)
        for dst in (0, 1, 2):  # not the zygote's log: what modules print at import is noise
            os.dup2(null, dst)
        os.close(null)
        import importlib

        for name in names:
            os.write(report, f"> {name}\n".encode())
            try:
                importlib.import_module(name)
            except BaseException:
                if os.getpid() != me:  # a module forked at import: not its child's business
                    os._exit(0)
                os.write(report, f"- {name}\n".encode())
                continue
            if os.getpid() != me:
                os._exit(0)
            if (
                threading.active_count() > 1
                or len(sys._current_frames()) > 1
                or _thread_count() > 1
            ):
                os.write(report, f"! {name}\n".encode())
                break
            os.write(report, f"+ {name}\n".encode())
        else:
            os.write(report, b"=\n")
    except BaseException:
        code = _CHILD_FAILED
    os._exit(code)


class _Server:
    """The zygote's single-threaded loop (runs in the zygote process only)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.entries: dict[str, EntryFunction] = {}
        self.children: dict[int, int] = {}  # pid -> pidfd (-1: polled)
        self.threaded = ""  # why forking is no longer safe, once it is not
        self.skipped: list[str] = []  # best-effort warm modules that did not import
        self.learned = False  # what a golden run imported was pre-imported (:meth:`learn`)
        self.learned_modules: list[str] = []  # those modules
        self.path0 = False  # did the zygote put the agent's folder first on sys.path?
        self.vets: dict[int, _Vet] = {}  # vetting child's pid -> its vetting

    def warm(self, module: str, *, strict: bool) -> None:
        """Import ``module`` (a warm module of a command agent); refuse it if that started a
        thread. ``strict`` False (modules read from the script): one that fails is skipped,
        the attempt imports it itself and fails there exactly as a spawned one would."""
        if self.threaded:
            raise ZygoteError(self.threaded)
        import importlib

        try:
            importlib.import_module(module)
        except Exception as exc:
            if not strict:
                self.skipped.append(module)
                return
            raise ZygoteError(
                f"warm module {module!r} could not be imported in the fork-mode "
                f"zygote: {type(exc).__name__}: {exc}. Install it, fix its "
                "name, or remove it from agent.warm"
            ) from exc
        n = _thread_count()
        if n > 1:
            self.threaded = (
                f"importing warm module {module!r} started {n - 1} thread(s) in the fork-mode "
                "zygote; forking a threaded interpreter is unsafe. Remove it from agent.warm "
                "(or set warm: false): attempts then import it themselves"
            )
            raise ZygoteError(self.threaded)

    def load(self, entry: str) -> EntryFunction:
        fn = self.entries.get(entry)
        if fn is not None:
            return fn
        if self.threaded:
            raise ZygoteError(self.threaded)
        fn = resolve(entry)
        n = _thread_count()
        if n > 1:
            self.threaded = (
                f"importing {entry!r} started {n - 1} thread(s) in the fork-mode zygote; forking "
                "a threaded interpreter is unsafe. Run this agent with `command:` (spawn mode), "
                "or start the threads inside the function rather than at import"
            )
            raise ZygoteError(self.threaded)
        self.entries[entry] = fn
        return fn

    def serve(self) -> None:
        try:
            while self._step():
                pass
        finally:
            self._kill_children()

    def _step(self) -> bool:
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        for fd in self.children.values():
            if fd >= 0:
                poller.register(fd, select.POLLIN)
        for vet in self.vets.values():
            poller.register(vet.fd, select.POLLIN)
            if vet.pidfd >= 0:
                poller.register(vet.pidfd, select.POLLIN)
        polled = any(fd < 0 for fd in self.children.values())
        wait = _POLL_S if polled else None
        if self.vets:
            due = min(v.deadline for v in self.vets.values()) - time.monotonic()
            wait = max(0.0, min(due, wait if wait is not None else due))
        events = poller.poll(None if wait is None else wait * 1000)
        self._reap(block=False)
        ready = {fd for fd, _ in events}
        for vet in list(self.vets.values()):
            if vet.fd in ready:
                data = os.read(vet.fd, 1 << 16)
                vet.out += data
                if not data:  # the child is done (or dead): judge, go on or answer
                    self._vetted(vet, timed_out=False)
                    continue
            if vet.pidfd in ready:  # it ended, and something it forked may hold the pipe
                os.set_blocking(vet.fd, False)
                with contextlib.suppress(BlockingIOError):
                    while data := os.read(vet.fd, 1 << 16):
                        vet.out += data
                self._vetted(vet, timed_out=False)
                continue
            if time.monotonic() >= vet.deadline:
                self._vetted(vet, timed_out=True)
        if self.sock.fileno() in ready:
            return self._request()
        return True

    def _reap(self, *, block: bool) -> None:
        for pid, fd in list(self.children.items()):
            try:
                got, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                got, status = pid, 0
            if got == 0:
                continue
            del self.children[pid]
            if fd >= 0:
                os.close(fd)
            _send(self.sock, {"op": "exited", "pid": pid, "status": status})

    def _request(self) -> bool:
        try:
            data, fds, flags, _ = socket.recv_fds(self.sock, MAX_MESSAGE, 8)
        except OSError:
            return False
        if not data:
            for fd in fds:
                os.close(fd)
            return False  # the harness closed its end (or died): shut down
        rid = None
        try:
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                raise ZygoteError("a control message was truncated")
            msg = json.loads(data)
            rid = msg.get("id")
            if msg.get("op") == "warm":  # learned modules, vetted by the harness
                for fd in fds:
                    os.close(fd)
                fds = []
                before = len(self.skipped)
                for module in [str(m) for m in msg.get("modules") or ()]:
                    self.warm(module, strict=False)
                _send(self.sock, {"op": "warmed", "id": rid, "skipped": self.skipped[before:]})
                return True
            if msg.get("op") == "vet":  # learned modules, to be vetted in a forked child
                for fd in fds:
                    os.close(fd)
                fds = []
                if self.threaded:
                    raise ZygoteError(self.threaded)
                modules = [str(m) for m in msg.get("modules") or ()]
                timeout = float(msg.get("timeout") or 60.0)
                self._vet(_Vet(rid, modules, time.monotonic() + timeout))
                return True  # answered ("vetted") once its child is done
            if msg.get("op") != "spawn":
                raise ZygoteError(f"unknown request {msg.get('op')!r}")
            if len(fds) != 3:
                raise ZygoteError(f"a spawn needs 3 file descriptors, got {len(fds)}")
            pid = self._fork(msg, fds)
        except Exception as exc:  # a refusal, never the end of the zygote
            _send(
                self.sock,
                {"op": "refused", "id": rid, "error": str(exc), "type": type(exc).__name__},
            )
        else:
            _send(self.sock, {"op": "started", "id": rid, "pid": pid})
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def _fork(self, msg: dict[str, Any], fds: list[int]) -> int:
        entry = str(msg.get("entry") or "")
        main = msg.get("main")
        if main:  # a {python} command agent: run as __main__ in the child, nothing to load
            if self.threaded:
                raise ZygoteError(self.threaded)
            if not (isinstance(main, list) and len(main) == 3 and main[0] in ("path", "module")):
                raise ZygoteError(f"bad main {main!r}")
            fn: EntryFunction | None = None
        else:
            fn = self.load(entry)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        cgroup = str(msg.get("cgroup") or "")
        pid = _fork_into(os.path.dirname(cgroup)) if cgroup else -1
        joined = pid >= 0
        if pid < 0:
            pid = os.fork()
        if pid == 0:
            self.sock.close()
            _child(
                entry,
                fn,
                msg,
                fds,
                [fd for fd in self.children.values() if fd >= 0],
                self.path0,
            )
        if cgroup and not joined:  # before "started": all it starts is in it (it waits for "go")
            try:
                _join(cgroup, pid)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                raise ZygoteError(
                    f"the attempt could not join its cgroup {os.path.dirname(cgroup)}: "
                    f"{exc.strerror or exc}"
                ) from None
        self.children[pid] = _pidfd(pid)
        return pid

    # -- vetting what a golden run imported (:meth:`Zygote.learn`) --------------------------

    def _vet(self, vet: _Vet) -> None:
        """Fork a child that imports ``vet.todo`` in order, as the zygote would, and reports on
        a pipe how each went (:func:`_vet_child`); :meth:`_vetted` reads it when it ends."""
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        r, w = os.pipe()
        try:
            pid = os.fork()
        except BaseException:
            os.close(r)
            os.close(w)
            raise
        if pid == 0:
            self.sock.close()
            keep = [fd for fd in self.children.values() if fd >= 0]
            vets = [fd for v in self.vets.values() for fd in (v.fd, v.pidfd) if fd >= 0]
            _vet_child(vet.todo, w, [r, *keep, *vets])
        os.close(w)
        vet.pid, vet.fd, vet.pidfd, vet.out = pid, r, _pidfd(pid), b""
        vet.children += 1
        self.vets[pid] = vet

    def _vetted(self, vet: _Vet, *, timed_out: bool, last: bool = False) -> None:
        """The vetting child ended (its pipe closed) or ran out of time: end it for sure (its
        session too: what a module started at import), reap it, read its report, and either
        answer the harness or fork the next child without the module that killed this one,
        hung it, or started a thread (not ``last``; at most :data:`MAX_VETTERS` children)."""
        del self.vets[vet.pid]
        os.close(vet.fd)
        if vet.pidfd >= 0:
            os.close(vet.pidfd)
        for kill in (os.killpg, os.kill):  # not reaped yet: the pid is still ours
            with contextlib.suppress(OSError):
                kill(vet.pid, signal.SIGKILL)
        try:
            _, status = os.waitpid(vet.pid, 0)
        except ChildProcessError:
            status = 0
        ok: list[str] = []
        current = culprit = why = ""
        done = False
        for line in vet.out.decode("utf-8", "replace").splitlines():
            mark, _, name = line.partition(" ")
            if mark == ">":  # importing it
                current = name
            elif mark == "+":  # imported, no thread
                ok.append(name)
                current = ""
            elif mark == "-":  # did not import: left out, as the zygote would skip it
                current = ""
            elif mark == "!":  # started a thread: nothing after it can be judged here
                culprit, why, current = name, "started a thread", ""
                break
            elif mark == "=":
                done = True
        if not done and current:
            culprit = current
            if timed_out:
                why = "did not finish importing in time"
            elif os.WIFSIGNALED(status):
                why = f"killed its importer (signal {os.WTERMSIG(status)})"
            else:
                why = f"ended its importer (exit {os.waitstatus_to_exitcode(status)})"
        if culprit:
            vet.dropped.append([culprit, why])
            rest = vet.todo[vet.todo.index(culprit) + 1 :] if culprit in vet.todo else []
            vet.todo = ok + rest
            if (
                rest
                and not last
                and vet.children < MAX_VETTERS
                and time.monotonic() < vet.deadline
                and not self.threaded
            ):
                try:
                    self._vet(vet)
                except OSError:
                    pass
                else:
                    return
        _send(self.sock, {"op": "vetted", "id": vet.rid, "modules": ok, "dropped": vet.dropped})

    def _kill_children(self) -> None:
        for vet in list(self.vets.values()):
            self._vetted(vet, timed_out=True, last=True)
        for pid in self.children:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self._reap(block=True)


#: clone3(2)'s number (the same on every Linux architecture) and its CLONE_INTO_CGROUP flag.
_SYS_CLONE3 = 435
_CLONE_INTO_CGROUP = 0x200000000
#: ``0`` makes the zygote fork and then move each child into its cgroup (never clone3).
CLONE3_VAR = "CRASHPOINT_CLONE3"
#: The shared libraries a clone3 child may inherit (besides the interpreter's own extension
#: modules): none of them keeps state that only libc's ``fork()`` (its at-fork handlers) resets.
_PLAIN_LIBS = (
    "libc.",
    "libm.",
    "ld-linux",
    "libpthread.",
    "libdl.",
    "librt.",
    "libutil.",
    "libz.",
    "libffi.",
    "libexpat.",
    "libbz2.",
    "liblzma.",
    "libuuid.",
    "libmpdec.",
    "libgcc_s.",
    "libpython",
)
_clone3_off = ""  # why the zygote forks and moves (set once, for good) rather than clone3
_libs_seen = -1  # len(sys.modules) when the mapped libraries were last found plain


def _clone3_usable() -> bool:
    """Can a child be made with clone3 here: Linux with glibc >= 2.34 (whose ``raise`` and
    ``pthread_kill`` of the calling thread ask the kernel for its thread id rather than trust
    the one cached at the last ``fork()``), not turned off, and nothing mapped into the zygote
    but libc's family and the interpreter's own modules (a library that registered at-fork
    handlers, e.g. OpenSSL or a BLAS with threads, gets a real ``fork()``)."""
    global _clone3_off, _libs_seen
    if _clone3_off:
        return False
    if os.environ.get(CLONE3_VAR, "") == "0":
        return False
    if _libs_seen == len(sys.modules):
        return True
    try:
        kind, _, version = os.confstr("CS_GNU_LIBC_VERSION").partition(" ")  # type: ignore[union-attr]
        major, minor = (int(x) for x in version.split(".")[:2])
    except (AttributeError, ValueError, OSError):
        _clone3_off = "not glibc"
        return False
    if kind != "glibc" or sys.platform != "linux" or (major, minor) < (2, 34):
        _clone3_off = f"{kind} {version}"
        return False
    own = os.path.join(
        os.path.realpath(sys.base_exec_prefix),
        "lib",
        f"python{sys.version_info[0]}.{sys.version_info[1]}",
        "lib-dynload",
    )
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            libs = {line.split(None, 5)[5].strip() for line in f if ".so" in line}
    except (OSError, IndexError):
        return False
    for lib in libs:
        name = os.path.basename(lib)
        if not (os.path.dirname(lib) == own or name.startswith(_PLAIN_LIBS)):
            return False  # not for good: checked again when more modules are imported
    _libs_seen = len(sys.modules)
    return True


_api: tuple[Any, Any, Any] | None = None


def _clone3_api() -> tuple[Any, Any, Any]:
    """(clone_args structure, libc's syscall keeping the GIL as fork does, the C API)."""
    global _api
    if _api is None:
        import ctypes

        class _Args(ctypes.Structure):
            _fields_ = [
                (n, ctypes.c_uint64)
                for n in (
                    "flags",
                    "pidfd",
                    "child_tid",
                    "parent_tid",
                    "exit_signal",
                    "stack",
                    "stack_size",
                    "tls",
                    "set_tid",
                    "set_tid_size",
                    "cgroup",
                )
            ]

        syscall = ctypes.PyDLL(None, use_errno=True).syscall
        syscall.restype = ctypes.c_long
        syscall.argtypes = [ctypes.c_long, ctypes.POINTER(_Args), ctypes.c_size_t]
        _api = (_Args, syscall, ctypes.pythonapi)
    return _api


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


def _fork_into(folder: str) -> int:
    """A child born in the cgroup ``folder`` (clone3 with CLONE_INTO_CGROUP): no move after the
    fork, whose write to ``cgroup.procs`` waits on the kernel's cgroup lock (3-10 ms of wall
    a child, more on a busy machine). Like :func:`os.fork` otherwise (the interpreter's own
    before/after-fork steps, ``os.register_at_fork`` handlers included): 0 in the child, the
    child's pid in the zygote; -1 if no child was made (then fork and move it).

    Needs a Linux with clone3 (5.7+) that a seccomp filter does not refuse; where it is not
    usable the zygote falls back to fork + move for good."""
    global _clone3_off
    if not _clone3_usable():
        return -1
    if _thread_count() > 1:
        # a raw clone3 runs none of glibc's at-fork steps: a lock another thread holds at that
        # instant (malloc's, stdio's) stays held in the child, which hangs on it; fork() resets
        # them. The zygote has no thread; a process that has one forks and moves the child.
        return -1
    try:
        cg = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return -1  # the move says why
    try:
        args_type, syscall, api = _clone3_api()
        args = args_type(flags=_CLONE_INTO_CGROUP, exit_signal=signal.SIGCHLD, cgroup=cg)
        sys.audit("os.fork")
        size = len(bytes(args))
        api.PyOS_BeforeFork()
        try:
            pid = syscall(_SYS_CLONE3, args, size)
        except BaseException:
            api.PyOS_AfterFork_Parent()  # no child: release what BeforeFork took
            raise
        if pid == 0:
            api.PyOS_AfterFork_Child()
            return 0
        err = _errno()
        api.PyOS_AfterFork_Parent()
    except Exception as exc:  # no ctypes, no pythonapi (another interpreter)
        _clone3_off = f"{type(exc).__name__}: {exc}"
        return -1
    finally:
        with contextlib.suppress(OSError):  # (in the child too: it needs no cgroup fd)
            os.close(cg)
    if pid < 0:
        if err in (errno.ENOSYS, errno.EPERM, errno.E2BIG):
            _clone3_off = os.strerror(err)  # an old kernel, or a seccomp filter's refusal
        return -1
    return int(pid)


def _join(procs: str, pid: int) -> None:
    """Move ``pid`` into the cgroup whose ``cgroup.procs`` is ``procs``."""
    fd = os.open(procs, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, str(pid).encode())
    finally:
        os.close(fd)


def _child(
    entry: str,
    fn: EntryFunction | None,
    msg: dict[str, Any],
    fds: list[int],
    pidfds: list[int],
    path0: bool = False,
) -> NoReturn:
    """The forked child: set up like a fresh agent process, run, exit. Never returns."""
    code = _CHILD_FAILED
    try:
        os.setsid()  # before "go": the agent's first line runs as its session's leader
        for fd in pidfds:  # the zygote's watch on earlier children
            os.close(fd)
        out, err, go = fds
        null = os.open(os.devnull, os.O_RDONLY)
        for src, dst in ((null, 0), (out, 1), (err, 2)):
            os.dup2(src, dst)
            os.close(src)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(msg["env"]).items()})
        _stamp_environ(os.environ.get(REAP_VAR, ""))
        os.chdir(str(msg["cwd"]))
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        sys.pycache_prefix = os.environ.get("PYTHONPYCACHEPREFIX") or None
        while os.read(go, 1):  # the harness closes its end once the ledger knows our group
            pass
        os.close(go)
        code = 1  # from here on, a failure is the agent's start-up failing, as in a fresh one
        learn = os.environ.get(LEARN_VAR, "")
        if learn:  # what the run imports beyond the zygote's modules: written when it ends
            own = [os.getcwd()]
            main = msg.get("main") or ()
            if main and main[0] == "path":  # the script's folder: its own modules
                own.append(os.path.dirname(os.path.realpath(str(main[1]))))
            atexit.register(_write_learned, learn, frozenset(sys.modules), own)
        random.seed()
        probe.reset()
        _failpoints.reload()
        args = [str(a) for a in msg.get("args", ())]
        if fn is not None:
            code = call(entry, fn, args)
        else:  # as `python SCRIPT ARGS` / `python -m MODULE ARGS` started here would
            kind, target, _ = (str(x) for x in msg["main"])
            if path0:
                sys.path.pop(0)
            first = os.path.dirname(os.path.realpath(target)) if kind == "path" else os.getcwd()
            code = run_main(kind, target, args, first)
    except BaseException:  # the set-up failed: say why on the attempt's stderr
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    _finish(code)


def _write_learned(path: str, before: frozenset[str], own: list[str]) -> None:
    """Write the modules imported since ``before`` (in import order) that are not the agent's
    own (nothing under ``own``: its working folder, its script's folder), one a line, to
    ``path``."""
    own = [os.path.realpath(d) for d in own]
    names: list[str] = []
    for name, mod in list(sys.modules.items()):
        if name in before or name == "__main__" or mod is None:
            continue
        where = getattr(mod, "__file__", None)
        if where and any(os.path.realpath(where).startswith(d + os.sep) for d in own):
            continue
        names.append(name)
    with contextlib.suppress(OSError):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("".join(n + "\n" for n in names[:MAX_LEARNED]))
        os.replace(tmp, path)


def _stamp_environ(token: str) -> bool:
    """Write ``token`` over the placeholder in this process's initial environment block (what
    ``/proc/self/environ`` shows and a plain fork inherits); best effort, False if not done."""
    old = f"{REAP_VAR}={PLACEHOLDER_TOKEN}".encode()
    new = f"{REAP_VAR}={token}".encode()
    if len(new) != len(old) or new == old:
        return False
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            block = b"\0" + mem.read(end - start)
            at = block.find(b"\0" + old + b"\0")
            if at < 0:
                return False
            mem.seek(start + at)
            mem.write(new)
    except (OSError, IndexError, ValueError):
        return False
    return True


def _finish(code: int) -> NoReturn:
    """End the child as the interpreter would: join threads, run atexit, flush, exit."""
    for name, mod in (("_shutdown", threading), ("_run_exitfuncs", sys.modules.get("atexit"))):
        fn = getattr(mod, name, None)
        if fn is not None:
            with contextlib.suppress(BaseException):
                fn()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            if stream is not None:
                stream.flush()
    os._exit(code)


def main(argv: list[str]) -> None:
    """The zygote process: ``argv`` is ``FD CWD ITEM...`` (``_BOOT`` in
    :mod:`crashpoint.harness._engine._zygote`); an ITEM is an entry (``module:function``), a
    warm module (``module``) or a best-effort one (``?module``)."""
    fd, cwd, preload = int(argv[0]), argv[1], argv[2:]
    # an ignored SIGCHLD survives exec and would have the kernel reap our children unseen
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # sys.path[0] is where we were started; an entry resolves against the agent's cwd instead,
    # as ``python -m crashpoint._entry`` run there would
    if sys.path and sys.path[0] in ("", ".", os.getcwd()):
        sys.path.pop(0)
    sock = socket.socket(fileno=fd)
    server = _Server(sock)
    if cwd:
        sys.path.insert(0, cwd)
        server.path0 = True
    try:
        for item in preload:
            if ":" in item:
                server.load(item)
            else:
                server.warm(item.lstrip("?"), strict=not item.startswith("?"))
    except Exception as exc:
        _send(sock, {"op": "error", "error": str(exc), "type": type(exc).__name__})
        return
    _send(sock, {"op": "ready", "pid": os.getpid(), "skipped": server.skipped})
    server.serve()
