"""Fork mode: a pre-forked, single-threaded "zygote" interpreter that imports an agent given as
``module:function`` once and forks one child per attempt (milliseconds instead of a fresh
interpreter's tens to hundreds). It serves ``{python}`` command agents too (a fork server): the
zygote imports the agent's *warm* modules (``AgentSpec.warm``: listed, or the script's top-level
imports, read with ``ast``; never the agent's own code) and each child runs the script or
``-m`` module as ``__main__`` (:func:`crashpoint._entry.run_main`, runpy), with
``sys.argv`` and ``sys.path[0]`` as the interpreter would set them; see :func:`fork_plan`.

Use it as a context manager and hand it to the harness as its launcher::

    with Zygote.for_agent(agent) as zygote:
        result = Campaign(agent, families, report_dir, launcher=zygote).run()

:meth:`Zygote.spawn` returns a :class:`ForkedProcess`, which has the interface of
:class:`~crashpoint._proc._process.AgentProcess` (``pid``, ``wait() -> Exit``, ``signal``,
``kill``), so the trial runner treats a forked attempt exactly as a spawned one: the child leads
its own session (``killpg`` and ``kill_tree`` reach it and everything it starts), its exit is
the real wait status (exit code or killing signal), a timeout kills its tree, its stdout and
stderr are captured (capped, as spawned attempts' are), and what it leaves behind is reported as
orphans: the members of its cgroup where the machine allows one per attempt (the zygote moves the
child into it before it answers "started"), else the stragglers of its session and reap token.

How a child is made (in the zygote, which has no thread, so fork is safe)::

    fork -> (the zygote moves it into the attempt's cgroup, if any, and answers "started": it
    does not wait for the child to be scheduled; with glibc and only the standard library's
    native modules mapped, clone3 makes the child in its cgroup and nothing is moved) -> setsid
    -> stdin /dev/null, stdout/stderr onto the harness's pipes -> os.environ = the attempt's
    env, its reap token stamped into the process's initial environment, chdir -> wait for "go" ->
    re-seed random, probe.reset(), _failpoints.reload() -> call the function
    (crashpoint._entry.call, the spawn path's own code), or run the script/module as
    __main__ (crashpoint._entry.run_main) -> join threads, atexit, flush
    -> os._exit(code)

``os.environ`` changes what the child's execs inherit, not ``/proc/PID/environ`` (the block the
zygote was started with), which the reaper reads to find an attempt's detached processes
(:func:`~crashpoint._proc._process.marked`). So the zygote starts with a placeholder
``CRASHPOINT_REAP_TOKEN=000…`` and each child overwrites, in its own copy of that block, the
placeholder with its attempt's token (same length): a plain ``os.fork`` of the agent that
detaches is marked too. Where ``/proc/self/mem`` cannot be written, only what the child execs
carries the token.

The "go" pipe lets the harness register the child's process group with the ledger
(``on_start``) before the agent can send its first probe event, so a kill at event #0 finds it.

The control channel is a Unix ``SOCK_SEQPACKET`` socketpair: one JSON object per packet (message
boundaries kept by the kernel, so no framing), file descriptors attached with ``SCM_RIGHTS``::

    zygote  -> harness   {"op": "ready", "pid": Z}            | {"op": "error", "error": "..."}
    harness -> zygote    {"op": "spawn", "id": N, "entry": "m:f", "args": [..], "env": {..},
                          "cwd": "...", "cgroup": ".../cgroup.procs" or "",
                          "main": null | ["path", SCRIPT, ""] | ["module", NAME, ""]}
                          + fds [stdout, stderr, go]
    zygote  -> harness   {"op": "started", "id": N, "pid": P} | {"op": "refused", "id": N,
                                                                  "error": "..."}
    zygote  -> harness   {"op": "exited", "pid": P, "status": S}   (raw wait status, any time)
    harness -> zygote    {"op": "vet", "id": N, "modules": [..], "timeout": T}   (Zygote.learn)
    zygote  -> harness   {"op": "vetted", "id": N, "modules": [safe..], "dropped": [[m, why]..]}
    harness -> zygote    {"op": "warm", "id": N, "modules": [..]}
    zygote  -> harness   {"op": "warmed", "id": N, "skipped": [..]}

A ``vet`` forks a child of the zygote (not an attempt: no "started", no "exited") that imports
the modules in order and reports each on a pipe; one that kills that child (``os._exit``, a
crash), hangs it past ``T`` or starts a thread is left out and the next child vets the rest
without it, so the zygote only ever imports (``warm``) what a copy of itself survived. The
zygote's loop goes on meanwhile (spawns, exits).

The zygote watches each child through a pidfd (Linux >= 5.3; otherwise it polls ``waitpid``
every 10 ms), reaps it and reports its status. When the harness's end closes (``close()``, or
the harness died), the zygote SIGKILLs the process groups of the children left, reaps them and
exits. Output goes to pipes the harness reads (one thread per attempt, capped: see
:class:`~crashpoint._proc._process.OutputCapture`); the capture ends once the attempt's
processes are gone, not on end-of-file, so a straggler that keeps a pipe open holds nothing.

What differs from a fresh interpreter, by construction: the module is imported once, in the
zygote, with the zygote's environment (read per-attempt settings inside the function, not at
import); interpreter-level settings read at start-up (``PYTHONUNBUFFERED``, ``PYTHONPATH``,
``-X`` options) are the zygote's, and so is the str-hash seed: forked attempts share one where
fresh interpreters each draw their own (``random`` is re-seeded per fork). Faults that need a
different process set-up (a tmpfs namespace, ``RLIMIT_FSIZE``, the injected ``sitecustomize``
of ``fileop`` kills) make the trial runner fall back to the spawn path for that attempt.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from crashpoint._forkserver import LEARN_VAR, MAX_MESSAGE
from crashpoint._placeholders import fields, fill
from crashpoint._proc import (
    KEEP_HEAD,
    KEEP_TAIL,
    PLACEHOLDER_TOKEN,
    REAP_VAR,
    AttemptCgroup,
    Exit,
    OutputCapture,
    attempt_cgroup,
    end_attempt,
    kill_tree,
    wait_exit,
    with_reap_token,
)
from crashpoint.errors import EntryError, InvalidArgument, ZygoteError
from crashpoint.harness._engine._pycache import bytecode_cache, bytecode_env
from crashpoint.harness._spec import AGENT_PLACEHOLDERS, PASS_ENV, WARM_IMPORTS, AgentSpec

__all__ = [
    "LEARN_VAR",
    "ForkPlan",
    "ForkedProcess",
    "Zygote",
    "fork_plan",
    "script_imports",
]

_IMPORT_ERRORS = ("EntryError", "ImportError", "ModuleNotFoundError")
#: How the zygote starts (``-c``, not ``-m``: this module must not run twice as __main__).
_BOOT = "import sys; from crashpoint._forkserver import main; main(sys.argv[1:])"


# -- what a zygote warms: the fork plan of an agent -------------------------------------------

#: Placeholders that differ per trial: a script path using one cannot be read beforehand
#: (all but the interpreter and the scenario's folder).
_PER_TRIAL = tuple(p for p in AGENT_PLACEHOLDERS if p not in ("python", "scenario_dir"))


@dataclass(frozen=True)
class ForkPlan:
    """How a zygote serves an agent: what it imports, where, and what each child runs.

    ``preload``: zygote items (``module:function`` entries, ``module`` warm modules, ``?module``
    best-effort ones). ``cwd``: the folder first on the zygote's ``sys.path``. ``main``: for a
    ``{python}`` command agent, ``("path", SCRIPT)`` or ``("module", NAME)`` as the command
    gives it; empty for an entry agent."""

    preload: tuple[str, ...]
    cwd: str
    main: tuple[str, ...] = ()


def _python_main(argv: Sequence[str]) -> tuple[str, str] | str:
    """``("path", script)`` or ``("module", name)`` from the arguments after ``{python}``,
    or why such a command cannot be run in a forked interpreter."""
    if not argv:
        return "the command is only {python} (an interactive interpreter)"
    first = argv[0]
    if first == "-m":
        if len(argv) < 2 or not argv[1]:
            return "-m names no module"
        return ("module", argv[1])
    if first.startswith("-"):
        return (
            f"the interpreter option {first!r} is read at start-up, and a forked attempt "
            "starts in an interpreter that already runs (drop the option, or set "
            "warm: false)"
        )
    return ("path", first)


def script_imports(source: str, filename: str = "<script>") -> list[str]:
    """The modules a script imports at its top level (``import a.b``: ``a.b``; ``from a.b
    import c``: ``a.b``), in order, without running it; imports inside functions, classes or
    ``if``/``try`` blocks, relative ones and ``__future__`` are left out. A SyntaxError (or
    ValueError: a NUL byte) says the file is not Python."""
    import ast

    tree = ast.parse(source, filename)
    out: list[str] = []
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        for name in names:
            if name != "__future__" and name not in out:
                out.append(name)
    return out


def _locate(module: str, paths: list[str]) -> str | None:
    """The source file of ``module`` found under ``paths`` without importing anything
    (a package: its ``__main__.py`` when ``main``), or None."""
    import importlib.machinery

    parts = module.split(".")
    search: list[str] | None = paths or None
    origin: str | None = None
    for i in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or []) or None
        origin = spec.origin if spec.has_location else None
    if search and origin and os.path.basename(origin) == "__init__.py":
        main = os.path.join(os.path.dirname(origin), "__main__.py")
        return main if os.path.isfile(main) else None
    return origin


def _local(module: str, folder: str) -> bool:
    """Is ``module`` the agent's own code (its top package in ``folder``)?"""
    import importlib.machinery

    top = module.split(".")[0]
    return bool(folder) and importlib.machinery.PathFinder.find_spec(top, [folder]) is not None


def fork_plan(agent: AgentSpec) -> ForkPlan | str:
    """The zygote set-up that serves ``agent`` in fork mode, or why it must be spawned.

    An entry agent: its entry (and ``agent.warm`` modules). A ``{python}`` command agent with
    ``agent.warm``: the listed modules, or for :data:`WARM_IMPORTS` the top-level imports of
    its script (read with ``ast``, not run), leaving out the agent's own modules (those found in
    the script's folder, or the working folder of a ``-m`` agent) and the agent's module
    itself, whose top-level code must run in every attempt."""
    warm = tuple(agent.warm or ())
    if agent.entry:
        return ForkPlan((agent.entry, *[w for w in warm if w != WARM_IMPORTS]), agent.cwd)
    if agent.warm is None:
        return "agent.warm is not set (fork mode for a command agent is opt-in)"
    if agent.command[0] != "{python}":
        return (
            f"the command starts with {agent.command[0]!r}, not {{python}}: only a Python "
            "agent run by this interpreter can be forked from it"
        )
    main = _python_main(agent.command[1:])
    if isinstance(main, str):
        return main
    kind, target = main
    if set(fields(target)) & set(_PER_TRIAL):
        return (
            f"the {'script' if kind == 'path' else 'module'} {target!r} changes per trial "
            "(a per-trial placeholder): the zygote cannot prepare it beforehand"
        )
    target = fill(target, {"scenario_dir": agent.scenario_dir, "python": sys.executable})
    env = dict(agent.env)
    pypath = [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x]
    if kind == "path":
        full = (
            target
            if os.path.isabs(target)
            else os.path.join(agent.cwd, target)
            if agent.cwd
            else ""
        )
        if not full:
            return (
                f"the script {target!r} is relative and the agent has no cwd (it starts in "
                "the trial's {workdir})"
            )
        folder = os.path.dirname(os.path.realpath(full))
        own = os.path.splitext(os.path.basename(full))[0]
    else:
        full = _locate(target, [*([agent.cwd] if agent.cwd else []), *pypath]) or ""
        folder = agent.cwd
        own = target
    imports: list[str] = []
    if WARM_IMPORTS in warm or kind == "path":
        try:
            with open(full, "rb") as f:
                source = f.read()
            found = script_imports(source.decode("utf-8"), full)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
            if kind == "module" and not full:
                found = []  # no source to read (an extension, a zip): nothing to warm
            else:
                why = (
                    exc.msg
                    if isinstance(exc, SyntaxError)
                    else getattr(exc, "strerror", None) or str(exc)
                )
                return f"the script {full or target} is not a Python source file ({why})"
        if WARM_IMPORTS in warm:
            imports = [m for m in found if not _local(m, folder)]
    listed = [w for w in warm if w != WARM_IMPORTS]
    items: list[str] = []
    for m in listed:
        if m == own:
            return (
                f"warm module {m!r} is the agent itself: its top-level code must run in "
                "every attempt, not once in the zygote"
            )
        items.append(m)
    items += [
        f"?{m}" for m in imports if m not in listed and m != own and not m.startswith(own + ".")
    ]
    return ForkPlan(tuple(items), folder, (kind, target))


# -- the zygote process ------------------------------------------------------------------------


# -- the harness side ----------------------------------------------------------------------------


class ForkedProcess:
    """One attempt forked by a :class:`Zygote`; the interface of ``AgentProcess``."""

    def __init__(
        self,
        zygote: Zygote,
        pid: int,
        timeout: float,
        capture: OutputCapture,
        t0: float,
        reap_token: str = "",
        cgroup: AttemptCgroup | None = None,
        containment: str = "",
    ) -> None:
        self.zygote, self.pid, self.timeout = zygote, pid, timeout
        self.reap_token = reap_token  # the attempt's REAP_VAR: finds what it detached
        self.containment = containment
        self._capture, self._cgroup, self._t0 = capture, cgroup, t0
        self._exit: Exit | None = None

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the attempt's whole process group (to the child alone while it does
        not lead one yet: forked a moment ago, it has run none of the agent's code)."""
        if self._exit is None and not self.zygote._has_exited(self.pid):
            _signal_group(self.pid, sig)

    def kill(self) -> None:
        """Kill the attempt's processes, all of them (its cgroup), whether or not it ended."""
        if self._cgroup is not None:
            self._cgroup.kill()
        if self._exit is None and not self.zygote._has_exited(self.pid):
            kill_tree(self.pid, sid=self.pid, token=self.reap_token)

    def _kill_all(self) -> None:
        if self._cgroup is not None:
            self._cgroup.kill()
        kill_tree(self.pid, sid=self.pid, token=self.reap_token)

    def wait(self, timeout: float | None = None) -> Exit:
        """Wait for the attempt to end (killing its tree on timeout); reap everything."""
        if self._exit is not None:
            return self._exit
        limit = self.timeout if timeout is None else timeout
        timed_out = False
        try:
            status = self.zygote._wait_exit(self.pid, self._t0 + limit)
            if status is None:
                timed_out = True
                self._kill_all()
                status = self.zygote._wait_exit(self.pid, time.monotonic() + 30.0)
                if status is None:
                    raise ZygoteError(
                        f"the zygote did not report the end of pid {self.pid} within 30s of SIGKILL"
                    )
        except BaseException:
            self._kill_all()
            self._end()
            raise
        duration = time.monotonic() - self._t0
        orphans = self._end()  # as AgentProcess.wait judges
        out, err = self._capture.finish()
        rc = os.waitstatus_to_exitcode(status)
        self._exit = Exit(
            rc if rc >= 0 else None,
            -rc if rc < 0 else None,
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
        return end_attempt(self.pid, self.reap_token, self._cgroup, self._capture)

    def __del__(self) -> None:  # never waited for (an error in between): do not leak its pipes
        with contextlib.suppress(Exception):
            if self._exit is None:
                self._capture.finish()

    def __repr__(self) -> str:
        return f"<ForkedProcess pid={self.pid} zygote={self.zygote.pid}>"


def _signal_group(pid: int, sig: int) -> None:
    """``killpg(pid, sig)``; a child that has not called ``setsid`` yet (the zygote answers
    "started" without waiting for it: the child runs nothing of the agent before "go") leads
    no group: then the child itself, and its group again in case it just made one."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        for kill in (os.kill, os.killpg):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, sig)
    except PermissionError:
        pass


def _shutdown(proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
    """Close the control channel and reap the zygote (kills it if it does not go in time)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    try:
        wait_exit(proc, 10)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid, sid=proc.pid)
        proc.wait()


class Zygote:
    """A warm interpreter that forks attempts of entry agents; see the module docstring.

    ``preload``: entries imported at start (a broken one fails :meth:`start` at once; others are
    imported on first :meth:`spawn`). ``env``: the zygote's environment (default: a clean one,
    as the harness gives agents). ``cwd``: the folder entries resolve against, as an agent's
    ``cwd`` (default: only ``PYTHONPATH`` and installed packages).
    """

    def __init__(
        self,
        preload: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str = "",
        start_timeout: float = 60.0,
        python: str = sys.executable,
    ) -> None:
        self.preload = tuple(preload)
        self.env = dict(env) if env is not None else _clean_env()
        self.cwd = cwd
        self.start_timeout = start_timeout
        self.python = python
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._log: IO[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._replies: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._live: set[int] = set()
        self._ready: dict[str, Any] | None = None
        self._dead = ""
        self._next_id = 0
        self.forks = 0  # attempts forked so far (the rest of a runner's attempts were spawned)
        self.main: tuple[str, ...] = ()  # a {python} command agent's ("path"|"module", target)
        self.skipped: list[str] = []  # best-effort warm modules that did not import
        self.learned = False  # what a golden run imported was pre-imported (:meth:`learn`)
        self.learned_modules: list[str] = []  # those modules
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._started = 0.0  # when the running zygote was launched
        self._checked = False  # its ready message was read (and it was ready)

    @classmethod
    def for_agent(cls, agent: AgentSpec, **kw: Any) -> Zygote:
        """A zygote set up as the harness sets up ``agent`` (its env, its cwd, its entry)."""
        plan = fork_plan(agent)
        if isinstance(plan, str):
            raise InvalidArgument(f"this agent cannot be forked: {plan}")
        env = _clean_env(dict(agent.env))
        z = cls(plan.preload, env=env, cwd=plan.cwd, **kw)
        z.main = plan.main
        return z

    def main_of(self, argv: Sequence[str]) -> tuple[str, str, list[str]] | None:
        """``(kind, target, args)`` if ``argv`` (a filled command) runs this zygote's ``main``
        with this interpreter, else None (the attempt is spawned: e.g. wrapped by strace)."""
        if not self.main or len(argv) < 2 or argv[0] != self.python:
            return None
        kind, target = self.main
        if kind == "module":
            if argv[1:3] == ["-m", target]:
                return (kind, target, list(argv[3:]))
            return None
        return (kind, target, list(argv[2:])) if argv[1] == target else None

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and not self._dead

    def start(self, wait: bool = True) -> Zygote:
        """Start the zygote and import ``preload``; raise EntryError / ZygoteError if it fails.
        ``wait=False``: return at once, while it starts (e.g. beside a golden run that is
        spawned anyway); :meth:`ready` then waits and raises what :meth:`start` would, and
        :meth:`spawn` and :meth:`learn` wait for it first."""
        if self._proc is None:
            self._launch()
        if wait:
            self.ready()
        return self

    def _launch(self) -> None:
        self._ready, self._dead = None, ""
        self._replies.clear()
        self._exits.clear()
        self._live.clear()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with contextlib.suppress(OSError):  # room for one whole spawn message (an environment)
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * MAX_MESSAGE)
        self._log = tempfile.TemporaryFile(prefix="crashpoint-zygote-")  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(
                [self.python, "-c", _BOOT, str(theirs.fileno()), self.cwd, *self.preload],
                env={**self.env, REAP_VAR: PLACEHOLDER_TOKEN},  # see _stamp_environ
                cwd=self.cwd or tempfile.gettempdir(),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            self._log.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        self._finalizer = weakref.finalize(self, _shutdown, self._proc, ours)
        self._reader = threading.Thread(
            target=self._read_loop, name="crashpoint-zygote", daemon=True
        )
        self._reader.start()
        self._started = time.monotonic()
        self._checked = False

    def ready(self) -> Zygote:
        """Wait until the zygote started by :meth:`start` has imported ``preload`` (at once if
        it has, or if it is not running); raise EntryError / ZygoteError if it failed."""
        if self._proc is None or self._checked:
            return self
        with self._cond:
            self._cond.wait_for(
                lambda: self._ready is not None or bool(self._dead),
                timeout=max(0.0, self._started + self.start_timeout - time.monotonic()),
            )
        ready = self._ready_message()
        if ready is not None:
            self.skipped = [str(m) for m in ready.get("skipped") or ()]
        if ready is None or ready.get("op") != "ready":
            why = (
                (ready or {}).get("error")
                or self._dead
                or f"no answer within {self.start_timeout}s"
            )
            kind = (ready or {}).get("type", "")
            tail = ""
            if kind not in _IMPORT_ERRORS:  # its last words (a traceback), read before close
                if self._proc is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                        wait_exit(self._proc, 2)
                tail = self._log_tail()
            self.close()
            if kind in _IMPORT_ERRORS:
                raise EntryError(why)
            raise ZygoteError(f"the fork-mode zygote did not start: {why}{tail}")
        self._checked = True
        return self

    def _ready_message(self) -> dict[str, Any] | None:
        with self._cond:
            return self._ready

    def close(self) -> None:
        """Kill what is still running, stop the zygote, reap it. Safe to call twice."""
        if self._proc is None:
            return
        for pid in list(self._live):
            with contextlib.suppress(OSError):
                _signal_group(pid, signal.SIGKILL)  # also one that has not called setsid yet
        deadline = time.monotonic() + 10.0
        for pid in list(self._live):
            with contextlib.suppress(ZygoteError):
                self._wait_exit(pid, deadline)
        if self._finalizer is not None:
            self._finalizer()  # closes the socket, reaps the zygote
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._log is not None:
            self._log.close()
        self._proc = self._sock = self._log = self._reader = None
        self._dead = self._dead or "closed"

    def __enter__(self) -> Zygote:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- learning what the agent imports ---------------------------------------------------------

    def learn(self, path: str, timeout: float = 60.0) -> str:
        """Pre-import in the zygote what a forked golden run (started with :data:`LEARN_VAR` =
        ``path``) imported beyond it. Each module is first vetted in a child forked from the
        zygote (which has imported all the zygote has, as the zygote would import the rest):
        one that fails to import, starts a thread, kills its importer (an ``os._exit``, a
        crash) or is still importing at ``timeout`` is left out, and the zygote goes on without
        it. Once per zygote; returns a note for the campaign ("" if nothing was learned)."""
        if self.learned or self._proc is None:
            return ""
        self.ready()
        self.learned = True
        try:
            with open(path, encoding="utf-8") as fh:
                names = [n for n in fh.read().split() if n.replace(".", "_").isidentifier()]
        except OSError:
            return ""
        if not names:
            return ""
        vetted = self._ask({"op": "vet", "modules": names, "timeout": timeout}, timeout + 30)
        if vetted is None or vetted.get("op") != "vetted":
            return ""  # a zygote that cannot fork any more says so at the next spawn
        safe = [str(m) for m in vetted.get("modules") or ()]
        dropped = [f"{m} ({why})" for m, why in vetted.get("dropped") or ()]
        left = f"; left out: {', '.join(dropped)}" if dropped else ""
        if not safe:
            return (
                f"fork mode: nothing the golden run imported could be pre-imported{left}"
                if dropped
                else ""
            )
        reply = self._ask({"op": "warm", "modules": safe}, quiet=False)
        if reply is None:
            return ""
        if reply.get("op") != "warmed":
            raise ZygoteError(f"the fork-mode zygote could not pre-import: {reply.get('error')}")
        skipped = [str(m) for m in reply.get("skipped") or ()]
        self.skipped += skipped
        self.learned_modules = [m for m in safe if m not in skipped]
        return (
            f"fork mode: {len(safe) - len(skipped)} module(s) the golden run imported are now "
            "pre-imported for the trials"
            + (f" ({len(skipped)} did not import in the zygote)" if skipped else "")
            + left
        )

    def _ask(
        self, request: dict[str, Any], timeout: float | None = None, *, quiet: bool = True
    ) -> dict[str, Any] | None:
        """Send ``request`` (its id added) and wait for its answer; None if it does not fit one
        message or the zygote is gone before it is sent; then, if no answer came within
        ``timeout`` or the zygote died: None if ``quiet``, else the ZygoteError."""
        rid = self._new_id()
        data = json.dumps({**request, "id": rid}).encode()
        if len(data) > MAX_MESSAGE:
            return None
        with self._send_lock:
            if self._dead or self._sock is None:
                return None
            socket.send_fds(self._sock, [data], [])
        try:
            return self._wait_reply(rid, timeout)
        except ZygoteError:
            if quiet:
                return None
            raise

    # -- spawning ------------------------------------------------------------------------------

    def spawn(
        self,
        entry: str,
        *,
        env: Mapping[str, str],
        cwd: str,
        timeout: float,
        args: Sequence[str] = (),
        on_start: Callable[[int], None] | None = None,
        stdout_path: str | None = None,
        stderr_path: str | None = None,
        keep_head: int = KEEP_HEAD,
        keep_tail: int = KEEP_TAIL,
        main: Sequence[str] = (),
    ) -> ForkedProcess:
        """Fork an attempt of ``entry``; ``on_start(pid)`` runs before it may run any code.
        Output is captured as :class:`~crashpoint._proc._process.AgentProcess` captures it.
        ``main``: ``("path", SCRIPT)`` or ``("module", NAME)`` (``entry`` empty): the child
        runs it as ``__main__`` with ``sys.argv = [target, *args]``, as ``{python}`` would."""
        self.start()  # started if it is not, waited for if it is starting
        if not os.path.isdir(cwd):
            raise FileNotFoundError(f"the agent's working folder does not exist: {cwd}")
        token, env = with_reap_token(env)
        cgroup, why = attempt_cgroup()
        containment = "cgroup" if cgroup is not None else f"session ({why})"
        msg = json.dumps(
            {
                "op": "spawn",
                "entry": entry,
                "args": list(args),
                "env": env,
                "main": [*main, ""] if main else None,
                "cwd": cwd,
                "id": self._new_id(),
                "cgroup": cgroup.procs if cgroup is not None else "",
            }
        )
        rid = json.loads(msg)["id"]
        data = msg.encode()
        if len(data) > MAX_MESSAGE:
            if cgroup is not None:
                cgroup.close()
            raise ZygoteError(
                f"the attempt's environment and arguments take {len(data)} bytes; "
                f"fork mode passes at most {MAX_MESSAGE}"
            )
        try:
            (out_r, out_w), (err_r, err_w), sinks = OutputCapture.pipes(
                stdout_path, stderr_path, keep_head, keep_tail
            )
        except BaseException:
            if cgroup is not None:
                cgroup.close()
            raise
        reads: list[int] = [out_r, err_r]  # closed here until a capture owns them
        proc: ForkedProcess | None = None
        go_w = -1
        try:
            go_r, go_w = os.pipe()
            t0 = time.monotonic()
            try:
                with self._send_lock:
                    if self._dead or self._sock is None:
                        raise ZygoteError(f"the fork-mode zygote is gone ({self._dead})")
                    try:
                        socket.send_fds(self._sock, [data], [out_w, err_w, go_r])
                    except OSError as exc:
                        if exc.errno != errno.EMSGSIZE:
                            raise
                        raise ZygoteError(
                            f"the attempt's environment and arguments ({len(data)} bytes) do "
                            "not fit one control message here; pass fewer variables"
                        ) from exc
            finally:
                for fd in (go_r, out_w, err_w):
                    os.close(fd)
            reply = self._wait_reply(rid)
            if reply.get("op") != "started":
                if reply.get("type") in _IMPORT_ERRORS:
                    raise EntryError(str(reply.get("error")))
                raise ZygoteError(
                    f"the fork-mode zygote refused {entry or list(main)!r}: {reply.get('error')}"
                )
            capture = OutputCapture(out_r, err_r, sinks)
            reads = []
            proc = ForkedProcess(
                self, int(reply["pid"]), timeout, capture, t0, token, cgroup, containment
            )
            if on_start is not None:
                on_start(proc.pid)
        except BaseException:
            for fd in reads:
                os.close(fd)
            if proc is None:
                for sink in sinks:
                    sink.close()
                if cgroup is not None:
                    cgroup.close()
            else:  # it never ran a line of the agent: kill it while it waits for "go"
                _signal_group(proc.pid, signal.SIGKILL)
                os.close(go_w)
                go_w = -1
                with contextlib.suppress(Exception):
                    proc.wait()
            raise
        finally:
            if go_w >= 0:
                os.close(go_w)  # the child goes
        return proc

    def _new_id(self) -> int:
        with self._cond:
            self._next_id += 1
            return self._next_id

    # -- the control channel -------------------------------------------------------------------

    def _read_loop(self) -> None:
        sock = self._sock
        assert sock is not None
        why = "its control channel closed"
        while True:
            try:
                data = sock.recv(MAX_MESSAGE)
            except OSError as exc:
                why = f"its control channel failed: {exc}"
                break
            if not data:
                break
            try:
                msg = json.loads(data)
            except ValueError:
                continue
            with self._cond:
                op = msg.get("op")
                if op in ("ready", "error"):
                    self._ready = msg
                elif op == "started":
                    self.forks += 1
                    self._live.add(int(msg["pid"]))
                    self._exits.pop(int(msg["pid"]), None)  # a recycled pid starts afresh
                    self._replies[int(msg["id"])] = msg
                elif op in ("refused", "warmed", "vetted"):
                    self._replies[int(msg.get("id") or 0)] = msg
                elif op == "exited":
                    self._live.discard(int(msg["pid"]))
                    self._exits[int(msg["pid"])] = int(msg["status"])
                self._cond.notify_all()
        with self._cond:
            self._dead = why
            self._cond.notify_all()

    def _wait_reply(self, rid: int, timeout: float | None = None) -> dict[str, Any]:
        with self._cond:
            self._cond.wait_for(lambda: rid in self._replies or bool(self._dead), timeout)
            if rid in self._replies:
                return self._replies.pop(rid)
            if not self._dead:
                raise ZygoteError(f"the fork-mode zygote did not answer within {timeout}s")
        raise ZygoteError(
            f"the fork-mode zygote died while forking: {self._dead}{self._log_tail()}"
        )

    def _wait_exit(self, pid: int, deadline: float) -> int | None:
        """The wait status of ``pid`` once the zygote reaped it; None at ``deadline``."""
        with self._cond:
            done = self._cond.wait_for(
                lambda: pid in self._exits or bool(self._dead),
                timeout=max(0.0, deadline - time.monotonic()),
            )
            if pid in self._exits:
                return self._exits[pid]
            if not done:
                return None
        raise ZygoteError(
            f"the fork-mode zygote died before attempt pid {pid} ended: "
            f"{self._dead}{self._log_tail()}"
        )

    def _has_exited(self, pid: int) -> bool:
        with self._cond:
            return pid in self._exits

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        try:
            self._log.seek(0)
            text = self._log.read()[-2000:].decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return f"\nzygote stderr:\n{text}" if text else ""

    def __repr__(self) -> str:
        return f"<Zygote pid={self.pid} preload={list(self.preload)} live={sorted(self._live)}>"


def _clean_env(agent_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The zygote's environment: what passes, ``agent_env``, the private bytecode cache."""
    agent_env = dict(agent_env or {})
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    return {**env, **agent_env, **bytecode_env(agent_env, bytecode_cache())}
