"""What the pytest plugin costs a project that does not use it (issue 24, item 4).

    python benchmarks/plugin_overhead.py [--runs 15] [--json PATH]

(the alone pair below runs 3 times as often as ``--runs``: its runs are short)

Writes a one-test project (``pytest.ini`` with ``filterwarnings = error``, one test that uses
no crashpoint fixture or marker) in a temporary folder and times ``python -m pytest`` in a
fresh interpreter, with the plugin and without it, alternating the two so that the machine's
load falls on both alike. Two pairs, interleaved run by run:

- ``installed``: every plugin of this environment loads (pytest's entry points), the plugin
  off with ``-p no:crashpoint``: what a project in this environment pays;
- ``alone``: ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, pytest with the plugin alone
  (``PYTEST_PLUGINS=crashpoint.pytest_plugin``) against pytest with an empty plugin module
  named the same way (pytest's cost of finding a named plugin falls on both sides): the
  plugin's own cost, not diluted by the other plugins' start-up (the stricter reading of the
  5% target). ``-p crashpoint.pytest_plugin`` against nothing would charge the plugin with
  pytest's scan of every distribution's entry points that ``-p`` makes.

Prints, and with ``--json`` writes, the median wall time and the median CPU time (user +
system of the child: less sensitive to other jobs) of each, their ratios (target: within 5%;
also the ratio of the fastest runs, the least disturbed by other jobs on a shared machine),
the crashpoint modules the plugin's start loads, and whether the run with the plugin printed
anything the run without it did not (timings aside). Bytecode is cached (the project's own and
the installed packages'), as after a first run. ``benchmarks/run.py`` runs this (``--only
plugin``) and renders the result into docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
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


def measure(runs: int) -> dict[str, Any]:
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
        wall: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        printed: dict[str, set[str]] = {name: set() for name in PAIRS}
        for r in range(runs * ALONE_TIMES):
            for name, (env, with_, env_without, without) in PAIRS.items():
                if name != "alone" and r % ALONE_TIMES:
                    continue  # the alone pair is cheap: it runs ALONE_TIMES as often
                sides = [("with", env, with_), ("without", env_without, without)]
                outs: dict[str, str] = {}
                for side, e, argv in sides if r % 2 == 0 else sides[::-1]:  # alternate
                    t, c, outs[side] = _run(folder, e, *argv)
                    wall.setdefault(f"{name}/{side}", []).append(t)
                    cpu.setdefault(f"{name}/{side}", []).append(c)
                printed[name] |= set(_said(outs["with"])) - set(_said(outs["without"]))
        modules = _modules(folder)
    result: dict[str, Any] = {
        "runs": runs,
        "alone_runs": runs * ALONE_TIMES,
        "target": TARGET,
        "modules": modules,
        "plugins": _plugins(),
        "python": sys.version.split()[0],
    }
    for name in PAIRS:
        w = {side: statistics.median(wall[f"{name}/{side}"]) for side in ("with", "without")}
        c = {side: statistics.median(cpu[f"{name}/{side}"]) for side in ("with", "without")}
        lo = {side: min(wall[f"{name}/{side}"]) for side in ("with", "without")}
        result[name] = {
            "with_ms": round(w["with"] * 1000, 1),
            "without_ms": round(w["without"] * 1000, 1),
            "ratio": round(w["with"] / w["without"], 3),
            # the fastest run of each: what is left when no other job got in the way
            "min_ratio": round(lo["with"] / lo["without"], 3),
            "cpu_with_ms": round(c["with"] * 1000, 1),
            "cpu_without_ms": round(c["without"] * 1000, 1),
            "cpu_ratio": round(c["with"] / c["without"], 3) if c["without"] else None,
            "printed": sorted(printed[name])[:5],
        }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="timed runs of each (default 15)")
    ap.add_argument("--json", metavar="PATH", help="also write the result here as JSON")
    a = ap.parse_args()
    if not 1 <= a.runs <= 200:
        ap.error(f"--runs must be between 1 and 200, got {a.runs}")
    r = measure(a.runs)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s), {a.runs} runs each "
        f"({r['alone_runs']} of the alone pair)"
    )
    for name, label in (
        ("installed", "every installed plugin, with / -p no:crashpoint"),
        ("alone", "pytest with the plugin alone / with an empty plugin"),
    ):
        v = r[name]
        print(
            f"{label}: wall {v['with_ms']:.1f} / {v['without_ms']:.1f} ms (ratio {v['ratio']}, "
            f"of the fastest runs {v['min_ratio']}), "
            f"CPU {v['cpu_with_ms']:.1f} / {v['cpu_without_ms']:.1f} ms (ratio "
            f"{v['cpu_ratio']}); printed: {v['printed'] or 'nothing'}"
        )
    print(f"target: ratio <= {TARGET}; crashpoint modules loaded: {', '.join(r['modules'])}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
