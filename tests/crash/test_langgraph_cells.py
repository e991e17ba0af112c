"""The checkpointer conformance cells (``examples/langgraph-checkpointers/``) through the real
harness: a LangGraph agent on CrashpointSaver survives power loss and file corruption, and a
cell can fail (InMemorySaver, which keeps nothing across a restart, fails the kill cell;
SqliteSaver lets two resumers of one thread run at once)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from _forked import forking, warm
from _lazy import needs
from crashpoint.faults import _strace
from crashpoint.harness import AgentSpec

pytestmark = needs(
    "langgraph.graph", reason="LangGraph is not installed: pip install 'crashpoint[langgraph]'"
)

CELLS = Path(__file__).resolve().parents[2] / "examples" / "langgraph-checkpointers"


def _cells() -> Any:
    spec = importlib.util.spec_from_file_location("lg_cells", CELLS / "cells.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["lg_cells"] = mod
    spec.loader.exec_module(mod)
    return mod


def _run(
    saver: str, cell: str, tmp_path: Path, count: int, only: list[int] | None = None
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = _cells().run_cells(
        [saver],
        [str(CELLS / f"{cell}.scenario.yaml")],
        str(tmp_path / "report"),
        progress=False,
        count=count,
        only=only,
    )
    return rows


# slow: fast cover: test_power_loss.py (drawn states); the adapter: test_langgraph_example.py
@pytest.mark.slow
def test_crashpoint_saver_survives_power_loss(tmp_path: Path) -> None:
    ok, why = _strace.available()
    if not ok:
        pytest.skip(f"power loss needs a syscall trace: {why}")
    rows = _run("savers:crashpoint", "power-loss", tmp_path, count=3)
    assert [r["family"] for r in rows] == ["power_loss@posix", "power_loss@ext4-ordered"]
    for r in rows:
        assert r["verdict"] == "PASS", r
        assert r["exercised"] == 3, r


# slow: fast cover: test_lifecycle_cli's test_the_shell_agent_detects_or_repairs_a_damaged_store
@pytest.mark.slow
def test_crashpoint_saver_detects_or_repairs_corruption(tmp_path: Path) -> None:
    rows = _run("savers:crashpoint", "corruption", tmp_path, count=1)
    assert [r["family"] for r in rows] == [
        "corrupt@truncate",
        "corrupt@bitflip",
        "corrupt@zero",
        "corrupt@stale-copy",
    ]
    for r in rows:
        assert r["verdict"] == "PASS", r
        assert r["exercised"] >= 1, r


def test_a_saver_that_keeps_nothing_fails_the_kill_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cells can fail: InMemorySaver loses the thread at each kill, so the graph starts
    again: steps reported completed start again."""
    # forked from a zygote that imported LangGraph once (about the cell's verdict, not about
    # spawning): cells.py's campaigns get it as their launcher
    import crashpoint.harness

    real = crashpoint.harness.Campaign
    zygotes = contextlib.ExitStack()

    def forked_campaign(agent: AgentSpec, *args: Any, **kwargs: Any) -> Any:
        # the graph's imports are inside its functions: named, or each attempt pays them
        agent = dataclasses.replace(
            warm(agent), warm=("*", "langgraph.graph", "langgraph.checkpoint.memory")
        )
        kwargs["launcher"] = zygotes.enter_context(forking(agent))
        return real(agent, *args, **kwargs)

    monkeypatch.setattr(crashpoint.harness, "Campaign", forked_campaign)
    # one kill among those after plan's and search's checkpoints (boundaries 1..3 of the golden
    # run): each of them fails the cell, and one trial of this graph costs seconds
    with zygotes:
        rows = _run("savers:memory", "kill-every-boundary", tmp_path, count=1, only=[2])
    assert rows[0]["verdict"] == "FAIL", rows
    assert "resumes_from_last_completed" in rows[0]["failed_checks"], rows
    table = _cells().table(rows, ["savers:memory"])
    assert "**FAIL**" in table


@pytest.mark.slow
def test_two_resumers_on_sqlite_saver_race_every_time_and_fail_single_writer(
    tmp_path: Path,
) -> None:
    """Issue 23: the two attempts "ran at the same time" but LangGraph's start-up kept their
    steps apart, and 3 of 3 trials passed. Released together at their first event, every
    trial races (exercised) and SqliteSaver's two writers are seen; CrashpointSaver's lock
    keeps one (the other refused): the race fired and it passes."""
    (sqlite,) = _run("savers:sqlite", "two-resumers", tmp_path / "sqlite", count=3)
    assert sqlite["exercised"] == 3, sqlite
    assert sqlite["failed"] == 3, sqlite
    assert sqlite["failed_checks"] == ["single_writer"], sqlite
    (ours,) = _run("savers:crashpoint", "two-resumers", tmp_path / "ours", count=2)
    assert ours["exercised"] == 2, ours
    assert ours["verdict"] == "PASS", ours


@pytest.mark.slow
def test_eight_resumers_on_sqlite_saver_show_the_duplicate_with_a_witness(tmp_path: Path) -> None:
    """Issue 28: eight resumers of one thread released together. SqliteSaver takes no lock:
    several run the graph, and single_writer names a step completed by two of them with the
    two events that show it (the trial folder's anomalies.txt lists every anomaly).
    CrashpointSaver's lock lets one proceed and refuses the seven others: it passes."""
    (sqlite,) = _run("savers:sqlite", "many-resumers", tmp_path / "sqlite", count=1)
    assert sqlite["exercised"] == 1, sqlite
    assert sqlite["failed"] == 1, sqlite
    assert "single_writer" in sqlite["failed_checks"], sqlite
    text = next((tmp_path / "sqlite").rglob("anomalies.txt")).read_text()
    found = re.search(
        r"\nconsume_once: step '(\w+)' completed (\d) times by attempts [\d, -]+ \(the golden "
        r"run completed it once\): two attempts did the same step of the run\n"
        r"  (attempt \d event #\d+ step_completed '\w+'.*)\n  (attempt \d event #\d+ .*)\n",
        text,
    )
    assert found, text
    assert int(found[2]) >= 2
    first, second = found[3], found[4]
    assert f"step_completed '{found[1]}' checkpoint " in first, first  # the ids, in the folder
    assert first.split()[1] != second.split()[1], (first, second)  # two attempts
    (ours,) = _run("savers:crashpoint", "many-resumers", tmp_path / "ours", count=1)
    assert ours["exercised"] == 1, ours
    assert ours["verdict"] == "PASS", ours


def test_every_cell_loads_and_names_its_saver() -> None:
    from crashpoint.harness import load_scenario

    cells = sorted(CELLS.glob("*.scenario.yaml"))
    assert [p.name.split(".")[0] for p in cells] == [
        "corruption",
        "disk-full",
        "kill-every-boundary",
        "kill-fileop",
        "many-resumers",
        "power-loss",
        "two-resumers",
    ]
    for p in cells:
        cmd = load_scenario(p).agent.command
        assert cmd[cmd.index("--saver") + 1] == "savers:crashpoint", p
    swapped = _cells().with_saver(cmd, "mypkg:make")
    assert swapped[swapped.index("--saver") + 1] == "mypkg:make"
