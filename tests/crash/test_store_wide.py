"""Guardrails that hold for every writer of a store together (real processes), and pruning
that frees the shortfall, oldest first, deciding "finished" from the journal."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crashpoint.checkpoint import Store
from crashpoint.checkpoint._store import _dir_size
from crashpoint.errors import DiskBudgetExceeded

BUDGET = 50_000

WRITER = """
import os, sys, time
from crashpoint.checkpoint import Store
from crashpoint.errors import DiskBudgetExceeded
root, run_id, go = sys.argv[1], sys.argv[2], sys.argv[3]
store = Store(root, reserve_bytes=0, budget_bytes=int(sys.argv[4]), durability="always")
j = store.open(run_id)
while not os.path.exists(go):
    time.sleep(0.001)
n = 0
try:
    while True:
        j.append({"n": n, "pad": "x" * 480})
        n += 1
except DiskBudgetExceeded as exc:
    print(n, exc.needed, flush=True)
    sys.exit(75)
"""


def test_two_processes_against_one_budget_never_exceed_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), f"w{i}", str(go), str(BUDGET)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for i in range(2)
    ]
    try:
        while not all((root / f"w{i}" / "lock").exists() for i in range(2)):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        go.touch()
        peak = 0
        while any(p.poll() is None for p in procs):
            peak = max(peak, _dir_size(str(root)))
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    assert [p.returncode for p in procs] == [75, 75], outs  # each got the budget error
    counts = [int(o.split()[0]) for o, _ in outs]
    assert min(counts) > 5, counts  # both really wrote
    final = _dir_size(str(root))
    assert max(peak, final) <= BUDGET, (peak, final, counts)
    assert final > BUDGET - 2 * 600  # and they used it: the limit, not a stall, stopped them


def _finished_run(
    store: Store,
    run_id: str,
    age: float,
    *,
    finish: bool = True,
    meta: str = "completed",
    pad: int = 1500,
) -> None:
    with store.open(run_id) as j:
        j.append({"t": "step", "name": "a", "result": "r" * pad})
        if finish:
            j.append({"t": "finish", "status": "completed"})
        j.set_meta(status=meta)
    t = time.time() - age
    for p in (Path(store.root) / run_id).iterdir():
        os.utime(p, (t, t))


def test_pruning_frees_the_shortfall_oldest_first_not_the_whole_write(tmp_path: Path) -> None:
    root = tmp_path / "store"
    setup = Store(root, reserve_bytes=0)
    for i, rid in enumerate(["old", "mid", "new"]):
        _finished_run(setup, rid, age=3000 - 1000 * i)
    with setup.open("current") as j:
        j.append({"t": "open"})
    size_old = _dir_size(str(root / "old"))
    # a write larger than the oldest run, short by about 500 bytes only: freeing the whole
    # write would take two runs, freeing the shortfall takes one
    pad = size_old + 300
    budget = _dir_size(str(root)) + pad - 500
    store = Store(root, reserve_bytes=0, budget_bytes=budget)
    with store.open("current") as j:
        j.append({"pad": "y" * pad})
    assert 600 < size_old < pad  # the oldest run covers the shortfall, not the whole write
    assert not (root / "old").exists()
    assert sorted(p.name for p in root.iterdir() if p.name != ".store-lock") == [
        "current",
        "mid",
        "new",
    ], "pruned more than the shortfall"
    assert _dir_size(str(root)) <= budget


def test_prune_decides_finished_from_the_journal_never_from_meta(tmp_path: Path) -> None:
    root = tmp_path / "store"
    setup = Store(root, reserve_bytes=0)
    _finished_run(setup, "meta-lies", age=5000, finish=False, meta="completed")
    _finished_run(setup, "journal-done", age=4000, finish=True, meta="running")
    with setup.open("reopened") as j:  # finished, then written to again: not finished now
        j.append({"t": "finish", "status": "completed"})
        j.append({"t": "rollback", "to": 0})
        j.set_meta(status="completed")
    removed = Store(root, reserve_bytes=0).prune(need=10**9)
    assert [r.run_id for r in removed] == ["journal-done"]
    assert removed[0].status == "completed"
    assert (root / "meta-lies").is_dir()
    assert (root / "reopened").is_dir()
    assert Store(root).read("meta-lies").seq == 1  # untouched


def test_budget_error_when_pruning_cannot_help(tmp_path: Path) -> None:
    root = tmp_path / "store"
    setup = Store(root, reserve_bytes=0)
    _finished_run(setup, "meta-lies", age=5000, finish=False)
    setup.open("current").close()
    store = Store(root, reserve_bytes=0, budget_bytes=_dir_size(str(root)) + 100)
    with store.open("current") as j, pytest.raises(DiskBudgetExceeded) as info:
        j.append({"pad": "z" * 1000})
    assert "in use by all its writers" in str(info.value)
    assert (root / "meta-lies").is_dir()
