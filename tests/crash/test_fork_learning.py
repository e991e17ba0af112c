"""Fork mode learns what the agent imports: a forked golden run writes the modules it imported
beyond the zygote's, a child forked from the zygote vets them (one that starts a thread at
import, kills its importer or hangs is left out, as the zygote must stay single-threaded and
alive), and the zygote imports the rest before the trials, so each forked attempt starts with
them in memory (``Zygote.learn``).

Each test's library module counts its own executions in a file: imported by the golden run,
once to vet it (by each vetting child that gets that far) and once in the zygote, never again
by the attempts.
"""

from __future__ import annotations

import contextlib
import os
import textwrap
import time
from pathlib import Path

import psutil

from crashpoint.harness import AgentSpec, Campaign, family_from_spec
from crashpoint.harness._engine._zygote import WARM_IMPORTS, Zygote

AGENT = textwrap.dedent("""
    import os, sys
    from crashpoint import probe

    def main():
        import cp_learn_lazy  # inside a function: no top-level import shows it
        import cp_learn_own  # the agent's own module, beside it: never pre-imported
        {extra}
        state = sys.argv[1]
        os.makedirs(state, exist_ok=True)
        for i in range(3):
            step = f"s{{i}}"
            if os.path.exists(os.path.join(state, step)):
                continue
            probe.step_started(step)
            with open(os.path.join(state, step), "w") as f:
                f.write(cp_learn_lazy.VALUE)
                f.flush()
                os.fsync(f.fileno())
            probe.step_completed(step)
        print(cp_learn_own.VALUE)

    if __name__ == "__main__":
        main()
""")

COUNTING = textwrap.dedent("""
    import os
    with open({log!r}, "a") as f:
        f.write(f"{{os.getpid()}}\\n")
    VALUE = "x"
""")

THREADED = textwrap.dedent("""
    import threading, time
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
""")


def _setup(tmp_path: Path, extra: str = "") -> tuple[AgentSpec, Path, Path]:
    lib, here = tmp_path / "lib", tmp_path / "agent"
    lib.mkdir()
    here.mkdir()
    log, own_log = tmp_path / "lazy.log", tmp_path / "own.log"
    (lib / "cp_learn_lazy.py").write_text(COUNTING.format(log=str(log)))
    (lib / "cp_learn_threaded.py").write_text(THREADED)
    (here / "cp_learn_own.py").write_text(COUNTING.format(log=str(own_log)))
    (here / "agent.py").write_text(AGENT.format(extra=extra))
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(lib), os.environ.get("PYTHONPATH")]))}
    agent = AgentSpec(
        ("{python}", str(here / "agent.py"), "{state_dir}"),
        timeout=60,
        warm=(WARM_IMPORTS,),
        env=tuple(env.items()),
    )
    return agent, log, own_log


def _run(agent: AgentSpec, report: Path) -> tuple[Campaign, object, Zygote]:
    families = [family_from_spec({"kill": {"at": "random", "count": 4}})]
    with Zygote.for_agent(agent) as z:
        campaign = Campaign(agent, families, str(report), seed=3, launcher=z)
        result = campaign.run()
        assert z.running
    return campaign, result, z


def _count(log: Path) -> int:
    return len(log.read_text().split()) if log.exists() else 0


def test_a_lazy_import_is_learned_once_and_not_repeated_by_the_attempts(tmp_path: Path) -> None:
    agent, log, own_log = _setup(tmp_path)
    _c, result, z = _run(agent, tmp_path / "report")
    assert result.ok, result.summary()["failures"]  # type: ignore[attr-defined]
    assert z.learned
    forked = [a for t in result.trials for a in t.attempts]  # type: ignore[attr-defined]
    assert len(forked) >= 4
    # the golden run, the vetting child, the zygote: nothing after
    assert _count(log) == 3, log.read_text()
    # the agent's own module is imported by every attempt that gets that far, never learned
    assert _count(own_log) >= 2
    assert "cp_learn_lazy" in z.learned_modules
    assert "cp_learn_own" not in z.learned_modules
    notes = result.summary()["notes"]  # type: ignore[attr-defined]
    assert any("pre-imported for the trials" in n for n in notes), notes


def test_a_learned_module_that_starts_a_thread_is_left_out_and_forks_go_on(
    tmp_path: Path,
) -> None:
    agent, log, _own = _setup(tmp_path, extra="import cp_learn_threaded")
    _c, result, z = _run(agent, tmp_path / "report")
    assert result.ok, result.summary()["failures"]  # type: ignore[attr-defined]
    assert z.learned
    # learned and vetted: the lazy module came before the threaded one and was kept
    assert _count(log) == 3, log.read_text()
    assert "cp_learn_lazy" in z.learned_modules
    assert "cp_learn_threaded" not in z.learned_modules
    assert z.forks >= 4  # the zygote stayed single-threaded: every attempt was forked


# -- a module that kills or hangs its importer: the vetting child, never the zygote ---------------

KILLERS = {
    "cp_learn_exit": "import os\nos._exit(3)\n",
    "cp_learn_segv": textwrap.dedent("""
        import ctypes, resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: nor a core_pattern pipe
        ctypes.string_at(0)  # SIGSEGV
    """),
    "cp_learn_hang": "import time\ntime.sleep(120)\n",
}

#: Imported by a vetting child (whose parent is the zygote), forks a process that keeps the
#: child's report pipe open for a minute; the vetting child itself goes on.
FORKS = textwrap.dedent("""
    import os, time
    with open(f"/proc/{{os.getppid()}}/cmdline", "rb") as f:
        vetting = b"crashpoint._forkserver" in f.read()
    if vetting:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        with open({pidfile!r}, "w") as f:
            f.write(str(pid))
""")

CHECK = textwrap.dedent("""
    import sys

    def main(argv):
        import cp_learn_lazy, cp_learn_after  # already imported in the zygote: not run again
        print(sorted(m for m in sys.modules if m.startswith("cp_learn_")))
""")


def _zygote(tmp_path: Path, *learned: str) -> tuple[Zygote, Path, dict[str, Path]]:
    """A zygote whose PYTHONPATH has the counting modules, the killers and an entry that
    imports two of them; a learned-imports file naming ``learned``, as a golden run writes."""
    lib = tmp_path / "lib"
    lib.mkdir()
    logs = {n: tmp_path / f"{n}.log" for n in ("cp_learn_lazy", "cp_learn_after")}
    for name, log in logs.items():
        (lib / f"{name}.py").write_text(COUNTING.format(log=str(log)))
    for name, source in KILLERS.items():
        (lib / f"{name}.py").write_text(source)
    (lib / "cp_learn_check.py").write_text(CHECK)
    (lib / "cp_learn_forks.py").write_text(FORKS.format(pidfile=str(tmp_path / "forked.pid")))
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(lib), os.environ.get("PYTHONPATH")]))
    path = tmp_path / "imports.learned"
    path.write_text("".join(f"{n}\n" for n in learned))
    return Zygote(env=env), path, logs


def _vetting_children(z: Zygote) -> list[psutil.Process]:
    assert z.pid is not None
    return [
        p
        for p in psutil.Process(z.pid).children(recursive=True)
        if p.status() != psutil.STATUS_ZOMBIE
    ]


def test_a_learned_module_that_kills_its_importer_is_left_out_and_learning_goes_on(
    tmp_path: Path,
) -> None:
    z, path, logs = _zygote(
        tmp_path, "cp_learn_lazy", "cp_learn_exit", "cp_learn_segv", "cp_learn_after"
    )
    with z:
        note = z.learn(str(path))
        assert z.running
        # each kill cost one vetting child; the next vetted the rest without the killer
        assert z.learned_modules == ["cp_learn_lazy", "cp_learn_after"], note
        assert "2 module(s) the golden run imported are now pre-imported" in note
        assert "cp_learn_exit (ended its importer (exit 3))" in note
        assert "cp_learn_segv (killed its importer (signal 11))" in note
        # three vetting children imported the first module, the last one the other; the zygote
        assert (_count(logs["cp_learn_lazy"]), _count(logs["cp_learn_after"])) == (4, 2)
        assert not _vetting_children(z)
        ex = z.spawn("cp_learn_check:main", env=z.env, cwd=str(tmp_path), timeout=30).wait()
        assert ex.returncode == 0, ex.stderr
        assert b"['cp_learn_after', 'cp_learn_check', 'cp_learn_lazy']" in ex.stdout
        assert (_count(logs["cp_learn_lazy"]), _count(logs["cp_learn_after"])) == (4, 2)


def test_a_learned_module_that_hangs_its_importer_is_cut_at_the_timeout(tmp_path: Path) -> None:
    z, path, logs = _zygote(tmp_path, "cp_learn_lazy", "cp_learn_hang", "cp_learn_after")
    with z:
        t0 = time.monotonic()
        note = z.learn(str(path), timeout=3.0)
        assert time.monotonic() - t0 < 30
        assert z.running
        # what came before it is learned; no time is left to vet what follows
        assert z.learned_modules == ["cp_learn_lazy"], note
        assert "cp_learn_hang (did not finish importing in time)" in note
        assert not _vetting_children(z)  # killed and reaped
        ex = z.spawn("cp_learn_check:main", env=z.env, cwd=str(tmp_path), timeout=30).wait()
        assert ex.returncode == 0, ex.stderr
        assert (_count(logs["cp_learn_lazy"]), _count(logs["cp_learn_after"])) == (2, 1)


def test_a_learned_module_that_forks_a_process_holding_the_report_does_not_stall_learning(
    tmp_path: Path,
) -> None:
    z, path, _logs = _zygote(tmp_path, "cp_learn_lazy", "cp_learn_forks", "cp_learn_after")
    with z:
        t0 = time.monotonic()
        note = z.learn(str(path), timeout=20)
        assert time.monotonic() - t0 < 10, note  # the child's end, not the pipe's, counts
        assert z.learned_modules == ["cp_learn_lazy", "cp_learn_forks", "cp_learn_after"], note
        # killed with the vetting child's session, and reaped by whoever adopted it
        with contextlib.suppress(psutil.NoSuchProcess):
            forked = psutil.Process(int((tmp_path / "forked.pid").read_text()))
            assert not psutil.wait_procs([forked], timeout=10)[1]
        assert z.running
        assert not _vetting_children(z)
