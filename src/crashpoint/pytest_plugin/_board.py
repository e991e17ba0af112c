"""Progress of a session's crashpoint items: which item, trials done, items done of all, an ETA.

Serial runs print from the item's own thread. Under pytest-xdist a worker cannot write to the
terminal, so each worker keeps a small JSON file (``<folder>/<worker>.json``, replaced
atomically) and the controller polls the folder and prints one combined line: the overall
count, the ETA and what each worker is running.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Board", "Watcher", "WorkerFile", "eta_seconds", "format_clock"]


def format_clock(seconds: float) -> str:
    """``75.4`` -> ``1:15``; ``3725`` -> ``1:02:05``."""
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def eta_seconds(elapsed: float, units_done: float, units_total: int) -> float | None:
    """Time left if the rest goes at the pace so far; None before anything is done."""
    if units_done <= 0 or units_total <= 0:
        return None
    return max(0.0, elapsed * (units_total - units_done) / units_done)


@dataclass
class Board:
    """What one process knows: its items (total and done) and the one it is running now."""

    items_total: int = 0
    items_done: int = 0
    trials_done: int = 0
    trials_failed: int = 0
    item: str = ""
    item_done: int = 0
    item_total: int = 0
    t0: float = field(default_factory=time.monotonic)

    def units_done(self) -> float:
        """Items done, plus the running item's share of its trials."""
        part = self.item_done / self.item_total if self.item and self.item_total else 0.0
        return self.items_done + min(part, 1.0)

    def start_item(self, name: str) -> None:
        self.item, self.item_done, self.item_total = name, 0, 0

    def trial(self, done: int, total: int, failed: bool) -> None:
        self.item_done, self.item_total = done, total
        self.trials_done += 1
        self.trials_failed += 1 if failed else 0

    def finish_item(self) -> None:
        self.items_done += 1
        self.item, self.item_done, self.item_total = "", 0, 0

    def to_json(self) -> dict[str, Any]:
        return {
            "items_total": self.items_total,
            "items_done": self.items_done,
            "trials_done": self.trials_done,
            "trials_failed": self.trials_failed,
            "item": self.item,
            "item_done": self.item_done,
            "item_total": self.item_total,
            "elapsed": time.monotonic() - self.t0,
        }

    def line(self, detail: str = "") -> str:
        """``[crashpoint 3/23 items, 41 trials, 0 failed, 0:12 elapsed, ETA 0:40] detail``."""
        elapsed = time.monotonic() - self.t0
        return _line(
            self.items_done,
            self.items_total,
            self.trials_done,
            self.trials_failed,
            elapsed,
            eta_seconds(elapsed, self.units_done(), self.items_total),
            detail,
        )


def _line(
    items_done: int,
    items_total: int,
    trials: int,
    failed: int,
    elapsed: float,
    eta: float | None,
    detail: str,
) -> str:
    total = f"/{items_total}" if items_total else ""
    eta_s = f", ETA {format_clock(eta)}" if eta is not None else ""
    head = (
        f"[crashpoint {items_done}{total} items, {trials} trials, {failed} failed, "
        f"{format_clock(elapsed)} elapsed{eta_s}]"
    )
    return f"{head} {detail}".rstrip()


class WorkerFile:
    """A worker's board, written to ``folder/<worker>.json`` (temp + rename: the controller
    never reads half a file)."""

    def __init__(self, folder: str, worker: str) -> None:
        self.path = os.path.join(folder, f"{worker}.json")

    def write(self, board: Board) -> None:
        tmp = f"{self.path}.tmp"
        with contextlib.suppress(OSError):
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(board.to_json(), f)
            os.replace(tmp, self.path)


class Watcher:
    """The controller's side under xdist: a private folder the workers write to, and a thread
    that prints a combined line when something changed (at most every ``every`` seconds, and a
    heartbeat every ``heartbeat`` seconds while items run)."""

    def __init__(
        self,
        write: Callable[[str], None],
        *,
        every: float = 2.0,
        heartbeat: float = 15.0,
        poll: bool = True,
    ) -> None:
        self.folder = tempfile.mkdtemp(prefix="cp-progress-")
        self._write = write
        self._every, self._heartbeat = every, heartbeat
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._last: tuple[Any, ...] = ()
        self._last_t = 0.0
        self._thread = threading.Thread(target=self._loop, name="crashpoint-progress", daemon=True)
        if poll:
            self._thread.start()

    def boards(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(self.folder)):
                if not name.endswith(".json"):
                    continue
                with contextlib.suppress(OSError, ValueError):
                    with open(os.path.join(self.folder, name), encoding="utf-8") as f:
                        data = json.load(f)
                    if isinstance(data, dict):
                        out[name[:-5]] = data
        return out

    def line(self) -> str | None:
        boards = self.boards()
        if not boards:
            return None
        items_total = max(int(b.get("items_total", 0)) for b in boards.values())
        items_done = sum(int(b.get("items_done", 0)) for b in boards.values())
        trials = sum(int(b.get("trials_done", 0)) for b in boards.values())
        failed = sum(int(b.get("trials_failed", 0)) for b in boards.values())
        units = float(items_done)
        running = []
        for worker, b in boards.items():
            if b.get("item"):
                done, total = int(b.get("item_done", 0)), int(b.get("item_total", 0))
                units += min(done / total, 1.0) if total else 0.0
                running.append(f"{worker}: {b['item']} {done}/{total or '?'}")
        elapsed = time.monotonic() - self._t0
        key = (items_done, trials, failed, tuple(running))
        now = time.monotonic()
        if key == self._last and now - self._last_t < self._heartbeat:
            return None
        if now - self._last_t < self._every and key[:3] == self._last[:3]:
            return None
        self._last, self._last_t = key, now
        return _line(
            items_done,
            items_total,
            trials,
            failed,
            elapsed,
            eta_seconds(elapsed, units, items_total),
            " | ".join(running),
        )

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            line = self.line()
            if line is not None:
                with contextlib.suppress(Exception):  # a closed terminal must not kill us
                    self._write(line)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        shutil.rmtree(self.folder, ignore_errors=True)
