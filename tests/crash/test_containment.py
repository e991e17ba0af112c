"""No process of an attempt outlives it, whatever it does to its session, group or environment.

Where the machine allows (root, or a delegated cgroup v2; Linux 5.14+), each attempt runs in a
cgroup of its own: a helper that detaches (``setsid``), clears its environment (``env -i``) and
keeps re-forking to new pids is still a member, reported as an orphan and killed with the
attempt, spawned or forked; a SIGKILLed harness leaves nothing behind (its watcher kills its
cgroups). The agent itself sees nothing of this: its signals, exit status and pids are its own.
Where no cgroup can be made these tests skip with the reason (the fallback reaper and its limit
are tested in tests/unit/test_faults.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from crashpoint._proc import AgentProcess, Exit, _cgroup
from crashpoint._proc._cgroup import AttemptCgroup, containment, reap_stale
from crashpoint.harness import AgentSpec, Fault, Golden, Plan, TrialRunner, Zygote

BASE_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}

#: A helper that leaves the agent's session and then keeps re-forking: every 20 ms its current
#: process forks and exits, so its pid is never the same for long and its parent is always gone
#: (too fast for a scan of /proc to see it reliably: each new process appends its pid to the file
#: named by its last argument, the test's marker, and that heartbeat shows it is alive).
HELPER = textwrap.dedent("""
    import os, sys, time
    if os.getsid(0) != os.getpid():
        os.setsid()
    while True:
        if os.fork():
            os._exit(0)
        fd = os.open(sys.argv[-1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(fd, b"%d\\n" % os.getpid())
        os.close(fd)
        time.sleep(0.02)
""")

#: The agent (spawned: a script; forked: its ``detach`` function): starts the helper in one of
#: three ways (``argv[0]``), waits until it runs, then exits 0 (``exit``) or sleeps (``sleep``).
AGENT = textwrap.dedent("""
    import os, subprocess, sys, time

    def detach(argv):
        how, then, helper, marker = argv
        quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
        if how == "refork":        # a new session, new pids all the time
            subprocess.Popen([sys.executable, helper, marker], **quiet)
        elif how == "env-i":       # a new session and no environment (no reap token)
            subprocess.Popen(["env", "-i", sys.executable, helper, marker],
                             start_new_session=True, **quiet)
        else:                      # "holds-stdout": detached, keeps the agent's stdout open
            subprocess.Popen(["env", "-i", "setsid", sys.executable, "-c",
                              "import time; time.sleep(60)", marker], stdin=subprocess.DEVNULL)
        time.sleep(0.3)
        print("helper started", flush=True)
        if then == "sleep":
            time.sleep(60)
        return 0

    if __name__ == "__main__":
        sys.exit(detach(sys.argv[1:]))
""")


@pytest.fixture(scope="module")
def contained() -> None:
    c = containment()
    if c.mechanism != "cgroup":
        pytest.skip(f"attempts cannot have a cgroup here: {c.reason}")


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "cp_contain_agent.py").write_text(AGENT)
    return {
        "helper": str(tmp_path / "helper.py"),
        "agent": str(tmp_path / "cp_contain_agent.py"),
        "dir": str(tmp_path),
        "marker": str(tmp_path / f"cp-contain-beats-{time.time_ns()}"),
    }


def _beating(marker: str, window: float = 0.3) -> bool:
    """True if a re-forking helper of this test is alive: its heartbeat file grows."""

    def size() -> int:
        try:
            return os.stat(marker).st_size
        except FileNotFoundError:
            return 0

    before = size()
    time.sleep(window)
    return size() != before


def _with_marker(marker: str) -> list[psutil.Process]:
    """Live processes whose command line holds ``marker`` (zombies are dead)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if marker in (p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
    return out


def _wait_for_marker(marker: str, present: bool, timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    found = _with_marker(marker)
    while bool(found) != present and time.monotonic() < deadline:
        time.sleep(0.02)
        found = _with_marker(marker)
    return found


@pytest.fixture
def sweep(files: dict[str, str]) -> Iterator[None]:
    """Whatever the outcome, kill what carries this test's marker. A re-forking helper is
    killed by its process group (its own session: each new pid stays in it), named by the last
    pid of its heartbeat."""
    yield
    marker = files["marker"]
    for _ in range(100):
        with contextlib.suppress(OSError, ValueError, IndexError, psutil.Error):
            with open(marker, "rb") as f:
                last = int(f.read().split()[-1])
            group = os.getpgid(last)
            if group != os.getpgid(0) and marker in psutil.Process(last).cmdline():
                os.killpg(group, signal.SIGKILL)
        for p in _with_marker(marker):
            with contextlib.suppress(psutil.Error):
                p.kill()
        if not _with_marker(marker) and not _beating(marker, 0.1):
            return


def _assert_contained(ex: Exit, marker: str) -> None:
    assert ex.containment == "cgroup"
    assert ex.returncode == 0, ex.stderr
    assert ex.orphans, "the helper was not reported as an orphan"
    assert os.path.getsize(marker) > 0  # it did run
    # gone when wait() returns: not a moment later, not after a grace period
    assert _with_marker(marker) == []
    assert not _beating(marker)


@pytest.mark.usefixtures("contained", "sweep")
@pytest.mark.parametrize("how", ["refork", "env-i"])
def test_a_detached_helper_does_not_outlive_its_spawned_attempt(
    how: str, files: dict[str, str]
) -> None:
    ex = (
        AgentProcess(
            [sys.executable, files["agent"], how, "exit", files["helper"], files["marker"]],
            BASE_ENV,
            timeout=30,
        )
        .start()
        .wait()
    )
    assert ex.stdout == b"helper started\n"
    _assert_contained(ex, files["marker"])


@pytest.mark.usefixtures("contained", "sweep")
@pytest.mark.parametrize("how", ["refork", "env-i"])
def test_a_detached_helper_does_not_outlive_its_forked_attempt(
    how: str, files: dict[str, str]
) -> None:
    env = {**BASE_ENV, "PYTHONPATH": files["dir"]}
    with Zygote(["cp_contain_agent:detach"], env=env) as z:
        ex = z.spawn(
            "cp_contain_agent:detach",
            env=env,
            cwd=files["dir"],
            timeout=30,
            args=[how, "exit", files["helper"], files["marker"]],
        ).wait()
    assert ex.stdout == b"helper started\n"
    _assert_contained(ex, files["marker"])


@pytest.mark.usefixtures("contained", "sweep")
def test_a_timed_out_attempt_takes_its_re_forking_helper_with_it(files: dict[str, str]) -> None:
    ex = (
        AgentProcess(
            [sys.executable, files["agent"], "refork", "sleep", files["helper"], files["marker"]],
            BASE_ENV,
            timeout=2,
        )
        .start()
        .wait()
    )
    assert ex.timed_out
    assert ex.signal == signal.SIGKILL
    assert os.path.getsize(files["marker"]) > 0
    assert _with_marker(files["marker"]) == []
    assert not _beating(files["marker"])


@pytest.mark.usefixtures("contained", "sweep")
@pytest.mark.parametrize("traced", [True, False], ids=["strace", "no-strace"])
def test_a_tmpfs_trial_is_contained_too(
    files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, traced: bool
) -> None:
    """disk_full via tmpfs wraps the agent in ``nsenter`` (mount namespace), and in strace
    where it can; the cgroup is joined before nsenter runs, so the agent and its helper are in
    it all the same. Under ``strace -f`` the helper would keep the trace (and the attempt)
    alive: the trace is ended when the agent exits, and the helper is an orphan as without."""
    from crashpoint.faults import _strace
    from crashpoint.faults._disk import capabilities

    if not traced:
        monkeypatch.setenv("CRASHPOINT_NO_STRACE", "1")
    elif not _strace.available()[0]:
        pytest.skip(f"strace unavailable: {_strace.available()[1]}")
    if not capabilities().tmpfs:
        pytest.skip(capabilities().tmpfs_reason)
    agent = AgentSpec(
        command=(sys.executable, files["agent"], "env-i", "exit", files["helper"], files["marker"]),
        timeout=30,
    )
    plan = Plan((Fault.make("disk_full", capacity=1 << 20),), "disk", 0, 0)
    with TrialRunner(agent, str(tmp_path / "report"), restarts=0) as runner:
        result = runner.run(plan, Golden([], [], Counter(), b"helper started\n", 0.1))
    first = result.attempts[0]
    assert first.argv[0] == "nsenter"
    assert ("strace" in " ".join(first.argv)) is traced
    assert first.containment == "cgroup"
    assert not first.timed_out  # it ended with the agent, not at its timeout
    assert (first.returncode, first.signal) == (0, None)  # the agent's own exit, not strace's
    assert first.orphans
    assert "no_orphans" in [c.name for c in result.failed]
    assert os.path.getsize(files["marker"]) > 0
    assert _with_marker(files["marker"]) == []
    assert not _beating(files["marker"])


@pytest.mark.usefixtures("contained")
def test_signals_and_exit_status_are_the_agents_own(tmp_path: Path) -> None:
    """SIGTERM reaches the agent with its usual meaning (its handler runs; without one it dies
    of it); SIGSTOP/SIGCONT pause and resume it; the status is the agent's, not a wrapper's."""
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent("""
        import os, signal, sys, time
        if sys.argv[1] == "handler":
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
        print(os.getpid(), os.getsid(0), os.getpgrp(), flush=True)
        time.sleep(30 if sys.argv[1] != "pause" else 1)
    """)
    )
    for mode, want in (("handler", (7, None)), ("default", (None, signal.SIGTERM))):
        p = AgentProcess([sys.executable, str(script), mode], BASE_ENV, timeout=20).start()
        _wait_for_line(p)
        p.signal(signal.SIGTERM)
        ex = p.wait()
        assert (ex.returncode, ex.signal, ex.containment) == (*want, "cgroup"), ex.stderr
        pid, sid, pgrp = map(int, ex.stdout.split())
        assert pid == sid == pgrp == p.pid  # its own session and group, its real pid
    p = AgentProcess([sys.executable, str(script), "pause"], BASE_ENV, timeout=20).start()
    try:
        _wait_for_line(p)
        p.signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while (
            psutil.Process(p.pid).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        assert psutil.Process(p.pid).status() == psutil.STATUS_STOPPED
        p.signal(signal.SIGCONT)
    finally:
        ex = p.wait()
    assert (ex.returncode, ex.signal) == (0, None), ex.stderr


def _wait_for_line(p: AgentProcess) -> None:
    """Until the agent has printed its first line (it has set up its handler by then)."""
    deadline = time.monotonic() + 10
    while not p._capture.sinks[0].total and time.monotonic() < deadline:
        time.sleep(0.01)


HARNESS = textwrap.dedent("""
    import json, sys
    from crashpoint._proc._process import AgentProcess
    agent, helper, marker, mode = sys.argv[1:]
    env = {"PATH": "/usr/bin:/bin"}
    if mode == "spawn":
        p = AgentProcess([sys.executable, agent, "refork", "sleep", helper, marker], env,
                         timeout=120).start()
    else:
        import os
        from crashpoint.harness._engine._zygote import Zygote
        env["PYTHONPATH"] = os.path.dirname(agent)
        z = Zygote(["cp_contain_agent:detach"], env=env).start()
        p = z.spawn("cp_contain_agent:detach", env=env, cwd=os.path.dirname(agent),
                    timeout=120, args=["refork", "sleep", helper, marker])
    print(json.dumps({"pid": p.pid, "containment": p.containment}), flush=True)
    p.wait()
""")


@pytest.mark.usefixtures("contained", "sweep")
@pytest.mark.parametrize("mode", ["spawn", "fork"])
def test_a_sigkilled_harness_leaves_no_agent_process(
    mode: str, files: dict[str, str], tmp_path: Path, children: object
) -> None:
    (tmp_path / "harness.py").write_text(HARNESS)
    harness = children.python(
        tmp_path / "harness.py",
        files["agent"],  # type: ignore[attr-defined]
        files["helper"],
        files["marker"],
        mode,
    )
    started = harness.read_json(timeout=60)
    assert started["containment"] == "cgroup"
    agent = psutil.Process(started["pid"])
    # the agent sleeps, its helper re-forks (its heartbeat grows)
    deadline = time.monotonic() + 10
    while not _beating(files["marker"], 0.05) and time.monotonic() < deadline:
        pass
    assert _beating(files["marker"])
    assert agent.is_running()
    os.kill(harness.pid, signal.SIGKILL)
    assert harness.wait() == -signal.SIGKILL
    deadline = time.monotonic() + 15
    while _beating(files["marker"]) and time.monotonic() < deadline:
        pass
    assert not _beating(files["marker"], 1.0)
    assert _with_marker(files["marker"]) == []
    deadline = time.monotonic() + 15
    while _alive(agent) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(agent)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.usefixtures("contained", "sweep")
def test_a_helper_holding_stdout_does_not_hold_the_attempt(files: dict[str, str]) -> None:
    """It keeps the agent's stdout open after the agent exits: wait() returns once the cgroup
    is empty, with the reader thread done and the pipes closed (not after a read timeout)."""
    p = AgentProcess(
        [sys.executable, files["agent"], "holds-stdout", "exit", files["helper"], files["marker"]],
        BASE_ENV,
        timeout=30,
    ).start()
    pipes = {os.readlink(f"/proc/self/fd/{fd}") for fd in p._capture._fds}
    ex = p.wait()
    assert ex.stdout == b"helper started\n"
    assert ex.orphans
    assert _with_marker(files["marker"]) == []
    assert not p._capture._thread.is_alive()
    assert len(pipes) == 2
    assert all(p.startswith("pipe:") for p in pipes)
    assert not pipes & set(_links())


def _links() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
    return out


def test_stale_cgroups_of_a_dead_harness_are_reaped(tmp_path: Path) -> None:
    """What a harness SIGKILLed together with its watcher left: found by name (pid namespace,
    dead pid) and killed, processes and all; a live harness's folder is left alone."""
    c = containment()
    if c.mechanism != "cgroup":
        pytest.skip(f"no cgroup here: {c.reason}")
    dead = subprocess.Popen(["true"])
    dead.wait()
    ns = _cgroup._pid_ns()
    stale = os.path.join(c.root, f"crashpoint-{ns}-{dead.pid}-deadbeef")
    live = os.path.join(c.root, f"crashpoint-{ns}-{os.getpid()}-livebeef")
    os.mkdir(stale)
    os.mkdir(live)
    try:
        member = AttemptCgroup(os.path.join(stale, "a-1-000000"))
        sleeper = subprocess.Popen(["sleep", "60"])
        with open(member.procs, "w") as f:
            f.write(str(sleeper.pid))
        assert member.pids() == [sleeper.pid]
        assert reap_stale(c.root) == [stale]
        assert sleeper.wait(5) == -signal.SIGKILL
        assert not os.path.exists(stale)
        assert os.path.isdir(live)
    finally:
        for folder in (stale, live):
            _cgroup._remove(folder, 5.0)


def test_containment_is_stated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mechanism and, without a cgroup, why: CRASHPOINT_CONTAINMENT=session forces it."""
    containment.cache_clear()
    try:
        monkeypatch.setenv("CRASHPOINT_CONTAINMENT", "session")
        c = containment()
        assert (c.mechanism, c.reason) == ("session", "CRASHPOINT_CONTAINMENT=session")
        assert "session + reap token" in c.describe()
        containment.cache_clear()
        monkeypatch.setenv("CRASHPOINT_CONTAINMENT", "bogus")
        with pytest.raises(ValueError, match="use auto, cgroup or session"):
            containment()
    finally:
        containment.cache_clear()
        monkeypatch.delenv("CRASHPOINT_CONTAINMENT")
    assert containment().describe()
