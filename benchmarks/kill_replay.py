"""A kill replayed from the recorded run judges as a real kill does: the evidence, and the cost.

For each scenario file given (default: the shipped ``scenarios/`` and the verdict corpus,
``tests/verdicts/scenarios/``) and each of its kill families that can be replayed (``kill: {at:
fileop | every-boundary | random | recovery}``, alone or first in a chain), the family runs twice
over ONE golden run (so both runs plan the same crash points): with kills replayed from the
golden run's recorded state where the trace allows (the default), and with every kill re-run
for real (``replay: false``). Printed per family: the crash points, how many were replayed (and
why the others were not), whether every trial got the same verdict both ways, and the time of
each way; then the totals and the median ratio of trial times.

    python benchmarks/kill_replay.py                     # everything (tens of minutes)
    python benchmarks/kill_replay.py --max 12 FILE...    # the first 12 operations of each file
    python benchmarks/kill_replay.py --trials 6          # 6 trials per family that draws them
    python benchmarks/kill_replay.py --json out.json

A family whose agent needs what this machine lacks (strace, an extra, node) is skipped with the
reason. Exit status 1 if any verdict differs.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _with_replay(fam: Any, replay: bool, most: int) -> Any:
    from crashpoint.harness import FaultFamily

    chain = []
    for kind, opts in fam.chain:
        o = dict(opts)
        if _replayable(kind, o):
            o["replay"] = replay
        if kind == "kill" and o.get("at") == "fileop":
            o["max"] = min(int(o.get("max", most)), most)
        chain.append((kind, tuple(sorted(o.items()))))
    return FaultFamily(tuple(chain))


def _replayable(kind: str, opts: dict[str, Any]) -> bool:
    return kind == "kill" and opts.get("at", "random") in (
        "fileop",
        "every-boundary",
        "random",
        "recovery",
    )


def _replayed(attempt: Any) -> bool:
    return "replayed from the golden run" in attempt.killed_by


def _one(sc: Any, sf: Any, work: str, most: int, trials: int) -> dict[str, Any]:
    from crashpoint.harness import Campaign, Zygote

    out: dict[str, Any] = {"file": os.path.relpath(sc.path, ROOT), "family": sf.family.name}
    runs: dict[bool, Any] = {}
    golden = None
    for replay in (True, False):
        fam = _with_replay(sf.family, replay, most)
        with contextlib.ExitStack() as stack:
            warm = sc.agent.warm is not None
            launcher = stack.enter_context(Zygote.for_agent(sc.agent)) if warm else None
            camp = Campaign(
                sc.agent,
                [fam],
                os.path.join(work, f"{'replay' if replay else 'real'}"),
                name="fileop",
                seed=sc.seed,
                restarts=sc.restarts,
                expect=sc.expect,
                launcher=launcher,
                trials=trials,
            )
            camp.record = frozenset().union(
                *(f.family.needs for f in sc.families), {"fileops", "killreplay"}
            )
            t = time.perf_counter()
            res = camp.run(golden=golden)
            took = time.perf_counter() - t
        golden = res.golden
        runs[replay] = (res, took)
    (rep, t_rep), (real, t_real) = runs[True], runs[False]
    why = [r["why"] for r in (*rep.golden.fileop_replay, *rep.golden.boundary_replay) if "why" in r]
    replayed = [t for t in rep.trials if any(_replayed(a) for a in t.attempts)]
    differ = [  # the same golden run and seed: the same plans, trial by trial
        f"{a.plan.describe()}: replayed {a.status}, real {b.status}"
        + ("" if a.plan.describe() == b.plan.describe() else f" ({b.plan.describe()})")
        for a, b in zip(rep.trials, real.trials, strict=False)
        if a.status != b.status or a.plan.describe() != b.plan.describe()
    ]
    out.update(
        points=len(rep.trials),
        replayed=len(replayed),
        not_replayed_because=sorted(set(why))[:3],
        same_verdicts=not differ and len(rep.trials) == len(real.trials),
        differ=differ[:5],
        verdict_replay="pass" if rep.ok else "FAIL",
        verdict_real="pass" if real.ok else "FAIL",
        seconds_replay=round(t_rep, 2),
        seconds_real=round(t_real, 2),
        trial_s_replay=statistics.median(t.duration for t in replayed) if replayed else None,
        trial_s_real=statistics.median(t.duration for t in real.trials) if real.trials else None,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="scenario files (default: scenarios/ and the corpus)")
    ap.add_argument("--max", type=int, default=40, help="first N file operations per family")
    ap.add_argument("--trials", type=int, default=12, help="trials per family with a count")
    ap.add_argument("--json", default="", help="write the rows to this file")
    args = ap.parse_args(argv)
    from crashpoint.errors import CrashpointError
    from crashpoint.harness import load_scenario

    files = args.files or sorted(
        glob.glob(os.path.join(ROOT, "scenarios", "*.scenario.yaml"))
        + glob.glob(os.path.join(ROOT, "tests", "verdicts", "scenarios", "*.scenario.yaml"))
    )
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kill-replay-", dir=os.environ.get("TMPDIR")) as base:
        for n, path in enumerate(files):
            try:
                sc = load_scenario(path)
            except CrashpointError as exc:
                print(f"skip {path}: {exc}", file=sys.stderr)
                continue
            for k, sf in enumerate(sc.families):
                kind, opts = sf.family.chain[0]
                if not _replayable(kind, dict(opts)):
                    continue
                work = os.path.join(base, f"{n}-{k}")
                try:
                    row = _one(sc, sf, work, args.max, args.trials)
                except CrashpointError as exc:  # a golden run that cannot run here
                    row = {"file": os.path.relpath(path, ROOT), "skipped": str(exc)[:200]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    judged = [r for r in rows if "points" in r]
    same = [r for r in judged if r["same_verdicts"]]
    ratios = [
        r["trial_s_real"] / r["trial_s_replay"]
        for r in judged
        if r.get("trial_s_replay") and r.get("trial_s_real")
    ]
    summary = {
        "families": len(judged),
        "skipped": len(rows) - len(judged),
        "same_verdicts": f"{len(same)} of {len(judged)}",
        "trials": sum(r["points"] for r in judged),
        "replayed": sum(r["replayed"] for r in judged),
        "seconds_replay": round(sum(r["seconds_replay"] for r in judged), 1),
        "seconds_real": round(sum(r["seconds_real"] for r in judged), 1),
        "median_trial_ratio_real_over_replay": round(statistics.median(ratios), 2)
        if ratios
        else None,
    }
    print(json.dumps({"summary": summary}), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)
    return 0 if len(same) == len(judged) else 1


if __name__ == "__main__":
    sys.exit(main())
