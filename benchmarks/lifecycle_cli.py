#!/usr/bin/env python3
"""What one lifecycle command costs a shell agent: ``crashpoint checkpoints start|step|effect|
status|complete``, each a fresh process, as the agent runs them.

    python benchmarks/lifecycle_cli.py [--rounds N] [--steps N] [--dir DIR] [--json PATH]
                                       [--write-docs]

Each round runs a shell agent's whole run as separate processes, the way
``examples/shell-lifecycle/agent.sh`` does: ``start`` (a new run of N steps), then for each step
``status --next``, an ``effect`` (announced, with a payload), ``step`` (recorded, fdatasync'ed),
and finally ``complete``; beside them, interleaved, a bare interpreter (``python -c pass``: the
floor no command can go under) and one command of the full command line (``checkpoints
list``: every room loaded, for contrast). Each command is timed from spawn to exit (wall
clock), run the way the ``crashpoint`` console script runs it (the same stub pip writes), on
the filesystem of ``--dir`` (its fdatasync is part of ``step``). Figures are medians (and
p90) over all rounds, of the wall time and of the process's CPU time (user + system: what the
command itself costs, less sensitive than the wall time to other jobs on the machine). Also:
the modules a ``step`` loads. Benchmarks are not tests: nothing
here asserts a timing (tests/contract/test_lean_lifecycle.py keeps the import set small).
``--write-docs`` stores the result in benchmarks/results/lifecycle_cli.json; run.py renders it
into docs/BENCHMARKS.md (``python benchmarks/run.py --only lifecycle`` runs this and does both).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "lifecycle_cli.json")
TARGET_MS = 50.0  # issue 25: one lifecycle command costs at most this
#: what pip's console script ``crashpoint`` runs, for the checkout's entry point
#: (``[project.scripts]`` in its pyproject.toml: ``crashpoint = "MODULE:FUNC"``)
CONSOLE_SCRIPT = """\
import re
import sys
from {module} import {func}
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit({func}())
"""


def _entry_point(src: str) -> tuple[str, str]:
    """(module, function) of the ``crashpoint`` console script of the checkout whose ``src``
    folder is ``src`` (its pyproject.toml beside it); ``crashpoint.cli:main`` if none says."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(src)), "pyproject.toml")) as f:
            text = f.read()
    except OSError:
        return "crashpoint.cli", "main"
    scripts = text.partition("[project.scripts]")[2].partition("\n[")[0]
    for line in scripts.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "crashpoint" and ":" in value:
            module, _, func = value.strip().strip("\"'").partition(":")
            return module, func
    return "crashpoint.cli", "main"


ORDER = ("python -c pass", "start", "status", "effect", "step", "complete", "list (full CLI)")


def _env(src: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHPOINT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    return env


_CPU: list[float] = []  # the CPU time (user + system) of each process _timed ran


def _timed(argv: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> float:
    """Run ``argv``; its wall time from spawn to exit (its CPU time goes to ``_CPU``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, check=False)
    took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    _CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if proc.returncode not in ok:
        raise SystemExit(
            f"{' '.join(argv[2:])} exited {proc.returncode}: {proc.stderr.decode()[-400:]}"
        )
    return took


def _summary(times: dict[str, list[float]], cpu: dict[str, list[float]]) -> dict[str, Any]:
    out = {}
    for k, v in times.items():
        ms = sorted(1000 * x for x in v)
        out[k] = {
            "p50_ms": round(statistics.median(ms), 1),
            "p90_ms": round(ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))], 1),
            "cpu_p50_ms": round(1000 * statistics.median(cpu[k]), 1),
            "n": len(ms),
        }
    return out


def measure(rounds: int, steps: int, base: str, compare: str | None = None) -> dict[str, Any]:
    """The commands of this checkout (and, interleaved round by round, of ``compare``: another
    checkout's ``src`` folder, the same commands on a store of its own)."""
    variants = {"this": os.path.join(ROOT, "src"), **({"compare": compare} if compare else {})}
    names = [f"s{i}" for i in range(steps)]
    got: dict[str, Any] = {}
    for label, src in variants.items():
        env = _env(src)
        script = os.path.join(base, f"crashpoint-{label}")  # as pip writes it for that checkout
        module, func = _entry_point(src)
        with open(script, "w") as f:
            f.write(CONSOLE_SCRIPT.format(module=module, func=func))
        cp = [sys.executable, script, "checkpoints", "--store", os.path.join(base, label)]
        subprocess.run(  # writes the bytecode caches, as any first run does
            [*cp, "start", "warm-up", "--steps", "a"], env=env, check=True, capture_output=True
        )
        got[label] = {
            "env": env,
            "cp": cp,
            "times": {k: [] for k in ORDER},
            "cpu": {k: [] for k in ORDER},
            "trial": [],
        }

    def timed(v: dict[str, Any], name: str, argv: list[str]) -> float:
        took = _timed(argv, v["env"])
        v["times"][name].append(took)
        v["cpu"][name].append(_CPU[-1])
        return took

    for r in range(rounds):
        for v in got.values():
            cp, run, total = v["cp"], f"r{r}", 0.0
            timed(v, "python -c pass", [sys.executable, "-c", "pass"])
            total += timed(v, "start", [*cp, "start", run, "--steps", ",".join(names)])
            for i, name in enumerate(names):
                total += timed(v, "status", [*cp, "status", run, "--next"])
                payload = json.dumps({"to": "ops@example.com", "n": i})
                total += timed(v, "effect", [*cp, "effect", run, "email", "--payload", payload])
                result = json.dumps({"i": i})
                total += timed(v, "step", [*cp, "step", run, name, "--result", result])
            total += timed(v, "complete", [*cp, "complete", run, "--output", '{"done": true}'])
            v["trial"].append(total)
            timed(v, "list (full CLI)", [*cp, "list"])
    this = got["this"]
    code = (
        "import sys; before = set(sys.modules); from crashpoint.cli import main\n"
        "main(sys.argv[1:])\n"
        "new = sorted(set(sys.modules) - before); print(len(new)); "
        "print(len([m for m in new if m.startswith('crashpoint')]))"
    )
    env, cp = this["env"], this["cp"]
    subprocess.run(
        [*cp, "start", "mods", "--steps", "s0"], env=env, check=True, capture_output=True
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *cp[2:], "step", "mods", "s0"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    commands = _summary(this["times"], this["cpu"])
    result: dict[str, Any] = {
        "commands": commands,
        "trial_p50_ms": round(1000 * statistics.median(this["trial"]), 1),
        "trial_commands": 2 + 3 * steps,
        "step_modules": int(out[-2]),
        "step_crashpoint_modules": int(out[-1]),
        "target_ms": TARGET_MS,
        "step_within_target": commands["step"]["p50_ms"] <= TARGET_MS,
    }
    if compare:
        c = got["compare"]
        result["compare"] = {
            "src": compare,
            "label": compare,
            "commands": _summary(c["times"], c["cpu"]),
            "trial_p50_ms": round(1000 * statistics.median(c["trial"]), 1),
        }
    return result


def _machine() -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return {
        "cpu": cpu or platform.processor(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def _fs_type(path: str) -> str:
    try:
        best, kind = "", "?"
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and path.startswith(parts[1]) and len(parts[1]) > len(best):
                    best, kind = parts[1], parts[2]
        return kind
    except OSError:
        return "?"


def saved_markdown() -> list[str]:
    """The section docs/BENCHMARKS.md shows for the last saved run ([] if there is none)."""
    if not os.path.exists(RESULTS):
        return []
    with open(RESULTS) as f:
        r = json.load(f)
    m = r["machine"]
    c = r["commands"]
    lines = [
        "",
        "## Lifecycle commands: what a shell agent pays per command",
        "",
        f"Each `crashpoint checkpoints ...` command in a fresh process, spawn to exit, run as the "
        f"`crashpoint` console script runs it; {r['rounds']} rounds of a {r['steps']}-step run "
        f"(per step: `status --next`, `effect`, `step`), store on `{r['filesystem']}` (`step` "
        f"fdatasyncs). Measured {r['date']} on {m['cpus']} CPUs ({m['cpu']}), Python "
        f"{m['python']}, load average (1, 5, 15 min) {_load(m['load_start'])} at start and "
        f"{_load(m['load_end'])} at end. "
        "Reproduce: `python benchmarks/lifecycle_cli.py --write-docs` (or `python "
        "benchmarks/run.py --only lifecycle`).",
        "",
        "| command | wall p50 (ms) | wall p90 (ms) | CPU p50 (ms) | runs |"
        + (" before: wall p50 (ms) | before: CPU p50 (ms) |" if "compare" in r else ""),
        "|---|---:|---:|---:|---:|" + ("---:|---:|" if "compare" in r else ""),
    ]
    for name in ORDER:
        row = c[name]
        line = (
            f"| `{name}` | {row['p50_ms']} | {row['p90_ms']} | {row.get('cpu_p50_ms', '-')} "
            f"| {row['n']} |"
        )
        if "compare" in r:
            old = r["compare"]["commands"][name]
            line += f" {old['p50_ms']} | {old['cpu_p50_ms']} |"
        lines.append(line)
    if "compare" in r:
        lines += [
            "",
            f"*Before*: the same commands of another checkout ({r['compare']['label']}), run "
            "in the same rounds, interleaved, on a store of their own (`--compare SRC`); its "
            f"{r['steps']}-step shell run cost {r['compare']['trial_p50_ms']} ms (p50).",
        ]
    verdict = "met" if r["step_within_target"] else "**missed**"
    lines += [
        "",
        f"A `step` loads {r['step_modules']} modules ({r['step_crashpoint_modules']} of "
        f"crashpoint's); a whole {r['steps']}-step run of the shell agent "
        f"({r['trial_commands']} commands) costs {r['trial_p50_ms']} ms (p50). Target: a `step` "
        f"in at most {r['target_ms']:g} ms, {verdict} ({c['step']['p50_ms']} ms p50, of which "
        f"the bare interpreter, `python -c pass`, takes {c['python -c pass']['p50_ms']} ms on "
        "this machine at this load).",
        "",
    ]
    return lines


def _load(xs: list[float]) -> str:
    return " / ".join(f"{x:g}" for x in xs)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    ap.add_argument("--steps", type=int, default=3, help="steps of each run (default 3)")
    ap.add_argument(
        "--dir",
        default=os.path.join(HERE, ".work"),
        help="where the store is written (its filesystem's fdatasync is part of `step`)",
    )
    ap.add_argument(
        "--compare",
        metavar="SRC",
        help="also run another checkout's commands (its src folder), interleaved: before/after",
    )
    ap.add_argument(
        "--compare-label",
        metavar="TEXT",
        help="how the docs name the --compare checkout (default: its path)",
    )
    ap.add_argument("--json", metavar="PATH", help="also write the result here")
    ap.add_argument(
        "--write-docs",
        action="store_true",
        help="save benchmarks/results/lifecycle_cli.json (run.py renders it into the docs)",
    )
    args = ap.parse_args()
    if not 1 <= args.rounds <= 100 or not 1 <= args.steps <= 50:
        ap.error("--rounds must be 1-100 and --steps 1-50")
    os.makedirs(args.dir, exist_ok=True)
    base = tempfile.mkdtemp(dir=args.dir)
    load_start = [round(x, 2) for x in os.getloadavg()]
    try:
        result = measure(args.rounds, args.steps, base, args.compare)
        if args.compare and args.compare_label:
            result["compare"]["label"] = args.compare_label
    finally:
        shutil.rmtree(base, ignore_errors=True)
    machine = _machine()
    machine["load_start"] = load_start
    machine["load_end"] = machine.pop("load")
    result.update(
        rounds=args.rounds,
        steps=args.steps,
        filesystem=_fs_type(os.path.abspath(args.dir)),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        machine=machine,
    )
    width = max(map(len, ORDER))
    for title, rows in [("this checkout", result["commands"])] + (
        [(f"compare: {args.compare}", result["compare"]["commands"])] if args.compare else []
    ):
        print(title)
        for name in ORDER:
            row = rows[name]
            print(
                f"  {name:<{width}}  p50 {row['p50_ms']:7.1f} ms   p90 {row['p90_ms']:7.1f} ms   "
                f"CPU p50 {row['cpu_p50_ms']:6.1f} ms"
            )
    print(
        f"step: {result['step_modules']} modules loaded ({result['step_crashpoint_modules']} "
        f"crashpoint); a {args.steps}-step shell run: {result['trial_p50_ms']} ms; target "
        f"{TARGET_MS:g} ms per step: {'met' if result['step_within_target'] else 'MISSED'}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
    if args.write_docs:
        os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
        with open(RESULTS, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
