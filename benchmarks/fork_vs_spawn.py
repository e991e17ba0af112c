"""Fork mode vs spawn mode: trials per second of a campaign over the demo agent, and the cost of
one attempt of a minimal agent.

    python benchmarks/fork_vs_spawn.py [--runs 3] [--trials 30]

Prints the median of ``--runs`` runs for each mode:

- campaign: the demo agent (``crashpoint.agents.demo:main``), kill at every boundary plus random
  kills, seed 1; spawned as a command (``python -m crashpoint.agents.demo``), spawned as an entry
  (``python -m crashpoint._entry``), and forked from a zygote.
- attempt: start-to-exit of one attempt of an agent whose function returns at once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from crashpoint.harness import AgentProcess, AgentSpec, Campaign, Zygote, family_from_spec
from crashpoint.harness._spec import ENTRY_ARGV

ENTRY = AgentSpec(entry="crashpoint.agents.demo:main", args=("--state", "{state_dir}"), timeout=60)
COMMAND = AgentSpec(
    ("{python}", "-m", "crashpoint.agents.demo", "--state", "{state_dir}"), timeout=60
)
MINIMAL = "def main(argv):\n    return 0\n"


def campaign_rate(agent: AgentSpec, trials: int, fork: bool) -> float:
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
        finally:
            if zygote is not None:
                zygote.close()
    assert result.ok, result.summary()["failures"]
    return len(result.trials) / elapsed


def attempt_ms(fork: bool, n: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "cp_minimal_agent.py"), "w") as f:
            f.write(MINIMAL)
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": folder}
        times = []
        if fork:
            with Zygote(["cp_minimal_agent:main"], env=env) as z:
                for _ in range(n):
                    t0 = time.monotonic()
                    z.spawn("cp_minimal_agent:main", env=env, cwd=folder, timeout=30).wait()
                    times.append(time.monotonic() - t0)
        else:
            for _ in range(n):
                t0 = time.monotonic()
                AgentProcess(
                    [sys.executable, "-c", "import cp_minimal_agent as m; m.main([])"],
                    env,
                    cwd=folder,
                    timeout=30,
                ).start().wait()
                times.append(time.monotonic() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--trials", type=int, default=30)
    args = ap.parse_args()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    for name, agent, fork in (
        ("spawn (command)", COMMAND, False),
        ("spawn (entry)", ENTRY, False),
        ("fork (zygote)", ENTRY, True),
    ):
        rates = [campaign_rate(agent, args.trials, fork) for _ in range(args.runs)]
        print(
            f"campaign {name:16s} {statistics.median(rates):6.2f} trials/s  "
            f"(runs: {', '.join(f'{r:.2f}' for r in rates)})"
        )
    for name, fork in (("spawn", False), ("fork", True)):
        ms = [attempt_ms(fork, 20) for _ in range(args.runs)]
        print(
            f"minimal attempt {name:5s} {statistics.median(ms):7.1f} ms  "
            f"(runs: {', '.join(f'{m:.1f}' for m in ms)})"
        )
    print(
        f"(spawning an entry agent runs {' '.join(ENTRY_ARGV[1:])}, which imports the whole "
        "crashpoint.harness package first)"
    )


if __name__ == "__main__":
    main()
