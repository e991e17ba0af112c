"""The progress line: overall count, ETA, and the xdist workers' boards combined."""

from __future__ import annotations

import os

import pytest

from crashpoint.pytest_plugin._board import Board, Watcher, WorkerFile, eta_seconds, format_clock


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0:00"), (75.4, "1:15"), (3725, "1:02:05"), (-3, "0:00")]
)
def test_format_clock(seconds: float, text: str) -> None:
    assert format_clock(seconds) == text


def test_eta_is_the_pace_so_far_and_unknown_before_anything_is_done() -> None:
    assert eta_seconds(10.0, 0, 5) is None
    assert eta_seconds(10.0, 2, 0) is None
    assert eta_seconds(10.0, 2, 6) == pytest.approx(20.0)
    assert eta_seconds(10.0, 6, 6) == 0.0


def test_board_counts_the_running_item_by_its_trials() -> None:
    b = Board(items_total=4)
    b.start_item("a [kill@random]")
    for k in range(1, 4):
        b.trial(k, 6, failed=k == 2)
    assert b.units_done() == pytest.approx(0.5)
    b.finish_item()
    assert (b.items_done, b.trials_done, b.trials_failed, b.item) == (1, 3, 1, "")
    line = b.line("x")
    assert line.startswith("[crashpoint 1/4 items, 3 trials, 1 failed, ")
    assert "ETA" in line
    assert line.endswith("] x")


def test_watcher_combines_worker_files_into_one_line() -> None:
    lines: list[str] = []
    w = Watcher(lines.append, every=0.0, heartbeat=1000.0, poll=False)
    try:
        one, two = Board(items_total=5), Board(items_total=5)
        one.start_item("s [kill@random]")
        one.trial(2, 4, failed=False)
        two.finish_item()
        two.start_item("t [corrupt@zero]")
        two.trial(1, 3, failed=True)
        WorkerFile(w.folder, "gw0").write(one)
        WorkerFile(w.folder, "gw1").write(two)
        line = w.line()
        assert line is not None
        assert line.startswith("[crashpoint 1/5 items, 2 trials, 1 failed, ")
        assert line.endswith("gw0: s [kill@random] 2/4 | gw1: t [corrupt@zero] 1/3")
        assert w.line() is None  # nothing changed: no repeated line
    finally:
        w.close()
    assert not os.path.exists(w.folder)
