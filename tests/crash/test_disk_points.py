"""A disk that fills where you say: write points from a real golden trace, hit one by one.

A small Python agent saves JSON state by temp file + rename and appends to a journal; a shell
agent does the same with ``head``, ``mv`` and ``>>``. Each is run once under strace (the golden
run); its write points are computed; then, for every point, it runs again in a fresh state
folder under a real tmpfs (private mount namespace, ballast for the exact free space) and under
a real RLIMIT_FSIZE, and the faulty run's own trace must show that exactly the planned write was
the first the disk refused. An over-large capacity must come out as "not fired", with the
explaining message. Skipped, with the reason, where strace or the tmpfs namespace is missing.

Every process is started through :class:`AgentProcess` (its own session; ``wait`` reaps the
whole tree) and every namespace is closed in a ``finally``.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from crashpoint._proc import AgentProcess, Exit
from crashpoint.faults import _strace
from crashpoint.faults._disk import TmpfsNamespace, UsageSampler, capabilities
from crashpoint.faults._writes import (
    PAGE,
    TRACE_SYSCALLS,
    WritePoint,
    confirm,
    disk_errors,
    refused,
    rlimit_argv,
    write_points,
)

STRACE_OK, STRACE_WHY = _strace.available()
needs_strace = pytest.mark.skipif(not STRACE_OK, reason=f"no syscall trace: {STRACE_WHY}")


def _tmpfs_skip() -> str:
    caps = capabilities()
    return "" if caps.tmpfs else caps.tmpfs_reason


needs_tmpfs = pytest.mark.skipif(bool(_tmpfs_skip()), reason=f"no tmpfs: {_tmpfs_skip()}")

#: Three steps: append ~1.2 KiB to a journal, then save growing JSON by temp + fsync + rename.
#: Exit 3 on a disk error, unless --swallow (then go on, and with --linger wait to be killed).
PY_AGENT = textwrap.dedent("""\
    import json, os, sys, time
    state = sys.argv[1]
    for i in range(3):
        try:
            with open(os.path.join(state, "journal"), "a") as j:
                j.write(f"step {i} " + "j" * 1200 + "\\n")
            tmp = os.path.join(state, "state.json.tmp")
            with open(tmp, "w") as f:
                json.dump({"step": i, "payload": "x" * (1500 * (i + 1))}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, os.path.join(state, "state.json"))
        except OSError as exc:
            print(f"step {i}: {exc.strerror}", file=sys.stderr, flush=True)
            if "--swallow" not in sys.argv:
                sys.exit(3)
    print("done", flush=True)
    if "--linger" in sys.argv:
        time.sleep(120)
""")

#: The same shape in sh: ``head -c N`` writes N bytes in one write (N <= 8 KiB), ``mv`` renames.
SH_AGENT = textwrap.dedent("""\
    state=$1
    for n in 1000 3000 6000; do
        printf 'step %s\\n' "$n" >> "$state/log" || exit 3
        head -c "$n" /dev/zero > "$state/data.tmp" || exit 3
        mv "$state/data.tmp" "$state/data" || exit 3
    done
    echo done
""")


class Agent:
    def __init__(self, tmp: Path, kind: str) -> None:
        self.tmp = tmp
        self.kind = kind
        self.script = tmp / ("agent.py" if kind == "python" else "agent.sh")
        self.script.write_text(PY_AGENT if kind == "python" else SH_AGENT)
        self._n = 0

    def argv(self, state: Path, *extra: str) -> list[str]:
        if self.kind == "python":
            return [sys.executable, str(self.script), str(state), *extra]
        return ["sh", str(self.script), str(state)]

    def fresh(self, name: str) -> tuple[Path, Path]:
        """A new empty state folder and a trace path for one run."""
        self._n += 1
        run = self.tmp / f"{self._n:02d}-{name}"
        (run / "state").mkdir(parents=True)
        return run / "state", run / "trace"

    def start(self, argv: list[str], *, rlimit: int | None = None) -> AgentProcess:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}
        return AgentProcess(argv, env, cwd=str(self.tmp), timeout=60, rlimit_fsize=rlimit).start()

    def run(self, argv: list[str], *, rlimit: int | None = None) -> Exit:
        return self.start(argv, rlimit=rlimit).wait()


def traced(argv: list[str], trace: Path) -> list[str]:
    return _strace.wrap(argv, str(trace), syscalls=TRACE_SYSCALLS)


def golden(agent: Agent) -> tuple[Path, list[_strace.Syscall]]:
    state, trace = agent.fresh("golden")
    ex = agent.run(traced(agent.argv(state), trace))
    assert ex.ok, ex.stderr
    assert b"done" in ex.stdout
    return state, _strace.parse(str(trace))


def run_at_tmpfs_point(agent: Agent, point: WritePoint) -> tuple[Path, Exit, list[Any]]:
    state, trace = agent.fresh(f"tmpfs{point.index}")
    ns = TmpfsNamespace(str(state), free=point.value)
    try:
        assert ns.usage().free == point.value
        ex = agent.run(ns.wrap(traced(agent.argv(state), trace), cwd=str(agent.tmp)))
    finally:
        ns.close()
    return state, ex, _strace.parse(str(trace))


Run = tuple[Path, Exit, list[_strace.Syscall]]


def check_every_point_hit_once(points: list[WritePoint], mechanism: str, runs: list[Run]) -> None:
    hit: list[int] = []
    for point, (state, ex, calls) in zip(points, runs, strict=True):
        errs = refused(calls, str(state), mechanism)
        assert errs == [
            e
            for e in disk_errors(calls, str(state))
            if e.errno in (("ENOSPC", "") if mechanism == "tmpfs" else ("EFBIG", ""))
        ]
        assert errs, f"{point.label()}: no write failed\n{ex.stderr.decode()}"
        assert point.matches(errs[0]), (point.label(), [e.describe() for e in errs])
        # the refused write is the first failure; a short write's retry fails right after
        assert all(e.path == errs[0].path for e in errs), [e.describe() for e in errs]
        assert ex.returncode == 3, (ex.describe(), ex.stderr)  # the agent saw the error
        got = confirm(mechanism, str(state), point=point, calls=calls)
        assert got.fired, got.why_not
        assert "planned" not in got.where, got.where
        hit.append(point.index)
    assert hit == [p.index for p in points]


# -- tmpfs: ENOSPC at each write point ----------------------------------------------------------


@needs_strace
@needs_tmpfs
@pytest.mark.needs_root
@pytest.mark.parametrize("kind", ["python", "sh"])
def test_tmpfs_ballast_hits_every_write_point_once(tmp_path: Path, kind: str) -> None:
    agent = Agent(tmp_path, kind)
    gstate, calls = golden(agent)
    points = write_points(calls, str(gstate), "tmpfs")
    assert len(points) >= 3, [p.label() for p in points]
    assert points[0].value == 0  # the very first page: a full disk, held by the ballast
    runs = [run_at_tmpfs_point(agent, p) for p in points]
    check_every_point_hit_once(points, "tmpfs", runs)


@needs_strace
@needs_tmpfs
@pytest.mark.needs_root
def test_tmpfs_over_large_capacity_is_not_fired_and_says_why(tmp_path: Path) -> None:
    agent = Agent(tmp_path, "python")
    state, trace = agent.fresh("roomy")
    ns = TmpfsNamespace(str(state), 1 << 20)
    try:
        sampler = UsageSampler(ns)
        ex = agent.run(ns.wrap(traced(agent.argv(state), trace), cwd=str(agent.tmp)))
        sample = sampler.stop()
    finally:
        ns.close()
    assert ex.ok, ex.stderr
    calls = _strace.parse(str(trace))
    got = confirm("tmpfs", str(state), capacity=1 << 20, calls=calls)
    assert not got.fired
    assert (
        "capacity 1 MiB never filled: lower it or use the write-point mode (disk_full "
        "without capacity)" in got.why_not
    )
    assert "took at most 10.9 KiB (16 KiB in tmpfs pages)" in got.why_not
    # without a trace, the sampler says the same
    assert not sample.full
    assert sample.peak_used <= 16 * 1024
    got = confirm("tmpfs", str(state), capacity=1 << 20, sample=sample)
    assert not got.fired
    assert "never filled" in got.why_not


@needs_tmpfs
@pytest.mark.needs_root
def test_tmpfs_sampler_sees_a_full_disk_without_strace(tmp_path: Path) -> None:
    agent = Agent(tmp_path, "python")
    state, _trace = agent.fresh("sampled")
    (state / "old").write_bytes(b"o" * 5000)  # content: 2 pages, not counted as free space
    ns = TmpfsNamespace(str(state), free=PAGE)
    try:
        assert ns.usage() == (ns.size, 2 * PAGE, PAGE)
        assert ns.content == 2 * PAGE
        sampler = UsageSampler(ns)
        ex = agent.run(ns.wrap(agent.argv(state), cwd=str(agent.tmp)))
        sample = sampler.stop()
    finally:
        ns.close()
    assert ex.returncode == 3, ex.stderr
    assert b"No space left on device" in ex.stderr
    assert sample.full
    assert sample.peak_used == 3 * PAGE
    got = confirm(
        "tmpfs", str(state), sample=sample, point=None, capacity=None, untraced="strace disabled"
    )
    assert got.fired
    assert "strace disabled" in got.where
    assert (state / "old").read_bytes() == b"o" * 5000  # copied back, ballast left out
    assert sorted(os.listdir(state)) == ["journal", "old", "state.json.tmp"]


@needs_tmpfs
@pytest.mark.needs_root
def test_tmpfs_with_no_free_space_refuses_the_first_byte(tmp_path: Path) -> None:
    """free=0 on an empty folder: a tmpfs of size 0 would be unlimited; the ballast makes it
    full. The folder's mode is the real folder's."""
    state = tmp_path / "state"
    state.mkdir(mode=0o751)
    state.chmod(0o751)
    ns = TmpfsNamespace(str(state), free=0)
    try:
        assert ns.usage() == (PAGE, 0, 0)  # the ballast's page, full
        ex = (
            AgentProcess(
                ns.wrap(["sh", "-c", "stat -c %a .; printf x > f; echo rc=$?"], cwd=str(state)),
                {"PATH": os.environ["PATH"]},
                timeout=30,
            )
            .start()
            .wait()
        )
    finally:
        ns.close()
    assert ex.stdout.split() == [b"751", b"rc=1"], (ex.stdout, ex.stderr)
    assert os.listdir(state) == ["f"]
    assert (state / "f").stat().st_size == 0


def test_tmpfs_namespace_needs_one_size(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one of capacity"):
        TmpfsNamespace(str(tmp_path))
    with pytest.raises(ValueError, match="exactly one of capacity"):
        TmpfsNamespace(str(tmp_path), 8192, free=0)
    with pytest.raises(ValueError, match="free >= 0"):
        TmpfsNamespace(str(tmp_path), free=-1)


# -- rlimit: EFBIG at each write point ----------------------------------------------------------


@needs_strace
@pytest.mark.parametrize("kind", ["python", "sh"])
def test_rlimit_hits_every_write_point_once(tmp_path: Path, kind: str) -> None:
    agent = Agent(tmp_path, kind)
    gstate, calls = golden(agent)
    points = write_points(calls, str(gstate), "rlimit", within=[str(gstate)])
    assert len(points) >= 3, [p.label() for p in points]
    runs = []
    for p in points:
        state, trace = agent.fresh(f"rlimit{p.index}")
        # the limit is set under strace, for the agent only: strace's own trace file is not cut
        ex = agent.run(traced(rlimit_argv(agent.argv(state), p.value), trace))
        runs.append((state, ex, _strace.parse(str(trace))))
    check_every_point_hit_once(points, "rlimit", runs)


@needs_strace
def test_rlimit_over_large_capacity_is_not_fired_and_says_why(tmp_path: Path) -> None:
    agent = Agent(tmp_path, "python")
    state, trace = agent.fresh("roomy")
    ex = agent.run(traced(rlimit_argv(agent.argv(state), 1 << 20), trace))
    assert ex.ok, ex.stderr
    got = confirm("rlimit", str(state), capacity=1 << 20, calls=_strace.parse(str(trace)))
    assert not got.fired
    assert got.why_not.startswith("the agent wrote at most 4.4 KiB into one file")
    assert "capacity 1 MiB never reached: lower it or use the write-point mode" in got.why_not


def test_rlimit_without_strace_shell_agent_gets_efbig_not_sigxfsz(tmp_path: Path) -> None:
    """AgentProcess(rlimit_fsize=...) ignores SIGXFSZ in the child: a shell agent sees EFBIG
    (``head: ... File too large``, exit 3 from the script) instead of dying of the signal."""
    agent = Agent(tmp_path, "sh")
    state, _trace = agent.fresh("rlimit-plain")
    ex = agent.run(agent.argv(state), rlimit=2000)
    assert ex.signal is None, ex.describe()
    assert ex.returncode == 3, ex.stderr
    assert b"File too large" in ex.stderr
    assert (state / "data.tmp").stat().st_size == 2000
    # and the exec wrapper does the same for a traced run
    state2, _ = agent.fresh("rlimit-wrapped")
    ex2 = agent.run(rlimit_argv(agent.argv(state2), 2000))
    assert ex2.signal is None
    assert ex2.returncode == 3, ex2.stderr
    assert (state2 / "data.tmp").stat().st_size == 2000


# -- a trace read while the agent still runs ----------------------------------------------------


@needs_strace
@needs_tmpfs
@pytest.mark.needs_root
def test_disk_errors_read_from_a_live_trace(tmp_path: Path) -> None:
    """An agent that swallows ENOSPC and goes on (then lingers): its trace file, read while it
    still runs, already names the refused write (what the harness needs to kill it at its next
    probe event)."""
    agent = Agent(tmp_path, "python")
    gstate, calls = golden(agent)
    point = write_points(calls, str(gstate), "tmpfs")[1]
    state, trace = agent.fresh("live")
    ns = TmpfsNamespace(str(state), free=point.value)
    proc = None
    try:
        proc = agent.start(
            ns.wrap(traced(agent.argv(state, "--swallow", "--linger"), trace), cwd=str(agent.tmp))
        )
        deadline = time.monotonic() + 30
        errs = []
        while not errs and time.monotonic() < deadline:
            time.sleep(0.02)
            errs = disk_errors(_strace.parse(str(trace)), str(state))
        assert proc.proc is not None
        assert proc.proc.poll() is None, "the agent was to linger"
        assert errs, "no refused write in the live trace"
        assert point.matches(errs[0]), (point.label(), errs[0].describe())
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        ns.close()
