#!/usr/bin/env python3
"""crashpoint benchmarks: one entry point, ratios measured in one run on one machine.

    python benchmarks/run.py [--quick] [--no-peers] [--dir DIR] [--only powerloss]

Peers (LangGraph's SqliteSaver, DBOS, ckpt-chaos) come from benchmarks/requirements.txt and
are installed into benchmarks/.venv, never into the project's runtime dependencies: without them
importable, this script creates that venv, installs this checkout into it (editable) beside the
peers, and runs itself again there. It works from any interpreter, a virtual environment
included (a venv made from a venv does not see the outer one's packages, so crashpoint is
installed, not borrowed). ``--only powerloss`` runs the power-loss row alone (it needs only
ckpt-chaos), merges it into benchmarks/results/latest.json and rewrites docs/BENCHMARKS.md;
``--only pg`` runs benchmarks/pg_store.py (crashpoint's PostgresStore vs LangGraph's
PostgresSaver vs DBOS on one real PostgreSQL server; skipped with the reason when no server can
be started), which a full run also does unless ``--no-pg``.
Variants run in interleaved rounds on the same filesystem; every figure is
a median (p50) or p99 over all rounds. Writes benchmarks/results/latest.json and
docs/BENCHMARKS.md. Benchmarks are not tests: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(HERE, ".venv")
PAYLOAD = "x" * 200  # what one step adds to the state
NAIVE_AGENT = os.path.join(HERE, "naive_agent.py")  # the power-loss row's agent, for both tools
SECTIONS = ("powerloss", "pg", "checkpointers")  # what --only can run alone


# -- helpers ----------------------------------------------------------------------------------


def wchar() -> int:
    """Bytes this process passed to write-like syscalls (/proc/self/io): counts every writer."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def stats(xs: list[float]) -> dict[str, float]:
    return {
        "p50_us": round(statistics.median(xs) * 1e6, 2),
        "p99_us": round(pct(xs, 99) * 1e6, 2),
        "n": len(xs),
    }


def dir_size(path: str) -> int:
    total = 0
    for dp, _d, files in os.walk(path):
        for n in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dp, n)).st_size
    return total


def fs_type(path: str) -> str:
    best, kind = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and path.startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


# -- 1. durable step cost -------------------------------------------------------------------------


def step_cost(work: str, rounds: int, steps: int, peers: bool) -> dict[str, Any]:
    from crashpoint.checkpoint import Store, open_run
    from crashpoint.checkpoint._record import encode, encode_json

    record = {"t": "step", "pos": 0, "name": "step", "kind": "step", "result": PAYLOAD}
    frame = encode(encode_json({"s": 1, "g": 1, "d": record}))
    samples: dict[str, list[float]] = {}

    def add(name: str, xs: list[float]) -> None:
        samples.setdefault(name, []).extend(xs)

    def limit(batch: int) -> list[float]:
        path = os.path.join(work, f"raw-{batch}.log")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        out = []
        try:
            for _ in range(steps // batch):
                t = time.perf_counter()
                for _ in range(batch):
                    os.write(fd, frame)
                os.fdatasync(fd)
                out.append((time.perf_counter() - t) / batch)
        finally:
            os.close(fd)
            os.unlink(path)
        return out

    def ours(durability: str, batch: int) -> list[float]:
        root = os.path.join(work, f"store-{batch}")
        with Store(root, durability=durability).open("run") as j:
            out = []
            for _ in range(steps // batch):
                t = time.perf_counter()
                for _ in range(batch):
                    j.append(record, redact=False)
                out.append((time.perf_counter() - t) / batch)
        shutil.rmtree(root)
        return out

    def ours_run() -> list[float]:
        """The product path: Run.step (probe no-op, redaction, step record, fdatasync)."""
        root = os.path.join(work, "runs")
        out = []
        with open_run(Store(root), "bench") as run:
            for i in range(steps):
                t = time.perf_counter()
                run.step(f"s{i}", lambda: PAYLOAD)
                out.append(time.perf_counter() - t)
        shutil.rmtree(root)
        return out

    variants: list[tuple[str, Callable[[], list[float]]]] = [
        ("limit", lambda: limit(1)),
        ("ours_always", lambda: ours("always", 1)),
        ("limit_batch10", lambda: limit(10)),
        ("ours_batch10", lambda: ours("batch(10)", 10)),
        ("ours_run_step", ours_run),
    ]
    if peers:
        variants += [
            ("sqlitesaver_step", lambda: sqlitesaver_steps(work, min(steps, 100))),
            ("dbos_step", lambda: dbos_steps(work, min(steps, 100))),
        ]
    for r in range(rounds):
        order = variants if r % 2 == 0 else list(reversed(variants))  # interleave, alternate
        for name, fn in order:
            add(name, fn())
    return {name: stats(xs) for name, xs in samples.items()}


def sqlitesaver_steps(work: str, steps: int) -> list[float]:
    """Per-step cost of a LangGraph graph of `steps` super-steps with SqliteSaver, sync
    durability, minus the same graph without a checkpointer; the state grows 200 B a step."""
    import operator
    import sqlite3
    from typing import Annotated, TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, StateGraph

    S = TypedDict("S", {"items": Annotated[list[str], operator.add], "n": int})  # noqa: UP013

    def node(s: Any) -> dict[str, Any]:
        return {"items": [PAYLOAD], "n": s["n"] + 1}

    g = StateGraph(S)
    g.add_node("step", node)
    g.set_entry_point("step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= steps else "step")
    path = os.path.join(work, "lg.sqlite")

    def run(saver: Any) -> float:
        app = g.compile(checkpointer=saver)
        t = time.perf_counter()
        kw: dict[str, Any] = {"durability": "sync"} if saver is not None else {}
        app.invoke(
            {"items": [], "n": 0},
            {"configurable": {"thread_id": "t"}, "recursion_limit": steps + 10},
            **kw,
        )
        return time.perf_counter() - t

    base = run(None)
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        with_saver = run(SqliteSaver(conn))
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(path + suffix)
    return [max(0.0, (with_saver - base) / steps)] * 1


def dbos_steps(work: str, steps: int) -> list[float]:
    """Per-step cost of DBOS steps in one workflow on its SQLite default, minus a plain loop."""
    from dbos import DBOS

    db = os.path.join(work, "dbos.sqlite")
    import logging

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(
        config={
            "name": "crashpoint-bench",
            "system_database_url": f"sqlite:///{db}",
            "log_level": "WARNING",
        }
    )
    try:
        DBOS.launch()

        @DBOS.step()
        def one(i: int) -> str:
            return PAYLOAD

        @DBOS.workflow()
        def flow(n: int) -> int:
            for i in range(n):
                one(i)
            return n

        t = time.perf_counter()
        for i in range(steps):
            one.__wrapped__(i) if hasattr(one, "__wrapped__") else PAYLOAD
        base = time.perf_counter() - t
        t = time.perf_counter()
        flow(steps)
        took = time.perf_counter() - t
    finally:
        DBOS.destroy()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(db + suffix)
    return [max(0.0, (took - base) / steps)]


# -- 2. growth, 3. resume ---------------------------------------------------------------------


def growth(work: str, sizes: list[int], peer_sizes: list[int], peers: bool) -> dict[str, Any]:
    from crashpoint.checkpoint import Durability, Store, open_run

    out: dict[str, Any] = {"ours": {}, "sqlitesaver": {}}
    for n in sizes:
        root = os.path.join(work, f"growth-{n}")
        w0 = wchar()
        store = Store(root, durability=Durability.batch(100))
        with open_run(store, "g") as run:
            for i in range(n):
                run.step(f"s{i}", lambda: PAYLOAD)
        written = wchar() - w0
        out["ours"][n] = {
            "bytes_written": written,
            "per_step": round(written / n, 1),
            "on_disk": dir_size(root),
            "content": n * len(PAYLOAD),
        }
        shutil.rmtree(root)
    if peers:
        for n in peer_sizes:
            w0 = wchar()
            sqlitesaver_steps(work, n)
            written = wchar() - w0
            out["sqlitesaver"][n] = {
                "bytes_written": written,
                "per_step": round(written / n, 1),
                "content": n * len(PAYLOAD),
            }
    return out


def resume(work: str, sizes: list[int], rounds: int) -> dict[str, Any]:
    """Open a run of N completed steps and replay to the next step (median of `rounds`)."""
    from crashpoint.checkpoint import Durability, Store, open_run

    out = {}
    for n in sizes:
        root = os.path.join(work, f"resume-{n}")
        store = Store(root, durability=Durability.batch(100))
        with open_run(store, "r") as run:
            for i in range(n):
                run.step(f"s{i}", lambda: PAYLOAD)
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            with open_run(Store(root), "r") as run:
                for i in range(n):
                    run.step(f"s{i}", lambda: None)  # replayed: the lambda is never called
                times.append(time.perf_counter() - t)
        out[n] = {
            "p50_ms": round(statistics.median(times) * 1000, 2),
            "max_ms": round(max(times) * 1000, 2),
        }
        shutil.rmtree(root)
    return out


# -- 4. harness throughput -----------------------------------------------------------------------


def harness(work: str, trials: int) -> dict[str, Any]:
    from crashpoint.harness import AgentSpec, Campaign, family_from_spec

    shm = "/dev/shm" if os.path.isdir("/dev/shm") else work
    out: dict[str, Any] = {"state_on": fs_type(shm)}
    fam = [family_from_spec({"kill": {"at": "random", "count": trials}})]
    spawn = AgentSpec(
        ("{python}", "-m", "crashpoint.agents.demo", "--state", "{state_dir}"), timeout=30
    )
    with tempfile.TemporaryDirectory(dir=shm) as d:
        camp = Campaign(spawn, fam, d, trials=trials, seed=1)
        golden = camp.runner().golden()
        t = time.perf_counter()
        res = camp.run(golden=golden)
        out["spawn_trials_per_s"] = round(len(res.trials) / (time.perf_counter() - t), 1)
        out["spawn_ok"] = res.ok
    try:
        from crashpoint.harness import Zygote
    except ImportError:
        out["fork_trials_per_s"] = None
        out["fork_note"] = "fork mode (crashpoint.harness._engine._zygote) not available"
    else:
        entry = AgentSpec(
            entry="crashpoint.agents.demo:main", args=("--state", "{state_dir}"), timeout=30
        )
        with tempfile.TemporaryDirectory(dir=shm) as d, Zygote([entry.entry]) as z:
            camp = Campaign(entry, fam, d, trials=trials, seed=1, launcher=z)
            golden = camp.runner().golden()
            t = time.perf_counter()
            res = camp.run(golden=golden)
            out["fork_trials_per_s"] = round(len(res.trials) / (time.perf_counter() - t), 1)
            out["fork_ok"] = res.ok
            t = time.perf_counter()
            res = Campaign(
                entry, [family_from_spec({"kill": {"at": "every-boundary"}})], d, seed=1, launcher=z
            ).run()  # golden run included
            out["systematic_sweep_fork_s"] = round(time.perf_counter() - t, 2)
            out["systematic_fork_ok"] = res.ok
    with tempfile.TemporaryDirectory(dir=shm) as d:
        t = time.perf_counter()
        res = Campaign(
            spawn, [family_from_spec({"kill": {"at": "every-boundary"}})], d, seed=1
        ).run()
        out["systematic_sweep_spawn_s"] = round(time.perf_counter() - t, 2)
        out["systematic_trials"] = len(res.trials)
        out["systematic_ok"] = res.ok
    return out


# -- 5. power loss: crash states judged per second, crashpoint vs ckpt-chaos -------------------


def agent_run(base: str) -> dict[str, Any]:
    """The unit both tools pay per run: one plain, fault-free run of the naive agent."""
    with tempfile.TemporaryDirectory(dir=base) as d:
        t = time.perf_counter()
        subprocess.run([sys.executable, NAIVE_AGENT, d], check=True, capture_output=True)
        return {
            "points": 1,
            "seconds": time.perf_counter() - t,
            "found": False,
            "verdicts": {},
            "example": "",
        }


def ckpt_chaos_round(base: str) -> dict[str, Any]:
    """One ``ckpt-chaos run --modes torn`` of the naive agent, in process (its CLI's own
    ``run_byo``, one job at a time; no result file, so its fastest configuration): the
    reference run, the control run, then per crash point (each open-for-write under ``{out}``)
    a run killed with the file cut to half its size, and a resume."""
    from pathlib import Path

    from ckpt_chaos.byo import run_byo

    with tempfile.TemporaryDirectory(dir=base) as d:
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            rows = run_byo(
                [sys.executable, NAIVE_AGENT, "{out}"],
                None,
                Path(d) / "run",
                modes=("torn",),
                max_points=40,
                timeout=60,
            )
        took = time.perf_counter() - t
    points = [r for r in rows if not r.label.startswith("no crash")]
    torn = [r for r in points if "state.json" in r.label and r.verdict != "PASS"]
    return {
        "points": len(points),
        "seconds": took,
        "found": bool(torn),
        "verdicts": dict(Counter(r.verdict for r in rows)),
        "example": f"{torn[0].label} -> {torn[0].verdict} ({torn[0].outcome.raised})"
        if torn
        else "",
    }


def crashpoint_round(base: str, fork: bool = False) -> dict[str, Any]:
    """One campaign of crashpoint's ``power_loss: {model: posix}`` family (systematic: every
    crash state of the golden run's trace) on the same agent, one trial at a time: the golden
    run under strace (always spawned), then per crash state one materialised folder, one
    resume, the usual checks. ``fork``: the resumes are forked from a warm zygote that imported
    ``naive_agent:run`` (its start is timed too) instead of spawned as the command line."""
    from crashpoint.harness import AgentSpec, Campaign, family_from_spec

    fam = family_from_spec({"power_loss": {"model": "posix"}})
    spec = (
        AgentSpec(entry="naive_agent:run", args=("{state_dir}",), cwd=HERE, timeout=60)
        if fork
        else AgentSpec(("{python}", NAIVE_AGENT, "{state_dir}"), timeout=60)
    )
    with tempfile.TemporaryDirectory(dir=base) as d, contextlib.ExitStack() as stack:
        t = time.perf_counter()
        launcher = None
        if fork:
            from crashpoint.harness import Zygote

            launcher = stack.enter_context(Zygote.for_agent(spec))
        res = Campaign(spec, [fam], d, name="powerloss", seed=1, launcher=launcher).run()
        took = time.perf_counter() - t
    ran = [x for x in res.trials if not x.skipped]
    torn = []
    for x in res.failures:
        text = x.plan.describe() + "\n" + "\n".join(str(c) for c in x.failed)
        if "state.json" in text and ("torn" in text or "empty" in text):
            torn.append(x)
    example = ""
    if torn:  # the state, the check it failed, and the barrier the hint names
        rc = torn[0].root_cause
        hint = rc.hint if rc is not None else ""
        barrier = hint.split("): ", 1)[-1].split("; then:", 1)[0]
        example = f"{torn[0].plan.describe()} -> {rc.name if rc else '?'} FAIL: {barrier}"
    return {
        "points": len(ran),
        "seconds": took,
        "found": bool(torn),
        "verdicts": dict(Counter(x.status for x in res.trials)),
        "skipped": [x.skipped for x in res.trials if x.skipped][:1],
        "golden_s": res.golden.duration,
        "trial_s": statistics.median(x.duration for x in ran) if ran else None,
        "resume_s": statistics.median(x.attempts[-1].duration for x in ran if x.attempts)
        if ran
        else None,
        "example": example[:300],
    }


def powerloss(work: str, rounds: int, with_peer: bool) -> dict[str, Any]:
    """Both tools on benchmarks/naive_agent.py in interleaved rounds (the order rotates each
    round), state on tmpfs where there is one. A rate is crash points (states) judged per
    second of the whole run, its fault-free reference/golden run included; medians over the
    rounds. crashpoint runs twice: spawned as the same command line ckpt-chaos runs, and in
    fork mode."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else work
    out: dict[str, Any] = {
        "state_on": fs_type(shm),
        "rounds": rounds,
        "agent": os.path.relpath(NAIVE_AGENT, ROOT),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
    }
    variants: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
        ("crashpoint", crashpoint_round),
        ("crashpoint_fork", functools.partial(crashpoint_round, fork=True)),
        ("agent_run", agent_run),
    ]
    if with_peer:
        variants.insert(1, ("ckpt_chaos", ckpt_chaos_round))
    else:
        out["ckpt_chaos"] = {"note": "ckpt-chaos not run (--no-peers)"}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    for r in range(rounds):
        k = r % len(variants)
        for name, fn in variants[k:] + variants[:k]:
            if name not in runs:
                continue
            try:
                runs[name].append(fn(shm))
            except Exception as exc:  # a tool that cannot run here is reported, not fatal
                out[name] = {"note": f"{type(exc).__name__}: {exc}"[:300]}
                del runs[name]
                continue
            x = runs[name][-1]
            print(
                f"    round {r + 1} {name}: {x['points']} points in {x['seconds']:.2f} s, "
                f"torn state reported: {x['found']}",
                flush=True,
            )

    def med(xs: list[dict[str, Any]], key: str) -> float | None:
        vals = [x[key] for x in xs if x.get(key) is not None]
        return round(statistics.median(vals), 3) if vals else None

    for name, xs in runs.items():
        rates = [x["points"] / x["seconds"] for x in xs if x["points"]]
        out[name] = {
            "points": xs[-1]["points"] if xs else 0,
            "per_s": round(statistics.median(rates), 2) if rates else None,
            "s_per_point": round(
                statistics.median(x["seconds"] / x["points"] for x in xs if x["points"]), 3
            )
            if rates
            else None,
            "run_s": med(xs, "seconds"),
        }
        if name == "agent_run":
            continue
        out[name].update(
            {
                "found_torn_state": all(x["found"] for x in xs) if xs else None,
                "found_in_rounds": f"{sum(x['found'] for x in xs)}/{len(xs)}",
                "verdicts": xs[-1]["verdicts"] if xs else {},
                "example": next((x["example"] for x in xs if x["example"]), ""),
            }
        )
        if name.startswith("crashpoint"):
            out[name].update(
                golden_s=med(xs, "golden_s"),
                trial_s=med(xs, "trial_s"),
                resume_s=med(xs, "resume_s"),
            )
            if xs and xs[-1].get("skipped"):
                out[name]["note"] = f"skipped: {xs[-1]['skipped'][0]}"
    peer = out.get("ckpt_chaos", {}).get("per_s")
    for name, key in (("crashpoint", "ratio"), ("crashpoint_fork", "ratio_fork")):
        ours = out.get(name, {}).get("per_s")
        out[key] = round(ours / peer, 2) if ours and peer else None
    return out


# -- driver ---------------------------------------------------------------------------------------


def peers_available(only: str | None = None) -> bool:
    """The peers the run needs are importable (``--only powerloss``: ckpt-chaos alone)."""
    import importlib.util

    if only == "pg":  # benchmarks/pg_store.py reports a missing peer as skipped
        return True
    needed = (
        ["ckpt_chaos"]
        if only == "powerloss"
        else ["dbos", "langgraph.checkpoint.sqlite", "ckpt_chaos"]
    )
    try:
        return all(importlib.util.find_spec(m) is not None for m in needed)
    except ImportError:  # a parent package is missing
        return False


def bootstrap(argv: list[str]) -> int:
    """Create benchmarks/.venv with the peers and run this script there."""
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        print(f"creating {VENV} for the peers (benchmarks/requirements.txt)...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run(
            [
                py,
                "-m",
                "pip",
                "install",
                "-q",
                "-e",
                ROOT,
                "-r",
                os.path.join(HERE, "requirements.txt"),
            ],
            check=True,
        )
    else:
        if (
            subprocess.run(
                [py, "-c", "import crashpoint"], capture_output=True, check=False
            ).returncode
            != 0
        ):  # a venv left by an older version
            subprocess.run([py, "-m", "pip", "install", "-q", "-e", ROOT], check=True)
        if (
            subprocess.run(
                [py, "-c", "import ckpt_chaos, langgraph.checkpoint.postgres"],
                capture_output=True,
                check=False,
            ).returncode
            != 0
        ):  # a peer added since it was made
            subprocess.run(
                [py, "-m", "pip", "install", "-q", "-r", os.path.join(HERE, "requirements.txt")],
                check=True,
            )
    return subprocess.run(
        [py, os.path.abspath(__file__), "--in-venv", *argv], check=False
    ).returncode


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("crashpoint", "langgraph", "langgraph-checkpoint-sqlite", "dbos", "ckpt-chaos"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "-"
    return out


def machine() -> dict[str, Any]:
    cpu = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release()}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer rounds and smaller N")
    ap.add_argument("--no-peers", action="store_true", help="skip LangGraph and DBOS")
    ap.add_argument(
        "--no-pg",
        action="store_true",
        help="skip the PostgreSQL comparison (benchmarks/pg_store.py)",
    )
    ap.add_argument(
        "--dir",
        default=os.path.join(HERE, ".work"),
        help="where the durable-write benchmarks write (its filesystem matters)",
    )
    ap.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--harness-only", nargs=2, metavar=("DIR", "TRIALS"), help=argparse.SUPPRESS)
    ap.add_argument("--powerloss-only", nargs=2, metavar=("DIR", "ROUNDS"), help=argparse.SUPPRESS)
    ap.add_argument(
        "--only",
        choices=SECTIONS,
        help="run only this section and merge it into benchmarks/results/latest.json "
        "(then rewrite docs/BENCHMARKS.md)",
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="only rewrite docs/BENCHMARKS.md from benchmarks/results/latest.json",
    )
    args = ap.parse_args()
    if args.render:
        with open(os.path.join(HERE, "results", "latest.json")) as f:
            results = json.load(f)
        with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as f:
            f.write(markdown(results))
        return 0
    if args.only == "checkpointers":  # LangGraph savers side by side (benchmarks/checkpointers.py)
        return subprocess.run(
            [
                sys.executable,
                os.path.join(HERE, "checkpointers.py"),
                *(["--quick"] if args.quick else []),
                "--dir",
                args.dir,
            ],
            check=False,
        ).returncode
    if args.harness_only:
        print(json.dumps(harness(args.harness_only[0], int(args.harness_only[1]))))
        return 0
    peers = not args.no_peers
    if args.powerloss_only:
        print(json.dumps(powerloss(args.powerloss_only[0], int(args.powerloss_only[1]), peers)))
        return 0
    if peers and not peers_available(args.only):
        if args.in_venv:
            print("peers still not importable in the venv; run with --no-peers", file=sys.stderr)
            return 2
        return bootstrap(sys.argv[1:])
    os.makedirs(args.dir, exist_ok=True)
    pl_rounds = 3 if args.quick else 5
    if args.only == "powerloss":
        return only_powerloss(args, pl_rounds, peers)
    if args.only == "pg":  # its own script: saves benchmarks/results/pg_store.json
        rc = run_pg_store(args.quick)
        latest = os.path.join(HERE, "results", "latest.json")
        if os.path.exists(latest):  # re-render, so the section lands where a full run puts it
            with open(latest) as f:
                results = json.load(f)
            with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as f:
                f.write(markdown(results))
        return rc
    work = tempfile.mkdtemp(dir=args.dir)
    rounds, steps = (3, 200) if args.quick else (7, 1000)
    sizes = [10, 100, 1000] if args.quick else [10, 100, 1000, 10000]
    peer_sizes = [10, 100] if args.quick else [10, 100, 1000]
    try:
        print(f"step cost: {rounds} interleaved rounds x {steps} steps ...", flush=True)
        cost = step_cost(work, rounds, steps, peers)
        print("growth ...", flush=True)
        grow = growth(work, sizes, peer_sizes, peers)
        print("resume ...", flush=True)
        res = resume(work, sizes, 3 if args.quick else 5)
        print(
            "harness throughput (in a fresh interpreter: the peers leave threads behind) ...",
            flush=True,
        )
        har = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--harness-only",
                    work,
                    str(20 if args.quick else 60),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        print(
            f"power loss: {pl_rounds} interleaved rounds, crashpoint vs ckpt-chaos ...", flush=True
        )
        pl = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--powerloss-only",
                    work,
                    str(pl_rounds),
                    *(["--no-peers"] if not peers else []),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        if not args.no_pg:
            run_pg_store(args.quick)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = summarize(cost, grow, res, har, sizes, args, fs_type(os.path.abspath(args.dir)))
    add_powerloss(results, pl)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "latest.json"), "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as f:
        f.write(markdown(results))
    print(json.dumps(results["headline"], indent=2))
    return 0


def run_pg_store(quick: bool) -> int:
    """benchmarks/pg_store.py in a fresh interpreter (DBOS and LangGraph leave threads behind);
    it saves benchmarks/results/pg_store.json, which markdown() renders. Without a PostgreSQL
    server (or psycopg) it prints why and keeps the previous result."""
    print(
        "PostgreSQL: crashpoint vs LangGraph PostgresSaver vs DBOS (benchmarks/pg_store.py) ...",
        flush=True,
    )
    argv = [
        sys.executable,
        os.path.join(HERE, "pg_store.py"),
        "--write-docs",
        *(["--steps", "100", "--repeat", "3"] if quick else []),
    ]
    return subprocess.run(argv, check=False).returncode


def only_powerloss(args: argparse.Namespace, rounds: int, peers: bool) -> int:
    """``--only powerloss``: run the row, merge it into latest.json, rewrite BENCHMARKS.md."""
    work = tempfile.mkdtemp(dir=args.dir)
    try:
        print(f"power loss: {rounds} interleaved rounds, crashpoint vs ckpt-chaos ...", flush=True)
        pl = powerloss(work, rounds, peers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    latest = os.path.join(HERE, "results", "latest.json")
    results: dict[str, Any] = {}
    if os.path.exists(latest):
        with open(latest) as f:
            results = json.load(f)
    else:  # no full run yet: a page with this row alone
        results = {
            "headline": {},
            "machine": machine(),
            "versions": versions(),
            "when": pl["when"],
            "quick": args.quick,
            "filesystem": pl["state_on"],
        }
    add_powerloss(results, pl)
    results["versions"] = {
        **results.get("versions", {}),
        **{k: v for k, v in versions().items() if k in ("crashpoint", "ckpt-chaos")},
    }
    os.makedirs(os.path.dirname(latest), exist_ok=True)
    with open(latest, "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as f:
        f.write(markdown(results))
    print(json.dumps(pl, indent=2))
    return 0


def add_powerloss(results: dict[str, Any], pl: dict[str, Any]) -> None:
    results["powerloss"] = pl
    h = results.setdefault("headline", {})
    h["powerloss_states_per_s"] = pl.get("crashpoint", {}).get("per_s")
    h["ckpt_chaos_points_per_s"] = pl.get("ckpt_chaos", {}).get("per_s")
    h["powerloss_over_ckpt_chaos"] = pl.get("ratio")
    h["powerloss_fork_states_per_s"] = pl.get("crashpoint_fork", {}).get("per_s")
    h["powerloss_fork_over_ckpt_chaos"] = pl.get("ratio_fork")


def summarize(
    cost: dict[str, Any],
    grow: dict[str, Any],
    res: dict[str, Any],
    har: dict[str, Any],
    sizes: list[int],
    args: argparse.Namespace,
    fs: str,
) -> dict[str, Any]:
    p50 = {k: v["p50_us"] for k, v in cost.items()}
    big = max(sizes)

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a and b else None

    ours_step = p50.get("ours_run_step")
    headline = {
        "append_p50_over_limit": ratio(p50["ours_always"], p50["limit"]),
        "batch10_p50_over_limit": ratio(p50["ours_batch10"], p50["limit_batch10"]),
        "sqlitesaver_overhead_over_ours": ratio(p50.get("sqlitesaver_step"), ours_step),
        "dbos_overhead_over_ours": ratio(p50.get("dbos_step"), ours_step),
        "bytes_per_step_10k_over_10": ratio(
            grow["ours"][big]["per_step"], grow["ours"][10]["per_step"]
        ),
        "resume_ms_10k": res[big]["p50_ms"],
        "fork_trials_per_s": har.get("fork_trials_per_s"),
        "spawn_trials_per_s": har.get("spawn_trials_per_s"),
        "systematic_sweep_s": har.get("systematic_sweep_fork_s"),
        "systematic_sweep_spawn_s": har.get("systematic_sweep_spawn_s"),
    }
    return {
        "headline": headline,
        "step_cost": cost,
        "growth": grow,
        "resume": res,
        "harness": har,
        "largest_n": big,
        "quick": args.quick,
        "filesystem": fs,
        "machine": machine(),
        "versions": versions(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(r: dict[str, Any]) -> str:
    h = r["headline"]
    full = "step_cost" in r  # else: only rows run alone with --only so far
    lines = [
        "# Benchmarks",
        "",
        "Reproduce with `python benchmarks/run.py` (`--quick` for a short run, `--only "
        "powerloss` for the power-loss row alone, `--only pg` for the PostgreSQL section "
        "alone). Figures are",
        "medians (p50) and p99 over interleaved rounds in **one run on one machine**; the",
        "machines are shared and noisy, so read ratios, not absolute times.",
        "",
        f"Machine: {r['machine']['cpus']} CPUs ({r['machine']['cpu']}), kernel "
        f"{r['machine']['kernel']}, durable writes on `{r['filesystem']}`; "
        + ", ".join(f"{k} {v}" for k, v in r["versions"].items())
        + f"; {r['when']}{' (quick run)' if r['quick'] else ''}.",
        "",
        "Whether the gate's verdicts are right (correct agents pass, buggy twins fail on the "
        "check that names their bug) is measured separately: [verdicts.md](verdicts.md), "
        "generated by `python benchmarks/verdicts.py` from the corpus in `tests/verdicts/`.",
        "",
        "## Headline ratios",
        "",
        "| metric | value | target |",
        "|---|---:|---|",
    ]
    if full:
        lines += [
            "| one durable append (p50) / raw write+fdatasync | "
            f"{h['append_p50_over_limit']} | ≤ 1.5 |",
            f"| batch(10) per step / batched raw limit | {h['batch10_p50_over_limit']} | ≤ 2 |",
            f"| SqliteSaver per-step overhead / ours | {h['sqlitesaver_overhead_over_ours']} "
            "| ≥ 5 |",
            f"| DBOS per-step overhead / ours | {h['dbos_overhead_over_ours']} | ≥ 20 |",
            f"| bytes written per step, N={r['largest_n']} / N=10 | "
            f"{h['bytes_per_step_10k_over_10']} | ≤ 1.2 |",
            f"| resume at N={r['largest_n']} (ms) | {h['resume_ms_10k']} | < 50 |",
            f"| fork-mode crash trials/s (demo, state on tmpfs) | {h['fork_trials_per_s']} "
            "| ≥ 150 |",
            f"| spawn-mode crash trials/s | {h['spawn_trials_per_s']} | - |",
            f"| full systematic sweep of the demo run, fork mode (s) | "
            f"{h['systematic_sweep_s']} | < 2 |",
            f"| the same sweep, spawn mode (s) | {h['systematic_sweep_spawn_s']} | - |",
        ]
    if "powerloss" in r:
        lines += [
            "| power-loss crash states judged/s (posix sweep) / ckpt-chaos torn crash "
            f"points/s, same naive agent, both spawning it | "
            f"{h.get('powerloss_over_ckpt_chaos')} | ≥ 3 |",
            "| the same, crashpoint in fork mode | "
            f"{h.get('powerloss_fork_over_ckpt_chaos')} | ≥ 3 |",
        ]
    if full:
        lines += [
            "",
            "## Durable step cost",
            "",
            "| variant | p50 µs | p99 µs | samples |",
            "|---|---:|---:|---:|",
        ]
        lines += markdown_full(r)
    if "powerloss" in r:
        lines += markdown_powerloss(r["powerloss"])
    with contextlib.suppress(ImportError):  # the PostgreSQL comparison, if it was measured
        sys.path.insert(0, HERE)
        import pg_store

        lines += pg_store.saved_markdown()
    notes = os.path.join(HERE, "NOTES.md")
    if os.path.exists(notes):
        with open(notes, encoding="utf-8") as f:
            lines += [f.read()]
    return "\n".join(lines)


def markdown_full(r: dict[str, Any]) -> list[str]:
    lines = []
    for k, v in r["step_cost"].items():
        lines.append(f"| {k} | {v['p50_us']} | {v['p99_us']} | {v['n']} |")
    lines += [
        "",
        "`limit` is `os.write` + `os.fdatasync` of the same framed bytes; `ours_*` are "
        "`RunJournal.append`; `ours_run_step` is a whole `Run.step` (the product path); "
        "peers are per-step overhead over the same graph/workflow without persistence.",
        "",
        "## Growth (bytes written, counted by /proc/self/io wchar)",
        "",
        "| N | ours per step | ours total | ours on disk | SqliteSaver per step | "
        "SqliteSaver total |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n, v in r["growth"]["ours"].items():
        s = r["growth"]["sqlitesaver"].get(n) or r["growth"]["sqlitesaver"].get(str(n)) or {}
        lines.append(
            f"| {n} | {v['per_step']} | {v['bytes_written']} | {v['on_disk']} | "
            f"{s.get('per_step', '-')} | {s.get('bytes_written', '-')} |"
        )
    lines += [
        "",
        "## Resume (open + replay to the next step)",
        "",
        "| N | p50 ms | max ms |",
        "|---:|---:|---:|",
    ]
    for n, v in r["resume"].items():
        lines.append(f"| {n} | {v['p50_ms']} | {v['max_ms']} |")
    lines += ["", "## Harness", "", "```json", json.dumps(r["harness"], indent=2), "```", ""]
    return lines


def markdown_powerloss(pl: dict[str, Any]) -> list[str]:
    names = {
        "crashpoint": "crashpoint `power_loss: {model: posix}` (systematic), spawn mode",
        "crashpoint_fork": "the same, fork mode (`entry: naive_agent:run`)",
        "ckpt_chaos": "ckpt-chaos `run --modes torn`",
    }
    unit = pl.get("agent_run", {}).get("run_s")
    m = pl.get("machine") or {}
    where = f" on {m['cpus']} CPUs ({m['cpu']}), kernel {m['kernel']}" if m else ""
    lines = [
        "",
        "## Power loss: crash states judged per second",
        "",
        f"The same naive agent (`{pl['agent']}`: five steps, `state.json` rewritten in "
        'place with `open("w")` + `json.dump`, no fsync) under both tools, in '
        f"{pl['rounds']} interleaved rounds, state on `{pl['state_on']}`, one job at a "
        f"time, measured {pl['when']}{where}. A rate is crash points (states) judged per "
        "second of the whole run, its fault-free reference (golden) run included."
        + (
            f" One plain run of the agent took {unit} s (p50): every figure below is a "
            "multiple of that start-up."
            if unit
            else ""
        ),
        "",
        "| tool | points per run | p50 points/s | p50 s per point | whole run (s) | "
        "reported the torn `state.json` | verdicts (last round) |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for key, name in names.items():
        v = pl.get(key, {})
        if "per_s" not in v:
            lines.append(f"| {name} | - | - | - | - | - | {v.get('note', 'not run')} |")
            continue
        verdicts = ", ".join(f"{k} {n}" for k, n in sorted(v["verdicts"].items()))
        lines.append(
            f"| {name} | {v['points']} | {v['per_s']} | {v['s_per_point']} | "
            f"{v['run_s']} | {'yes' if v['found_torn_state'] else 'no'} "
            f"({v['found_in_rounds']} rounds) | {verdicts} |"
        )
    lines += [
        "",
        f"Ratio to ckpt-chaos (points per second): spawn mode **{pl.get('ratio')}**, "
        f"fork mode **{pl.get('ratio_fork')}** (target ≥ 3).",
        "",
    ]
    for key in ("crashpoint", "crashpoint_fork"):
        v = pl.get(key, {})
        if v.get("trial_s") is not None:
            lines.append(
                f"- {names[key]}: golden run under strace {v['golden_s']} s, one "
                f"state {v['trial_s']} s (p50), of which the agent's resume "
                f"{v['resume_s']} s."
            )
    for key in ("crashpoint", "ckpt_chaos"):  # fork mode finds what spawn mode finds
        ex = pl.get(key, {}).get("example")
        if ex:
            lines.append(f"- {names[key].split(' (')[0]}, a finding: {ex}")
    return [*lines, ""]


if __name__ == "__main__":
    sys.exit(main())
