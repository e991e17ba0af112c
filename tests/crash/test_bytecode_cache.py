"""The private bytecode cache: attempts write and read their ``.pyc`` files under a folder of
the harness's (``PYTHONPYCACHEPREFIX``) even when the harness itself runs under
``PYTHONDONTWRITEBYTECODE=1``, never next to the agent's sources; a folder another user could
write is never used; the scenario's own choice wins; ``CRASHPOINT_PYCACHE=off`` turns it off.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from crashpoint._proc._cleanup import live_dir
from crashpoint.faults import strace_available, strace_wrap
from crashpoint.harness import AgentSpec, Campaign, family_from_spec
from crashpoint.harness._engine._pycache import (
    PYCACHE_VAR,
    bytecode_cache,
    bytecode_env,
    prune,
    unsafe_folder,
)
from crashpoint.harness._engine._trial import TrialRunner
from crashpoint.harness._engine._zygote import WARM_IMPORTS, Zygote, _clean_env

AGENT = textwrap.dedent("""
    import json, os, sys
    from crashpoint import probe
    import cp_bc_helper

    state = os.path.join(sys.argv[1], "n.json")
    n = json.load(open(state))["n"] if os.path.exists(state) else 0
    print("MARK", cp_bc_helper.MARK, cp_bc_helper.__cached__, flush=True)
    for i in range(n, 3):
        probe.step_started(f"s{i}")
        with open(state + ".tmp", "w") as f:
            json.dump({"n": i + 1}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(state + ".tmp", state)
        probe.step_completed(f"s{i}")
""")
HELPER = 'MARK = "source"\n'
TAG = sys.implementation.cache_tag


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    d = tmp_path / "agent"
    d.mkdir()
    (d / "agent.py").write_text(AGENT)
    (d / "cp_bc_helper.py").write_text(HELPER)
    return d


def _agent(agent_dir: Path, **env: str) -> AgentSpec:
    return AgentSpec(
        ("{python}", str(agent_dir / "agent.py"), "{state_dir}"),
        timeout=60,
        env=tuple(sorted(env.items())),
    )


def _pycs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix == ".pyc" or p.name == "__pycache__")


def _plant(pyc: Path, code: str) -> None:
    """Replace the module's cached bytecode by ``code``, keeping the header (source mtime and
    size) so Python takes it as current: the attempt then runs ``code`` only if it reads it."""
    header = pyc.read_bytes()[:16]
    pyc.write_bytes(header + marshal.dumps(compile(code, "cp_bc_helper.py", "exec")))


@pytest.mark.parametrize("mode", ["spawn", "fork"])
def test_attempts_cache_bytecode_privately_under_an_inherited_dontwritebytecode(
    agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(PYCACHE_VAR, str(cache))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as in many CI images
    agent = _agent(agent_dir)
    if mode == "fork":
        agent = AgentSpec(agent.command, timeout=60, warm=(WARM_IMPORTS,))
    families = [family_from_spec({"kill": {"at": "every-boundary"}})]

    def run(folder: str) -> list[bytes]:
        if mode == "spawn":
            res = Campaign(agent, families, str(tmp_path / folder), seed=3).run()
        else:
            with Zygote.for_agent(agent) as z:
                res = Campaign(agent, families, str(tmp_path / folder), seed=3, launcher=z).run()
                assert z.forks > 0
        assert res.ok, res.summary()["failures"]
        outs = [a.stdout for t in res.trials for a in t.attempts]
        assert res.summary()["bytecode_cache"] == {"path": str(cache), "note": None}
        return outs

    outs = run("first")
    pyc = cache / str(agent_dir).lstrip("/") / f"cp_bc_helper.{TAG}.pyc"  # Python's mirror
    assert pyc.is_file(), sorted(cache.rglob("*"))[:20]
    assert any(outs)
    assert all(f"MARK source {pyc}".encode() in o for o in outs if o), outs[:2]
    assert _pycs(agent_dir) == []  # nothing next to the sources
    assert not list((tmp_path / "first").rglob("*.pyc"))  # nor in the state folders
    _plant(pyc, 'MARK = "cache"\n')
    outs = run("second")
    assert any(outs)
    assert all(b"MARK cache " in o for o in outs if o), outs[:2]  # read from the cache
    assert _pycs(agent_dir) == []


def test_the_scenarios_own_choice_wins_and_off_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PYCACHE_VAR, str(tmp_path / "c"))
    cache = bytecode_cache()
    assert cache.path == str(tmp_path / "c")
    assert not cache.note
    assert bytecode_env({}, cache) == {"PYTHONPYCACHEPREFIX": cache.path}
    assert bytecode_env({"PYTHONDONTWRITEBYTECODE": "1"}, cache) == {}
    assert bytecode_env({"PYTHONPYCACHEPREFIX": "/mine"}, cache) == {}

    runner = TrialRunner(AgentSpec(("true",)), str(tmp_path / "r"))
    ledger = runner.ledger(str(tmp_path / "h.jsonl"))
    try:

        def env_of(**agent_env: str) -> dict[str, str]:
            runner.agent = AgentSpec(("true",), env=tuple(sorted(agent_env.items())))
            return runner.environment(ledger, 1, "c", "golden", {})

        monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # the harness's own: not passed on
        env = env_of()
        assert env["PYTHONPYCACHEPREFIX"] == cache.path
        assert "PYTHONDONTWRITEBYTECODE" not in env
        env = env_of(PYTHONDONTWRITEBYTECODE="1")
        assert env["PYTHONDONTWRITEBYTECODE"] == "1"
        assert "PYTHONPYCACHEPREFIX" not in env
        env = env_of(PYTHONPYCACHEPREFIX="/mine")
        assert env["PYTHONPYCACHEPREFIX"] == "/mine"
        assert "PYTHONDONTWRITEBYTECODE" not in env
        zenv = _clean_env({"PYTHONPYCACHEPREFIX": "/mine"})
        assert zenv["PYTHONPYCACHEPREFIX"] == "/mine"
        assert "PYTHONDONTWRITEBYTECODE" not in zenv
        assert _clean_env()["PYTHONPYCACHEPREFIX"] == cache.path

        monkeypatch.setenv(PYCACHE_VAR, "off")
        assert bytecode_cache().path == ""
        assert not bytecode_cache().note
        env = env_of()
        assert env["PYTHONDONTWRITEBYTECODE"] == "1"
        assert "PYTHONPYCACHEPREFIX" not in env
        assert _clean_env()["PYTHONDONTWRITEBYTECODE"] == "1"
    finally:
        runner.close()


def test_a_cache_folder_another_user_could_write_is_not_used(
    agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    assert "writable by others" in unsafe_folder(str(open_dir))
    inner = open_dir / "inner"  # ours and 0700, but under a folder anyone can rename it in
    inner.mkdir(mode=0o700)
    assert "above it, is writable by others and not sticky" in unsafe_folder(str(inner))
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "c")
    (tmp_path / "c").mkdir(mode=0o700)
    assert "symlink" in unsafe_folder(str(link))
    assert "not an absolute path" in unsafe_folder("rel/cache")
    assert unsafe_folder(str(tmp_path / "c")) == ""
    assert unsafe_folder(str(tmp_path / "new" / "made"), create=True) == ""
    for made in (tmp_path / "new", tmp_path / "new" / "made"):  # parents too, as live_dir wants
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
    if os.geteuid() == 0:  # only root can give a folder away
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        assert "owned by uid 65534, not by us" in unsafe_folder(str(theirs))

    # named explicitly: not used, said, and the attempts cache nothing
    monkeypatch.setenv(PYCACHE_VAR, str(open_dir))
    cache = bytecode_cache()
    assert cache.path == ""
    assert "writable by others" in cache.note
    assert PYCACHE_VAR in cache.note
    res = Campaign(
        _agent(agent_dir),
        [family_from_spec({"kill": {"at": "random", "count": 1}})],
        str(tmp_path / "report"),
        seed=1,
    ).run()
    assert res.ok
    assert cache.note in res.notes
    assert res.summary()["bytecode_cache"]["note"] == cache.note
    assert not list(open_dir.rglob("*.pyc"))
    assert _pycs(agent_dir) == []

    # the default place refused: the per-user temp one is used instead, and that is said
    monkeypatch.delenv(PYCACHE_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(open_dir))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(mode=0o700)
    cache = bytecode_cache()
    assert cache.path == str(tmp_path / "tmp" / f"crashpoint-{os.geteuid()}" / "pycache")
    assert f"{open_dir}, above it, is writable by others" in cache.note
    assert live_dir(str(tmp_path / "tmp"), create=True)  # the registry's folder still usable

    # the default place, when it is safe: $XDG_CACHE_HOME/crashpoint/pycache, made 0700
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = bytecode_cache()
    assert cache.path == str(tmp_path / "xdg" / "crashpoint" / "pycache")
    assert cache.note == ""
    assert stat.S_IMODE(os.stat(tmp_path / "xdg" / "crashpoint").st_mode) == 0o700

    # a relative folder is refused with how to fix it
    monkeypatch.setenv(PYCACHE_VAR, "rel/cache")
    cache = bytecode_cache()
    assert cache.path == ""
    assert "'rel/cache' is not an absolute path" in cache.note
    assert f"set {PYCACHE_VAR} to a folder of yours" in cache.note


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    live = tmp_path / "src"
    live.mkdir()
    (live / "m.py").write_text("X = 1\n")
    for folder in (live, tmp_path / "gone"):
        mirror = cache / str(folder).lstrip("/")
        mirror.mkdir(parents=True)
        (mirror / f"m.{TAG}.pyc").write_bytes(b"x" * 1000)
    assert prune(str(cache)) == 1000  # the mirror of a folder that is gone is removed
    assert not (cache / str(tmp_path / "gone").lstrip("/")).exists()
    assert (cache / str(live).lstrip("/") / f"m.{TAG}.pyc").is_file()
    assert prune(str(cache), max_bytes=999) == 0  # too big: emptied
    assert cache.is_dir()
    assert not any(cache.iterdir())


def test_attempts_whose_file_operations_are_counted_run_without_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the audit hook or strace a compile in one run and a cache hit in another would
    open other files and shift the counts a fileop kill is armed by: such attempts run as
    before the cache (no prefix, no bytecode written)."""
    cache = tmp_path / "c"
    monkeypatch.setenv(PYCACHE_VAR, str(cache))
    runner = TrialRunner(AgentSpec(("true",)), str(tmp_path / "r"))
    ledger = runner.ledger(str(tmp_path / "h.jsonl"))
    code = "import sys; print(sys.pycache_prefix, sys.flags.dont_write_bytecode)"
    plain = [sys.executable, "-c", code]

    def run(argv: list[str], **extra: str) -> list[str]:
        env = runner.environment(ledger, 1, "c", "golden", extra)
        proc = runner.spawn(argv, env, str(tmp_path), None, lambda pid: None)
        exit_ = proc.wait()
        assert exit_.returncode == 0, exit_.stderr
        return exit_.stdout.decode().split()

    try:
        assert run(plain) == [str(cache), "0"]
        assert run(plain, CRASHPOINT_FILEOP_KILL="999") == ["None", "1"]
        if strace_available()[0]:
            traced = strace_wrap(plain, str(tmp_path / "trace"), syscalls=("openat",))
            assert run(traced) == ["None", "1"]
        runner.agent = AgentSpec(("true",), env=(("PYTHONPYCACHEPREFIX", str(tmp_path / "u")),))
        assert run(plain, CRASHPOINT_FILEOP_KILL="999") == [str(tmp_path / "u"), "0"]
    finally:
        runner.close()
