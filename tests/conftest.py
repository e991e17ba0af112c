"""Shared fixtures: child processes that are always reaped.

``children`` spawns processes in their own session and, whatever the test's outcome, kills each
one's whole tree (snapshotted with psutil first, so a grandchild that re-parented itself is
still found) and asserts that nothing survived. A session-wide check then fails loudly if any
child of the pytest process is still alive at the end (the leak pytest-timeout #159 shows).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psutil
import pytest

#: How long a child may take to die after SIGKILL before it counts as a survivor.
REAP_TIMEOUT = 5.0
#: Environment variables a child never inherits from the test process.
SCRUBBED_ENV = ("CRASHPOINT_FAILPOINTS", "CRASHPOINT_LEDGER")

# This suite's own campaigns (many fail on purpose) and the gates its tests run write no step
# summary and print no annotation into the CI job that runs the suite: the plugin reads these
# at the end of every session. A test that checks them sets them for its own gate.
for _name in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS"):
    os.environ.pop(_name, None)

# The pytest sessions the tests start (``crashpoint run``, ``python -m pytest``) leave out
# langsmith's entry-point plugin, which imports langsmith (~1 s of CPU) in each of them and
# each of their xdist workers; this session's options were parsed already. (pytester's inner
# runs clear the variable: tests/plugin/conftest.py's UNRELATED_PLUGINS covers them.)
_NO_LANGSMITH = "-p no:langsmith_plugin"
if _NO_LANGSMITH not in os.environ.get("PYTEST_ADDOPTS", ""):
    os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {_NO_LANGSMITH}".strip()

#: Plugins of the test extras that no pytest session the tests start uses (they use neither
#: Hypothesis nor pyfakefs nor pytest-benchmark): 0.3-0.4 s of CPU a ``crashpoint run`` (of
#: ~1.7), Hypothesis's importing hypothesis at every session's end.
_UNUSED_IN_CHILD_SESSIONS = ("hypothesispytest", "benchmark", "fakefs")


def pytest_configure(config: pytest.Config) -> None:
    """Leave out :data:`_UNUSED_IN_CHILD_SESSIONS` in the pytest sessions this process starts.
    Only where this process runs tests itself (an xdist worker, or no workers): xdist workers
    read ``PYTEST_ADDOPTS`` when they start, and this suite's own tests use Hypothesis and
    pyfakefs."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and getattr(config.option, "numprocesses", 0):
        return  # the controller: its workers are yet to start, with its environment
    have = os.environ.get("PYTEST_ADDOPTS", "")
    more = [f"-p no:{n}" for n in _UNUSED_IN_CHILD_SESSIONS if f"no:{n}" not in have]
    if more:
        os.environ["PYTEST_ADDOPTS"] = " ".join([have, *more]).strip()


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (the default addopts) for this suite: two workers a core (at most four more
    than the cores). Its tests mostly wait on the agents they start: on 2 idle cores, 2 workers
    left 26% of the CPU idle and ran the suite in 476 s, 4 workers 2.7% and 384 s (2026-11-28).
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides where it is set (xdist's own reading)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = cores or 1
    return min(2 * n, n + 4)


def _describe(p: psutil.Process) -> str:
    try:
        return f"pid {p.pid} ({p.status()}): {' '.join(p.cmdline()) or p.name()}"
    except psutil.Error:
        return f"pid {p.pid} (gone)"


def _is_alive(p: psutil.Process) -> bool:
    """Running, or stopped; a zombie has died (its parent has yet to reap it)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _holds_pipe(pid: int, inodes: set[int]) -> bool:
    """True if process ``pid`` can write to one of the pipes ``inodes`` (the child's stdout and
    stderr).

    Only the write end counts: that is what the child's descendants inherit. The read ends are
    the test process's, and so are held, between fork and exec, by every process the test
    process is starting at that moment (another trial's agent, on another thread): such a
    process is no part of this child's tree.
    """
    if not inodes:
        return False
    wanted = {f"pipe:[{i}]" for i in inodes}
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        with contextlib.suppress(OSError):
            if os.readlink(f"{fd_dir}/{fd}") in wanted and _writable(pid, fd):
                return True
    return False


def _stat(pid: int) -> tuple[int, int, int]:
    """Process ``pid``'s parent, session and start time (clock ticks since boot), from one read
    of /proc/PID/stat (psutil reads it once per question)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[1]), int(fields[3]), int(fields[19])


def _writable(pid: int, fd: str) -> bool:
    """True if descriptor ``fd`` of process ``pid`` was opened for writing."""
    with open(f"/proc/{pid}/fdinfo/{fd}") as info:
        for line in info:
            if line.startswith("flags:"):
                return (int(line.split()[1], 8) & os.O_ACCMODE) != os.O_RDONLY
    return False


class Child:
    """One spawned process: its stdout as lines (with timeouts), its stderr, its tree."""

    def __init__(self, argv: Sequence[str], popen: subprocess.Popen[bytes]) -> None:
        self.argv = list(argv)
        self.popen = popen
        self.pid = popen.pid
        try:  # when it started, in clock ticks since boot (as its descendants' are counted)
            self._started = _stat(self.pid)[2]
        except OSError:  # already gone and reaped: anything it left started after boot
            self._started = 0
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._stderr: list[bytes] = []
        self._threads = [
            threading.Thread(target=self._pump_lines, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _pump_lines(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.popen.stderr is not None
        for chunk in iter(lambda: self.popen.stderr.read1(65536), b""):  # type: ignore[union-attr]
            self._stderr.append(chunk)

    # -- talking to it ---------------------------------------------------------------------------

    def send(self, message: str | Mapping[str, Any]) -> None:
        """Write one line to the child's stdin (a mapping is sent as JSON)."""
        text = message if isinstance(message, str) else json.dumps(message)
        assert self.popen.stdin is not None
        self.popen.stdin.write(text.encode() + b"\n")
        self.popen.stdin.flush()

    def close_stdin(self) -> None:
        if self.popen.stdin is not None and not self.popen.stdin.closed:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()

    def read_line(self, timeout: float = 10.0) -> str | None:
        """The next stdout line (without the newline); None once stdout is closed."""
        try:
            raw = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no output from {self.argv} within {timeout}s\n{self.stderr_text()}"
            ) from None
        if raw is None:
            self._lines.put(None)  # EOF stays EOF for later reads
            return None
        return raw.decode("utf-8", "replace").rstrip("\n")

    def read_json(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next stdout line as a JSON object; fails the test (with stderr) at EOF."""
        line = self.read_line(timeout)
        if line is None:
            self.wait(REAP_TIMEOUT)
            raise AssertionError(
                f"{self.argv} closed its stdout (exit {self.popen.returncode}) while a line was "
                f"expected\nstderr:\n{self.stderr_text()}"
            )
        try:
            obj = json.loads(line)
        except ValueError:
            raise AssertionError(
                f"not a JSON line from the child: {line!r}\nstderr:\n{self.stderr_text()}"
            ) from None
        assert isinstance(obj, dict), line
        return obj

    def has_output(self, timeout: float) -> bool:
        """True if a stdout line (or EOF) arrives within ``timeout`` seconds; consumes nothing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._lines.empty():
                return True
            time.sleep(0.01)
        return not self._lines.empty()

    def stderr_text(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    def wait(self, timeout: float = 10.0) -> int:
        """Wait for the child to exit; return its returncode (-N when killed by signal N)."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.argv} still running after {timeout}s\n{self.stderr_text()}"
            ) from None

    # -- its process tree --------------------------------------------------------------------------

    def tree(self) -> list[psutil.Process]:
        """The child, its descendants, every other member of its session, and any process that
        still holds its stdout or stderr pipe (a grandchild that double-forked and called
        setsid left both the tree and the session, but not the pipe), as psutil handles."""
        procs: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.pid)
            procs[root.pid] = root
            for c in root.children(recursive=True):
                procs[c.pid] = c
        unreaped = self.popen.returncode is None  # then its pid still names its session
        pipes = self._pipe_inodes()
        me = os.getpid()
        for pid in psutil.pids():
            if pid in procs or pid == me:
                continue
            with contextlib.suppress(OSError, psutil.Error):
                ppid, session, started = _stat(pid)
                # Another child of the test process (a sibling, maybe not yet exec'd) is never
                # in this tree; killing it and then waiting for it with psutil would reap it
                # behind its Popen's back, and its Popen would then read returncode 0.
                if ppid == me:
                    continue
                # Only a process started after the child can be one it left behind: the older
                # ones' descriptors are not read (on a busy machine that scan cost more than
                # the trials the tests run).
                if (unreaped and session == self.pid) or (
                    started >= self._started and _holds_pipe(pid, pipes)
                ):
                    procs[pid] = psutil.Process(pid)
        return list(procs.values())

    def _pipe_inodes(self) -> set[int]:
        out = set()
        for stream in (self.popen.stdout, self.popen.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                out.add(os.fstat(stream.fileno()).st_ino)  # type: ignore[union-attr]
        return out

    def kill_tree(
        self, sig: int = signal.SIGKILL, timeout: float = REAP_TIMEOUT
    ) -> list[psutil.Process]:
        """Snapshot the tree, send ``sig`` to all of it, reap; return the snapshot.

        Fails the test if any process of the snapshot is still alive after ``timeout``.
        """
        snapshot = self.tree()
        survivors = self._signal_and_reap(snapshot, sig, timeout)
        if survivors:
            raise AssertionError(
                f"{len(survivors)} process(es) of {self.argv} survived "
                f"{signal.Signals(sig).name}:\n" + "\n".join(map(_describe, survivors))
            )
        return snapshot

    def _signal_and_reap(
        self, snapshot: list[psutil.Process], sig: int, timeout: float
    ) -> list[psutil.Process]:
        if self.popen.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)  # the child leads its own group (new session)
        for p in snapshot:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)  # reap our own child so its returncode is kept
        survivors = [p for p in snapshot if p.pid != self.pid]
        deadline = time.monotonic() + timeout
        while survivors and time.monotonic() < deadline:  # a zombie that is not ours is dead
            _, alive = psutil.wait_procs(survivors, timeout=0.05)
            survivors = [p for p in alive if _is_alive(p)]
        if self.popen.returncode is None:
            survivors.insert(0, psutil.Process(self.pid))
        return survivors

    def reap(self) -> list[str]:
        """Kill whatever is left of the tree, close the pipes; describe any survivor."""
        self.close_stdin()
        out = [
            _describe(p) for p in self._signal_and_reap(self.tree(), signal.SIGKILL, REAP_TIMEOUT)
        ]
        for t in self._threads:
            t.join(1.0)
        if any(t.is_alive() for t in self._threads):  # nobody should hold the pipes now
            out.append("something outside the tree still holds the child's stdout/stderr")
        else:
            for stream in (self.popen.stdout, self.popen.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        return out

    def __repr__(self) -> str:
        return f"<Child pid={self.pid} rc={self.popen.returncode} argv={self.argv}>"


class Children:
    """Spawns children in their own session; :meth:`reap_all` kills and reaps them all."""

    def __init__(self) -> None:
        self.spawned: list[Child] = []

    def spawn(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str | None] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> Child:
        """Start ``argv`` in a new session with piped stdin/stdout/stderr.

        ``env`` adds to (a None value removes from) the test's environment, minus
        :data:`SCRUBBED_ENV`.
        """
        full_env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
        for k, v in (env or {}).items():
            if v is None:
                full_env.pop(k, None)
            else:
                full_env[k] = v
        if full_env.get("CRASHPOINT_FAILPOINTS") and not full_env.get("CRASHPOINT_REAP_TOKEN"):
            # the test plays the harness: failpoints are armed only in an attempt (its token)
            full_env["CRASHPOINT_REAP_TOKEN"] = secrets.token_hex(16)
        args = [os.fspath(a) for a in argv]
        popen = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
        child = Child(args, popen)
        self.spawned.append(child)
        return child

    def python(
        self,
        script: str | os.PathLike[str],
        *args: str | os.PathLike[str],
        env: Mapping[str, str | None] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> Child:
        """Run a Python file with this interpreter."""
        return self.spawn([sys.executable, script, *args], env=env, cwd=cwd)

    def reap_all(self) -> list[str]:
        """Kill every spawned tree; describe each process that survived (empty: all reaped)."""
        out: list[str] = []
        for child in self.spawned:
            out += [f"{child.argv[:4]}: {what}" for what in child.reap()]
        return out


@pytest.fixture
def children() -> Iterator[Children]:
    """Spawn child processes that are killed and reaped after the test, pass or fail."""
    spawner = Children()
    try:
        yield spawner
    finally:
        survivors = spawner.reap_all()
    if survivors:
        pytest.fail(
            "child processes survived SIGKILL after the test:\n" + "\n".join(survivors),
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_children() -> Iterator[None]:
    """At the end of the session no child of the pytest process may be left running."""
    yield
    me = psutil.Process()
    left = [p for p in me.children(recursive=True) if _is_alive(p)]
    if not left:
        return
    _, alive = psutil.wait_procs(left, timeout=2.0)  # let processes that are exiting finish
    alive = [p for p in alive if _is_alive(p)]
    if not alive:
        return
    described = [_describe(p) for p in alive]
    for p in alive:  # do not leave them behind either way
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=REAP_TIMEOUT)
    pytest.fail(
        f"{len(described)} child process(es) of pytest (pid {me.pid}) were still running at the "
        "end of the session; a test or fixture leaked them (use the `children` fixture):\n"
        + "\n".join(described),
        pytrace=False,
    )


# -- a real PostgreSQL server (issue 14): one per test session (per xdist worker), a fresh
#    database per test; skipped with the reason where the server binaries, the unprivileged
#    account (CI runs as root) or the driver are missing.


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running :class:`crashpoint.harness._standins._postgres.PostgresServer` (fsync on)."""
    from crashpoint.harness._standins._postgres import PostgresServer, unavailable

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    # not under tmp_path: pytest's base folder is 0700 and the server's account cannot reach it
    with PostgresServer.start() as server:
        yield server


@pytest.fixture
def pg_dsn(pg_server: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """The DSN of an empty database of its own on :func:`pg_server`, dropped afterwards."""
    pytest.importorskip(
        "psycopg",
        reason="psycopg (PostgreSQL driver) is not installed: pip install 'crashpoint[postgres]'",
    )
    name = "t_" + secrets.token_hex(6)
    dsn = pg_server.create_database(name)
    yield dsn
    with contextlib.suppress(RuntimeError):
        pg_server.drop_database(name)


# -- one suite, both stores (issue 14): the runs, effects and approval suites take their store
#    from ``store_factory``, parametrized over the file store and PostgresStore.


class StoreFactory:
    """Makes stores of one kind for a test: ``make(name, **options)``; ``location(name)`` is
    what an agent or the CLI is given for the same store (a folder, or the DSN)."""

    def __init__(self, kind: str, base: Any, dsn: str | None) -> None:
        self.kind, self.base, self.dsn = kind, base, dsn
        self.made: list[Any] = []

    def location(self, name: str = "store") -> str:
        if self.kind == "file":
            return str(self.base / name)
        assert self.dsn is not None
        return self.dsn  # one database per test; the default schema

    def make(self, name: str = "store", **kw: Any) -> Any:
        from crashpoint.checkpoint import open_store

        if self.kind == "postgres" and name != "store":
            kw.setdefault(
                "schema", "s_" + "".join(c if c.isalnum() else "_" for c in name.lower())[:50]
            )
        store = open_store(self.location(name), **kw)
        self.made.append(store)
        return store

    __call__ = make

    def close(self) -> None:
        for s in self.made:
            close = getattr(s, "close", None)
            if close is not None:
                close()


@pytest.fixture(params=["file", "postgres"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[StoreFactory]:
    """A :class:`StoreFactory` of the file store, then of PostgresStore (a fresh database on
    the session's server; skipped with the reason where there is none)."""
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else None
    factory = StoreFactory(request.param, tmp_path, dsn)
    yield factory
    factory.close()
