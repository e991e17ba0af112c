"""The history checker's time on long ledger histories (issue 28: 100,000 events in under 5 s).

    python benchmarks/history_checker.py [--sizes 25000,50000,100000] [--processes 8,32]
        [--runs 3] [--json]

Builds a synthetic ledger history of N events for k resumers racing through a long run (every
attempt starts every step; half of them complete it, saving a checkpoint with its parent; a
third send an effect with a key of their own; step names repeat, as in an agent's loop), the
worst case for the checker: every anomaly kind occurs, many times. Then times
``crashpoint.harness._checker.check_history`` over it (the median of ``--runs``), and prints
per size: seconds, events per second, the checker's counted work per event (what
tests/unit/test_history.py asserts grows linearly), and the anomalies found. The target is
100,000 events in under 5 s; the last line says whether this run met it. Benchmarks are not
tests: nothing here fails on a timing.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from typing import Any

from crashpoint.harness._checker import check_history

TARGET_EVENTS, TARGET_SECONDS = 100_000, 5.0


def history(n: int, k: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """About ``n`` ledger events of ``k`` resumers (see the module docstring), and the golden
    run's step completions."""
    events: list[dict[str, Any]] = []
    golden: dict[str, int] = {}

    def add(attempt: int, op: str, **kw: Any) -> None:
        events.append(
            {"i": len(events), "attempt": attempt, "op": op, "t": len(events) * 1e-4, **kw}
        )

    step = 0
    while len(events) < n:
        name = f"step-{step % (n // 40 + 1)}"
        golden[name] = golden.get(name, 0) + 1
        for a in range(1, k + 1):
            add(a, "step_started", step=name)
            if a % 3 == 0:
                add(
                    a,
                    "effect",
                    kind="mail",
                    payload={"step": step},
                    key=f"{a}:{step}",
                    applied=True,
                )
            if a % 2 == 0:
                add(
                    a,
                    "step_completed",
                    step=name,
                    checkpoint=f"c{step}.{a}",
                    parent=f"c{step - 1}",
                    thread="t",
                )
        step += 1
    return events[:n], golden


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="25000,50000,100000")
    ap.add_argument("--processes", default="8,32")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    rows = []
    for k in (int(x) for x in args.processes.split(",")):
        for n in (int(x) for x in args.sizes.split(",")):
            events, golden = history(n, k)
            times = []
            found = None
            for _ in range(max(1, args.runs)):
                t0 = time.perf_counter()
                found = check_history(events, golden)
                times.append(time.perf_counter() - t0)
            assert found is not None
            secs = statistics.median(times)
            rows.append(
                {
                    "processes": k,
                    "events": n,
                    "seconds": round(secs, 4),
                    "events_per_second": round(n / secs),
                    "work_per_event": round(found.work / n, 2),
                    "anomalies": len(found.anomalies),
                }
            )
    if args.json:
        print(json.dumps({"machine": platform.platform(), "rows": rows}, indent=1))
    else:
        print(
            f"{'k':>3} {'events':>8} {'seconds':>8} {'events/s':>10} {'work/event':>10} anomalies"
        )
        for r in rows:
            print(
                f"{r['processes']:>3} {r['events']:>8} {r['seconds']:>8.3f} "
                f"{r['events_per_second']:>10} {r['work_per_event']:>10} {r['anomalies']}"
            )
    at = [r for r in rows if r["events"] >= TARGET_EVENTS]
    if at:
        worst = max(r["seconds"] for r in at)
        met = "met" if worst < TARGET_SECONDS else "MISSED"
        print(
            f"target {TARGET_EVENTS:,} events in under {TARGET_SECONDS:g} s: {met} "
            f"(slowest {worst:.3f} s, on {platform.machine()}, {platform.python_version()})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
