"""History and notifications (issue 13, item 9).

``crashpoint checkpoints show RUN --at STEP`` replays the journal up to a step's record; a hook
(a real command reading its stdin, or a callable) hears of pauses, dead letters and stale runs,
and a failing hook never fails the run.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from crashpoint.checkpoint import (
    NOTIFY_ENV,
    SnapshotPolicy,
    Store,
    Supervisor,
    _notify,
    open_run,
    rollback,
    state_at,
)
from crashpoint.cli import main
from crashpoint.errors import RunPaused, RunStateError

HOOK = Path(__file__).parents[1] / "agents" / "notify_hook.py"


def hook(out: Path, *extra: str) -> list[str]:
    return [sys.executable, str(HOOK), str(out), *extra]


def events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["checkpoints", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _age(folder: Path, seconds: float) -> None:
    t = time.time() - seconds
    for p in folder.iterdir():
        os.utime(p, (t, t), follow_symlinks=False)


# -- show --at --------------------------------------------------------------------------------


def test_show_at_a_step_replays_the_journal_up_to_its_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    store = Store(root, durability="none")
    with open_run(store, "r", steps=["a", "b", "c"]) as run:
        run.step("a", lambda: 1)
        run.step("b", lambda: run.effect("mail", {"to": "x"}, lambda p, k: "sent"))
        run.step("c", lambda: 3)
        run.finish("out")

    code, out, _ = cli(capsys, "--store", str(root), "show", "r", "--at", "b", "--json")
    assert code == 0
    got = json.loads(out)
    assert got["at"] == {"step": "b", "position": 1, "seq": 5, "discarded": False}
    assert got["state"]["order"] == ["a", "b"]
    assert got["state"]["results"] == [1, "sent"]
    assert got["state"]["status"] == "running"  # not yet completed then
    assert list(got["state"]["effects"]) == ["r:1.b:mail:0"]
    code, out, _ = cli(capsys, "--store", str(root), "show", "r", "--at", "#0")
    assert code == 0
    assert out.splitlines()[:2] == ["run:        r", "at:         #0 a (record 2)"]
    assert '"order": [\n    "a"\n  ]' in out

    # after a rollback: the discarded completion is shown as such, then the re-run one
    rollback(store, "r", "a")
    assert state_at(store, "r", "b").discarded is True
    with open_run(store, "r", steps=["a", "b", "c"]) as run:
        run.step("a", lambda: 1)
        run.step("b", lambda: "again")
    again = state_at(store, "r", "b")
    assert (again.discarded, again.state["results"]) == (False, [1, "again"])

    code, _, err = cli(capsys, "--store", str(root), "show", "r", "--at", "zzz")
    assert code == 2
    assert "step 'zzz' never completed in run 'r'" in err


def test_show_at_a_step_folded_into_a_snapshot_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    store = Store(root, durability="none", snapshots=SnapshotPolicy(min_bytes=1, ratio=0.0))
    with open_run(store, "r", steps=["a", "b"]) as run:
        run.step("a", lambda: 1)
        run.step("b", lambda: 2)
    assert list((root / "r").glob("snap-*"))
    code, _, err = cli(capsys, "--store", str(root), "show", "r", "--at", "a")
    assert code == 2
    assert "completed before the snapshot at record" in err
    assert "cannot be shown" in err


# -- pause --------------------------------------------------------------------------------------


def test_a_pause_runs_the_command_from_the_environment_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, state = tmp_path / "events.jsonl", tmp_path / "state"
    env = {**os.environ, NOTIFY_ENV: shlex.join(hook(out))}
    argv = [sys.executable, "-m", "crashpoint.agents.demo", "--state", str(state), "--approval"]

    def agent() -> int:
        return subprocess.run(
            argv, env=env, capture_output=True, timeout=120, check=False, start_new_session=True
        ).returncode

    assert agent() == 75
    got = events(out)
    assert [(e["event"], e["run_id"], e["step"], e["reason"]) for e in got] == [
        ("paused", "demo", "approve", "publish the report?")
    ]
    assert set(got[0]["request"]) == {"report"}
    assert got[0]["store"] == str(state / "checkpoints")
    assert agent() == 75  # still waiting: no second notification
    assert len(events(out)) == 1
    assert cli(capsys, "--store", str(state / "checkpoints"), "approve", "demo")[0] == 0
    assert agent() == 0
    assert len(events(out)) == 1


def test_a_pause_calls_a_callable_and_redacts_secrets(tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []
    store = Store(tmp_path / "store", durability="none", notify=got.append)
    with open_run(store, "h", steps=["ok"]) as run, pytest.raises(RunPaused):
        run.approval("ok", {"api_key": "sk-live-secret", "amount": 3}, reason="pay?")
    assert [(e["event"], e["step"], e["reason"]) for e in got] == [("paused", "ok", "pay?")]
    assert got[0]["request"]["amount"] == 3
    assert "sk-live-secret" not in json.dumps(got)


@pytest.mark.parametrize("kind", ["raises", "exit 3", "missing command"])
def test_a_failing_hook_never_fails_the_run_and_is_logged(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "events.jsonl"

    def boom(event: dict[str, Any]) -> None:
        raise RuntimeError("pager is down")

    notify: Any = {
        "raises": boom,
        "exit 3": hook(out, "3"),
        "missing command": [str(tmp_path / "no-such-command")],
    }[kind]
    store = Store(tmp_path / "store", durability="none", notify=notify)
    with (
        caplog.at_level(logging.WARNING, logger="crashpoint.notify"),
        open_run(store, "h", steps=["ok"]) as run,
        pytest.raises(RunPaused),
    ):
        run.approval("ok")
    assert store.meta("h")["status"] == "paused"  # the run paused as it should
    why = {
        "raises": "RuntimeError: pager is down",
        "exit 3": "exited 3: hook refused on purpose",
        "missing command": "cannot start",
    }[kind]
    assert [r.getMessage() for r in caplog.records if why in r.getMessage()], caplog.text
    assert "the paused event of run 'h'" in caplog.text
    if kind == "exit 3":
        assert [e["event"] for e in events(out)] == ["paused"]  # it did get the event


def test_a_hook_that_hangs_is_killed_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_notify, "NOTIFY_TIMEOUT", 0.5)
    store = Store(
        tmp_path / "store",
        durability="none",
        notify=[sys.executable, "-c", "import time; time.sleep(60)"],
    )
    with (
        caplog.at_level(logging.WARNING, logger="crashpoint.notify"),
        open_run(store, "h", steps=["ok"]) as run,
        pytest.raises(RunPaused),
    ):
        run.approval("ok")
    assert "timed out after 0.5s (killed)" in caplog.text


# -- dead letter --------------------------------------------------------------------------------


def _interrupted(store: Store, run_id: str) -> None:
    with open_run(store, run_id, steps=["a", "b"]) as run:
        run.step("a", lambda: 1)


def test_a_dead_letter_notifies_a_callable_and_a_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got: list[dict[str, Any]] = []
    store = Store(tmp_path / "store", durability="none", notify=got.append)
    _interrupted(store, "poison")

    def resume(run_id: str) -> None:
        raise ValueError("bad input row 7")

    outcomes = Supervisor(store, resume=resume, max_attempts=2).resume_all()
    assert [(o.run_id, o.status) for o in outcomes] == [("poison", "dead")]
    assert [(e["event"], e["run_id"], e["attempts"]) for e in got] == [("dead_letter", "poison", 2)]
    assert "bad input row 7" in got[0]["reason"]
    assert Supervisor(store, resume=resume, max_attempts=2).resume_all() == []  # once

    out = tmp_path / "events.jsonl"  # a command from the environment, no hook on the store
    monkeypatch.setenv(NOTIFY_ENV, shlex.join(hook(out)))
    plain = Store(tmp_path / "store2", durability="none")
    _interrupted(plain, "poison2")
    Supervisor(plain, resume=resume, max_attempts=1).resume_all()
    assert [(e["event"], e["run_id"]) for e in events(out)] == [("dead_letter", "poison2")]


# -- stale --------------------------------------------------------------------------------------


def test_stale_notifies_a_command_per_stale_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, out = tmp_path / "store", tmp_path / "events.jsonl"
    store = Store(root, durability="none")
    _interrupted(store, "stuck")
    with open_run(store, "done", steps=["a"]) as run:
        run.step("a", lambda: 1)
        run.finish(1)
    _interrupted(store, "fresh")
    for rid in ("stuck", "done"):
        _age(root / rid, 3 * 3600)

    code, text, _ = cli(
        capsys,
        "--store",
        str(root),
        "stale",
        "--older-than",
        "1h",
        "--notify",
        shlex.join(hook(out)),
    )
    assert code == 1
    assert text.startswith("stuck status=running age=3h")
    got = events(out)
    assert [(e["event"], e["run_id"], e["status"]) for e in got] == [("stale", "stuck", "running")]
    assert got[0]["age_seconds"] >= 3 * 3600 - 5

    # a real process, the command from the environment, failing: logged on stderr
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "crashpoint.cli",
            "checkpoints",
            "--store",
            str(root),
            "stale",
            "--older-than",
            "1h",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, NOTIFY_ENV: shlex.join(hook(out, "4"))},
    )
    assert proc.returncode == 1  # a failing hook does not change the monitor's answer
    assert "the notification hook failed for the stale event of run 'stuck'" in proc.stderr
    assert "exited 4: hook refused on purpose" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(events(out)) == 2

    got_cb: list[dict[str, Any]] = []
    from crashpoint.checkpoint import stale_runs

    assert [r.run_id for r in stale_runs(Store(root, notify=got_cb.append), 3600)] == ["stuck"]
    assert [e["run_id"] for e in got_cb] == ["stuck"]


def test_state_at_refuses_a_step_that_never_completed(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", durability="none")
    _interrupted(store, "r")
    with pytest.raises(RunStateError, match="'b' never completed"):
        state_at(store, "r", "b")
    assert state_at(store, "r", "a").state["order"] == ["a"]
