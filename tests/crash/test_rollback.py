"""Rollback on demand (issue 13, item 7): ``Run.rollback`` and ``crashpoint checkpoints rollback``.

A real agent process runs, an operator rolls it back with the real CLI, and the next start
runs exactly the steps after the rollback point (and their effects again, under new keys).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crashpoint.checkpoint import RunDenied, Store, open_run, records_reducer, rollback
from crashpoint.cli import main
from crashpoint.errors import RunLocked, RunPaused, RunStateError

AGENT = Path(__file__).parents[1] / "agents" / "rollback_agent.py"
STEPS = ["fetch", "plan", "draft", "send", "review", "publish"]


def agent(root: Path, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(AGENT), str(root), str(log)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        start_new_session=True,
    )


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["checkpoints", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def ran(log: Path) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return lines


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_rollback_then_resume_runs_exactly_the_later_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, log = tmp_path / "store", tmp_path / "ran.log"
    first = agent(root, log)
    assert first.returncode == 0, first.stderr
    assert ran(log) == [
        "ran fetch",
        "ran plan",
        "ran draft",
        "ran send",
        "effect r1:3.send:email:0",
        "ran review",
        "ran publish",
        "effect r1:5.publish:email:0",
    ]

    code, out, _ = cli(capsys, "--store", str(root), "rollback", "r1", "--to", "plan")
    assert code == 0
    assert out.splitlines() == [
        "r1: rolled back to #1 plan (was completed); discarded 4 step(s): #2 draft, #3 send, "
        "#4 review, #5 publish",
        "may need compensation: effect email key=r1:3.send:email:0 (step send, done)",
        "may need compensation: effect email key=r1:5.publish:email:0 (step publish, done)",
        "the next start replays #0..#1 and runs from #2 draft",
    ]
    listed = json.loads(cli(capsys, "--store", str(root), "list", "--json")[1])
    assert (listed[0]["status"], listed[0]["steps_done"]) == ("running", 2)
    plan = json.loads(cli(capsys, "--store", str(root), "plan", "r1", "--json")[1])
    assert [(p["action"], p["what"]) for p in plan] == [
        ("replay", "#0 fetch"),
        ("replay", "#1 plan"),
        ("run", "#2 draft"),
        ("run", "#3 send"),
        ("run", "#4 review"),
        ("run", "#5 publish"),
    ]

    second = agent(root, log)
    assert second.returncode == 0, second.stderr
    assert ran(log) == [
        "ran draft",
        "ran send",
        "effect r1:3.send:email:0@r1",
        "ran review",
        "ran publish",
        "effect r1:5.publish:email:0@r1",
    ]
    assert json.loads(second.stdout) == json.loads(first.stdout)

    # history stays: the first completion of every step and the rollback record are all there
    records = Store(root).read("r1", reducer=records_reducer).state["records"]
    kinds = [r["t"] for r in records]
    assert kinds.count("rollback") == 1
    assert [r["name"] for r in records if r["t"] == "step"] == STEPS + STEPS[2:]
    rb = next(r for r in records if r["t"] == "rollback")
    assert (rb["pos"], rb["name"], rb["was"]) == (1, "plan", "completed")
    assert rb["compensate"] == ["r1:3.send:email:0", "r1:5.publish:email:0"]

    third = agent(root, log)  # a completed run replays: nothing runs
    assert (third.returncode, ran(log)) == (0, [])


def test_a_rollback_of_a_killed_run_by_position_and_as_a_real_process(tmp_path: Path) -> None:
    root, log = tmp_path / "store", tmp_path / "ran.log"
    assert agent(root, log).returncode == 0
    ran(log)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "crashpoint.cli",
            "checkpoints",
            "--store",
            str(root),
            "rollback",
            "r1",
            "--to",
            "#3",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert (got["to"], got["position"], got["discarded"]) == ("send", 3, ["review", "publish"])
    assert [e["key"] for e in got["compensate"]] == ["r1:5.publish:email:0"]
    assert agent(root, log).returncode == 0
    assert ran(log) == ["ran review", "ran publish", "effect r1:5.publish:email:0@r1"]


def test_a_refused_rollback_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    store = Store(root)
    with open_run(store, "r1", steps=STEPS) as run:
        run.step("fetch", lambda: 1)
        run.step("plan", lambda: 2)
    before = _files(root / "r1")
    for to, why in [
        ("draft", "step 'draft' has not completed in run 'r1' (completed: #0 fetch, #1 plan)"),
        ("nope", "step 'nope' is not a step of this run"),
        ("#7", "run 'r1' has no completed step #7"),
        ("plan", "run 'r1' has nothing after #1 plan to roll back"),
    ]:
        code, out, err = cli(capsys, "--store", str(root), "rollback", "r1", "--to", to)
        assert (code, out) == (2, ""), to
        assert why in err, err
        assert "nothing was changed" in err, err
    assert _files(root / "r1") == before
    with pytest.raises(RunStateError, match="has not completed"):
        rollback(store, "r1", "draft")
    assert _files(root / "r1") == before

    held = store.open("r1")  # a live agent holds it: refused, nothing written
    try:
        with pytest.raises(RunLocked):
            rollback(store, "r1", "fetch")
        code, _, err = cli(capsys, "--store", str(root), "rollback", "r1", "--to", "fetch")
        assert code == 2
        assert "locked" in err.lower()
    finally:
        held.close()
    assert rollback(store, "r1", "fetch").discarded == ("plan",)  # the good path


def test_run_rollback_in_process_reruns_the_next_steps_with_new_effect_keys(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", durability="none")
    calls: list[str] = []
    with open_run(store, "r", steps=["a", "b", "c"]) as run:
        run.step("a", lambda: "A")
        run.step("b", lambda: run.effect("mail", {"n": 1}, lambda p, k: calls.append(k)))
        run.step("c", lambda: "C")
        done = run.rollback("a", note="b went wrong")
        assert done.discarded == ("b", "c")
        assert [e["key"] for e in done.compensate] == ["r:1.b:mail:0"]
        assert run.completed_steps == ["a"]
        run.step("b", lambda: run.effect("mail", {"n": 2}, lambda p, k: calls.append(k)))
        run.rollback(to=0)  # twice: the second rollback's keys differ from the first's
        run.step("b", lambda: run.effect("mail", {"n": 3}, lambda p, k: calls.append(k)))
        run.step("c", lambda: "C2")
        run.finish("ok")
    assert calls == ["r:1.b:mail:0", "r:1.b:mail:0@r1", "r:1.b:mail:0@r2"]
    with open_run(store, "r", steps=["a", "b", "c"]) as run:
        assert run.status == "completed"
        assert [run.step(n, lambda: pytest.fail("replays")) for n in "abc"] == ["A", None, "C2"]


def test_a_paused_run_rolled_back_before_its_pause_asks_again(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", durability="none")
    steps = ["draft", "ok", "send"]
    with open_run(store, "h", steps=steps) as run:
        run.step("draft", lambda: "v1")
        with pytest.raises(RunPaused):
            run.approval("ok", {"draft": "v1"})
    done = rollback(store, "h", "draft")
    assert (done.status_before, done.discarded, done.pauses) == ("paused", (), ("ok",))
    assert store.meta("h")["status"] == "running"
    with open_run(store, "h", steps=steps) as run:
        assert run.step("draft", lambda: "v2") == "v1"  # kept: replays
        with pytest.raises(RunPaused):  # the pause came after: asked again
            run.approval("ok", {"draft": "v1"})


def test_a_denied_run_is_reopened_by_a_rollback(tmp_path: Path) -> None:
    from crashpoint.checkpoint import decide

    store = Store(tmp_path / "store", durability="none")
    steps = ["draft", "ok", "send"]
    with open_run(store, "d", steps=steps) as run:
        run.step("draft", lambda: "v1")
        with pytest.raises(RunPaused):
            run.approval("ok")
    decide(store, "d", approved=False, note="rewrite it")
    with open_run(store, "d", steps=steps) as run:
        run.step("draft", lambda: "v1")
        with pytest.raises(RunDenied):
            run.approval("ok")
    assert store.meta("d")["status"] == "denied"
    done = rollback(store, "d", 0)
    assert (done.status_before, done.discarded) == ("denied", ("ok",))
    with open_run(store, "d", steps=steps) as run:
        assert run.status == "running"
        run.step("draft", lambda: "v1")
        with pytest.raises(RunPaused):
            run.approval("ok")
    assert os.path.isdir(store.path("d"))
