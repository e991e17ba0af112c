"""Fork mode: a warm zygote forks each attempt of an entry agent, and nothing else changes.

The same seed and fault families over the demo agent give identical verdicts spawned and
forked; a forked attempt exits, dies by a signal, times out, leaves orphans and reads its
environment exactly like a spawned one; the zygote reaps every child, leaks no descriptor, and
outlives SIGKILLed and hung children; a broken entry is a clear error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from crashpoint._proc import AgentProcess, Exit
from crashpoint.errors import EntryError
from crashpoint.faults._disk import capabilities
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    Fault,
    GoldenRunFailed,
    Plan,
    TrialRunner,
    Zygote,
    ZygoteError,
    family_from_spec,
)
from crashpoint.harness._engine import _zygote as _zygote_module
from crashpoint.harness._engine._zygote import _signal_group
from crashpoint.harness._spec import ENTRY_ARGV

#: The fake model thinks 300 ms: the signal family's instants (drawn in [0, 200 ms)) land in
#: the agent's work however fast the machine is.
DEMO = AgentSpec(
    entry="crashpoint.agents.demo:main",
    args=("--state", "{state_dir}", "--think", "0.3"),
    timeout=60.0,
)
FAMILIES = [
    {"kill": {"at": "every-boundary"}},
    {"kill": {"at": "random", "count": 2}},
    {"kill": {"at": "failpoint", "count": 3}},
    {"corrupt": {"count": 3}},
    {"signal": {"count": 2, "within": "200ms"}},
]

AGENTS = textwrap.dedent("""
    import json, os, random, subprocess, sys, time

    def report(argv):
        print(json.dumps({
            "argv": argv, "sys_argv": sys.argv, "cwd": os.getcwd(),
            "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("CP_TEST")),
            "session_leader": os.getsid(0) == os.getpid(),
            "group_leader": os.getpgrp() == os.getpid(),
            "stdin": sys.stdin.read(), "failpoints": os.environ.get("CRASHPOINT_FAILPOINTS"),
        }, sort_keys=True))
        print("to stderr", file=sys.stderr)

    def code(argv):
        print("partial line without newline", end="")
        return int(argv[0])

    def exit_message(argv):
        sys.exit("bye: " + " ".join(argv))

    def boom(argv):
        raise ValueError("boom")

    def interrupted(argv):
        raise KeyboardInterrupt

    def locked(argv):
        import crashpoint.checkpoint
        from crashpoint.errors import RunLocked
        raise RunLocked("run-1", "/state/lock", "pid 1")

    def draw(argv):
        print(random.random())

    def sleeper(argv):
        time.sleep(float(argv[0]))

    def with_grandchild(argv):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        time.sleep(60)

    def leaves_orphan(argv):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def leaves_detached(argv):  # a new session; orphaned (re-parented) once the agent exits
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
        print(p.pid)

    def daemonizes(argv):  # the classic double fork, no exec: the daemon is a copy of the agent
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, str(os.getpid()).encode())
                os.close(w)
                time.sleep(60)
            os._exit(0)
        os.close(w)
        print(os.read(r, 32).decode())
""")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def agents_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fork-agents")
    (folder / "cp_fork_agents.py").write_text(AGENTS)
    (folder / "cp_fork_bad_import.py").write_text('raise RuntimeError("bad config")\n')
    return folder


@pytest.fixture(scope="module")
def agent_env(agents_dir: Path) -> dict[str, str]:
    return _clean_env(
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(agents_dir), os.environ.get("PYTHONPATH", "")])
        )
    )


@pytest.fixture(scope="module")
def zygote(agent_env: dict[str, str]) -> Iterator[Zygote]:
    with Zygote(["cp_fork_agents:report"], env=agent_env) as z:
        yield z
    assert not z.running


def _spawned(
    entry: str, args: list[str], env: dict[str, str], cwd: str, timeout: float = 30.0
) -> Exit:
    return AgentProcess([*ENTRY_ARGV, entry, *args], env, cwd=cwd, timeout=timeout).start().wait()


def _fds(pid: int | None = None) -> list[str]:
    return sorted(os.listdir(f"/proc/{pid or 'self'}/fd"))


def _zygote_children(z: Zygote) -> list[psutil.Process]:
    """The zygote's live descendants (an exited child it has not reaped yet is waited for)."""
    assert z.pid is not None
    kids = psutil.Process(z.pid).children(recursive=True)
    _, alive = psutil.wait_procs(kids, timeout=2)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


# -- the Done-when: same verdicts ------------------------------------------------------------------


# slow: fast cover: test_fork_server's
# test_the_same_scenario_spawned_and_forked_gives_the_same_verdicts
@pytest.mark.slow
def test_fork_and_spawn_give_identical_verdicts_on_the_same_seed(tmp_path: Path) -> None:
    families = [family_from_spec(f) for f in FAMILIES]
    golden = TrialRunner(DEMO, str(tmp_path / "golden-spawn")).golden()
    with Zygote.for_agent(DEMO) as z:
        forked_golden = TrialRunner(DEMO, str(tmp_path / "golden-fork"), launcher=z).golden()
        assert z.forks == 1
        # the golden run itself is the same (wall-clock duration aside) ...
        assert (
            forked_golden.steps,
            forked_golden.events,
            forked_golden.effects,
            forked_golden.output,
        ) == (golden.steps, golden.events, golden.effects, golden.output)
        # ... and both campaigns judge against one golden, so time-drawn faults (signal at a
        # random instant within the golden run) get the same plan in both modes
        forked = Campaign(DEMO, families, str(tmp_path / "fork"), seed=1234, launcher=z).run(
            golden=golden
        )
        attempts = sum(len(t.attempts) for t in forked.trials)
        assert z.forks == 1 + attempts  # every attempt was forked, none fell back to spawning
        assert _zygote_children(z) == []
    spawned = Campaign(DEMO, families, str(tmp_path / "spawn"), seed=1234).run(golden=golden)

    assert len(spawned.trials) == len(forked.trials) == len(golden.boundaries()) + 10
    assert {t.plan.family for t in spawned.trials} == {family_from_spec(f).name for f in FAMILIES}
    assert [t.verdict() for t in forked.trials] == [t.verdict() for t in spawned.trials]
    assert spawned.ok, spawned.summary()["failures"]
    assert not z.running


def test_a_given_golden_run_is_not_run_again_in_fork_mode(tmp_path: Path) -> None:
    """Kills at boundaries ask the golden run to be recorded for replayed kills, which fork
    mode never records (a fork is cheaper than a replay): a golden run handed to a forked
    campaign was run again for it, a wasted fork per campaign (issue 24)."""
    golden = TrialRunner(DEMO, str(tmp_path / "golden")).golden()
    kills = family_from_spec({"kill": {"at": "random", "count": 2}})
    assert "killreplay" in kills.needs
    with Zygote.for_agent(DEMO) as z:
        result = Campaign(DEMO, [kills], str(tmp_path / "fork"), seed=7, launcher=z).run(
            golden=golden
        )
        attempts = sum(len(t.attempts) for t in result.trials)
        assert attempts > 0
        assert z.forks == attempts  # the golden run was not forked again
    assert result.ok, result.summary()["failures"]


def test_faults_that_need_a_fresh_interpreter_fall_back_to_spawning(tmp_path: Path) -> None:
    runner = TrialRunner(DEMO, str(tmp_path / "spawn"))
    golden = runner.golden()
    plans = [Plan((Fault.make("fileop", 1, n=4),), "fileop", 5, 0)]
    if capabilities().rlimit:
        plans.append(
            Plan(
                (Fault.make("disk_full", 1, capacity=2048, mechanism="rlimit"),), "disk_full", 5, 1
            )
        )
    with Zygote.for_agent(DEMO) as z:
        forking = TrialRunner(DEMO, str(tmp_path / "fork"), launcher=z)
        for plan in plans:
            before = z.forks
            forked = forking.run(plan, golden)
            spawned = runner.run(plan, golden)
            assert forked.verdict() == spawned.verdict()
            assert len(forked.attempts) >= 2, forked.to_json()
            # the faulty first attempt was spawned (sitecustomize / rlimit), the rest forked
            assert z.forks - before == len(forked.attempts) - 1
            assert forked.attempts[0].signal == signal.SIGKILL or plan.family == "disk_full"


# -- a forked attempt is indistinguishable from a spawned one --------------------------------------


@pytest.mark.parametrize(
    ("function", "args"),
    [
        ("report", ["--state", "x y", "{not a placeholder}"]),
        ("code", ["0"]),
        ("code", ["3"]),
        ("code", ["300"]),
        ("exit_message", ["a", "b"]),
        ("boom", []),
        ("interrupted", []),
        ("locked", []),
    ],
)
def test_a_forked_attempt_exits_like_a_spawned_one(
    zygote: Zygote, agent_env: dict[str, str], tmp_path: Path, function: str, args: list[str]
) -> None:
    entry = f"cp_fork_agents:{function}"
    env = {
        **agent_env,
        "CP_TEST_A": "1",
        "CP_TEST_B": "two words",
        "CRASHPOINT_FAILPOINTS": "journal.write=kill@99",
    }
    spawned = _spawned(entry, args, env, str(tmp_path))
    forked = zygote.spawn(entry, env=env, cwd=str(tmp_path), timeout=30, args=args).wait()
    assert (forked.returncode, forked.signal, forked.timed_out, forked.orphans) == (
        spawned.returncode,
        spawned.signal,
        spawned.timed_out,
        spawned.orphans,
    )
    assert forked.stdout == spawned.stdout
    assert forked.stderr.splitlines()[-1:] == spawned.stderr.splitlines()[-1:]
    if function == "locked":  # run_main's documented code and one clear line, no traceback
        assert forked.returncode == 73
        assert forked.stderr.startswith(b"crashpoint: ")
    if function == "interrupted":
        assert forked.signal == signal.SIGINT
    if function == "report":
        assert b'"session_leader": true' in forked.stdout
        assert b'"group_leader": true' in forked.stdout
        assert b'"failpoints": "journal.write=kill@99"' in forked.stdout


def test_each_fork_is_reseeded_and_gets_its_own_environment(
    zygote: Zygote, agent_env: dict[str, str], tmp_path: Path
) -> None:
    draws = {
        zygote.spawn("cp_fork_agents:draw", env=agent_env, cwd=str(tmp_path), timeout=30)
        .wait()
        .stdout
        for _ in range(5)
    }
    assert len(draws) == 5
    a = zygote.spawn(
        "cp_fork_agents:report", env={**agent_env, "CP_TEST_X": "a"}, cwd=str(tmp_path), timeout=30
    ).wait()
    b = zygote.spawn("cp_fork_agents:report", env=agent_env, cwd="/", timeout=30).wait()
    assert b'"CP_TEST_X", "a"' in a.stdout
    assert b"CP_TEST_X" not in b.stdout
    assert b'"cwd": "/"' in b.stdout


def test_a_straggler_of_a_forked_attempt_is_an_orphan_and_is_killed(
    zygote: Zygote, agent_env: dict[str, str], tmp_path: Path
) -> None:
    ex = zygote.spawn(
        "cp_fork_agents:leaves_orphan", env=agent_env, cwd=str(tmp_path), timeout=30
    ).wait()
    assert ex.returncode == 0
    assert len(ex.orphans) == 1
    assert (
        not psutil.pid_exists(ex.orphans[0])
        or psutil.Process(ex.orphans[0]).status() == psutil.STATUS_ZOMBIE
    )


@pytest.mark.parametrize("entry", ["leaves_detached", "daemonizes"])
def test_a_detached_straggler_of_a_forked_attempt_is_found_by_its_reap_token(
    zygote: Zygote, agent_env: dict[str, str], tmp_path: Path, entry: str
) -> None:
    """A process in a new session whose parent is gone carries the attempt's token: an exec'd
    one through os.environ, a plain fork of the agent through the stamped environment block."""
    proc = zygote.spawn(f"cp_fork_agents:{entry}", env=agent_env, cwd=str(tmp_path), timeout=30)
    assert proc.reap_token
    ex = proc.wait()
    assert ex.returncode == 0, ex.stderr
    daemon = int(ex.stdout)
    try:
        assert ex.orphans == (daemon,)
        assert (
            not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == psutil.STATUS_ZOMBIE
        )
    finally:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(daemon).ppid() != os.getpid():
                psutil.Process(daemon).kill()


# -- the zygote survives its children ----------------------------------------------------------


def test_the_zygote_survives_a_sigkilled_child_and_its_tree(
    zygote: Zygote, agent_env: dict[str, str], tmp_path: Path
) -> None:
    p = zygote.spawn("cp_fork_agents:with_grandchild", env=agent_env, cwd=str(tmp_path), timeout=30)
    deadline = time.monotonic() + 20
    tree: list[psutil.Process] = []
    while time.monotonic() < deadline and not tree:
        with contextlib.suppress(psutil.Error):
            tree = psutil.Process(p.pid).children(recursive=True)
        time.sleep(0.02)
    assert tree, "the agent did not start its grandchild"
    os.killpg(p.pid, signal.SIGKILL)  # what the ledger's kill switch does
    ex = p.wait()
    assert (ex.returncode, ex.signal, ex.timed_out) == (None, signal.SIGKILL, False)
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert alive == []
    assert zygote.running
    assert _zygote_children(zygote) == []
    again = zygote.spawn(
        "cp_fork_agents:code", env=agent_env, cwd=str(tmp_path), timeout=30, args=["7"]
    ).wait()
    assert again.returncode == 7


def test_a_hung_child_times_out_and_is_killed(
    zygote: Zygote, agent_env: dict[str, str], tmp_path: Path
) -> None:
    t0 = time.monotonic()
    ex = zygote.spawn(
        "cp_fork_agents:sleeper", env=agent_env, cwd=str(tmp_path), timeout=0.5, args=["60"]
    ).wait()
    assert (ex.timed_out, ex.signal, ex.returncode) == (True, signal.SIGKILL, None)
    assert 0.5 <= ex.duration < 10
    assert time.monotonic() - t0 < 10
    assert zygote.running
    assert _zygote_children(zygote) == []


def test_a_signal_at_once_after_the_fork_kills_the_child_whether_or_not_it_leads_its_group(
    zygote: Zygote, agent_env: dict[str, str], tmp_path: Path
) -> None:
    """The zygote answers "started" without waiting for the child to call setsid (it runs
    nothing of the agent before "go"): a signal then reaches the child itself."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # a child that leads no group (it is in ours): killpg finds none, the child is hit
        _signal_group(sleeper.pid, signal.SIGKILL)
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
    finally:
        sleeper.kill()
        sleeper.wait()
    for _ in range(5):  # a forked attempt signalled as soon as spawn() returns
        p = zygote.spawn(
            "cp_fork_agents:sleeper", env=agent_env, cwd=str(tmp_path), timeout=30, args=["60"]
        )
        p.signal(signal.SIGKILL)
        ex = p.wait()
        assert (ex.signal, ex.timed_out) == (signal.SIGKILL, False)
    assert zygote.running
    assert _zygote_children(zygote) == []


def test_an_attempt_that_cannot_join_its_cgroup_is_refused_and_the_zygote_goes_on(
    zygote: Zygote, agent_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The zygote moves the child into the attempt's cgroup before it answers: where it cannot,
    the child is killed before it ran a line and the spawn is refused, saying why."""

    class NoCgroup:
        procs = str(tmp_path / "gone" / "cgroup.procs")

        def close(self) -> list[int]:
            return []

    monkeypatch.setattr(_zygote_module, "attempt_cgroup", lambda: (NoCgroup(), ""))
    with pytest.raises(ZygoteError, match=r"could not join its cgroup .*gone"):
        zygote.spawn(
            "cp_fork_agents:code", env=agent_env, cwd=str(tmp_path), timeout=30, args=["3"]
        )
    monkeypatch.undo()
    assert zygote.running
    assert _zygote_children(zygote) == []
    again = zygote.spawn(
        "cp_fork_agents:code", env=agent_env, cwd=str(tmp_path), timeout=30, args=["7"]
    )
    assert again.wait().returncode == 7


def test_fifty_forks_in_a_row_leak_no_process_and_no_descriptor(
    zygote: Zygote, agent_env: dict[str, str], tmp_path: Path
) -> None:
    assert zygote.pid is not None
    warm = zygote.spawn(
        "cp_fork_agents:code", env=agent_env, cwd=str(tmp_path), timeout=30, args=["0"]
    ).wait()
    assert warm.returncode == 0
    ours, theirs = _fds(), _fds(zygote.pid)
    pids = []
    for i in range(50):
        p = zygote.spawn(
            "cp_fork_agents:code", env=agent_env, cwd=str(tmp_path), timeout=30, args=[str(i % 5)]
        )
        pids.append(p.pid)
        assert p.wait().returncode == i % 5
    assert len(set(pids)) > 1
    assert _fds() == ours
    assert _fds(zygote.pid) == theirs
    assert _zygote_children(zygote) == []


def test_a_dead_zygote_is_an_error_and_its_child_is_killed(
    agent_env: dict[str, str], tmp_path: Path
) -> None:
    with Zygote(env=agent_env) as z:
        p = z.spawn(
            "cp_fork_agents:sleeper", env=agent_env, cwd=str(tmp_path), timeout=30, args=["60"]
        )
        assert z.pid is not None
        os.kill(z.pid, signal.SIGKILL)
        with pytest.raises(ZygoteError, match="died"):
            p.wait()
        assert (
            not psutil.pid_exists(p.pid) or psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE
        )
        with pytest.raises(ZygoteError, match="gone"):
            z.spawn("cp_fork_agents:code", env=agent_env, cwd=str(tmp_path), timeout=30, args=["0"])


def test_close_kills_what_is_still_running(agent_env: dict[str, str], tmp_path: Path) -> None:
    z = Zygote(env=agent_env).start()
    p = z.spawn("cp_fork_agents:sleeper", env=agent_env, cwd=str(tmp_path), timeout=30, args=["60"])
    zpid = z.pid
    z.close()
    z.close()  # twice is fine
    assert not z.running
    assert zpid not in [c.pid for c in psutil.Process().children()]
    assert not psutil.pid_exists(p.pid) or psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE


def test_close_signals_an_attempt_that_leads_no_group_yet(
    agent_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The zygote answers "started" before its child calls setsid: close() right after a spawn
    must reach the child itself, not only its (not yet existing) group. With a bare killpg the
    child lived on and close() waited out its 10 s deadline (seen under load in the suite)."""
    signalled: list[tuple[int, int]] = []

    def recording(pid: int, sig: int) -> None:
        signalled.append((pid, sig))
        _signal_group(pid, sig)

    monkeypatch.setattr(_zygote_module, "_signal_group", recording)
    z = Zygote(env=agent_env).start()
    p = z.spawn("cp_fork_agents:sleeper", env=agent_env, cwd=str(tmp_path), timeout=30, args=["60"])
    z.close()
    assert (p.pid, signal.SIGKILL) in signalled
    assert not psutil.pid_exists(p.pid) or psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE


# -- broken entries -------------------------------------------------------------------------------


def test_a_broken_entry_is_a_clear_error_in_both_modes(
    agent_env: dict[str, str], tmp_path: Path
) -> None:
    before = {c.pid for c in psutil.Process().children()}
    with pytest.raises(EntryError, match=r"cannot import module 'nosuchmodule'.*PYTHONPATH"):
        Zygote(["nosuchmodule:main"], env=agent_env).start()
    assert {c.pid for c in psutil.Process().children()} <= before  # the zygote was reaped

    broken = AgentSpec(entry="nosuchmodule:main", timeout=30)
    with pytest.raises(GoldenRunFailed, match="cannot import module 'nosuchmodule'"):
        TrialRunner(broken, str(tmp_path / "spawn")).golden()

    with Zygote(env=agent_env) as z:
        with pytest.raises(EntryError, match="cannot import module 'nosuchmodule'"):
            TrialRunner(broken, str(tmp_path / "fork"), launcher=z).golden()
        with pytest.raises(EntryError, match="has no attribute 'nosuch'"):
            z.spawn("crashpoint.agents.demo:nosuch", env=agent_env, cwd=str(tmp_path), timeout=30)
        with pytest.raises(EntryError, match="is not 'module:function'"):
            z.spawn("crashpoint.agents.demo", env=agent_env, cwd=str(tmp_path), timeout=30)
        with pytest.raises(EntryError, match="raised RuntimeError: bad config"):
            z.spawn("cp_fork_bad_import:main", env=agent_env, cwd=str(tmp_path), timeout=30)
        # the zygote is still fine afterwards
        ex = z.spawn(
            "cp_fork_agents:code", env=agent_env, cwd=str(tmp_path), timeout=30, args=["4"]
        ).wait()
        assert ex.returncode == 4

    ex = _spawned("nosuchmodule:main", [], agent_env, str(tmp_path))
    assert ex.returncode == 2
    assert b"crashpoint: agent entry 'nosuchmodule:main': cannot import" in ex.stderr
    ex = _spawned("cp_fork_bad_import:main", [], agent_env, str(tmp_path))
    assert ex.returncode == 2
    assert b"raised RuntimeError: bad config" in ex.stderr


def test_a_zygote_started_without_wait_overlaps_and_still_fails_clearly(
    agent_env: dict[str, str], tmp_path: Path
) -> None:
    """``start(wait=False)`` returns while the zygote imports (its start overlaps the golden
    run); :meth:`Zygote.ready`, a spawn and a campaign wait for it; a broken entry is the same
    EntryError from the campaign as from ``start()``, not the golden run's failure."""
    go = tmp_path / "go"
    (tmp_path / "cp_fork_gated.py").write_text(
        "import os, time\n"
        f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.01)\n"
        "def main(argv):\n    return 5\n"
    )
    env = {**agent_env, "PYTHONPATH": str(tmp_path) + os.pathsep + agent_env["PYTHONPATH"]}
    z = Zygote(["cp_fork_gated:main"], env=env).start(wait=False)  # its import waits for `go`
    try:
        assert z.running
        assert z._ready_message() is None  # still importing: start did not wait
        go.write_text("")
        ex = z.spawn("cp_fork_gated:main", env=env, cwd=str(tmp_path), timeout=30).wait()
        assert ex.returncode == 5  # the spawn waited for it
        assert z.ready() is z
    finally:
        z.close()

    broken = AgentSpec(entry="nosuchmodule:main", timeout=30)
    before = {c.pid for c in psutil.Process().children()}
    z = Zygote(["nosuchmodule:main"], env=agent_env).start(wait=False)
    try:
        campaign = Campaign(
            broken,
            [family_from_spec({"kill": {"at": "fileop"}})],  # the golden run is spawned
            str(tmp_path / "c"),
            launcher=z,
        )
        with pytest.raises(EntryError, match=r"cannot import module 'nosuchmodule'.*PYTHONPATH"):
            campaign.run()
    finally:
        z.close()
    assert {c.pid for c in psutil.Process().children()} <= before  # the zygote was reaped


def test_a_zygote_that_dies_at_start_says_why_with_its_stderr(
    agent_env: dict[str, str], tmp_path: Path
) -> None:
    """A zygote that cannot even boot (here: another ``crashpoint`` first on its path, which
    raises) fails with its own last words, not only "its control channel closed"."""
    (tmp_path / "crashpoint").mkdir()
    (tmp_path / "crashpoint" / "__init__.py").write_text('raise RuntimeError("not this one")\n')
    env = {**agent_env, "PYTHONPATH": str(tmp_path)}
    with pytest.raises(ZygoteError, match=r"(?s)did not start.*zygote stderr.*not this one"):
        Zygote(env=env).start()


def test_an_entry_that_starts_threads_at_import_is_refused(
    agent_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "cp_threaded_agent.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "def main(argv):\n    return 0\n"
    )
    env = {**agent_env, "PYTHONPATH": str(tmp_path) + os.pathsep + agent_env["PYTHONPATH"]}
    with pytest.raises(ZygoteError, match=r"started 1 thread.*command"):
        Zygote(["cp_threaded_agent:main"], env=env).start()


def test_agent_spec_args_round_trip_and_fill_placeholders() -> None:
    spec = AgentSpec(
        entry="m:f", args=("--state", "{state_dir}", "--id={run_id}"), env=(("A", "1"),), cwd="/tmp"
    )
    assert AgentSpec.from_json(spec.to_json()) == spec
    assert spec.argv(state_dir="/s", workdir="/w", run_id="r") == [
        sys.executable,
        "-m",
        "crashpoint._entry",
        "m:f",
        "--state",
        "/s",
        "--id=r",
    ]
    with pytest.raises(ValueError, match="args"):
        AgentSpec(command=("x",), args=("y",))
