"""The verdict matrix as tests: each correct agent of ``matrix.yaml`` passes the gate (with the
default and the strictest settings; no failing check, every fault family exercised), each buggy
twin fails on the check that names its bug. One test per cell, run through ``crashpoint run``
as users run it.

The whole matrix is slow (``pytest tests/verdicts -m slow``); the default run keeps one correct
agent and its twin, and the checks of the manifest itself. An agent whose extra is missing
(LangGraph, DBOS, the OpenAI SDK, node, PostgreSQL) is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _matrix as m

SETTINGS, AGENTS = m.load()
CELLS = m.cells(AGENTS)
FAST = set(m.fast_ids())


def _param(cell: m.Cell) -> object:
    marks = [] if cell.id in FAST else [pytest.mark.slow]
    return pytest.param(cell, id=cell.id, marks=marks)


@pytest.fixture(scope="module")
def pg_base() -> Iterator[Callable[[], str | None]]:
    """A throw-away PostgreSQL server's base URL for the agents that need one, started when
    the first of them runs (``None`` where the server binaries are missing)."""
    with contextlib.ExitStack() as stack:
        holder: list[str | None] = []

        def get() -> str | None:
            if not holder:
                from crashpoint.harness._standins._postgres import unavailable

                holder.append(None if unavailable() else stack.enter_context(m.postgres()))
            return holder[0]

        yield get


@pytest.mark.parametrize("cell", [_param(c) for c in CELLS])
def test_cell(cell: m.Cell, tmp_path: Path, pg_base: Callable[[], str | None]) -> None:
    reason = m.missing(cell.agent)
    if reason:
        pytest.skip(f"{cell.agent.id}: {reason}")
    pg = pg_base() if "postgres" in cell.agent.needs else None
    result = m.run_cell(cell, tmp_path, pg=pg)
    if result.outcome == m.SKIPPED:
        pytest.skip(result.reason)
    evidence = "\n".join(
        f"  {f.check} [{f.campaign} trial {f.trial}]: {f.message[:400]}\n    hint: {f.hint[:300]}"
        f"\n    folder: {f.folder}"
        for f in result.failures[:8]
    )
    want = m.TRUE_PASS if cell.check is None else m.TRUE_FAIL
    assert result.outcome == want, (
        f"{cell.id}: expected {cell.expected}, got {result.got} "
        f"({', '.join(result.failed_checks) or 'no failing check'}); {result.reason}\n{evidence}"
    )


def test_the_manifest_has_24_agents_each_with_a_twin_naming_a_check() -> None:
    from crashpoint.harness import BUILTIN_CHECKS

    assert len(AGENTS) >= 24
    assert len({a.id for a in AGENTS}) == len(AGENTS)
    for a in AGENTS:
        assert a.twins, f"{a.id} has no buggy twin"
        for bug, check in a.twins.items():
            for name in check.split("|"):
                assert name in BUILTIN_CHECKS, f"{a.id} twin {bug}: unknown check {name!r}"
    assert {c.id for c in CELLS} >= FAST


def test_the_scenario_files_are_rendered_from_the_manifest() -> None:
    stale = []
    for cell in CELLS:
        if not m.renderable(cell):
            continue
        path = m.SCENARIOS / f"{cell.file_stem}.scenario.yaml"
        if not path.exists() or path.read_text(encoding="utf-8") != m.render(cell, SETTINGS):
            stale.append(path.name)
    assert not stale, f"re-render with `python benchmarks/verdicts.py --render`: {stale}"


def test_an_agent_whose_extra_is_missing_is_skipped_with_the_reason(tmp_path: Path) -> None:
    agent = m.Agent(
        id="needs-nothing-here",
        family="python",
        command=["{python}", "-c", "pass"],
        bug_args=[],
        correct_bug=None,
        needs=["no_such_module_for_verdicts", "postgres"],
        faults=[{"kill": {"at": "every-boundary"}}],
        twins={},
    )
    result = m.run_cell(m.Cell(agent, "correct", m.DEFAULT, None), tmp_path)
    assert result.outcome == m.SKIPPED
    assert "no_such_module_for_verdicts" in result.reason
    assert "pip install" in result.reason
    assert not (tmp_path / "report").exists()
