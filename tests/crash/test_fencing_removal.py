"""Fencing generations that never repeat, run folders the store refuses to follow, and a
removal that a kill at any file operation leaves whole or gone (real processes, real SIGKILL
through strace's fault injection)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crashpoint.checkpoint import Store, open_run
from crashpoint.errors import CheckpointError
from crashpoint.faults import _strace
from crashpoint.faults._fileops import Watch, arm, landed, record_golden, recorder

OPENER = """
import sys
from crashpoint.checkpoint import Store
store = Store(sys.argv[1], reserve_bytes=0, durability="none")
for _ in range(int(sys.argv[2])):
    with store.open("shared", lock_timeout=30) as j:
        j.append({"by": sys.argv[3]})
        print(j.generation, flush=True)
"""


def test_racing_openers_never_share_a_fencing_generation(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    rounds, writers = 25, 4
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, root, str(rounds), str(w)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for w in range(writers)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * writers, outs
    gens = [int(g) for out, _ in outs for g in out.split()]
    assert len(gens) == rounds * writers
    assert len(set(gens)) == len(gens), sorted(gens)  # every opener had its own
    recs = Store(root).read("shared").state["records"]
    assert len(recs) == rounds * writers


def test_a_symlinked_run_folder_is_refused_and_nothing_is_written_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "store"
    root.mkdir()
    (root / "r1").symlink_to(outside)
    store = Store(root, reserve_bytes=0)
    with pytest.raises(CheckpointError, match="symbolic link"):
        store.open("r1")
    with pytest.raises(CheckpointError, match="symbolic link"):
        store.remove("r1")
    assert list(outside.iterdir()) == []
    assert (root / "r1").is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_run_folder_planted_by_another_user_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    os.chmod(root, 0o1777)  # noqa: S103 - the point: a world-writable store root
    planted = root / "r1"
    planted.mkdir()
    os.chown(planted, 4242, 4242)
    store = Store(root, reserve_bytes=0)
    with pytest.raises(CheckpointError, match="uid 4242"):
        store.open("r1")
    assert list(planted.iterdir()) == []  # not journalled into
    with store.open("r2") as j:  # our own runs are fine
        j.append({"ok": 1})


# -- a kill at each file operation of prune -------------------------------------------------------

OK, WHY = _strace.available()
PRUNER = textwrap.dedent("""
    import sys
    from crashpoint.checkpoint import Retention, Store
    removed = Store(sys.argv[1], reserve_bytes=0, retention=Retention(max_runs=0)).prune()
    print(len(removed))
""")
STEPS = ["a", "b", "c"]


def _template(path: Path) -> None:
    store = Store(path, reserve_bytes=0)
    with open_run(store, "done", steps=STEPS) as run:
        for s in STEPS:
            run.step(s, lambda s=s: f"result-{s}")
        run.finish({"out": 1})


def _wait_for_the_pruner(state: Path) -> None:
    """Wait until no process runs on ``state`` (the pruner itself, not only strace, which
    ``wait`` returned for: its lock goes only when it is gone, and a live lock rightly makes
    ``runs()`` leave its removal alone)."""
    import psutil

    def mine() -> list[psutil.Process]:
        out = []
        for p in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if str(state) in (p.info["cmdline"] or []) and p.status() != "zombie":
                    out.append(p)
        return out

    _gone, alive = psutil.wait_procs(mine(), timeout=30)
    assert not alive, f"the pruner on {state} did not exit: {alive}"


def _whole_or_gone(root: Path, label: str) -> str:
    store = Store(root, reserve_bytes=0)
    store.runs()  # finishes an interrupted removal
    names = sorted(os.listdir(root))
    assert not [n for n in names if n.startswith(".removing-")], (label, names)
    if "done" not in names:
        return "gone"
    called: list[str] = []
    with open_run(store, "done", steps=STEPS) as run:
        assert run.status == "completed", label
        for s in STEPS:
            assert run.step(s, lambda s=s: called.append(s)) == f"result-{s}", label
    assert called == [], f"{label}: steps re-ran: {called}"
    return "whole"


@pytest.mark.skipif(not OK, reason=f"strace cannot trace here: {WHY}")
def test_a_kill_at_each_file_operation_of_prune_leaves_the_run_whole_or_gone(
    tmp_path: Path, children
) -> None:
    script = tmp_path / "prune.py"
    script.write_text(PRUNER)
    template = tmp_path / "template"
    _template(template)
    golden = tmp_path / "golden"
    shutil.copytree(template, golden, symlinks=True)
    rec = recorder(str(tmp_path / "golden-run"), use_strace=True)
    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    child = children.spawn(
        rec.wrap([sys.executable, str(script), str(golden)]), env=rec.environ(env)
    )
    assert child.wait(60) == 0
    assert not (golden / "done").exists()
    ops = record_golden(rec, {"state_dir": str(golden)})
    labels = [o.label() for o in ops]
    assert any(op.startswith("rename") for op in labels), labels
    assert sum(op.startswith(("unlink", "rmdir")) for op in labels) >= 3, labels
    seen = {}
    for i, op in enumerate(ops):
        state = tmp_path / f"trial-{i}"
        shutil.copytree(template, state, symlinks=True)
        a = arm(op, {"state_dir": str(state)}, str(tmp_path / f"trial-{i}-run"), use_strace=True)
        c = children.spawn(a.wrap([sys.executable, str(script), str(state)]), env=a.environ(env))
        w = Watch(a, lambda c=c: os.killpg(c.pid, signal.SIGKILL))
        try:
            rc = c.wait(60)
        finally:
            w.stop()
        land = landed(a, attempt=1)
        assert land.fired, f"{op.label()}: {land.why_not}"
        assert rc == -signal.SIGKILL, op.label()
        _wait_for_the_pruner(state)
        seen[op.label()] = _whole_or_gone(state, op.label())
    assert set(seen.values()) == {"whole", "gone"}, seen  # both outcomes were exercised
