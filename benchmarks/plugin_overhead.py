"""What the pytest plugin costs a project that does not use it (issue 24, item 4).

    python benchmarks/plugin_overhead.py [--runs 20] [--max-pairs 40] [--ci 3] [--json PATH]

(the alone pair below runs 3 times as often as the installed one: its runs are short)

Writes a one-test project (``pytest.ini`` with ``filterwarnings = error``, one test that uses
no crashpoint fixture or marker) in a temporary folder and times ``python -m pytest`` in a
fresh interpreter, with the plugin and without it, in pairs: one run with, one without, back
to back, the order alternating pair by pair (with-without, without-with: ABBA), so that a drift
of the machine's load falls on both sides alike. Two kinds of pair, interleaved:

- ``installed``: every plugin of this environment loads (pytest's entry points), the plugin
  off with ``-p no:crashpoint``: what a project in this environment pays;
- ``alone``: ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, pytest with the plugin alone
  (``PYTEST_PLUGINS=crashpoint.pytest_plugin``) against pytest with an empty plugin module
  named the same way (pytest's cost of finding a named plugin falls on both sides): the
  plugin's own cost, not diluted by the other plugins' start-up (the stricter reading of the
  5% target). ``-p crashpoint.pytest_plugin`` against nothing would charge the plugin with
  pytest's scan of every distribution's entry points that ``-p`` makes.

Prints, and with ``--json`` writes, for each kind the median of the pairs' own ratios (with /
without) of wall time and of CPU time (user + system of the child, from ``RUSAGE_CHILDREN``:
less sensitive to other jobs), each with its 95% interval (the sign test's order statistics:
no resampling, no assumption of normality); target: within 5%. At least ``--runs`` pairs, then
more, up to ``--max-pairs``, until every interval reaches no further than ``--ci`` percent from
its median (``converged`` says whether they all did). Beside them: the median times of each
side, the ratio of the fastest runs (the least disturbed by other jobs on a shared machine),
the crashpoint modules the plugin's start loads, and whether the run with the plugin printed
anything the run without it did not (timings aside). Bytecode is cached (the project's own and
the installed packages'), as after a first run. ``benchmarks/run.py`` runs this (``--only
plugin``) and renders the result into docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

#: a plugin module that does nothing, written into the project: the "alone" pair's baseline
EMPTY = "bench_empty_plugin"
NO_AUTOLOAD = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
#: the pairs: name -> (environment with the plugin, argv with it, environment without, argv)
PAIRS: dict[str, tuple[dict[str, str], tuple[str, ...], dict[str, str], tuple[str, ...]]] = {
    "installed": ({}, (), {}, ("-p", "no:crashpoint")),
    # both sides name one plugin in PYTEST_PLUGINS: pytest's own cost of finding a named
    # plugin (it reads every distribution's entry points) falls on both, not on crashpoint
    "alone": (
        {**NO_AUTOLOAD, "PYTEST_PLUGINS": "crashpoint.pytest_plugin"},
        (),
        {**NO_AUTOLOAD, "PYTEST_PLUGINS": EMPTY},
        (),
    ),
}
TARGET = 1.05
#: pairs are added (past ``--runs``, up to ``--max-pairs``) until every 95% interval of a
#: median ratio reaches no further than this from it
CI_TARGET = 0.03
MAX_PAIRS = 40
#: the fewest pairs with a 95% sign-test interval (2 / 2**6 < 0.05)
MIN_CI_PAIRS = 6
SIDES = ("with", "without")
#: the alone pair runs this many times as often as the installed one: each of its runs is
#: short (a bare pytest), so more of them cost little and steady its median
ALONE_TIMES = 3
_TIMING = re.compile(r"\d+(\.\d+)?s\b")


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CRASHPOINT_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra)
    return env


def _run(folder: str, extra_env: dict[str, str], *argv: str) -> tuple[float, float, str]:
    """One ``python -m pytest`` in ``folder``: (wall seconds, CPU seconds, its output)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv],
        cwd=folder,
        env=_env(extra_env),
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(
            f"plugin_overhead: `pytest {' '.join(argv)}` in {folder} exited {out.returncode}: "
            f"{(out.stdout + out.stderr)[-600:]}"
        )
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return took, cpu, out.stdout + out.stderr


def _said(text: str) -> list[str]:
    """The output's lines, timings blanked and pytest's ``plugins:`` line left out (pytest
    lists every installed plugin there, crashpoint among them: not the plugin's own output)."""
    return [_TIMING.sub("<t>", ln) for ln in text.splitlines() if not ln.startswith("plugins:")]


def _modules(folder: str) -> list[str]:
    """The crashpoint modules loaded by the end of a session with the plugin (alone): the run
    in process, then ``sys.modules``."""
    code = (
        "import sys, pytest\n"
        "rc = pytest.main(['-q', '-p', 'no:cacheprovider'])\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'crashpoint')))\n"
        "sys.exit(int(rc))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder,
        env=_env(PAIRS["alone"][0]),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"plugin_overhead: pytest.main in {folder} failed: {out.stdout[-600:]}")
    return out.stdout.strip().splitlines()[-1].split()


def _plugins() -> list[str]:
    """The pytest plugins this environment installs (their ``pytest11`` entry points)."""
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group="pytest11")})


def median_ci(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """The median of ``xs`` and a distribution-free confidence interval for it at ``level``:
    the order statistics ``x(k)``, ``x(n+1-k)`` with the largest ``k`` whose binomial tail
    ``2 * P(Bin(n, 1/2) < k)`` is at most ``1 - level`` (the sign test's interval; no
    resampling, no normality). Below 6 values no 95% interval exists: (min, max) then."""
    s = sorted(xs)
    n = len(s)
    med = statistics.median(s)
    k = 0
    tail = 0.0
    for j in range(n // 2 + 1):  # tail = P(Bin(n, 1/2) <= j - 1)
        if 2 * tail > 1 - level:
            break
        k = j
        tail += math.comb(n, j) / 2**n
    if k == 0:
        return med, s[0], s[-1]
    return med, s[k - 1], s[n - k]


def _halfwidth(ci: tuple[float, float, float]) -> float:
    """How far the interval reaches from the median, as a fraction of it (the wider side)."""
    med, lo, hi = ci
    return max(hi / med - 1, 1 - lo / med) if med else math.inf


def measure(runs: int, max_pairs: int = MAX_PAIRS, ci_target: float = CI_TARGET) -> dict[str, Any]:
    """Paired runs: each pair is one run with the plugin and one without, back to back, their
    order alternating pair by pair (with, without; without, with: ABBA), so a drift of the
    machine's load falls on both sides alike. The ratio is the median of the pairs' own ratios,
    with its 95% interval; at least ``runs`` pairs, then more, up to ``max_pairs``, until every
    interval (wall and CPU time of both pairs) reaches within ``ci_target`` of its median."""
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as folder:
        with open(os.path.join(folder, "pytest.ini"), "w") as f:
            f.write("[pytest]\nfilterwarnings = error\n")
        with open(os.path.join(folder, "test_plain.py"), "w") as f:
            f.write("def test_sum():\n    assert sum([1, 2]) == 3\n")
        with open(os.path.join(folder, f"{EMPTY}.py"), "w") as f:
            f.write('"""A pytest plugin that does nothing (the baseline of the alone pair)."""\n')
        for env, with_, env_without, without in PAIRS.values():  # warm-up: bytecode, cache
            _run(folder, env, *with_)
            _run(folder, env_without, *without)
        # per pair name: the runs' (with, without) wall and CPU seconds, pair by pair
        wall: dict[str, list[tuple[float, float]]] = {name: [] for name in PAIRS}
        cpu: dict[str, list[tuple[float, float]]] = {name: [] for name in PAIRS}
        printed: dict[str, set[str]] = {name: set() for name in PAIRS}
        widest = math.inf
        r = 0
        while r < max_pairs and (r < runs or widest > ci_target):
            for name, (env, with_, env_without, without) in PAIRS.items():
                for _ in range(ALONE_TIMES if name == "alone" else 1):  # alone: short runs
                    n = len(wall[name])
                    sides = [("with", env, with_), ("without", env_without, without)]
                    took: dict[str, tuple[float, float, str]] = {}
                    for side, e, argv in sides if n % 2 == 0 else sides[::-1]:  # ABBA
                        took[side] = _run(folder, e, *argv)
                    wall[name].append((took["with"][0], took["without"][0]))
                    cpu[name].append((took["with"][1], took["without"][1]))
                    printed[name] |= set(_said(took["with"][2])) - set(_said(took["without"][2]))
            r += 1
            if r >= MIN_CI_PAIRS:  # fewer pairs have no 95% interval
                widest = max(
                    _halfwidth(median_ci([a / b for a, b in xs if b]))
                    for series in (wall, cpu)
                    for xs in series.values()
                )
        modules = _modules(folder)
    result: dict[str, Any] = {
        "runs": r,  # pairs of the installed pair (each: one run with, one without)
        "alone_runs": len(wall["alone"]),
        "target": TARGET,
        "ci_target": ci_target,
        "converged": widest <= ci_target,
        "modules": modules,
        "plugins": _plugins(),
        "python": sys.version.split()[0],
        "statistic": (
            "median of per-pair ratios (ABBA order), 95% sign-test interval; with/without "
            "medians beside it; CPU: the child's user + system time (RUSAGE_CHILDREN)"
        ),
    }
    for name in PAIRS:
        w_ratio = median_ci([a / b for a, b in wall[name]])
        c_ratio = median_ci([a / b for a, b in cpu[name] if b])
        w = {side: statistics.median(x[i] for x in wall[name]) for i, side in enumerate(SIDES)}
        c = {side: statistics.median(x[i] for x in cpu[name]) for i, side in enumerate(SIDES)}
        lo = {side: min(x[i] for x in wall[name]) for i, side in enumerate(SIDES)}
        result[name] = {
            "pairs": len(wall[name]),
            "with_ms": round(w["with"] * 1000, 1),
            "without_ms": round(w["without"] * 1000, 1),
            "ratio": round(w_ratio[0], 3),
            "ratio_ci": [round(w_ratio[1], 3), round(w_ratio[2], 3)],
            # the fastest run of each: what is left when no other job got in the way
            "min_ratio": round(lo["with"] / lo["without"], 3),
            "cpu_with_ms": round(c["with"] * 1000, 1),
            "cpu_without_ms": round(c["without"] * 1000, 1),
            "cpu_ratio": round(c_ratio[0], 3),
            "cpu_ratio_ci": [round(c_ratio[1], 3), round(c_ratio[2], 3)],
            "printed": sorted(printed[name])[:5],
        }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--runs", type=int, default=20, help="pairs of runs at least (default 20; see --ci)"
    )
    ap.add_argument(
        "--max-pairs",
        type=int,
        default=MAX_PAIRS,
        help=f"pairs at most, while an interval is wider than --ci (default {MAX_PAIRS})",
    )
    ap.add_argument(
        "--ci",
        type=float,
        default=CI_TARGET * 100,
        metavar="PERCENT",
        help=f"add pairs until every 95%% interval is within this of its median "
        f"(default {CI_TARGET * 100:g})",
    )
    ap.add_argument("--json", metavar="PATH", help="also write the result here as JSON")
    a = ap.parse_args()
    if not 1 <= a.runs <= 200:
        ap.error(f"--runs must be between 1 and 200, got {a.runs}")
    if not a.runs <= a.max_pairs <= 400:
        ap.error(f"--max-pairs must be between --runs ({a.runs}) and 400, got {a.max_pairs}")
    if not 0 < a.ci < 100:
        ap.error(f"--ci must be a percentage between 0 and 100, got {a.ci}")
    r = measure(a.runs, a.max_pairs, a.ci / 100)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s), {r['runs']} pairs "
        f"({r['alone_runs']} of the alone pair), ABBA order; the ratio is the median of the "
        "pairs' own ratios [95% interval]"
        + ("" if r["converged"] else f" (not every interval within ±{a.ci:g}% by {a.max_pairs})")
    )
    for name, label in (
        ("installed", "every installed plugin, with / -p no:crashpoint"),
        ("alone", "pytest with the plugin alone / with an empty plugin"),
    ):
        v = r[name]
        print(
            f"{label}: wall {v['with_ms']:.1f} / {v['without_ms']:.1f} ms, ratio {v['ratio']} "
            f"[{v['ratio_ci'][0]}, {v['ratio_ci'][1]}] (of the fastest runs {v['min_ratio']}); "
            f"CPU {v['cpu_with_ms']:.1f} / {v['cpu_without_ms']:.1f} ms, ratio {v['cpu_ratio']} "
            f"[{v['cpu_ratio_ci'][0]}, {v['cpu_ratio_ci'][1]}]; "
            f"printed: {v['printed'] or 'nothing'}"
        )
    print(f"target: ratio <= {TARGET}; crashpoint modules loaded: {', '.join(r['modules'])}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
