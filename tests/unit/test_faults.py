"""The faults, each on its own: file corruptions (seeded, reproducible, doing what they say),
failpoint specs, the injected file-operation killer, disk full (tmpfs namespace, RLIMIT_FSIZE),
signals and hangs in a trial, and killing a whole process tree.

Every process started here is reaped: by :class:`AgentProcess` (its own session, tree killed on
timeout), by the ``children`` fixture, or explicitly in a ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import stat
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

from crashpoint._failpoints import FAILPOINTS, FailpointSpecError, parse
from crashpoint._proc import (
    REAP_VAR,
    AgentProcess,
    _process,
    containment,
    kill_tree,
    leftovers,
    marked,
    with_reap_token,
)
from crashpoint.faults import CORRUPTIONS, Corruption, corrupt
from crashpoint.faults._disk import TmpfsNamespace, capabilities
from crashpoint.harness import AgentSpec, Fault, Golden, Plan, TrialResult, TrialRunner

INJECT = Path(__file__).resolve().parents[2] / "src" / "crashpoint" / "faults" / "_inject"
BASE_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}


def run_python(code: str, tmp_path: Path, env: dict[str, str] | None = None, **kw: Any) -> Any:
    """Run ``code`` in a fresh interpreter (own session, reaped) with cwd ``tmp_path``."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    return (
        AgentProcess(
            [sys.executable, str(script)],
            {**BASE_ENV, **(env or {})},
            cwd=str(tmp_path),
            timeout=20,
            **kw,
        )
        .start()
        .wait()
    )


# -- file corruptions ------------------------------------------------------------------------------


def make_state(root: Path, salt: str = "") -> None:
    """A small state folder: files of several sizes (no zero bytes in them), one empty."""
    rng = random.Random(f"state{salt}")
    root.mkdir(parents=True, exist_ok=True)
    (root / "sub").mkdir(exist_ok=True)
    for name, size in (("journal.log", 3000), ("meta.json", 200), ("sub/snap.bin", 1000)):
        (root / name).write_bytes(bytes(rng.randrange(1, 256) for _ in range(size)))
    (root / "empty").write_bytes(b"")


def tree(root: Path) -> dict[str, tuple[Any, ...]]:
    """Everything observable about a folder: per entry, its kind, mode and bytes or target."""
    out: dict[str, tuple[Any, ...]] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        st = p.lstat()
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_file():
            out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
        else:
            out[rel] = ("dir",)
    return out


def relative(c: Corruption | None, root: Path) -> dict[str, Any] | None:
    if c is None:
        return None
    return {**c.to_json(), "path": os.path.relpath(c.path, root)}


def apply(how: str, root: Path, seed: int, older: Path | None = None) -> Corruption | None:
    return corrupt(
        how, f"{root}/**", random.Random(seed), older=str(older) if older else None, root=str(root)
    )


@pytest.fixture
def restore_modes(tmp_path: Path) -> Any:
    """Make every file readable again after the test (``unreadable`` sets mode 000)."""
    yield
    for p in tmp_path.rglob("*"):
        if p.is_file() and not p.is_symlink():
            p.chmod(0o600)


@pytest.mark.usefixtures("restore_modes")
@pytest.mark.parametrize("how", CORRUPTIONS)
def test_a_corruption_is_seeded_and_reproducible(how: str, tmp_path: Path) -> None:
    records, trees = [], []
    for copy in ("a", "b"):
        root, older = tmp_path / copy / "state", tmp_path / copy / "older"
        make_state(root)
        make_state(older, salt="older")  # what stale-copy rolls back to
        records.append(relative(apply(how, root, 1234, older), root))
        trees.append(tree(root))
    assert records[0] is not None
    assert records[0] == records[1]
    assert trees[0] == trees[1]  # same seed: byte for byte the same damage
    # and the seed matters: other seeds pick other files, offsets, bits or garbage
    seen = set()
    for seed in range(12):
        root = tmp_path / f"s{seed}" / "state"
        older = tmp_path / f"s{seed}" / "older"
        make_state(root)
        make_state(older, salt="older")
        seen.add(repr(relative(apply(how, root, seed, older), root)))
    assert len(seen) > 1


def _one(how: str, tmp_path: Path) -> tuple[Corruption, bytes, Path]:
    root = tmp_path / "state"
    make_state(root)
    before = tree(root)
    c = apply(how, root, 99)
    assert c is not None
    rel = os.path.relpath(c.path, root)
    return c, before[rel][2], Path(c.path)


def test_truncate_cuts_the_file_at_the_recorded_offset(tmp_path: Path) -> None:
    c, old, path = _one("truncate", tmp_path)
    assert path.read_bytes() == old[: c.offset]
    assert c.offset < len(old)
    assert c.length == len(old) - c.offset
    assert c.detail == "torn write"


def test_bitflip_flips_exactly_the_recorded_bit(tmp_path: Path) -> None:
    c, old, path = _one("bitflip", tmp_path)
    new = path.read_bytes()
    diff = [i for i in range(len(old)) if old[i] != new[i]]
    assert len(new) == len(old)
    assert diff == [c.offset]
    assert c.length == 1
    assert old[c.offset] ^ new[c.offset] == 1 << int(c.detail.split()[1])


def test_zero_zeroes_the_recorded_range_and_nothing_else(tmp_path: Path) -> None:
    c, old, path = _one("zero", tmp_path)
    new = path.read_bytes()
    end = c.offset + c.length
    assert c.length >= 1
    assert len(new) == len(old)
    assert new[c.offset : end] == b"\0" * c.length
    assert new[: c.offset] == old[: c.offset]
    assert new[end:] == old[end:]


def test_delete_removes_the_file(tmp_path: Path) -> None:
    c, old, path = _one("delete", tmp_path)
    assert not path.exists()
    assert c.length == len(old)


def test_append_garbage_keeps_the_file_and_adds_the_recorded_bytes(tmp_path: Path) -> None:
    c, old, path = _one("append-garbage", tmp_path)
    new = path.read_bytes()
    assert new[: len(old)] == old
    assert len(new) == len(old) + c.length
    assert c.offset == len(old)
    assert c.length >= 1


@pytest.mark.usefixtures("restore_modes")
def test_unreadable_sets_mode_000(tmp_path: Path) -> None:
    c, _, path = _one("unreadable", tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0
    assert "root still reads it" in c.detail  # documented: root ignores the mode


def test_symlink_replaces_the_file_with_a_link_to_its_old_bytes(tmp_path: Path) -> None:
    _c, old, path = _one("symlink", tmp_path)
    assert path.is_symlink()
    assert os.readlink(path) == path.name + ".decoy"
    assert path.read_bytes() == old
    assert not os.path.isabs(os.readlink(path))


def test_stale_copy_rolls_one_changed_file_back_to_the_older_copy(tmp_path: Path) -> None:
    root, older = tmp_path / "state", tmp_path / "older"
    make_state(root)
    make_state(older, salt="older")
    (older / "meta.json").unlink()  # a file that did not exist back then is left alone
    c = apply("stale-copy", root, 5, older)
    assert c is not None
    rel = os.path.relpath(c.path, root)
    assert rel in ("journal.log", "sub/snap.bin")
    assert Path(c.path).read_bytes() == (older / rel).read_bytes()
    # without an older copy, or when nothing differs from it, there is nothing to roll back
    assert apply("stale-copy", root, 5, None) is None
    same = tmp_path / "same"
    shutil.copytree(root, same)
    assert apply("stale-copy", root, 5, same) is None


@pytest.mark.parametrize("how", ["truncate", "bitflip", "zero"])
def test_byte_corruptions_never_pick_an_empty_file(how: str, tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    assert corrupt(how, f"{tmp_path}/**", random.Random(0)) is None
    c = corrupt("delete", f"{tmp_path}/**", random.Random(0))
    assert c is not None
    assert c.path == str(tmp_path / "empty")


def test_corrupt_refuses_an_unknown_kind_and_finds_nothing_in_an_empty_folder(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="unknown corruption 'shred'"):
        corrupt("shred", f"{tmp_path}/**", random.Random(0))
    for how in CORRUPTIONS:
        assert (
            corrupt(
                how, f"{tmp_path}/**", random.Random(0), older=str(tmp_path), root=str(tmp_path)
            )
            is None
        )


# -- failpoint specs -------------------------------------------------------------------------------


def test_failpoint_specs_parse() -> None:
    assert parse("") == {}
    assert parse(" journal.write = enospc ; ") == {"journal.write": ("enospc", 1)}
    assert parse("atomic.after_temp=kill@3;effect.after_call=exit(9)@2") == {
        "atomic.after_temp": ("kill", 3),
        "effect.after_call": ("exit(9)", 2),
    }
    for name in FAILPOINTS:
        for action in ("kill", "abort", "exit", "exit(0)", "enospc", "eio", "efbig"):
            assert parse(f"{name}={action}@1") == {name: (action, 1)}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("journal.write", "is not NAME=ACTION"),
        ("nope=kill", "is not NAME=ACTION"),
        ("=kill", "is not NAME=ACTION"),
        ("journal.write=explode", "unknown action 'explode'"),
        ("journal.write=", "unknown action ''"),
        ("journal.write=exit(1000)", "unknown action"),
        ("journal.write=kill@0", "the count after @ must be an integer >= 1"),
        ("journal.write=kill@-2", "the count after @"),
        ("journal.write=kill@x", "the count after @"),
        ("journal.write=kill;bogus=eio", "is not NAME=ACTION"),
    ],
)
def test_failpoint_spec_errors_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(FailpointSpecError, match=message.replace("(", r"\(")) as info:
        parse(spec)
    assert isinstance(info.value, ValueError)
    assert "CRASHPOINT_FAILPOINTS" in str(info.value)


# -- the injected file-operation killer ------------------------------------------------------------

WRITE_TEN = """
    for i in range(1, 11):
        with open(str(i), "w") as f:
            f.write("x")
    print("done", flush=True)
"""


@pytest.mark.parametrize("n", [1, 2, 5, 10, 11])
def test_the_injected_sitecustomize_kills_before_the_nth_file_write(n: int, tmp_path: Path) -> None:
    ex = run_python(
        WRITE_TEN, tmp_path, {"PYTHONPATH": str(INJECT), "CRASHPOINT_FILEOP_KILL": str(n)}
    )
    written = sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit())
    if n <= 10:
        assert ex.signal == signal.SIGKILL, ex.stderr
        assert written == list(range(1, n))  # exactly n - 1: killed before the n-th open
    else:
        assert (ex.returncode, ex.stdout) == (0, b"done\n")
        assert written == list(range(1, 11))


OPS = """
    import os
    ops = [
        ("mkdir", lambda: os.mkdir("d")),
        ("open-w", lambda: open("d/f", "w").close()),
        ("os.open", lambda: os.close(os.open("d/g", os.O_WRONLY | os.O_CREAT))),
        ("rename", lambda: os.rename("d/f", "d/f2")),
        ("replace", lambda: os.replace("d/f2", "d/f3")),
        ("truncate", lambda: os.truncate("d/f3", 0)),
        ("symlink", lambda: os.symlink("f3", "d/s")),
        ("link", lambda: os.link("d/f3", "d/h")),
        ("remove", lambda: os.remove("d/s")),
        ("unlink", lambda: os.unlink("d/h")),
        ("append", lambda: open("d/f3", "a").close()),
    ]
    for name, op in ops:
        with open(__file__) as f:  # reading is not a mutation: never counted
            f.read()
        op()
        print(name, flush=True)
"""
OP_NAMES = [
    "mkdir",
    "open-w",
    "os.open",
    "rename",
    "replace",
    "truncate",
    "symlink",
    "link",
    "remove",
    "unlink",
    "append",
]


@pytest.mark.parametrize("n", range(1, len(OP_NAMES) + 1))
def test_every_kind_of_file_mutation_is_a_kill_point(n: int, tmp_path: Path) -> None:
    ex = run_python(OPS, tmp_path, {"PYTHONPATH": str(INJECT), "CRASHPOINT_FILEOP_KILL": str(n)})
    assert ex.signal == signal.SIGKILL, ex.stderr
    assert ex.stdout.decode().split() == OP_NAMES[: n - 1]


def test_without_a_count_the_sitecustomize_does_nothing(tmp_path: Path) -> None:
    ex = run_python(WRITE_TEN, tmp_path, {"PYTHONPATH": str(INJECT)})
    assert (ex.returncode, ex.stdout) == (0, b"done\n")


# -- disk full -------------------------------------------------------------------------------------

FILL = """
    import errno, os, sys
    fd = os.open(os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "fill"),
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    total = 0
    try:
        while True:
            total += os.write(fd, b"x" * 4096)
    except OSError as exc:
        print(errno.errorcode[exc.errno], total, flush=True)
    os.close(fd)
"""


def test_rlimit_fsize_gives_efbig_in_the_child(tmp_path: Path) -> None:
    if not capabilities().rlimit:
        pytest.skip(capabilities().rlimit_reason)
    ex = run_python(FILL, tmp_path, rlimit_fsize=10_000)
    assert ex.returncode == 0, ex.stderr  # Python ignores SIGXFSZ: the write fails instead
    assert ex.stdout.split() == [b"EFBIG", b"10000"]  # the last write was cut short
    assert (tmp_path / "fill").stat().st_size == 10_000


def test_a_tmpfs_namespace_gives_a_real_enospc_and_copies_the_state_back(tmp_path: Path) -> None:
    caps = capabilities()
    if not caps.tmpfs:
        pytest.skip(caps.tmpfs_reason)
    state = tmp_path / "state"
    state.mkdir()
    (state / "before").write_bytes(b"kept")
    script = tmp_path / "fill.py"
    script.write_text(textwrap.dedent(FILL))
    ns = TmpfsNamespace(str(state), 64 * 1024)
    try:
        argv = ns.wrap([sys.executable, str(script), str(state)])
        ex = AgentProcess(argv, BASE_ENV, cwd=str(tmp_path), timeout=20).start().wait()
        assert ex.returncode == 0, ex.stderr
        code, total = ex.stdout.split()
        assert code == b"ENOSPC"
        # the tmpfs is capacity bytes; "before" takes a page of it
        assert 0 < int(total) <= 64 * 1024 - 4096
        assert not (state / "fill").exists()  # outside the namespace the real folder is intact
    finally:
        ns.close()
    assert (state / "fill").stat().st_size == int(total)  # the tmpfs content was copied back
    assert (state / "before").read_bytes() == b"kept"  # and what was there before survived
    assert psutil.pid_exists(ns._holder.pid) is False  # the namespace holder was reaped


# -- signals and hangs in a trial ------------------------------------------------------------------

DEMO = AgentSpec(
    command=("{python}", "-m", "crashpoint.agents.demo", "--state", "{state_dir}"), timeout=30
)


@pytest.fixture(scope="module")
def demo_golden(tmp_path_factory: pytest.TempPathFactory) -> Golden:
    return TrialRunner(DEMO, str(tmp_path_factory.mktemp("golden"))).golden()


def run_trial(
    spec: AgentSpec, golden: Golden, tmp_path: Path, *faults: Fault, restarts: int = 2
) -> TrialResult:
    return TrialRunner(spec, str(tmp_path), restarts=restarts).run(
        Plan(tuple(faults), "signals", 1, 0), golden
    )


def test_sigterm_mid_run_ends_the_attempt_and_the_demo_resumes(
    demo_golden: Golden, tmp_path: Path
) -> None:
    at = round(min(demo_golden.span / 3, 0.01), 3)  # just after its first event: mid-run
    term = Fault.make("signal", 1, sig="TERM", seconds=at, grace=5.0)
    res = run_trial(DEMO, demo_golden, tmp_path, term)
    first, second = res.attempts
    assert first.signal == signal.SIGTERM  # it died of the TERM itself, before the grace ran out
    assert first.duration < 5.0
    assert "sig=TERM" in first.killed_by
    assert second.returncode == 0
    assert res.ok, [str(c) for c in res.failed]


def test_sigterm_is_followed_by_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    agent = tmp_path / "stubborn.py"
    agent.write_text(
        textwrap.dedent("""
        import os, signal, sys, time
        marker = os.path.join(sys.argv[1], "started")
        if os.path.exists(marker):
            print("done", flush=True)
            sys.exit(0)
        open(marker, "w").close()
        signal.signal(signal.SIGTERM, lambda *a: print("TERM ignored", file=sys.stderr,
                                                       flush=True))
        time.sleep(30)
    """)
    )
    spec = AgentSpec(command=("{python}", str(agent), "{state_dir}"), timeout=20)
    golden = Golden([], [], Counter(), b"done\n", 0.05)
    term = Fault.make("signal", 1, sig="TERM", seconds=0.3, grace=0.4, anchor="start")
    res = run_trial(spec, golden, tmp_path, term)
    first, second = res.attempts
    assert first.signal == signal.SIGKILL
    assert b"TERM ignored" in first.stderr
    assert 0.65 <= first.duration < 5.0  # TERM at 0.3 s, KILL 0.4 s later
    assert (second.returncode, second.stdout) == (0, b"done\n")
    assert res.ok, [str(c) for c in res.failed]


def test_sigstop_then_sigcont_is_a_freeze_the_demo_survives(
    demo_golden: Golden, tmp_path: Path
) -> None:
    freeze = Fault.make("signal", 1, sig="STOP", seconds=0.0, pause=0.6, anchor="start")
    res = run_trial(DEMO, demo_golden, tmp_path, freeze)
    (only,) = res.attempts  # frozen, thawed, finished: no restart needed
    assert only.returncode == 0
    assert only.duration >= 0.6
    assert res.ok, [str(c) for c in res.failed]


def test_a_hang_is_a_timeout_failure_not_a_stuck_job(demo_golden: Golden, tmp_path: Path) -> None:
    spec = AgentSpec(command=DEMO.command, timeout=1.0)
    hang = Fault.make(
        "signal",
        1,
        sig="STOP",
        seconds=0.0,  # at once: the lean demo can finish its whole run within 0.05 s
        pause=1e6,  # frozen for good
        anchor="start",
    )
    res = run_trial(spec, demo_golden, tmp_path, hang, restarts=0)
    (only,) = res.attempts
    assert only.timed_out
    assert only.signal == signal.SIGKILL
    assert 1.0 <= only.duration < 5.0
    failed = {c.name: c.message for c in res.failed}
    assert re.search(r"hung, killed after 1\.\ds", failed["completes"])  # the 1 s timeout
    assert "no_orphans" not in failed
    assert Path(res.folder, "REPLAY").is_file()


# -- killing a process tree ------------------------------------------------------------------------

SPAWNER = """
    import os, subprocess, sys, time
    kids = [subprocess.Popen(["sleep", "30"]),                          # same group
            subprocess.Popen(["sleep", "30"],                           # its own group
                             preexec_fn=lambda: os.setpgid(0, 0)),
            subprocess.Popen(["sleep", "30"], start_new_session=True),  # setsid, still a child
            subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30"])]      # a grandchild's child
    time.sleep(0.2)
    print(" ".join(str(k.pid) for k in kids), flush=True)
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _descendants(pids: list[int]) -> list[int]:
    out = list(pids)
    for pid in pids:
        try:
            out += [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return out


def test_kill_tree_leaves_no_survivor_among_groups_and_new_sessions(
    tmp_path: Path, children: Any
) -> None:
    (tmp_path / "spawner.py").write_text(textwrap.dedent(SPAWNER))
    child = children.spawn([sys.executable, str(tmp_path / "spawner.py")])
    kids = [int(x) for x in (child.read_line(10) or "").split()]
    everyone = _descendants(kids)
    assert len(everyone) >= 6
    assert all(_alive(p) for p in everyone)
    assert kill_tree(child.pid, sid=child.pid) == []
    assert child.wait(5) == -signal.SIGKILL  # kill_tree reaps nothing: Popen keeps the status
    assert [p for p in everyone if _alive(p)] == []


def test_an_attempt_that_exits_leaving_a_process_behind_reports_and_kills_it(
    tmp_path: Path,
) -> None:
    ex = (
        AgentProcess(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], BASE_ENV, timeout=10)
        .start()
        .wait()
    )
    left = int(ex.stdout)
    assert ex.returncode == 0
    assert ex.orphans == (left,)
    assert not _alive(left)


def test_processes_dying_of_the_same_kill_are_not_orphans() -> None:
    # The planned kill SIGKILLs the whole group; a member may still be exiting when the leader
    # is reaped (right after the wait, half the time here). It must not count as an orphan.
    for _ in range(20):
        proc = AgentProcess(
            ["sh", "-c", 'x=$(sh -c "sleep 30; echo"); echo "$x"'], BASE_ENV, timeout=10
        ).start()
        time.sleep(0.02)
        proc.signal(signal.SIGKILL)
        assert proc.proc is not None
        proc.proc.wait()
        assert leftovers(proc.pid) == ()
        ex = proc.wait()
        assert ex.orphans == ()


def test_a_timed_out_attempt_is_killed_with_its_whole_tree(tmp_path: Path) -> None:
    (tmp_path / "spawner.py").write_text(textwrap.dedent(SPAWNER))
    proc = AgentProcess(
        [sys.executable, str(tmp_path / "spawner.py")], BASE_ENV, timeout=1.0
    ).start()
    ex = proc.wait()
    kids = [int(x) for x in ex.stdout.split()]
    assert ex.timed_out
    assert ex.signal == signal.SIGKILL
    assert len(kids) == 4
    assert [p for p in kids if _alive(p)] == []


DETACH = """
    import os, subprocess, sys, time
    detached = dict(start_new_session=True, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if sys.argv[1] == "double-fork":
        # an intermediate starts a grandchild in a new session and exits at once: the
        # grandchild is re-parented to PID 1, out of the tree and the session (a daemon)
        code = f"import subprocess; print(subprocess.Popen(['sleep', '30'], **{detached}).pid)"
        pid = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout.strip()
    else:  # a child of the agent itself in a new session; orphaned once the agent is killed
        pid = subprocess.Popen(["sleep", "30"], **detached).pid
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(str(pid))
    os.replace(sys.argv[2] + ".tmp", sys.argv[2])
    time.sleep(60)
"""


@pytest.fixture
def no_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attempts use the fallback reaper (session + reap token), as where no cgroup is allowed."""
    monkeypatch.setattr(_process, "attempt_cgroup", lambda: (None, "disabled by the test"))


@pytest.mark.usefixtures("no_cgroup")
@pytest.mark.parametrize("how", ["double-fork", "setsid-child"])
def test_a_process_in_a_new_session_that_lost_its_parent_is_found_by_its_reap_token(
    how: str, tmp_path: Path
) -> None:
    """It is neither a descendant nor a session member when the harness looks, but it carries
    the attempt's CRASHPOINT_REAP_TOKEN: found, killed, reported as an orphan (the fallback
    reaper; with a cgroup it is found there first)."""
    (tmp_path / "spawner.py").write_text(textwrap.dedent(DETACH))
    pidfile = tmp_path / "daemon.pid"
    agent = AgentProcess(
        [sys.executable, str(tmp_path / "spawner.py"), how, str(pidfile)], BASE_ENV, timeout=20
    ).start()
    daemon = 0
    try:
        deadline = time.monotonic() + 10
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        daemon = int(pidfile.read_text())
        assert os.getsid(daemon) == daemon != agent.pid
        # the agent and its daemon carry the token (the double fork's intermediate is gone)
        assert sorted(p.pid for p in marked(agent.reap_token)) == sorted([agent.pid, daemon])
        agent.signal(signal.SIGKILL)  # what a planned kill does: killpg of the attempt's group
        ex = agent.wait()  # then the harness looks for what is left, and kills it
        assert ex.signal == signal.SIGKILL
        assert ex.orphans == (daemon,)  # reported: no_orphans fails
        assert not _alive(daemon)  # and killed
    finally:
        agent.kill()
        if daemon:
            _kill_by_pid(daemon, "sleep")


@pytest.mark.parametrize("contained", [True, False], ids=["cgroup", "no-cgroup"])
def test_a_process_that_cleared_its_environment_escapes_only_without_a_cgroup(
    contained: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback reaper's limit: ``env -i`` drops the marker, so a detached process started
    that way is found by nothing once its parent is gone (this test reaps it). In the attempt's
    cgroup it is found, reported and killed like any other orphan."""
    if not contained:
        monkeypatch.setattr(_process, "attempt_cgroup", lambda: (None, "disabled by the test"))
    elif containment().mechanism != "cgroup":
        pytest.skip(f"no cgroup here: {containment().reason}")
    code = """
        import subprocess, sys
        p = subprocess.Popen(["env", "-i", "sleep", "30"], start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        print(p.pid)
    """
    (tmp_path / "child.py").write_text(textwrap.dedent(code))
    ex = (
        AgentProcess([sys.executable, str(tmp_path / "child.py")], BASE_ENV, timeout=20)
        .start()
        .wait()
    )
    daemon = int(ex.stdout)
    try:
        assert ex.returncode == 0, ex.stderr
        assert ex.containment == ("cgroup" if contained else "session (disabled by the test)")
        assert ex.orphans == ((daemon,) if contained else ())
        assert _alive(daemon) is not contained
    finally:
        _kill_by_pid(daemon, "sleep")


def test_marked_matches_the_exact_entry_only() -> None:
    token, env = with_reap_token(BASE_ENV)
    assert env[REAP_VAR] == token
    assert re.fullmatch(r"[0-9a-f]{32}", token)
    assert with_reap_token(env) == (token, env)  # a given token is kept
    assert with_reap_token({**BASE_ENV, REAP_VAR: "short"})[0] != "short"
    longer = {**BASE_ENV, REAP_VAR: token + "0"}  # a prefix is not the entry
    procs = [AgentProcess(["sleep", "30"], e, timeout=20).start() for e in (env, longer)]
    try:
        assert [p.pid for p in marked(token)] == [procs[0].pid]
        assert marked("") == []
        with pytest.MonkeyPatch.context() as mp:  # inherited from us: replaced, never scanned
            mp.setenv(REAP_VAR, token)
            assert with_reap_token(env)[0] != token
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _kill_by_pid(pid: int, name: str) -> None:
    """SIGKILL a process that escaped its tree (checked to be ours by name); wait until dead."""
    with contextlib.suppress(psutil.NoSuchProcess):
        p = psutil.Process(pid)
        if p.name() == name:
            p.kill()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
