"""``crashpoint checkpoints dead`` on a folder store: a supervisor's dead letters (the run's
journal ended as dead) are listed, cleared (the run deleted), and a retry is refused with the
way to re-open one; a run that is not dead-lettered is refused and nothing changes. The
PostgreSQL store's (a fleet's) dead letters: tests/unit/test_pg_store.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crashpoint.checkpoint import Store, Supervisor, open_run
from crashpoint.cli import main


def _poison(store: Store, run_id: str) -> None:
    with open_run(store, run_id, steps=["a", "b"]) as run:
        run.step("a", lambda: 1)

    def resume(rid: str) -> None:
        raise RuntimeError("boom")

    [outcome] = Supervisor(store, resume=resume, max_attempts=2).resume_all()
    assert outcome.status == "dead"


def test_a_folder_store_s_dead_letters_are_listed_and_cleared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "s")
    _poison(store, "poison")
    with open_run(store, "fine", steps=["a"]) as run:
        run.step("a", lambda: 1)
    base = ["checkpoints", "--store", str(tmp_path / "s"), "dead"]
    assert main(base) == 1
    out = capsys.readouterr().out
    assert out.startswith("poison: dead-lettered by a supervisor after 2 attempts: failed on all")
    assert "boom" in out
    assert "fine" not in out
    assert main([*base, "--json"]) == 1
    [d] = json.loads(capsys.readouterr().out)
    assert (d["run_id"], d["by"], d["attempts"]) == ("poison", "supervisor", 2)
    assert main([*base, "--retry", "poison"]) == 2  # a supervisor's: re-opened by rollback
    assert "checkpoints rollback poison --to STEP" in capsys.readouterr().err
    assert main([*base, "--clear", "fine"]) == 2  # not a dead letter: nothing changes
    assert "'fine'" in capsys.readouterr().err
    assert sorted(store.run_ids()) == ["fine", "poison"]
    assert main([*base, "--clear", "poison"]) == 0
    assert "poison: cleared" in capsys.readouterr().out
    assert store.run_ids() == ["fine"]
    assert main(base) == 0
    assert "no dead letters in" in capsys.readouterr().out
