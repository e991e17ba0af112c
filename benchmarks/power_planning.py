"""Power-loss planning time against the number of unsynced writes (issue 24).

    python benchmarks/power_planning.py [--sizes 10,100,1000,3000] [--runs 3] [--json PATH]
        [--append-sizes 10,100,300] [--ext4-sizes 10,100] [--from-scratch 10,30]
        [--campaign 1000 --budget 60 [--models posix,ext4-ordered]]

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

For each size: states planned (one trial each), seconds (median of at least ``--runs``
plannings, more for a small size, until half a second was spent), states per second, and time
per state relative to the smallest size (linear planning keeps it about 1).
``--ext4-sizes``: the growing file again under ``model: ext4-ordered`` (whose planning is not
linear: a lost write holds back every later name or size change, so nothing is skipped).
With ``--from-scratch``, the same for the former planner (each state rebuilt by replaying the log
from the start) at the given sizes, for comparison (it grows as N^3: keep the sizes small).

``--campaign N``: then a real campaign per model of ``--models``, end to end and within
``--budget`` seconds: ``benchmarks/naive_agent.py`` with N steps (N unsynced rewrites of
``state.json``), spawned as a ``{python}`` command, ``power_loss: {model: M}`` (systematic),
state on tmpfs where there is one. Reported: the golden run's time (under strace), the
planning time (``Campaign.plans``, stopped by the budget if it runs out), trials planned and
run, the median trial, the whole wall time against the budget (a campaign must never overrun
it: stopped, it fails and says why), and what the whole campaign would take at that rate.
``--json PATH`` writes every figure (benchmarks/run.py runs this with ``--only planning`` and
renders it into docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from crashpoint.faults import LogOp, OpLog
from crashpoint.faults import _powercut as pc
from crashpoint.harness import AgentSpec, Campaign, Golden, family_from_spec
from crashpoint.harness._spec import _plans, _power

S = "{state_dir}"
MIN_SECONDS, MAX_RUNS = 0.5, 100  # a size is planned at least --runs times, and this long
NAIVE_AGENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "naive_agent.py")


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


def plan_once(g: Golden, model: str = "posix") -> tuple[int, float]:
    """(trials planned, seconds) for one planning of a systematic ``power_loss`` campaign
    over ``g``: its crash states and one plan per state (the per-process caches emptied)."""
    _power._CACHE.clear()
    _plans._ORDERS.clear()
    fam = family_from_spec({"power_loss": {"model": model}})
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


def measure(
    sizes: list[int], runs: int, shape: str, scratch: bool, model: str = "posix"
) -> list[dict[str, Any]]:
    """Per size: at least ``runs`` plannings, and more (up to ``MAX_RUNS``) until
    ``MIN_SECONDS`` were spent, so that the small sizes' few milliseconds are a median of many;
    after a warm-up planning at the smallest size (the first one in a process loads modules
    and fills caches, which would inflate the baseline every other size is divided by)."""
    rows: list[dict[str, Any]] = []
    plan = from_scratch_once if scratch else functools.partial(plan_once, model=model)
    if sizes:
        plan(golden(min(sizes), shape))
    for n in sizes:
        g = golden(n, shape)
        times, states = [], 0
        while len(times) < runs or (sum(times) < MIN_SECONDS and len(times) < MAX_RUNS):
            states, t = plan(g)
            times.append(t)
        sec = statistics.median(times)
        rows.append(
            {
                "planner": "from scratch" if scratch else "incremental",
                "model": model,
                "shape": shape,
                "writes": n,
                "operations": len(g.plog["ops"]),
                "states": states,
                "seconds": round(sec, 4),
                "states_per_s": round(states / sec, 1) if sec else None,
                "us_per_state": round(sec / max(1, states) * 1e6, 1),
                "runs": len(times),
            }
        )
    base = rows[0]["us_per_state"] if rows else 0
    for r in rows:
        r["per_state_vs_smallest"] = round(r["us_per_state"] / base, 2) if base else None
    return rows


@dataclass
class _TimedCampaign(Campaign):
    """A campaign that times its own planning (``Campaign.plans``, within its budget)."""

    planning_s: float = field(default=0.0, init=False)
    planning_at: float = field(default=0.0, init=False)  # time.monotonic() when it began

    def plans(self, golden: Golden, deadline: float | None = None) -> list[Any]:
        self.planning_at = time.monotonic()
        try:
            return super().plans(golden, deadline)
        finally:
            self.planning_s = time.monotonic() - self.planning_at


def campaign(steps: int, model: str, budget: float, count: int = 0) -> dict[str, Any]:
    """One real campaign, end to end: ``naive_agent.py`` with ``steps`` unsynced rewrites,
    spawned, ``power_loss: {model: MODEL}`` (systematic; with ``count``, that many states
    drawn by the seed), within ``budget`` seconds."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    agent = AgentSpec(
        ("{python}", NAIVE_AGENT, "{state_dir}", str(steps)), timeout=max(60.0, budget)
    )
    fam = family_from_spec({"power_loss": {"model": model, **({"count": count} if count else {})}})
    with tempfile.TemporaryDirectory(dir=shm, prefix="bench-planning-") as d:
        camp = _TimedCampaign(agent, [fam], d, name=f"powerloss-{model}", seed=1, budget=budget)
        t0 = time.monotonic()
        res = camp.run()
        wall = time.monotonic() - t0
        # the golden run's phase: spawned under strace, its trace read (up to the planning)
        before = camp.planning_at - t0 if camp.planning_at else wall
    ran = [x for x in res.trials if not x.skipped]
    planned = len(res.trials) + len(res.not_run)
    trial_s = statistics.median(x.duration for x in ran) if ran else None
    golden_s = res.golden.duration
    projected = (
        round(golden_s + camp.planning_s + planned * trial_s, 1)
        if trial_s is not None and not camp.planning_stopped
        else None
    )
    return {
        "model": model,
        "count": count or None,
        "writes": steps,
        "budget_s": budget,
        "wall_s": round(wall, 2),
        "wall_over_budget": round(wall / budget, 3) if math.isfinite(budget) else None,
        "golden_s": round(golden_s, 2),
        "golden_phase_s": round(before, 2),
        "trials_s": round(wall - before - camp.planning_s, 2) if camp.planning_at else 0.0,
        "operations": len(res.golden.plog.get("ops", ())) if res.golden.plog else 0,
        "planning_s": round(camp.planning_s, 3),
        "planning_stopped": bool(camp.planning_stopped),
        "planned": planned,
        "ran": len(res.trials),
        "failed": len(res.failures),
        "trial_s": round(trial_s, 3) if trial_s is not None else None,
        "projected_s": projected,
        "verdict": "PASS" if res.ok else "FAIL",
        "incomplete": res.incomplete[:400],
    }


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10,100,1000,3000", help="unsynced writes, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="repetitions per size (median)")
    ap.add_argument("--append-sizes", default="10,100,300", help="records, comma-separated")
    ap.add_argument(
        "--ext4-sizes", default="", help="writes to plan under model ext4-ordered, comma-separated"
    )
    ap.add_argument("--from-scratch", default="", help="sizes to time the former planner at")
    ap.add_argument(
        "--campaign", type=int, default=0, metavar="N", help="a real campaign at N writes"
    )
    ap.add_argument("--budget", type=float, default=60.0, help="its budget, seconds (default 60)")
    ap.add_argument(
        "--models", default="posix,ext4-ordered", help="the campaign's models, comma-separated"
    )
    ap.add_argument(
        "--count",
        type=int,
        default=0,
        metavar="K",
        help="then a posix campaign of K states drawn by the seed (count: K), same budget",
    )
    ap.add_argument("--json", metavar="PATH", help="also write every figure here as JSON")
    args = ap.parse_args()
    try:
        sizes, appends = _ints(args.sizes), _ints(args.append_sizes)
        ext4, old = _ints(args.ext4_sizes), _ints(args.from_scratch)
    except ValueError as exc:
        ap.error(f"sizes are comma-separated whole numbers ({exc})")
    if not 1 <= args.runs <= 100 or min(args.campaign, args.count) < 0:
        ap.error("--runs must be 1-100, --campaign and --count 0 or more")
    if not 1 <= args.budget <= 3600:
        ap.error(f"--budget must be 1-3600 seconds, got {args.budget:g}")
    rows: list[dict[str, Any]] = []
    for shape in ("growing", "fixed"):
        rows += measure(sizes, args.runs, shape, scratch=False)
    rows += measure(appends, args.runs, "append", scratch=False)
    if ext4:
        rows += measure(ext4, args.runs, "growing", scratch=False, model="ext4-ordered")
    if old:
        rows += measure(old, 1, "growing", scratch=True)
    print(f"power-loss planning; {platform.python_version()}, {platform.machine()}")
    print(
        f"{'planner':<13} {'model':<12} {'state file':<10} {'writes':>6} {'states':>7} "
        f"{'seconds':>9} {'states/s':>9} {'us/state':>9} {'per state vs smallest':>22}"
    )
    for r in rows:
        print(
            f"{r['planner']:<13} {r['model']:<12} {r['shape']:<10} {r['writes']:>6} "
            f"{r['states']:>7} {r['seconds']:>9.3f} {r['states_per_s'] or 0:>9.0f} "
            f"{r['us_per_state']:>9.1f} {r['per_state_vs_smallest'] or 0:>22.2f}"
        )
    campaigns = []
    if args.campaign:
        runs = [(m.strip(), 0) for m in args.models.split(",") if m.strip()]
        for model, count in runs + ([("posix", args.count)] if args.count else []):
            print(
                f"campaign: naive_agent.py at {args.campaign} writes, power_loss model {model}"
                f"{f', count {count}' if count else ''}, budget {args.budget:g} s ...",
                flush=True,
            )
            c = campaign(args.campaign, model, args.budget, count)
            campaigns.append(c)
            print(
                f"  golden {c['golden_s']} s (its phase {c['golden_phase_s']} s), "
                f"planning {c['planning_s']} s"
                f"{' (stopped by the budget)' if c['planning_stopped'] else ''}, "
                f"{c['ran']} of {c['planned']} trials, wall {c['wall_s']} s / budget "
                f"{args.budget:g} s = {c['wall_over_budget']}; {c['verdict']}"
                + (f": {c['incomplete'][:160]}" if c["incomplete"] else ""),
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            out = {"rows": rows, "runs": args.runs, "campaigns": campaigns}
            json.dump(out, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
