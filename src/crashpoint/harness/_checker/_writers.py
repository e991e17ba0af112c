"""``single_writer`` judged from what live attempts did to the files, not from step names.

An agent without crashpoint instrumentation names no step, and its keyed requests are
deduplicated by the service: its events cannot show two writers. Its files can. In a
``resumers`` trial the engine records each attempt's changes to files under ``{state_dir}``
and ``{workdir}`` with their times (``TrialFacts.extra["race"]``, see
:mod:`crashpoint.harness._engine._races`): a syscall trace where strace works (any language;
an SQLite database's writes from C included), else the audit hook of a Python agent.

The rule (:func:`judge_writes`):

- a *change* to a file is a call that changes what it holds or which file its name is: a
  write, a truncation (an open with ``O_TRUNC`` included), a rename or link (both names), a
  removal. Opening a file without truncating it, fsyncs, and locks are not changes. Not
  judged, as coordination rather than state: a file either attempt took an ``flock`` on (a lock
  file, or a ledger kept under its own lock, such as the reference library's ``.store-lock``;
  the engine leaves these out) and an SQLite ``-shm`` index (every connection maps it);
- an attempt is *at work* from its first activity (its first event, or its first change to a
  file) until its process ended. An attempt that waits on a lock before doing anything is not
  at work until it holds the lock; one that is refused never is;
- two live writers: attempts A and B both changed the same file F at instants when *both*
  were at work. A waiter changes F only after the holder ended; a refuser changes nothing; an
  agent that releases its lock before exiting has made its changes before the other's work
  began. Either way no change of theirs falls inside the window where both were at work.

With k attempts started at once (``resumers: {processes: k}``) the rule is the same for any
two of them, found in one pass over the changes in time order (:func:`_clash`), and the first
two caught are named as a pair is.

Where neither attempt changed a file, nothing is judged from files (the caller says "not
judged", never a pass).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crashpoint.harness._checker._facts import TrialFacts
from crashpoint.harness._spec import CheckResult

__all__ = ["judge_writes"]

NAME = "single_writer"
#: SQLite's shared-memory index (``db-shm``): every connection, reader or writer, maps and
#: updates it; it holds coordination, not state (as a lock file does), so it is not judged.
_SHARED_INDEX = "-shm"


def _busy_all(
    group: list[int],
    race: dict[str, Any],
    events: list[dict[str, Any]],
    writes: list[dict[str, Any]],
) -> dict[int, tuple[float, float] | None]:
    """When each attempt of ``group`` was at work: (its first activity, its end), or None; one
    pass over the events and the writes."""
    first: dict[int, float] = {}
    for t, n in (
        *((e.get("t"), int(e["attempt"])) for e in events),
        *((w["t"], int(w["attempt"])) for w in writes),
    ):
        if t is not None and (n not in first or float(t) < first[n]):
            first[n] = float(t)
    out: dict[int, tuple[float, float] | None] = {}
    for n in group:
        span = race["live"].get(n) or race["live"].get(str(n))
        out[n] = (first[n], float(span[1])) if span and n in first else None
    return out


def _clash(
    writes: list[dict[str, Any]], busy: dict[int, tuple[float, float] | None]
) -> tuple[tuple[int, int] | None, list[int]]:
    """The first two attempts that changed one file while both were at work, found in one pass
    over the changes in time order (each against the latest change to that file by each other
    attempt: at most k - 1 looks, k at most 32), and every attempt in such a clash."""
    last: dict[str, dict[int, float]] = {}  # file -> attempt -> its latest change
    first: tuple[int, int] | None = None
    involved: set[int] = set()
    for w in sorted(writes, key=lambda w: float(w["t"])):
        path, x, t = str(w["path"]), int(w["attempt"]), float(w["t"])
        bx = busy.get(x)
        if path.endswith(_SHARED_INDEX) or bx is None:
            continue
        seen = last.setdefault(path, {})
        for y, ty in seen.items():
            by = busy.get(y)
            if y == x or by is None:
                continue
            # y changed it while x was at work (ty >= x's start), x changes it while y still is
            if ty >= bx[0] and t <= by[1]:
                first = first or (min(x, y), max(x, y))
                involved |= {x, y}
        seen[x] = t
    return first, sorted(involved)


def _busy(
    num: int, race: dict[str, Any], events: list[dict[str, Any]], writes: list[dict[str, Any]]
) -> tuple[float, float] | None:
    """When attempt ``num`` was at work: (its first activity, its end), or None."""
    span = race["live"].get(num) or race["live"].get(str(num))
    if not span:
        return None
    acts = [float(e["t"]) for e in events if int(e["attempt"]) == num and e.get("t") is not None]
    acts += [float(w["t"]) for w in writes if int(w["attempt"]) == num]
    if not acts:
        return None
    return min(acts), float(span[1])


def judge_writes(f: TrialFacts) -> CheckResult | None:
    """``single_writer`` from the files two live attempts changed (see the module docstring):
    a failure naming the file and both attempts; a pass saying what was seen; a skipped result
    saying why nothing could be judged; None when the trial recorded no race (not a
    ``resumers`` trial)."""
    race: dict[str, Any] = f.extra.get("race") or {}
    group = [int(n) for n in race.get("attempts") or race.get("pair") or []]
    if not group:
        return None
    if len(group) > 2:
        return _judge_group(f, race, group)
    a, b = group
    if not race.get("by"):
        why = race.get("why_not") or "no recording"
        return CheckResult(
            NAME,
            True,
            f"not judged from files: their file operations were not recorded ({why})",
            skipped=True,
        )
    writes: list[dict[str, Any]] = list(race.get("writes") or [])
    by = race["by"]
    if not writes:
        return CheckResult(
            NAME,
            True,
            f"not judged from files: neither attempt {a} nor {b} changed a file under "
            f"{{state_dir}} or {{workdir}} (recorded by {by})",
            skipped=True,
        )
    t0 = min(float(s[0]) for s in race["live"].values())
    busy = {n: _busy(n, race, f.events, writes) for n in (a, b)}
    ba, bb = busy[a], busy[b]
    window = (max(ba[0], bb[0]), min(ba[1], bb[1])) if ba and bb else None
    count = {n: len({w["path"] for w in writes if int(w["attempt"]) == n}) for n in (a, b)}
    if window is not None and window[0] <= window[1]:
        inside = [w for w in writes if window[0] <= float(w["t"]) <= window[1]]
        by_file: dict[str, dict[int, list[dict[str, Any]]]] = {}
        for w in inside:
            by_file.setdefault(str(w["path"]), {}).setdefault(int(w["attempt"]), []).append(w)
        # the file both changed most first (a database's log before its index)
        shared = sorted(
            (p for p, who in by_file.items() if len(who) == 2 and not p.endswith(_SHARED_INDEX)),
            key=lambda p: (-min(len(ws) for ws in by_file[p].values()), p),
        )
        if shared:
            path = shared[0]
            wa, wb = by_file[path][a], by_file[path][b]
            first = min((wa[0], wb[0]), key=lambda w: float(w["t"]))
            second = wb[0] if first is wa[0] else wa[0]
            more = (
                f" (and {len(shared) - 1} more file(s): {', '.join(shared[1:4])})"
                if len(shared) > 1
                else ""
            )
            return CheckResult(
                NAME,
                False,
                f"attempts {a} and {b} both changed {path} while both were at work: attempt "
                f"{first['attempt']} {first['op']} at +{float(first['t']) - t0:.3f}s, attempt "
                f"{second['attempt']} {second['op']} at +{float(second['t']) - t0:.3f}s "
                f"({len(wa)} change(s) by attempt {a} and {len(wb)} by attempt {b} while both "
                f"were at work){more}; two live writers of one run (file operations recorded "
                f"by {by})",
            )
    locks = list(race.get("locked") or [])
    return CheckResult(
        NAME,
        True,
        f"judged from file operations ({by}): attempt {a} changed {count[a]} file(s), attempt "
        f"{b} {count[b]}; no file was changed by both while both were at work"
        + (f" (lock files, not judged: {', '.join(locks[:3])})" if locks else ""),
    )


def _judge_group(f: TrialFacts, race: dict[str, Any], group: list[int]) -> CheckResult:
    """:func:`judge_writes` for k attempts started at once: the first two that changed one file
    while both were at work are named as a pair is (see the module docstring), with every
    attempt caught in such a clash; the pass counts each attempt's files."""
    k = len(group)
    span = f"attempts {group[0]} to {group[-1]}"
    if not race.get("by"):
        why = race.get("why_not") or "no recording"
        return CheckResult(
            NAME,
            True,
            f"not judged from files: their file operations were not recorded ({why})",
            skipped=True,
        )
    writes: list[dict[str, Any]] = list(race.get("writes") or [])
    by = race["by"]
    if not writes:
        return CheckResult(
            NAME,
            True,
            f"not judged from files: none of {span} changed a file under {{state_dir}} or "
            f"{{workdir}} (recorded by {by})",
            skipped=True,
        )
    busy = _busy_all(group, race, f.events, writes)
    pair, involved = _clash(writes, busy)
    if pair is not None:
        sub = {**race, "attempts": list(pair), "pair": list(pair)}
        sub["writes"] = [w for w in writes if int(w["attempt"]) in pair]
        found = judge_writes(dataclasses.replace(f, extra={**f.extra, "race": sub}))
        if found is not None and not found.ok:
            return CheckResult(
                NAME,
                False,
                f"{found.message}; of the {k} attempts started at once, "
                f"{len(involved)} changed a file another was changing while both were at work: "
                f"{', '.join(map(str, involved))}",
            )
    files: dict[int, set[str]] = {n: set() for n in group}
    for w in writes:
        files.setdefault(int(w["attempt"]), set()).add(str(w["path"]))
    locks = list(race.get("locked") or [])
    counts = ", ".join(f"attempt {n}: {len(files[n])}" for n in group)
    return CheckResult(
        NAME,
        True,
        f"judged from file operations ({by}): files changed per attempt ({counts}); no file "
        "was changed by two while both were at work"
        + (f" (lock files, not judged: {', '.join(locks[:3])})" if locks else ""),
    )
