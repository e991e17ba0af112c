#!/usr/bin/env python3
"""LangGraph checkpointers side by side: CrashpointSaver vs SqliteSaver, one run, one machine.

    python benchmarks/checkpointers.py [--quick] [--dir DIR] [--steps N] [--rounds R]

The same graph on each: one node looping N times, the state growing 200 B a step (a list
channel with an add reducer, as chat histories grow), ``durability="sync"`` (each step's
checkpoint is written before the next starts). Per checkpointer, in interleaved rounds:

* step cost: (time with the saver - time without a checkpointer) / N, the median of rounds;
* bytes per step: bytes the process passed to write syscalls (/proc/self/io ``wchar``: SQLite's
  C writes count too) / N, and the bytes left on disk;
* resume: a fresh saver object opens the folder and reads the thread's last state.

Writes benchmarks/results/checkpointers.json and prints a Markdown table. Also run by
``python benchmarks/run.py --only checkpointers``. Not a test: nothing asserts a timing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
PAYLOAD = "x" * 200


def wchar() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def dir_size(path: str) -> int:
    total = 0
    for dp, _d, files in os.walk(path):
        for n in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dp, n)).st_size
    return total


def graph(steps: int) -> Any:
    import operator
    from typing import Annotated, TypedDict

    from langgraph.graph import END, StateGraph

    S = TypedDict("S", {"items": Annotated[list[str], operator.add], "n": int})  # noqa: UP013

    def node(s: Any) -> dict[str, Any]:
        return {"items": [PAYLOAD], "n": s["n"] + 1}

    g = StateGraph(S)
    g.add_node("step", node)
    g.set_entry_point("step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= steps else "step")
    return g


class Sqlite:
    name = "SqliteSaver"

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, "lg.sqlite")

    def open(self) -> Any:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        return SqliteSaver(self.conn)

    def close(self, saver: Any) -> None:
        self.conn.close()


class Ours:
    name = "CrashpointSaver"

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, "cp")

    def open(self) -> Any:
        from crashpoint.adapters.langgraph_saver import CrashpointSaver

        return CrashpointSaver(self.path)

    def close(self, saver: Any) -> None:
        saver.close()


def one(kind: type, work: str, steps: int, base: float) -> dict[str, float]:
    folder = tempfile.mkdtemp(dir=work)
    try:
        cell = kind(folder)
        g = graph(steps)
        cfg: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": steps + 10}
        saver = cell.open()
        w0 = wchar()
        t = time.perf_counter()
        out = g.compile(checkpointer=saver).invoke({"items": [], "n": 0}, cfg, durability="sync")
        took = time.perf_counter() - t
        written = wchar() - w0
        cell.close(saver)
        t = time.perf_counter()
        saver = cell.open()
        state = g.compile(checkpointer=saver).get_state(cfg).values
        resume = time.perf_counter() - t
        cell.close(saver)
        if state != out or len(out["items"]) != steps:
            raise RuntimeError(f"{cell.name}: the state read back differs from the state written")
        return {
            "step_s": max(0.0, (took - base) / steps),
            "bytes_per_step": written / steps,
            "disk_bytes": dir_size(folder),
            "resume_s": resume,
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def baseline(steps: int) -> float:
    g = graph(steps).compile()
    t = time.perf_counter()
    g.invoke({"items": [], "n": 0}, {"recursion_limit": steps + 10})
    return time.perf_counter() - t


def fs_type(path: str) -> str:
    best, kind = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and path.startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


def run(work: str, steps: int, rounds: int) -> dict[str, Any]:
    from importlib.metadata import version

    samples: dict[str, list[dict[str, float]]] = {"CrashpointSaver": [], "SqliteSaver": []}
    for r in range(rounds):
        base = baseline(steps)
        order = [Ours, Sqlite] if r % 2 == 0 else [Sqlite, Ours]
        for kind in order:
            print(
                f"round {r + 1}/{rounds}: {kind.name} x {steps} steps ...",
                file=sys.stderr,
                flush=True,
            )
            samples[kind.name].append(one(kind, work, steps, base))
    med = {
        name: {k: statistics.median(s[k] for s in xs) for k in xs[0]}
        for name, xs in samples.items()
    }
    ours, sq = med["CrashpointSaver"], med["SqliteSaver"]
    cpu = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    return {
        "steps": steps,
        "rounds": rounds,
        "payload_bytes": len(PAYLOAD),
        "medians": med,
        "ratios": {
            "step_cost_sqlite_over_ours": round(sq["step_s"] / max(ours["step_s"], 1e-9), 2),
            "bytes_sqlite_over_ours": round(sq["bytes_per_step"] / ours["bytes_per_step"], 1),
            "resume_sqlite_over_ours": round(sq["resume_s"] / max(ours["resume_s"], 1e-9), 2),
        },
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": cpu,
            "kernel": platform.release(),
            "fs": fs_type(os.path.abspath(work)),
            "python": platform.python_version(),
            "langgraph": version("langgraph"),
            "langgraph-checkpoint-sqlite": version("langgraph-checkpoint-sqlite"),
        },
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(r: dict[str, Any]) -> str:
    m = r["medians"]
    rows = [
        ("step cost, ms (saver's share of a step)", "step_s", 1e3, 3),
        ("bytes written per step", "bytes_per_step", 1, 0),
        ("bytes on disk after the run", "disk_bytes", 1, 0),
        ("resume (open + read last state), ms", "resume_s", 1e3, 1),
    ]
    out = [
        f"{r['steps']} steps of {r['payload_bytes']} B, durability sync, median of "
        f"{r['rounds']} interleaved rounds; {r['date']}; {r['machine']['cpus']} CPUs "
        f"({r['machine']['cpu']}), kernel {r['machine']['kernel']}, {r['machine']['fs']}, "
        f"Python {r['machine']['python']}, langgraph {r['machine']['langgraph']}, "
        f"langgraph-checkpoint-sqlite {r['machine']['langgraph-checkpoint-sqlite']}.",
        "",
        "| metric | CrashpointSaver | SqliteSaver | SqliteSaver / ours |",
        "|---|---:|---:|---:|",
    ]
    for label, key, scale, nd in rows:
        a, b = m["CrashpointSaver"][key] * scale, m["SqliteSaver"][key] * scale
        ratio = f"{b / a:.2f}" if a else "-"
        out.append(f"| {label} | {a:,.{nd}f} | {b:,.{nd}f} | {ratio} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="200 steps, 3 rounds")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--dir", default=os.path.join(HERE, ".work"))
    args = ap.parse_args(argv)
    steps = args.steps or (200 if args.quick else 1000)
    rounds = args.rounds or (3 if args.quick else 5)
    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(dir=args.dir)
    try:
        r = run(work, steps, rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "checkpointers.json"), "w") as f:
        json.dump(r, f, indent=2, sort_keys=True)
    print(markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
