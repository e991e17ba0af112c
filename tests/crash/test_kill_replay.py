"""A kill at a file operation replayed from the golden run's recorded state (issue 24, item 1):
it judges as the real kill does, it is refused (a real kill runs) wherever the trace cannot
tell what the kill would leave, and each refusal says why.

The refusals are read from real traced runs of small programs (strace), one per reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from _reaped import run_reaped
from crashpoint.errors import FaultSpecError
from crashpoint.faults import (
    _strace,
    build_oplog,
    fileop_seqs,
    fileop_times,
    kill_points,
    read_fileop_trace,
    read_trace,
    record_fileops,
)
from crashpoint.harness import AgentSpec, Campaign, CampaignResult, family_from_spec
from crashpoint.harness._engine._recording import GoldenRecording

AGENTS = Path(__file__).resolve().parents[1] / "agents"

needs_strace = pytest.mark.skipif(
    not _strace.available()[0], reason=f"strace unavailable: {_strace.available()[1]}"
)


def recorded(tmp_path: Path, body: str, **learn: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """Run ``body`` (Python, with STATE and WORK folders) traced as a golden run is, and
    return (fileop_replay, fileops)."""
    state, work = tmp_path / "state", tmp_path / "work"
    state.mkdir()
    work.mkdir()
    script = tmp_path / "prog.py"
    script.write_text(
        f"import os, sys, threading, mmap\nSTATE, WORK = {str(state)!r}, {str(work)!r}\n"
        + textwrap.dedent(body)
    )
    rec = GoldenRecording({"fileops", "killreplay"}, str(tmp_path / "rec"), str(tmp_path), True)
    assert rec.how == "strace"
    done = run_reaped(rec.wrap([sys.executable, str(script)]), timeout=60)  # its whole session
    assert done.returncode == 0, done.stderr
    out = rec.learn(str(state), str(work), [], **learn)
    return out["fileop_replay"], out["fileops"]


def _labels(ops: list[dict[str, Any]], replay: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(f"{o['op']} {o['path']}", r.get("why", "")) for o, r in zip(ops, replay, strict=True)]


#: A trace no Python run writes (its first call resolves a relative path against the folder
#: it was started in, which the trace never shows): a parse with the recording's cwd resolves
#: it, the file operations' parse (no cwd) does not; the recording keeps them apart.
UNPLACED = """\
9 1795816369.100000 rename("state/a", "state/b") = 0
9 1795816369.200000 openat(AT_FDCWD</r>, "{state}/c", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</r/c>
9 1795816369.300000 write(3<{state}/c>, "1", 1) = 1
9 1795816369.400000 close(3<{state}/c>) = 0
9 1795816369.500000 +++ exited with 0 +++
"""


@needs_strace
@pytest.mark.parametrize("unplaced", [False, True], ids=["python-run", "unplaced-cwd"])
def test_the_recording_parses_once_and_learns_what_separate_parses_learn(
    tmp_path: Path, unplaced: bool
) -> None:
    """The golden run's recording shares one parse of its trace between the power-loss log,
    the file operations, their times and call numbers, and the replays: it learns exactly
    what each read separately learns (the file operations from a parse without cwd)."""
    state, work = tmp_path / "state", tmp_path / "work"
    state.mkdir()
    work.mkdir()
    rec = GoldenRecording({"fileops", "killreplay"}, str(tmp_path / "rec"), str(tmp_path), True)
    if unplaced:
        Path(rec.trace).write_text(UNPLACED.format(state=state))
    else:
        script = tmp_path / "prog.py"
        script.write_text(
            f"import os\nSTATE = {str(state)!r}\n"
            "for i in range(3):\n"
            "    with open(os.path.join(STATE, 's.json'), 'w') as f:\n"
            "        f.write('x' * (i + 1))\n"
            "        os.fsync(f.fileno())\n"
            "    os.replace(os.path.join(STATE, 's.json'), os.path.join(STATE, 't.json'))\n"
        )
        done = run_reaped(rec.wrap([sys.executable, str(script)]), timeout=60)
        assert done.returncode == 0, done.stderr
    copy = str(tmp_path / "copy.strace")
    shutil.copy(rec.trace, copy)
    out = rec.learn(str(state), str(work), [0.0])
    roots = {"state_dir": str(state), "workdir": str(work)}
    trace = read_trace(copy, cwd=str(tmp_path))
    assert trace.cwd_given is unplaced
    parsed = read_fileop_trace(copy)
    assert parsed is not None
    ops = record_fileops(copy, roots, trace=parsed)
    times = fileop_times(copy, roots, trace=parsed)
    assert out["fileops"] == [op.to_json() for op in ops]
    assert len(ops) >= 2
    assert out["fileop_events"] == [1 if t > 0.0 else 0 for t in times]
    assert out["fileop_replay"] == kill_points(
        trace,
        build_oplog(trace, roots),
        fileop_seqs(copy, roots, trace=parsed),
        out["fileop_events"],
        roots,
    )
    if unplaced:  # what the shared parse would have recorded: one operation more
        assert len(record_fileops(copy, roots, trace=trace)) == len(ops) + 1


@needs_strace
def test_a_sequential_writer_is_replayed_at_every_operation(tmp_path: Path) -> None:
    replay, ops = recorded(
        tmp_path,
        """
        for i in range(3):
            with open(os.path.join(STATE, "s.json"), "w") as f:
                f.write("x" * (i + 1))
            os.replace(os.path.join(STATE, "s.json"), os.path.join(STATE, "t.json"))
        """,
    )
    assert len(replay) == len(ops) >= 9
    assert all("upto" in r for r in replay), _labels(ops, replay)
    uptos = [r["upto"] for r in replay]
    assert uptos == sorted(uptos)  # a longer prefix each
    assert uptos[0] == 0
    assert uptos[-1] > 0


@needs_strace
@pytest.mark.parametrize(
    ("case", "body", "says"),
    [
        (
            "outside",
            """
            open(os.path.join(STATE, "a"), "w").write("1")
            open(os.path.join(os.path.dirname(STATE), "elsewhere"), "w").write("2")
            open(os.path.join(STATE, "b"), "w").write("3")
            """,
            "outside the trial's folders",
        ),
        (
            "symlink",
            """
            open(os.path.join(STATE, "a"), "w").write("1")
            os.symlink("a", os.path.join(STATE, "link"))
            open(os.path.join(STATE, "b"), "w").write("3")
            """,
            "symbolic link",
        ),
        (
            "mmap",
            """
            with open(os.path.join(STATE, "m"), "w+b") as f:
                f.write(b"0" * 4096)
                f.flush()
                m = mmap.mmap(f.fileno(), 4096)
                m[0:1] = b"1"
                m.close()
            open(os.path.join(STATE, "b"), "w").write("3")
            """,
            "mapped shared and writable",
        ),
        (
            "own path",
            """
            open(os.path.join(STATE, "a"), "w").write("1")
            open(os.path.join(STATE, "cfg"), "w").write(STATE)
            open(os.path.join(STATE, "b"), "w").write("3")
            """,
            "its own folder's path",
        ),
        (
            "threads",
            """
            go = threading.Barrier(2)
            def writer(name):
                go.wait()
                for i in range(40):
                    with open(os.path.join(STATE, name), "w") as f:
                        f.write(str(i))
            ts = [threading.Thread(target=writer, args=(n,)) for n in ("x", "y")]
            for t in ts: t.start()
            for t in ts: t.join()
            """,
            "thread",
        ),
        (
            "event loop",
            """
            import asyncio
            async def main():
                open(os.path.join(STATE, "a"), "w").write("1")
                await asyncio.sleep(0)
                open(os.path.join(STATE, "b"), "w").write("2")
            asyncio.run(main())
            """,
            "event loop",
        ),
    ],
)
def test_a_kill_after_what_the_trace_cannot_tell_is_a_real_kill(
    case: str, body: str, says: str, tmp_path: Path
) -> None:
    replay, ops = recorded(tmp_path, body)
    refused = [r["why"] for r in replay if "why" in r]
    assert refused, _labels(ops, replay)
    # two threads racing can also leave the trace unable to model an offset: refused too
    assert all(says in w or (case == "threads" and "could not model" in w) for w in refused), (
        refused
    )
    if case not in ("threads", "event loop"):  # the operations before the cause: replayed
        assert "upto" in replay[0], _labels(ops, replay)


@needs_strace
def test_a_parent_waiting_for_each_writing_child_is_replayed_between_them(tmp_path: Path) -> None:
    replay, ops = recorded(
        tmp_path,
        """
        import subprocess
        open(os.path.join(STATE, "a"), "w").write("1")
        for name in ("b", "c"):  # a shell script's way: one command at a time, waited for
            code = f"open({os.path.join(STATE, name)!r}, 'w').write('2')"
            subprocess.run([sys.executable, "-c", code], check=True)
        open(os.path.join(STATE, "a"), "w").write("3")
        """,
    )
    assert len({o["path"] for o in ops}) == 3
    by_parent = [r for o, r in zip(ops, replay, strict=True) if o["path"].endswith("/a")]
    by_child = [r for o, r in zip(ops, replay, strict=True) if not o["path"].endswith("/a")]
    # the parent's own writes, before and after the children: not a turn taken while another
    # writer lived, so replayed
    assert by_parent, _labels(ops, replay)
    assert all("upto" in r for r in by_parent), _labels(ops, replay)
    # a child's: a real kill kills that child alone, and what its parent does then is not
    # in the golden run's trace
    assert by_child, _labels(ops, replay)
    assert all("a process it started" in r.get("why", "") for r in by_child), replay


@needs_strace
def test_sqlite_shm_is_not_a_shared_mapping_that_refuses(tmp_path: Path) -> None:
    replay, ops = recorded(
        tmp_path,
        """
        import sqlite3
        db = sqlite3.connect(os.path.join(STATE, "q.db"))
        db.execute("pragma journal_mode=wal")
        db.execute("create table t (x)")
        for i in range(3):
            with db:
                db.execute("insert into t values (?)", (i,))
        db.close()
        """,
    )
    assert any(o["path"].endswith("q.db-wal") for o in ops)
    assert not any("mapped" in r.get("why", "") for r in replay), _labels(ops, replay)


@needs_strace
def test_a_reason_for_every_point_refuses_them_all(tmp_path: Path) -> None:
    replay, _ops = recorded(
        tmp_path, 'open(os.path.join(STATE, "a"), "w").write("1")\n', refuse="keeps state away"
    )
    assert replay
    assert all(r == {"why": "keeps state away"} for r in replay)


def run(
    agent: str,
    tmp_path: Path,
    replay: bool,
    count: int | None = None,
    first: int | None = None,
    **kw: Any,
) -> CampaignResult:
    """A sweep of ``agent``'s file operations (``count``: that many drawn instead; ``first``:
    the sweep of the first that many only)."""
    spec = AgentSpec(
        command=(
            "{python}",
            str(AGENTS / f"{agent}.py"),
            "--state",
            "{state_dir}",
            *kw.pop("argv", ()),
        ),
        **kw,
    )
    opts: dict[str, Any] = {"at": "fileop", "replay": replay}
    if count is not None:
        opts["count"] = count
    if first is not None:
        opts["max"] = first
    fam = family_from_spec({"kill": opts})
    return Campaign(spec, [fam], str(tmp_path / ("replay" if replay else "real")), seed=3).run()


def _replayed(t: Any) -> bool:
    return any("replayed from the golden run" in a.killed_by for a in t.attempts)


@needs_strace
@pytest.mark.parametrize(
    "agent",
    # slow: the passing side's fast cover: [torn_checkpoint] (the same comparison, trial by
    # trial, over a sweep where some pass and some fail) and the trial-id test below
    [pytest.param("good_agent", marks=pytest.mark.slow), "torn_checkpoint"],
)
def test_replayed_kills_give_the_verdicts_of_real_kills(agent: str, tmp_path: Path) -> None:
    # torn_checkpoint's first 6 of its 9 operations: 3 kills pass, 3 fail (a torn state file)
    first = 6 if agent == "torn_checkpoint" else None
    rep, real = run(agent, tmp_path, True, first=first), run(agent, tmp_path, False, first=first)
    assert rep.trials
    assert {t.status for t in rep.trials} == ({"passed", "failed"} if first else {"passed"}), [
        (t.plan.describe(), t.status) for t in rep.trials
    ]
    assert all(_replayed(t) for t in rep.trials)
    assert not any(_replayed(t) for t in real.trials)
    assert [(t.plan.describe(), t.status) for t in rep.trials] == [
        (t.plan.describe(), t.status) for t in real.trials
    ]
    assert rep.ok == real.ok == (agent == "good_agent")  # the broken one is caught both ways
    if not rep.ok:  # the evidence says the attempt was not run, and how to re-run it for real
        folder = Path(rep.failures[0].folder)
        note = (folder / "killreplay.txt").read_text()
        assert "replay: false" in note
        assert "attempt 1 was not run" in note


@needs_strace
def test_an_agent_given_its_trial_id_is_killed_for_real(tmp_path: Path) -> None:
    # two drawn operations, not the sweep: every one is killed for real, which is what it shows
    rep = run("good_agent", tmp_path, True, count=2, env=(("AGENT_RUN", "{trial_id}"),))
    assert len(rep.trials) == 2
    assert rep.trials
    assert not any(_replayed(t) for t in rep.trials)
    assert all("{trial_id}" in r["why"] for r in rep.golden.fileop_replay)
    assert rep.ok


@needs_strace
def test_a_kill_while_a_started_process_runs_is_a_real_kill(tmp_path: Path) -> None:
    """A process the agent started may die with it or be left behind (an orphan no_orphans
    must see): a replay starts no such process, so the kill there is a real one."""
    spec = AgentSpec(
        command=("{python}", str(AGENTS / "leaves_child.py"), "--state", "{state_dir}"),
        env=(("LEAVE_CHILD_DETACHED", "1"),),
    )
    fam = family_from_spec({"kill": {"at": "random", "count": 2}})
    rep = Campaign(spec, [fam], str(tmp_path), seed=3).run()
    assert rep.golden.boundary_replay
    # seen from outside in the untraced golden run (then nothing is traced), or in the trace
    said = ("a process it started", "it starts processes")
    assert all(any(s in r.get("why", "") for s in said) for r in rep.golden.boundary_replay)
    assert not any(_replayed(t) for t in rep.trials)
    assert not rep.ok  # and the orphan of the killed attempt is caught, as ever
    assert any(c.name == "no_orphans" for t in rep.failures for c in t.failed)


def test_replay_is_an_option_of_kills_at_file_operations_and_events() -> None:
    for at in ("fileop", "every-boundary", "random", "recovery"):
        assert "killreplay" in family_from_spec({"kill": {"at": at}}).needs
        assert "killreplay" not in family_from_spec({"kill": {"at": at, "replay": False}}).needs
    with pytest.raises(FaultSpecError, match=r"kill\.replay goes with at: fileop"):
        family_from_spec({"kill": {"at": "time", "replay": False}})
    with pytest.raises(FaultSpecError, match="true or false"):
        family_from_spec({"kill": {"at": "fileop", "replay": "no"}})


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("import time; time.sleep(0.4)", ""),
        (
            "import threading, time; threading.Thread(target=time.sleep, args=(1,)).start()",
            "threads",
        ),
        ("import subprocess; subprocess.run(['sleep', '0.4'])", "processes"),
        ("import asyncio; asyncio.run(asyncio.sleep(0.4))", "event loop"),
    ],
)
def test_the_golden_run_is_watched_for_what_makes_a_replay_pointless(code: str, says: str) -> None:
    """Kills at events alone: an untraced golden run watched from outside decides whether a
    traced one is worth running (a threaded agent pays no trace)."""
    from crashpoint._proc import BusyWatch

    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        watch = BusyWatch(proc.pid)
        proc.wait(timeout=30)
        watch.stop()
    finally:  # the whole session: the program and what it started
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (says in watch.busy) if says else watch.busy == "", watch.busy
