"""Operator commands tell the truth (issue 13, item 6), through the real CLI.

A folder that is not a store is refused with the store inside it named; ``verify`` with
nothing verified is an error; ``list``'s STEPS counts completed steps; a refused ``approve``
changes nothing (no record, no generation, no age).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from crashpoint.checkpoint import Store, open_run
from crashpoint.cli import main
from crashpoint.errors import RunPaused


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["checkpoints", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _agent_state(tmp_path: Path) -> Path:
    """An agent's state folder as the demo agent lays it out: state/checkpoints/<run>."""
    state = tmp_path / "state"
    proc = subprocess.run(
        [sys.executable, "-m", "crashpoint.agents.demo", "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        start_new_session=True,
    )
    assert proc.returncode == 0, proc.stderr
    return state


def _snapshot(folder: Path) -> dict[str, tuple[bytes, float]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime) for p in sorted(folder.iterdir())}


def _age(folder: Path, seconds: float) -> None:
    t = time.time() - seconds
    for p in folder.iterdir():
        os.utime(p, (t, t), follow_symlinks=False)


# -- a folder that is not a store -------------------------------------------------------------


def test_state_folder_one_level_too_high_is_refused_naming_the_store_inside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _agent_state(tmp_path)
    inside = state / "checkpoints"
    for command in ("verify", "list", "stale --older-than 1s", "prune --keep 0"):
        code, out, err = cli(capsys, "--store", str(state), *command.split())
        assert code == 2, (command, out, err)
        assert f"{state} (from --store) is not a checkpoint store" in err
        assert f"the store inside it is --store {inside}" in err
        assert out == ""
    assert (inside / "demo").is_dir()  # prune refused: nothing removed
    code, out, _ = cli(capsys, "--store", str(inside), "verify")  # the good path
    assert (code, out.startswith("ok: 1 run, ")) == (0, True)


def test_a_run_folder_given_as_the_store_is_refused_naming_its_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _agent_state(tmp_path)
    code, _, err = cli(capsys, "--store", str(state / "checkpoints" / "demo"), "list")
    assert code == 2
    assert "is one run's folder, not a store" in err
    assert f"use --store {state / 'checkpoints'} and name the run 'demo'" in err


def test_list_skips_folders_that_hold_no_run_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "store", durability="none")
    with open_run(store, "real", steps=["a"]) as run:
        run.step("a", lambda: 1)
    (tmp_path / "store" / "notes").mkdir()
    code, out, err = cli(capsys, "--store", str(tmp_path / "store"), "list", "--json")
    assert code == 0
    assert [r["run_id"] for r in json.loads(out)] == ["real"]
    assert "skipped 1 folder that hold no run: notes" in err


# -- verify with nothing verified ------------------------------------------------------------


def test_verify_of_an_empty_store_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    code, out, err = cli(capsys, "--store", str(tmp_path / "empty"), "verify")
    assert code == 2
    assert out == ""
    assert f"nothing verified: no runs in {tmp_path / 'empty'}" in err


def test_verify_of_a_run_without_journal_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "store", durability="none")
    for rid in ("whole", "hollow"):
        with open_run(store, rid, steps=["a"]) as run:
            run.step("a", lambda: 1)
    for p in (tmp_path / "store" / "hollow").glob("seg-*"):
        p.unlink()  # what a half-finished removal leaves: meta.json and lock, no journal
    code, out, _ = cli(capsys, "--store", str(tmp_path / "store"), "verify")
    assert code == 1
    assert "no journal segment or snapshot: nothing of run 'hollow' could be verified" in out
    code, out, err = cli(capsys, "--store", str(tmp_path / "store"), "verify", "hollow")
    assert code == 2
    assert "nothing verified: 1 run without a journal segment or snapshot (hollow)" in err
    assert cli(capsys, "--store", str(tmp_path / "store"), "verify", "whole")[0] == 0


# -- STEPS counts steps -------------------------------------------------------------------------

KILLED_AFTER_4 = textwrap.dedent("""
    import os, signal, sys
    from crashpoint.checkpoint import Store, open_run
    store = Store(sys.argv[1])
    steps = ["s0", "s1", "s2", "s3", "s4", "s5"]
    with open_run(store, "six", steps=steps) as run:
        for i, name in enumerate(steps):
            run.step(name, lambda: run.effect("mail", {"n": name}, lambda p, k: "sent"))
            if i == 3:
                os.kill(os.getpid(), signal.SIGKILL)
""")


def test_steps_counts_completed_steps_not_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_4, str(root)],
        timeout=60,
        capture_output=True,
        check=False,
        start_new_session=True,
    )
    assert proc.returncode == -9
    code, out, _ = cli(capsys, "--store", str(root), "list")
    assert code == 0
    row = out.splitlines()[1].split()
    assert row[:3] == ["six", "running", "4"]  # 13 records: open, 4 x (intent, effect, step)
    assert json.loads(cli(capsys, "--store", str(root), "list", "--json")[1])[0]["steps_done"] == 4
    assert Store(root).read("six").seq == 13


# -- a refused approve changes nothing ---------------------------------------------------------


def _paused(root: Path) -> Store:
    store = Store(root)
    with open_run(store, "hitl", steps=["draft", "ok", "send"]) as run:
        run.step("draft", lambda: "text")
        with pytest.raises(RunPaused):
            run.approval("ok", {"draft": "text"})
    with open_run(store, "busy", steps=["a", "b"]) as run:
        run.step("a", lambda: 1)
    return store


def test_a_refused_approve_leaves_age_generation_and_files_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    _paused(root)
    for rid in ("hitl", "busy"):
        _age(root / rid, 3 * 3600)
    before = {rid: _snapshot(root / rid) for rid in ("hitl", "busy")}
    listed = {
        r["run_id"]: r for r in json.loads(cli(capsys, "--store", str(root), "list", "--json")[1])
    }

    code, _, err = cli(capsys, "--store", str(root), "approve", "busy")
    assert code == 2
    assert "run 'busy' is running, not waiting for a decision; nothing was recorded" in err
    code, _, err = cli(capsys, "--store", str(root), "approve", "hitl", "--step", "send")
    assert code == 2
    assert "waits for a decision on 'ok', not 'send'; nothing was recorded" in err

    assert {rid: _snapshot(root / rid) for rid in ("hitl", "busy")} == before
    after = {
        r["run_id"]: r for r in json.loads(cli(capsys, "--store", str(root), "list", "--json")[1])
    }
    for rid in ("hitl", "busy"):
        assert after[rid]["generation"] == listed[rid]["generation"]
        assert after[rid]["age_seconds"] >= 3 * 3600 - 5

    # the good path: the right step is recorded, and that does change the run
    code, out, _ = cli(capsys, "--store", str(root), "approve", "hitl", "--step", "ok")
    assert code == 0, out
    assert "approved ok" in out
    assert _snapshot(root / "hitl") != before["hitl"]


def test_every_read_command_leaves_the_run_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    _paused(root)
    _age(root / "busy", 3 * 3600)
    before = _snapshot(root / "busy")
    reads = [
        "list",
        "list --json",
        "show busy",
        "show busy --at a",
        "verify",
        "verify busy",
        "plan busy",
        "stale --older-than 1h",
        "rollback busy --to b",
        "approve busy",
    ]
    for command in reads:
        cli(capsys, "--store", str(root), *command.split())
    assert _snapshot(root / "busy") == before
    row = next(
        r
        for r in json.loads(cli(capsys, "--store", str(root), "list", "--json")[1])
        if r["run_id"] == "busy"
    )
    assert row["age_seconds"] >= 3 * 3600 - 5
