"""Fork server vs spawn for a ``{python}`` command agent: trials per second of a campaign over
a small LangGraph agent (``tests/agents/lg_agent.py``: plan -> search -> send -> report on
SqliteSaver), which pays LangGraph's import (~0.4 s) in every spawned attempt.

    python benchmarks/fork_server.py [--runs 3] [--trials 20] [--example]

``--example`` measures the shipped LangGraph example instead (``examples/langgraph/agent.py
--fixed``: its email goes to the HTTP stand-in, its report through the probe).

For each mode, ``--runs`` campaigns (kill at every boundary plus ``--trials`` random kills,
seed 1) over the same agent: spawned (``agent.warm`` unset) and forked from a warm zygote that
did the script's top-level imports (``warm: true``). Prints the median trials/s of each mode,
their ratio, and the verdicts (identical in both modes, or the script fails).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from crashpoint.harness import AgentSpec, Campaign, family_from_spec
from crashpoint.harness._engine._zygote import WARM_IMPORTS, Zygote

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = os.path.join(os.path.dirname(HERE), "tests", "agents", "lg_agent.py")
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "langgraph", "agent.py")


def spec(fork: bool, example: bool = False) -> AgentSpec:
    argv: tuple[str, ...] = ("{python}", AGENT, "--state", "{state_dir}")
    if example:
        argv = (
            "{python}",
            EXAMPLE,
            "--state",
            "{state_dir}",
            "--http",
            "{http}",
            "--thread",
            "{run_id}",
            "--fixed",
        )
    return AgentSpec(argv, timeout=60, warm=(WARM_IMPORTS,) if fork else None)


def campaign(
    fork: bool, trials: int, example: bool = False
) -> tuple[float, list[dict[str, object]], int]:
    agent = spec(fork, example)
    families = [
        family_from_spec({"kill": {"at": "every-boundary"}}),
        family_from_spec({"kill": {"at": "random"}}),
    ]
    with tempfile.TemporaryDirectory() as root:
        zygote = Zygote.for_agent(agent).start() if fork else None
        try:
            camp = Campaign(agent, families, root, trials=trials, seed=1, launcher=zygote)
            t0 = time.monotonic()
            result = camp.run()
            elapsed = time.monotonic() - t0
            forks = zygote.forks if zygote is not None else 0
        finally:
            if zygote is not None:
                zygote.close()
    verdicts = [{"plan": t.plan.describe(), "ok": t.ok} for t in result.trials]
    return len(result.trials) / elapsed, verdicts, forks


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument(
        "--example",
        action="store_true",
        help="measure examples/langgraph/agent.py (the shipped example)",
    )
    args = ap.parse_args()
    import langgraph  # noqa: F401 - the agent needs it (pip install 'crashpoint[langgraph]')

    rates: dict[str, list[float]] = {"spawn": [], "fork": []}
    verdicts: dict[str, list[dict[str, object]]] = {}
    trials = forks = 0
    for _ in range(args.runs):
        for mode in ("spawn", "fork"):
            rate, v, n = campaign(mode == "fork", args.trials, args.example)
            rates[mode].append(rate)
            verdicts[mode] = v
            trials, forks = len(v), max(forks, n)
    same = verdicts["spawn"] == verdicts["fork"]
    if args.example:  # its saves run in the background (durability="async"), so the golden
        # runs' event order, and the plans drawn from it, can differ: compare outcomes only
        same = [v["ok"] for v in verdicts["spawn"]] == [v["ok"] for v in verdicts["fork"]]
    out = {
        "agent": "examples/langgraph/agent.py --fixed"
        if args.example
        else "tests/agents/lg_agent.py",
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load": [round(x, 1) for x in os.getloadavg()],
        "runs": args.runs,
        "trials_per_campaign": trials,
        "forked_attempts_per_campaign": forks,
        "spawn_trials_per_s": round(statistics.median(rates["spawn"]), 2),
        "fork_trials_per_s": round(statistics.median(rates["fork"]), 2),
        "same_verdicts": same,
        "all_passed": all(bool(v["ok"]) for v in verdicts["fork"]),
    }
    out["ratio"] = round(out["fork_trials_per_s"] / out["spawn_trials_per_s"], 2)  # type: ignore[operator]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    if not same:
        sys.exit("verdicts differ between spawn and fork mode")


if __name__ == "__main__":
    main()
