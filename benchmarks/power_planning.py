"""Power-loss planning time against the number of unsynced writes (issue 24).

    python benchmarks/power_planning.py [--sizes 10,100,1000,3000] [--runs 3] [--json]
        [--append-sizes 10,100,300] [--from-scratch 10,30]

Plans a systematic ``power_loss: {model: posix}`` campaign over a synthetic golden run, as
``Campaign.run`` does before its first trial (``Campaign.plans``: the crash states of every
point of the log, deduplicated, then one trial plan per state), for an agent that rewrites
its state file in place N times without fsync (``open(path, "w")`` + ``json.dump``: a
truncate to 0 and a write per step; the trace of ``benchmarks/naive_agent.py`` with N
steps). Three state files:

- ``growing``: the naive agent's, a JSON list of the steps done (the file grows with N, so
  each state holds O(N) bytes: hashing and comparing them is O(N) per state at C speed);
- ``fixed``: about 120 bytes whatever N (the planning work itself, per state);
- ``append``: N records appended to a log never synced (each lost record is a state of every
  later point: O(N^2) states, so smaller sizes; the log grows with N too).

For each size: states planned (one trial each), seconds (median of ``--runs``), states per
second, and time per state relative to the smallest size (linear planning keeps it about 1).
With ``--from-scratch``, the same for the former planner (each state rebuilt by replaying the log
from the start) at the given sizes, for comparison (it grows as N^3: keep the sizes small).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import Counter
from typing import Any

from crashpoint.faults import LogOp, OpLog
from crashpoint.faults import _powercut as pc
from crashpoint.harness import AgentSpec, Campaign, Golden, family_from_spec
from crashpoint.harness._spec import _plans, _power

S = "{state_dir}"


def golden(n: int, shape: str) -> Golden:
    """A golden run of ``n`` steps: step started, ``state.json`` rewritten in place (not
    synced), step completed."""
    ops: list[LogOp] = []
    events: list[dict[str, Any]] = []
    at: list[int] = []
    done: list[str] = []
    for k in range(n):
        step = f"s{k}"
        events.append({"i": len(events), "attempt": 1, "op": "step_started", "step": step})
        at.append(len(ops))
        done.append(step)
        doc = {"done": done} if shape == "growing" else {"step": k, "pad": "x" * 100}
        data = json.dumps(doc).encode()
        name, off = f"{S}/state.json", 0
        if shape == "append":
            name, data = f"{S}/log.jsonl", json.dumps({"step": k}).encode() + b"\n"
            off = sum(op.size for op in ops[-1:]) + (ops[-1].offset if ops else 0)
        if k == 0 or shape != "append":
            kind = "creat" if k == 0 else "trunc"
            ops.append(LogOp(len(ops), kind, name, file=1, time=float(len(ops))))
        ops.append(
            LogOp(
                len(ops),
                "write",
                name,
                file=1,
                offset=off,
                size=len(data),
                data=data,
                time=float(len(ops)),
            )
        )
        events.append({"i": len(events), "attempt": 1, "op": "step_completed", "step": step})
        at.append(len(ops))
    log = OpLog(ops=tuple(ops))
    return Golden(
        [f"s{k}" for k in range(n)],
        events,
        Counter(),
        b"",
        0.1,
        recorded_by="strace",
        plog=log.to_json(),
        plog_events=at,
    )


def plan_once(g: Golden) -> tuple[int, float]:
    """(trials planned, seconds) for one planning of a systematic ``power_loss`` campaign
    over ``g``: its crash states and one plan per state (the per-process caches emptied)."""
    _power._CACHE.clear()
    _plans._ORDERS.clear()
    fam = family_from_spec({"power_loss": {"model": "posix"}})
    camp = Campaign(AgentSpec(("true",)), [fam], "/nonexistent-report", seed=1)
    t0 = time.perf_counter()
    n = len(camp.plans(g))
    return n, time.perf_counter() - t0


def from_scratch_once(g: Golden) -> tuple[int, float]:
    """The former planner: at each point, each state built by replaying the log from 0."""
    log = OpLog.from_json(g.plog)
    t0 = time.perf_counter()
    seen: set[tuple[str, int]] = set()
    for upto in range(len(log.ops) + 1):
        mdl = pc._Model(log, "posix")
        events = sum(1 for k in g.plog_events if k <= upto)
        digests: set[str] = set()
        for m in mdl.mutations(upto):
            s = mdl.state(upto, m)
            if s.lost and s.digest not in digests:
                digests.add(s.digest)
                seen.add((s.digest, events))
    return len(seen), time.perf_counter() - t0


def measure(sizes: list[int], runs: int, shape: str, scratch: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for n in sizes:
        g = golden(n, shape)
        times, states = [], 0
        for _ in range(runs):
            states, t = (from_scratch_once if scratch else plan_once)(g)
            times.append(t)
        sec = statistics.median(times)
        rows.append(
            {
                "planner": "from scratch" if scratch else "incremental",
                "shape": shape,
                "writes": n,
                "operations": len(g.plog["ops"]),
                "states": states,
                "seconds": round(sec, 4),
                "states_per_s": round(states / sec, 1) if sec else None,
                "us_per_state": round(sec / max(1, states) * 1e6, 1),
                "runs": runs,
            }
        )
    base = rows[0]["us_per_state"] if rows else 0
    for r in rows:
        r["per_state_vs_smallest"] = round(r["us_per_state"] / base, 2) if base else None
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10,100,1000,3000", help="unsynced writes, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="repetitions per size (median)")
    ap.add_argument("--append-sizes", default="10,100,300", help="records, comma-separated")
    ap.add_argument("--from-scratch", default="", help="sizes to time the former planner at")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    rows: list[dict[str, Any]] = []
    for shape in ("growing", "fixed"):
        rows += measure(sizes, args.runs, shape, scratch=False)
    appends = [int(x) for x in args.append_sizes.split(",") if x]
    rows += measure(appends, args.runs, "append", scratch=False)
    if args.from_scratch:
        old = [int(x) for x in args.from_scratch.split(",") if x]
        rows += measure(old, 1, "growing", scratch=True)
    print(f"power-loss planning, posix model; {platform.python_version()}, {platform.machine()}")
    print(
        f"{'planner':<13} {'state file':<10} {'writes':>6} {'states':>7} {'seconds':>9} "
        f"{'states/s':>9} {'us/state':>9} {'per state vs smallest':>22}"
    )
    for r in rows:
        print(
            f"{r['planner']:<13} {r['shape']:<10} {r['writes']:>6} {r['states']:>7} "
            f"{r['seconds']:>9.3f} {r['states_per_s'] or 0:>9.0f} {r['us_per_state']:>9.1f} "
            f"{r['per_state_vs_smallest'] or 0:>22.2f}"
        )
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
