"""Fork server for ``{python}`` command agents (``agent.warm``): a warm zygote does the
agent's imports once and forks each attempt, which runs the script as ``__main__``.

The same scenario spawned and forked gives the same verdicts; a broken agent still fails when
forked; a forked script exits, dies by a signal, times out and leaves orphans as a spawned one
does; what the fork cannot preserve (threads started at import, environment read at import)
is refused or shown; bad ``warm`` values are clear errors, and agents that cannot be forked are
spawned with the reason stated.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from _reaped import run_reaped
from crashpoint._proc import AgentProcess, Exit
from crashpoint.harness import AgentSpec, Campaign, ScenarioError, family_from_spec, load_scenario
from crashpoint.harness._engine._zygote import (
    WARM_IMPORTS,
    ForkPlan,
    Zygote,
    ZygoteError,
    fork_plan,
    script_imports,
)

AGENTS = Path(__file__).resolve().parents[1] / "agents"
FAMILIES = [{"kill": {"at": "every-boundary"}}, {"kill": {"at": "random", "count": 3}}]

SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys, time
    import cp_fs_warm

    def main():
        what = sys.argv[1] if len(sys.argv) > 1 else "report"
        if what == "report":
            print(json.dumps({"argv": sys.argv, "name": __name__, "path0": sys.path[0],
                              "cwd": os.getcwd(), "x": os.environ.get("CP_TEST_X"),
                              "at_import": cp_fs_warm.AT_IMPORT, "sid": os.getsid(0) == os.getpid(),
                              "warm_imported": cp_fs_warm.__name__ in sys.modules}, sort_keys=True))
        elif what == "code":
            print("no newline", end="")
            sys.exit(int(sys.argv[2]))
        elif what == "message":
            sys.exit("bye")
        elif what == "boom":
            raise ValueError("boom")
        elif what == "interrupted":
            raise KeyboardInterrupt
        elif what == "sleep":
            time.sleep(float(sys.argv[2]))
        elif what == "orphan":
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        elif what == "detached":
            p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 start_new_session=True)
            print(p.pid)

    if __name__ == "__main__":
        main()
""")
WARM = 'import os\nAT_IMPORT = os.environ.get("CP_TEST_X")\n'


def _env(folder: Path, **extra: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(folder / "lib"), os.environ.get("PYTHONPATH", "")])
    )
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fork-server")
    (root / "lib").mkdir()
    (root / "lib" / "cp_fs_warm.py").write_text(WARM)
    (root / "agent.py").write_text(SCRIPT)
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text(SCRIPT)
    return root


@pytest.fixture(scope="module")
def zygote(folder: Path) -> Iterator[Zygote]:
    agent = AgentSpec(
        ("{python}", str(folder / "agent.py")),
        warm=(WARM_IMPORTS,),
        env=tuple(sorted(_env(folder, CP_TEST_X="zygote").items())),
    )
    with Zygote.for_agent(agent) as z:
        assert z.main == ("path", str(folder / "agent.py"))
        assert z.preload[-1] == "?cp_fs_warm"
        yield z
    assert not z.running


def _both(
    z: Zygote, argv: list[str], env: dict[str, str], cwd: str, timeout: float = 30.0
) -> tuple[Exit, Exit]:
    spawned = AgentProcess(argv, env, cwd=cwd, timeout=timeout).start().wait()
    main = z.main_of(argv)
    assert main is not None, argv
    forked = z.spawn("", env=env, cwd=cwd, timeout=timeout, args=main[2], main=main[:2]).wait()
    return spawned, forked


# -- the Done-when: same verdicts, a broken agent still fails ----------------------------------


@pytest.mark.parametrize(
    ("script", "ok"),
    [
        # slow: the passing side's fast cover: [keyless_effect.py] (every trial's verdict compared,
        # passes and failures) and test_the_gate_forks_a_warm_scenario_and_a_broken_one_still_fails
        pytest.param("good_agent.py", True, marks=pytest.mark.slow),
        ("keyless_effect.py", False),
    ],
)
def test_the_same_scenario_spawned_and_forked_gives_the_same_verdicts(
    tmp_path: Path, script: str, ok: bool
) -> None:
    command = ("{python}", str(AGENTS / script), "--state", "{state_dir}")
    spawn_agent = AgentSpec(command, timeout=60)
    fork_agent = AgentSpec(command, timeout=60, warm=(WARM_IMPORTS,))
    families = [family_from_spec(f) for f in FAMILIES]
    spawned = Campaign(spawn_agent, families, str(tmp_path / "spawn"), seed=7).run()
    with Zygote.for_agent(fork_agent) as z:
        # the sibling good_agent (the agent's own code) is not pre-imported; probe is
        assert "?good_agent" not in z.preload
        assert "?crashpoint" in z.preload or script == "keyless_effect.py"
        forked = Campaign(fork_agent, families, str(tmp_path / "fork"), seed=7, launcher=z).run(
            golden=spawned.golden
        )
        # every attempt that ran was forked, none fell back to spawning (a kill replayed from
        # the spawned golden run's recorded state runs no attempt 1)
        ran = [a for t in forked.trials for a in t.attempts if "replayed from" not in a.killed_by]
        assert z.forks == len(ran)
    assert [t.verdict() for t in forked.trials] == [t.verdict() for t in spawned.trials]
    assert forked.ok is spawned.ok is ok, (forked.summary()["failures"], forked.unexercised())
    if not ok:  # the check can fail in fork mode: the duplicate is caught there too
        assert {c.name for t in forked.failures for c in t.failed} >= {"exactly_once"}


# slow: fork mode's fast cover: test_the_same_scenario_spawned_and_forked_gives_the_same_verdicts
@pytest.mark.slow
def test_a_langgraph_agent_gives_the_same_verdicts_spawned_and_forked(tmp_path: Path) -> None:
    pytest.importorskip(
        "langgraph.checkpoint.sqlite",
        reason="needs the langgraph extra (pip install 'crashpoint[dev]')",
    )
    command = ("{python}", str(AGENTS / "lg_agent.py"), "--state", "{state_dir}")
    families = [family_from_spec({"kill": {"at": "every-boundary"}})]
    spawned = Campaign(AgentSpec(command, timeout=60), families, str(tmp_path / "s")).run()
    agent = AgentSpec(command, timeout=60, warm=(WARM_IMPORTS,))
    with Zygote.for_agent(agent) as z:
        assert {"?langgraph.graph", "?langgraph.checkpoint.sqlite"} <= set(z.preload)
        assert z.skipped == []
        forked = Campaign(agent, families, str(tmp_path / "f"), launcher=z).run(
            golden=spawned.golden
        )
        assert z.forks == sum(len(t.attempts) for t in forked.trials)
    assert len(forked.trials) >= 8
    assert [t.verdict() for t in forked.trials] == [t.verdict() for t in spawned.trials]


# -- a forked script is run as python would run it ------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["report", "x y", "{not a placeholder}"],
        ["code", "0"],
        ["code", "3"],
        ["code", "300"],
        ["message"],
        ["boom"],
        ["interrupted"],
    ],
)
def test_a_forked_script_exits_like_a_spawned_one(
    zygote: Zygote, folder: Path, tmp_path: Path, args: list[str]
) -> None:
    env = _env(folder, CP_TEST_X="attempt")
    spawned, forked = _both(
        zygote, [sys.executable, str(folder / "agent.py"), *args], env, str(tmp_path)
    )
    assert (forked.returncode, forked.signal, forked.timed_out, forked.orphans) == (
        spawned.returncode,
        spawned.signal,
        spawned.timed_out,
        spawned.orphans,
    )
    if args[0] == "report":
        # the same sys.argv, __main__, sys.path[0], cwd and per-attempt env; only the
        # module that read the environment at import differs (it ran in the zygote)
        assert (
            forked.stdout.replace(b'"at_import": "zygote"', b'"at_import": "attempt"')
            == spawned.stdout
        )
        assert b'"at_import": "zygote"' in forked.stdout
        assert b'"name": "__main__"' in forked.stdout
        assert b'"sid": true' in forked.stdout
    else:
        assert forked.stdout == spawned.stdout
        assert forked.stderr == spawned.stderr  # tracebacks too: no runpy frames
    if args[0] == "boom":
        assert forked.stderr.splitlines()[-1] == b"ValueError: boom"
    if args[0] == "interrupted":
        assert forked.signal == signal.SIGINT


def test_a_module_agent_runs_as_python_dash_m(folder: Path, tmp_path: Path) -> None:
    env = _env(folder, CP_TEST_X="attempt")
    agent = AgentSpec(
        ("{python}", "-m", "pkg.mod"),
        cwd=str(folder),
        warm=("cp_fs_warm",),
        env=tuple(sorted(_env(folder).items())),
    )
    plan = fork_plan(agent)
    assert plan == ForkPlan(("cp_fs_warm",), str(folder), ("module", "pkg.mod"))
    with Zygote.for_agent(agent) as z:
        spawned, forked = _both(z, [sys.executable, "-m", "pkg.mod", "report"], env, str(folder))
        assert "pkg.mod" not in z.preload
    assert forked.returncode == spawned.returncode == 0
    assert forked.stdout.replace(b'"at_import": null', b'"at_import": "attempt"') == spawned.stdout
    assert b'"argv": ["' + str(folder / "pkg" / "mod.py").encode() in forked.stdout


def test_a_hung_forked_script_times_out_and_its_orphans_are_reaped(
    zygote: Zygote, folder: Path, tmp_path: Path
) -> None:
    env = _env(folder)
    script = [sys.executable, str(folder / "agent.py")]
    spawned, forked = _both(zygote, [*script, "sleep", "60"], env, str(tmp_path), timeout=0.5)
    assert (
        (forked.timed_out, forked.signal)
        == (spawned.timed_out, spawned.signal)
        == (True, signal.SIGKILL)
    )
    spawned, forked = _both(zygote, [*script, "orphan"], env, str(tmp_path))
    assert len(forked.orphans) == len(spawned.orphans) == 1
    main = zygote.main_of([*script, "detached"])
    assert main is not None
    ex = zygote.spawn(
        "", env=env, cwd=str(tmp_path), timeout=30, args=main[2], main=main[:2]
    ).wait()
    daemon = int(ex.stdout)
    try:
        assert ex.orphans == (daemon,)  # found by its reap token, though in its own session
        assert (
            not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == psutil.STATUS_ZOMBIE
        )
    finally:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(daemon).ppid() != os.getpid():
                psutil.Process(daemon).kill()
    assert zygote.running


# -- what the fork cannot preserve ---------------------------------------------------------


def test_a_warm_module_that_starts_a_thread_is_refused_by_name(
    folder: Path, tmp_path: Path
) -> None:
    (tmp_path / "cp_fs_threaded.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    (tmp_path / "agent.py").write_text("import cp_fs_threaded\nprint('hi')\n")
    env = _env(folder, PYTHONPATH=str(tmp_path))
    listed = AgentSpec(
        ("{python}", str(tmp_path / "agent.py")),
        warm=("cp_fs_threaded",),
        env=tuple(sorted(env.items())),
    )
    with pytest.raises(ZygoteError, match=r"warm module 'cp_fs_threaded' started 1 thread"):
        Zygote.for_agent(listed).start()


def test_a_broken_warm_module_is_a_clear_error_when_listed(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "cp_fs_bad.py").write_text('raise RuntimeError("bad config")\n')
    (tmp_path / "agent.py").write_text("import sys\nsys.exit(0)\n")
    env = _env(folder, PYTHONPATH=str(tmp_path))
    agent = AgentSpec(
        ("{python}", str(tmp_path / "agent.py")),
        warm=("cp_fs_bad",),
        env=tuple(sorted(env.items())),
    )
    with pytest.raises(ZygoteError, match=r"warm module 'cp_fs_bad'.*RuntimeError: bad config"):
        Zygote.for_agent(agent).start()


def test_an_import_that_fails_in_the_zygote_fails_in_the_attempt_as_when_spawned(
    folder: Path, tmp_path: Path
) -> None:
    (tmp_path / "agent.py").write_text("import cp_fs_nosuch\n")
    (tmp_path / "lib").mkdir()
    env = _env(folder)
    agent = AgentSpec(
        ("{python}", str(tmp_path / "agent.py")),
        warm=(WARM_IMPORTS,),
        env=tuple(sorted(env.items())),
    )
    with Zygote.for_agent(agent) as z:
        assert z.skipped == ["cp_fs_nosuch"]
        spawned, forked = _both(z, [sys.executable, str(tmp_path / "agent.py")], env, str(tmp_path))
    assert forked.returncode == spawned.returncode == 1
    assert (
        forked.stderr.splitlines()[-1]
        == spawned.stderr.splitlines()[-1]
        == b"ModuleNotFoundError: No module named 'cp_fs_nosuch'"
    )


# -- what is warmed, what cannot be forked --------------------------------------------------


def test_script_imports_are_read_without_running_the_script() -> None:
    src = textwrap.dedent("""
        from __future__ import annotations
        import os, json as j
        import langgraph.graph
        from langgraph.checkpoint.sqlite import SqliteSaver
        from . import sibling
        raise SystemExit("never run")
        def f():
            import inside
        try:
            import optional
        except ImportError:
            pass
    """)
    assert script_imports(src) == ["os", "json", "langgraph.graph", "langgraph.checkpoint.sqlite"]
    with pytest.raises(SyntaxError):
        script_imports("#!/bin/sh\necho hi\n")


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        (("sh", "agent.sh"), "starts with 'sh', not {python}"),
        (("{python}", "-u", "agent.py"), "interpreter option '-u'"),
        (("{python}", "{workdir}/agent.py"), "changes per trial"),
        (("{python}", "{scenario_dir}/not_python.py"), "is not a Python source file"),
        (("{python}", "{scenario_dir}/agent.py"), ""),
    ],
)
def test_agents_that_cannot_be_forked_say_why(
    tmp_path: Path, command: tuple[str, ...], reason: str
) -> None:
    (tmp_path / "not_python.py").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "agent.py").write_text("print('hi')\n")
    plan = fork_plan(AgentSpec(command, warm=(WARM_IMPORTS,), scenario_dir=str(tmp_path)))
    if reason:
        assert isinstance(plan, str)
        assert reason in plan
    else:
        assert isinstance(plan, ForkPlan)
    assert isinstance(fork_plan(AgentSpec(command, scenario_dir=str(tmp_path))), str)


# -- the scenario key -------------------------------------------------------------------------


def _scenario(tmp_path: Path, agent: str) -> Path:
    (tmp_path / "agent.py").write_text("import json\nprint('hi')\n")
    p = tmp_path / "w.scenario.yaml"
    p.write_text(f"name: w\nagent:\n{textwrap.indent(agent, '  ')}\nfaults:\n  - kill: {{}}\n")
    return p


def test_the_warm_key_is_loaded(tmp_path: Path) -> None:
    cmd = 'command: ["{python}", "{scenario_dir}/agent.py"]\n'
    assert load_scenario(_scenario(tmp_path, cmd + "warm: true")).agent.warm == (WARM_IMPORTS,)
    assert load_scenario(_scenario(tmp_path, cmd + "warm: false")).agent.warm is None
    assert load_scenario(_scenario(tmp_path, cmd)).agent.warm is None
    agent = load_scenario(_scenario(tmp_path, cmd + "warm: [json, email.mime.text]")).agent
    assert agent.warm == ("json", "email.mime.text")
    assert AgentSpec.from_json(agent.to_json()) == agent


@pytest.mark.parametrize(
    ("warm", "message"),
    [
        ("yes please", "got 'yes please': use true"),
        ("[1]", "1 is not a module name"),
        ("[json, json]", "'json' is listed twice"),
        ("[agent]", "'agent' is the agent's own module"),
        ("[cp_fs_no_such_module]", "module 'cp_fs_no_such_module' not found"),
        ("[json, 'lang graph']", "'lang graph' is not a module name"),
    ],
)
def test_bad_warm_values_are_clear_errors(tmp_path: Path, warm: str, message: str) -> None:
    p = _scenario(tmp_path, f'command: ["{{python}}", "{{scenario_dir}}/agent.py"]\nwarm: {warm}')
    with pytest.raises(ScenarioError) as info:
        load_scenario(p)
    assert str(info.value).startswith(f"{p}:4 (key 'agent.warm'): "), str(info.value)
    assert message in str(info.value)


# -- the gate: `crashpoint run` forks a warm: scenario, or says why it spawns ------------------


#: One kill: enough where the test is about how the attempts start, not about the verdicts.
ONE_KILL = "kill: {at: random, count: 1}"
#: The gate's session without the installed pytest plugins it never uses (~0.5 s of start-up).
GATE_ENV = {
    **os.environ,
    "PYTEST_ADDOPTS": " ".join(
        f"-p no:{p}"
        for p in ("langsmith_plugin", "hypothesispytest", "fakefs", "anyio", "benchmark")
    ),
}


def _write_scenario(path: Path, name: str, agent: str, fault: str) -> Path:
    sc = path / f"{name}.scenario.yaml"
    sc.write_text(f"name: {name}\nagent:\n{textwrap.indent(agent, '  ')}\nfaults:\n  - {fault}\n")
    return sc


def _run_gate(*args: str | Path) -> tuple[int, str]:
    """``crashpoint run ARGS`` in a session of its own, killed whole after it (a timeout too)."""
    proc = run_reaped([sys.executable, "-m", "crashpoint", "run", *args], env=GATE_ENV, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def _gate(
    tmp_path: Path, name: str, agent: str, fault: str = "kill: {at: every-boundary}"
) -> tuple[int, str]:
    sc = _write_scenario(tmp_path, name, agent, fault)
    return _run_gate(sc, "--report", tmp_path / "report")


@pytest.fixture(scope="module")
def one_gate(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str]:
    """One gate over three scenarios (a gate run costs seconds of CPU), read by the two tests
    below: ``good`` (warm, forks), ``bad`` (the same, keyless: must still fail), ``sh`` (warm,
    but a shell script: spawned, and the gate says why). ``-n 0``: this is not about workers."""
    folder = tmp_path_factory.mktemp("gate")
    (folder / "agents").mkdir()
    for f in ("good_agent.py", "keyless_effect.py"):
        (folder / "agents" / f).write_text((AGENTS / f).read_text())
    (folder / "agent.sh").write_text((AGENTS / "shell_agent.sh").read_text())
    (folder / "agent.sh").chmod(0o755)
    good = (
        'command: ["{python}", "{scenario_dir}/agents/good_agent.py", "--state", '
        '"{state_dir}"]\nwarm: true'
    )
    every = "kill: {at: every-boundary}"
    for name, agent, fault in (
        ("good", good, every),
        ("bad", good.replace("good_agent.py", "keyless_effect.py"), every),
        ("sh", 'command: ["{scenario_dir}/agent.sh", "{state_dir}"]\nwarm: true', ONE_KILL),
    ):
        _write_scenario(folder, name, agent, fault)
    return _run_gate(folder, "-n", "0", "--report", folder / "report")


def _row(out: str, name: str) -> str:
    """The gate table's row of scenario ``name``."""
    [row] = [ln for ln in out.splitlines() if ln.startswith(f"{name} [kill@")]
    return row


def test_the_gate_forks_a_warm_scenario_and_a_broken_one_still_fails(
    one_gate: tuple[int, str],
) -> None:
    code, out = one_gate
    assert code == 1, out  # bad fails the gate
    assert _row(out, "good").endswith(" PASS"), out
    assert "launch: good [kill@every-boundary]: fork mode: 17 of 17 attempts forked" in out
    assert "launch: bad [kill@every-boundary]: fork mode: 17 of 17 attempts forked" in out
    assert _row(out, "bad").endswith(" FAIL (1)"), out
    assert re.search(
        r"FAILED bad \[kill@every-boundary\] trial \d+: exactly_once: FAIL: DUPLI", out
    )


def test_the_gate_spawns_an_agent_it_cannot_fork_and_says_why(one_gate: tuple[int, str]) -> None:
    _code, out = one_gate
    assert _row(out, "sh").endswith(" PASS"), out
    assert (
        "launch: sh [kill@random]: fork mode off, attempts are spawned: the command starts with"
        in out
    ), out
    assert "fork mode off" not in "".join(ln for ln in out.splitlines() if "good [" in ln)


def test_the_gate_reports_a_warm_module_that_fails_at_the_warm_key(tmp_path: Path) -> None:
    (tmp_path / "cp_fs_gate_bad.py").write_text('raise RuntimeError("bad config")\n')
    (tmp_path / "agent.py").write_text((AGENTS / "good_agent.py").read_text())
    code, out = _gate(
        tmp_path,
        "badwarm",
        'command: ["{python}", "{scenario_dir}/agent.py", "--state", '
        '"{state_dir}"]\nwarm: [cp_fs_gate_bad]\nenv: {PYTHONPATH: '
        '"{scenario_dir}"}',
        ONE_KILL,
    )
    assert code != 0
    assert "(key 'agent.warm')" in out, out
    assert "RuntimeError: bad config" in out


def test_an_entry_agent_with_warm_forks_its_entry_and_the_listed_modules() -> None:
    agent = AgentSpec(entry="crashpoint.agents.demo:main", warm=("json",), cwd="/tmp")
    assert fork_plan(agent) == ForkPlan(("crashpoint.agents.demo:main", "json"), "/tmp")
    assert fork_plan(AgentSpec(entry="m:f", warm=(WARM_IMPORTS,))) == ForkPlan(("m:f",), "")
