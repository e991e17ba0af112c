#!/usr/bin/env python3
"""crashpoint benchmarks: one entry point, ratios measured in one run on one machine.

    python benchmarks/run.py [--quick] [--no-peers] [--no-pg] [--dir DIR] [--rounds N]
                             [--only powerloss|fileop|pg|checkpointers|lifecycle|plugin|planning]
                             [--render]

Peers (LangGraph's SqliteSaver, DBOS, ckpt-chaos) come from benchmarks/requirements.txt and
are installed into benchmarks/.venv, never into the project's runtime dependencies: without them
importable, this script creates that venv, installs this checkout into it (editable) beside the
peers, and runs itself again there. It works from any interpreter, a virtual environment
included (a venv made from a venv does not see the outer one's packages, so crashpoint is
installed, not borrowed). ``--only powerloss`` runs the power-loss row alone and ``--only
fileop`` the file-operation kill sweep (crashpoint's ``kill: {at: fileop}`` against
ckpt-chaos's ``--modes before`` on the same agents; both need only ckpt-chaos): each merges its
row into benchmarks/results/latest.json and rewrites docs/BENCHMARKS.md, where every table says
which run, machine and load it comes from. ``--only pg`` runs benchmarks/pg_store.py
(crashpoint's PostgresStore vs LangGraph's PostgresSaver vs DBOS on one real PostgreSQL server;
skipped with the reason when no server can be started), which a full run also does unless
``--no-pg``. ``--only lifecycle`` runs benchmarks/lifecycle_cli.py (what one lifecycle command
costs a shell agent, each a fresh process), which a full run also does. ``--only plugin`` runs
benchmarks/plugin_overhead.py (what the pytest plugin costs an unrelated one-test project) and
``--only planning`` benchmarks/power_planning.py (power-loss planning time at 10 / 100 / 1,000
unsynced writes, and real campaigns of the naive agent at 1,000 writes within a budget), each
in a fresh interpreter, merged into latest.json like the rows above; a full run does both. A
full run replaces latest.json whole: one run, one machine.
Variants run in interleaved rounds on the same filesystem; every figure is a median (p50) or
p99 over all rounds, the same statistic on both sides of a ratio. Harness rows give the time
to verdict (the whole run, its golden run included) beside their rate. Benchmarks are not
tests: nothing here asserts a timing.
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
#: the file-operation sweep's agents: the naive one, and its kill-safe twin (both tools pass it)
FILEOP_AGENTS = {"naive": NAIVE_AGENT, "atomic": os.path.join(HERE, "naive_agent_atomic.py")}
#: what --only runs
SECTIONS = ("powerloss", "fileop", "pg", "checkpointers", "lifecycle", "plugin", "planning")
PLUGIN_RUNS = (
    3,
    20,
)  # plugin_overhead.py's least pairs (ABBA) of each pytest command: --quick, full
#: power_planning.py: the planning table's sizes, and the campaigns at 1,000 writes (each
#: within BUDGET_S; one of DRAWN states drawn besides the systematic ones)
PLANNING_SIZES, PLANNING_WRITES, BUDGET_S, DRAWN = "10,100,1000", 1000, 30, 3
#: the step-cost variants run at the peers' number of steps (the like-for-like comparison)
PEER_N = ("ours_run_step_peer_n", "sqlitesaver_step", "dbos_step")
Sample = tuple[list[float], float]  # per-step seconds (may be empty), the run's seconds / step


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
    """Per variant, per round: the per-step samples (where a step can be timed alone) and the
    per-run figure, the run's wall time / its steps (fsync tails included). The peers can only
    be timed per run (a graph invocation, a workflow), so the ratios compare per-run figures
    on both sides, at the same number of steps (``ours_run_step_peer_n``), medians over rounds
    (``summarize``)."""
    from crashpoint.checkpoint import Store, open_run
    from crashpoint.checkpoint._record import encode, encode_json

    record = {"t": "step", "pos": 0, "name": "step", "kind": "step", "result": PAYLOAD}
    frame = encode(encode_json({"s": 1, "g": 1, "d": record}))
    samples: dict[str, list[float]] = {}
    per_run: dict[str, list[float]] = {}
    peer_steps = min(steps, 100)

    def limit(batch: int) -> Sample:
        path = os.path.join(work, f"raw-{batch}.log")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        out = []
        try:
            t0 = time.perf_counter()
            for _ in range(steps // batch):
                t = time.perf_counter()
                for _ in range(batch):
                    os.write(fd, frame)
                os.fdatasync(fd)
                out.append((time.perf_counter() - t) / batch)
            total = time.perf_counter() - t0
        finally:
            os.close(fd)
            os.unlink(path)
        return out, total / (steps // batch * batch)

    def ours(durability: str, batch: int) -> Sample:
        root = os.path.join(work, f"store-{batch}")
        with Store(root, durability=durability).open("run") as j:
            out = []
            t0 = time.perf_counter()
            for _ in range(steps // batch):
                t = time.perf_counter()
                for _ in range(batch):
                    j.append(record, redact=False)
                out.append((time.perf_counter() - t) / batch)
            total = time.perf_counter() - t0
        shutil.rmtree(root)
        return out, total / (steps // batch * batch)

    def ours_run(n: int) -> Sample:
        """The product path: Run.step (probe no-op, redaction, step record, fdatasync); the
        per-run figure spans the whole run, opening and closing it included, as the peers'
        do."""
        root = os.path.join(work, "runs")
        out = []
        t0 = time.perf_counter()
        with open_run(Store(root), "bench") as run:
            for i in range(n):
                t = time.perf_counter()
                run.step(f"s{i}", lambda: PAYLOAD)
                out.append(time.perf_counter() - t)
        total = time.perf_counter() - t0
        shutil.rmtree(root)
        return out, total / n

    variants: list[tuple[str, Callable[[], Sample]]] = [
        ("limit", lambda: limit(1)),
        ("ours_always", lambda: ours("always", 1)),
        ("limit_batch10", lambda: limit(10)),
        ("ours_batch10", lambda: ours("batch(10)", 10)),
        ("ours_run_step", lambda: ours_run(steps)),
    ]
    if peers:
        variants += [
            ("ours_run_step_peer_n", lambda: ours_run(peer_steps)),
            ("sqlitesaver_step", lambda: ([], sqlitesaver_steps(work, peer_steps))),
            ("dbos_step", lambda: ([], dbos_steps(work, peer_steps))),
        ]
    for r in range(rounds):
        order = variants if r % 2 == 0 else list(reversed(variants))  # interleave, alternate
        for name, fn in order:
            xs, run_mean = fn()
            samples.setdefault(name, []).extend(xs)
            per_run.setdefault(name, []).append(run_mean)
    out = {}
    for name, runs in per_run.items():
        out[name] = {
            **(stats(samples[name]) if samples[name] else {"n": 0}),
            **run_stats(runs),
            "steps": peer_steps if name in PEER_N else steps,
        }
    return out


def run_stats(runs: list[float]) -> dict[str, Any]:
    """One figure per round (a run's seconds / its steps): the median over the rounds (the
    statistic both sides of a peer ratio use), their mean, and how many rounds."""
    return {
        "run_p50_us": round(statistics.median(runs) * 1e6, 2),
        "run_mean_us": round(statistics.fmean(runs) * 1e6, 2),
        "rounds": len(runs),
    }


def sqlitesaver_steps(work: str, steps: int) -> float:
    """Per-step overhead of a LangGraph graph of `steps` super-steps with SqliteSaver, sync
    durability: the run's wall time minus the same graph's without a checkpointer, / steps.
    Like for like with ``Run.step``: each step stores a 200 B result in place of the last one
    (the state does not grow), as each of our steps records its own 200 B result."""
    import sqlite3
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, StateGraph

    S = TypedDict("S", {"last": str, "n": int})  # noqa: UP013

    def node(s: Any) -> dict[str, Any]:
        return {"last": PAYLOAD, "n": s["n"] + 1}

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
            {"last": "", "n": 0},
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
    return max(0.0, (with_saver - base) / steps)


def dbos_steps(work: str, steps: int) -> float:
    """Per-step overhead of DBOS steps in one workflow on its SQLite default (each returns the
    200 B result), minus a plain loop: the run's wall time / steps."""
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
    return max(0.0, (took - base) / steps)


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
        for n in peer_sizes:  # the like-for-like workload: a 200 B result a step, not growing
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
        t0 = time.perf_counter()
        camp = Campaign(spawn, fam, d, trials=trials, seed=1)
        golden = camp.runner().golden()
        t = time.perf_counter()
        res = camp.run(golden=golden)
        out["spawn_trials_per_s"] = round(len(res.trials) / (time.perf_counter() - t), 1)
        out["spawn_verdict_s"] = round(time.perf_counter() - t0, 2)  # golden run included
        out["spawn_trials"] = len(res.trials)
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
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=shm) as d, Zygote([entry.entry]) as z:
            camp = Campaign(entry, fam, d, trials=trials, seed=1, launcher=z)
            golden = camp.runner().golden()
            t = time.perf_counter()
            res = camp.run(golden=golden)
            out["fork_trials_per_s"] = round(len(res.trials) / (time.perf_counter() - t), 1)
            out["fork_verdict_s"] = round(time.perf_counter() - t0, 2)  # zygote, golden included
            out["fork_trials"] = len(res.trials)
            out["fork_ok"] = res.ok
            t = time.perf_counter()
            res = Campaign(
                entry, [family_from_spec({"kill": {"at": "every-boundary"}})], d, seed=1, launcher=z
            ).run()  # golden run included
            out["systematic_sweep_fork_s"] = round(time.perf_counter() - t, 2)
            out["systematic_fork_trials"] = len(res.trials)
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


def _ckpt_chaos(agent: str, mode: str, points: int, base: str) -> tuple[Any, float, str]:
    """One ``ckpt-chaos run --modes MODE`` of the agent script, in process (its CLI's own
    ``run_byo``, one job at a time, no result file): its rows, the seconds it took, and what it
    printed."""
    from pathlib import Path

    from ckpt_chaos.byo import run_byo

    with tempfile.TemporaryDirectory(dir=base) as d:
        said = io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stdout(said):
            rows = run_byo(
                [sys.executable, agent, "{out}"],
                None,
                Path(d) / "run",
                modes=(mode,),
                max_points=points,
                timeout=60,
            )
        return rows, time.perf_counter() - t, said.getvalue()


def ckpt_chaos_round(base: str) -> dict[str, Any]:
    """One ``ckpt-chaos run --modes torn`` of the naive agent, in process (its CLI's own
    ``run_byo``, one job at a time; no result file, so its fastest configuration): the
    reference run, the control run, then per crash point (each open-for-write under ``{out}``)
    a run killed with the file cut to half its size, and a resume."""
    rows, took, _said = _ckpt_chaos(NAIVE_AGENT, "torn", 40, base)
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


def _timed_campaign(
    path: str, family: dict[str, Any], base: str, name: str, fork: bool
) -> tuple[Any, float]:
    """One campaign of ``family`` on the agent script ``path`` (its ``run(ARGS)`` function in
    fork mode, forked from a warm zygote whose start is timed too, started beside the golden
    run; else the command line,
    spawned): the result and the seconds it took, golden run included."""
    from crashpoint.harness import AgentSpec, Campaign, family_from_spec

    module = os.path.splitext(os.path.basename(path))[0]
    spec = (
        AgentSpec(entry=f"{module}:run", args=("{state_dir}",), cwd=HERE, timeout=60)
        if fork
        else AgentSpec(("{python}", path, "{state_dir}"), timeout=60)
    )
    with tempfile.TemporaryDirectory(dir=base) as d, contextlib.ExitStack() as stack:
        t = time.perf_counter()
        launcher = None
        if fork:
            from crashpoint.harness import Zygote

            # its start overlaps the golden run (spawned under strace anyway); the campaign
            # waits for it before the first trial
            launcher = Zygote.for_agent(spec).start(wait=False)
            stack.callback(launcher.close)
        fam = family_from_spec(family)
        res = Campaign(spec, [fam], d, name=name, seed=1, launcher=launcher).run()
        return res, time.perf_counter() - t


def crashpoint_round(base: str, fork: bool = False) -> dict[str, Any]:
    """One campaign of crashpoint's ``power_loss: {model: posix}`` family (systematic: every
    crash state of the golden run's trace) on the same agent, one trial at a time: the golden
    run under strace (always spawned), then per crash state one materialised folder, one
    resume, the usual checks. ``fork``: the resumes are forked from a warm zygote that imported
    ``naive_agent:run`` (its start is timed too) instead of spawned as the command line."""
    res, took = _timed_campaign(
        NAIVE_AGENT, {"power_loss": {"model": "posix"}}, base, "powerloss", fork
    )
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
    runs, notes = interleave(variants, rounds, shm)
    out.update({name: {"note": note} for name, note in notes.items()})

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


# -- 6. file-operation kill sweep: crash points per second, crashpoint vs ckpt-chaos ------------


def fileop_crashpoint_round(base: str, agent: str = "naive", fork: bool = False) -> dict[str, Any]:
    """One campaign of crashpoint's ``kill: {at: fileop}`` family without ``count`` (a sweep:
    one trial per file operation of the golden run under ``{state_dir}``, killed just before
    it), one trial at a time; the clock runs from before the golden run (and the zygote's
    start, in fork mode) to the verdict. ``fork``: every attempt is forked from a warm zygote
    that imported ``<agent>:run`` instead of spawned as the command line."""
    res, took = _timed_campaign(
        FILEOP_AGENTS[agent], {"kill": {"at": "fileop"}}, base, "fileop", fork
    )
    ran = [x for x in res.trials if not x.skipped]
    example = ""
    if res.failures:  # the crash point and the check that names the bug
        x = res.failures[0]
        rc = x.root_cause or x.failed[0]
        example = f"{x.plan.describe()} -> {rc.name} FAIL: {rc.message}"

    def med(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    return {
        "points": len(ran),
        "seconds": took,
        "verdict": "PASS" if res.ok else "FAIL",
        "verdicts": dict(Counter(x.status for x in res.trials)),
        "skipped": next((x.skipped for x in res.trials if x.skipped), ""),
        "incomplete": res.incomplete,
        "golden_s": res.golden.duration,
        "trial_s": med([x.duration for x in ran]),
        "passed_trial_s": med([x.duration for x in ran if x.status == "passed"]),
        "failed_trial_s": med([x.duration for x in ran if x.status == "failed"]),
        "attempts": med([float(len(x.attempts)) for x in ran]),
        "example": example[:300],
    }


def fileop_ckpt_chaos_round(base: str, agent: str = "naive") -> dict[str, Any]:
    """One ``ckpt-chaos run --modes before --max-points 100000`` of the same agent, in process
    (its CLI's own ``run_byo``, one job at a time, no result file: its fastest
    configuration): the reference run, the control run, then per file event under ``{out}``
    (each open for write, rename, remove, mkdir) a run hard-exited just before it and a resume.
    ``before`` is its kill -9 (``os._exit(137)``, nothing flushed); its other modes are not
    kills (``torn`` cuts the file in half, ``unsynced`` drops what was not fsynced: power loss;
    ``term`` is a SIGTERM with a grace period), and the point budget above the events makes it
    a sweep of every event, not a sample."""
    import re

    rows, took, said = _ckpt_chaos(FILEOP_AGENTS[agent], "before", 100_000, base)
    points = [r for r in rows if not r.label.startswith("no crash")]
    bad = [r for r in rows if r.verdict != "PASS"]
    m = re.search(r"(\d+) file events -> (\d+) crash points", said)
    return {
        "points": len(points),
        "events": int(m.group(1)) if m else None,
        "seconds": took,
        "verdict": "PASS" if not bad else "FAIL",
        "verdicts": dict(Counter(r.verdict for r in rows)),
        "example": f"{bad[0].label} -> {bad[0].verdict} ({bad[0].outcome.raised})" if bad else "",
        "labels": sorted({r.label.split(" ", 1)[-1].rsplit(" [", 1)[0] for r in points}),
    }


def interleave(
    variants: list[tuple[str, Callable[[str], dict[str, Any]]]], rounds: int, base: str
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """Run every variant once per round, the order rotated each round; a variant that raises
    is reported (its note) and dropped, never fatal to the others."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    notes: dict[str, str] = {}
    for r in range(rounds):
        k = r % len(variants)
        for name, fn in variants[k:] + variants[:k]:
            if name not in runs:
                continue
            try:
                x = fn(base)
            except Exception as exc:  # a tool that cannot run here is reported, not fatal
                notes[name] = f"{type(exc).__name__}: {exc}"[:300]
                del runs[name]
                continue
            runs[name].append(x)
            verdict = f", verdict {x['verdict']}" if "verdict" in x else ""
            if "found" in x:  # the power-loss row: did it report the torn state
                verdict += f", torn state reported: {x['found']}"
            print(
                f"    round {r + 1} {name}: {x['points']} points in {x['seconds']:.2f} s" + verdict,
                flush=True,
            )
    return runs, notes


def per_point(xs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of a row, each a median over its rounds: seconds per crash point (the run's
    wall time / its points), points per second, time to verdict (the whole run); and the
    verdict of every round (a FAIL in any round shows)."""
    done = [x for x in xs if x["points"]]

    def med(key: str) -> float | None:
        vals = [x[key] for x in xs if x.get(key) is not None]
        return round(statistics.median(vals), 3) if vals else None

    verdicts = Counter(x.get("verdict", "-") for x in xs)
    return {
        "points": xs[-1]["points"] if xs else 0,
        "s_per_point": round(statistics.median(x["seconds"] / x["points"] for x in done), 3)
        if done
        else None,
        "per_s": round(statistics.median(x["points"] / x["seconds"] for x in done), 2)
        if done
        else None,
        "verdict_s": med("seconds"),
        "verdict": "FAIL" if verdicts.get("FAIL") else ("PASS" if verdicts.get("PASS") else "-"),
        "verdict_rounds": ", ".join(f"{k} {n}/{len(xs)}" for k, n in sorted(verdicts.items())),
        "verdicts": xs[-1].get("verdicts", {}) if xs else {},
        "rounds": len(xs),
    }


def fileop(work: str, rounds: int, with_peer: bool) -> dict[str, Any]:
    """crashpoint's file-operation kill sweep against ckpt-chaos's (``before`` mode) on the same
    agents, in interleaved rounds, state on tmpfs where there is one: the naive agent (the
    power-loss row's) and its kill-safe twin. crashpoint runs spawned as the same command line
    ckpt-chaos runs, and in fork mode. Per row: crash points, seconds per point, time to
    verdict, the verdict of each round; ratios: ckpt-chaos's seconds per point / ours (target
    >= 3) and our time to verdict / ckpt-chaos's (target <= 1), from the medians."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else work
    out: dict[str, Any] = {
        "state_on": fs_type(shm),
        "rounds": rounds,
        "agents": {k: os.path.relpath(v, ROOT) for k, v in FILEOP_AGENTS.items()},
    }
    variants: list[tuple[str, Callable[[str], dict[str, Any]]]] = []
    for agent in FILEOP_AGENTS:
        variants += [
            (f"{agent}/crashpoint", functools.partial(fileop_crashpoint_round, agent=agent)),
            (
                f"{agent}/crashpoint_fork",
                functools.partial(fileop_crashpoint_round, agent=agent, fork=True),
            ),
        ]
        if with_peer:
            variants.append(
                (f"{agent}/ckpt_chaos", functools.partial(fileop_ckpt_chaos_round, agent=agent))
            )
    variants.append(("agent_run", agent_run))
    runs, notes = interleave(variants, rounds, shm)
    for agent in FILEOP_AGENTS:
        row: dict[str, Any] = {}
        for tool in ("crashpoint", "crashpoint_fork", "ckpt_chaos"):
            name = f"{agent}/{tool}"
            if name in notes:
                row[tool] = {"note": notes[name]}
                continue
            if name not in runs:
                row[tool] = {"note": "ckpt-chaos not run (--no-peers)"}
                continue
            xs = runs[name]
            v = per_point(xs)
            v["example"] = next((x["example"] for x in xs if x.get("example")), "")
            if tool == "ckpt_chaos":
                v["events"] = xs[-1]["events"] if xs else None
                v["labels"] = xs[-1]["labels"] if xs else []
            else:
                for key in (
                    "golden_s",
                    "trial_s",
                    "passed_trial_s",
                    "failed_trial_s",
                    "attempts",
                ):
                    vals = [x[key] for x in xs if x.get(key) is not None]
                    v[key] = round(statistics.median(vals), 3) if vals else None
                skipped = next((x["skipped"] for x in xs if x.get("skipped")), "")
                incomplete = next((x["incomplete"] for x in xs if x.get("incomplete")), "")
                if skipped or incomplete:
                    v["note"] = (f"skipped: {skipped}" if skipped else f"incomplete: {incomplete}")[
                        :300
                    ]
            row[tool] = v
        peer = row["ckpt_chaos"]
        for tool, suffix in (("crashpoint", ""), ("crashpoint_fork", "_fork")):
            ours = row[tool]
            row[f"per_point_ratio{suffix}"] = ratio(
                peer.get("s_per_point"), ours.get("s_per_point")
            )
            row[f"verdict_ratio{suffix}"] = ratio(ours.get("verdict_s"), peer.get("verdict_s"))
        out[agent] = row
    unit = runs.get("agent_run", [])
    out["agent_run_s"] = round(statistics.median(x["seconds"] for x in unit), 3) if unit else None
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b to two decimals, or None when either is missing or zero."""
    return round(a / b, 2) if a and b else None


# -- 7. the plugin's cost to an unrelated project, 8. power-loss planning at scale --------------


def script_json(script: str, argv: list[str], work: str) -> dict[str, Any]:
    """One of benchmarks/' own scripts in a fresh interpreter (its output shown as it comes),
    its result read back from its ``--json PATH``; a script that fails is reported in the
    section (``note``), never fatal to the run."""
    path = os.path.join(work, f"{os.path.splitext(script)[0]}.json")
    with contextlib.suppress(OSError):
        os.unlink(path)
    argv = [sys.executable, os.path.join(HERE, script), *argv, "--json", path]
    rc = subprocess.run(argv, check=False).returncode
    if rc != 0 or not os.path.exists(path):
        return {"note": f"benchmarks/{script} exited {rc} (its output is in the run's log)"}
    with open(path) as f:
        out: dict[str, Any] = json.load(f)
    return out


def plugin(work: str, quick: bool) -> dict[str, Any]:
    """benchmarks/plugin_overhead.py: an unrelated one-test project's pytest run with the
    plugin and without it, every installed plugin loaded, and pytest alone against pytest with
    the plugin alone (medians of interleaved runs; whether the plugin printed anything)."""
    runs = PLUGIN_RUNS[0 if quick else 1]
    print(
        f"the plugin's cost to an unrelated one-test project: at least {runs} pairs of runs "
        "(benchmarks/plugin_overhead.py) ...",
        flush=True,
    )
    return script_json("plugin_overhead.py", ["--runs", str(runs)], work)


def planning(work: str, quick: bool) -> dict[str, Any]:
    """benchmarks/power_planning.py: planning a systematic power-loss campaign at 10 / 100 /
    1,000 unsynced writes (synthetic traces; posix, and ext4-ordered at 10 / 100), then real
    campaigns of benchmarks/naive_agent.py at 1,000 writes, spawned, each within a budget:
    posix and ext4-ordered systematic, and posix with a few states drawn."""
    runs = 1 if quick else 3
    print(
        f"power-loss planning at {PLANNING_SIZES} writes (at least {runs} run(s) each), then "
        f"campaigns at {PLANNING_WRITES} writes within {BUDGET_S} s "
        "(benchmarks/power_planning.py) ...",
        flush=True,
    )
    argv = [
        *("--sizes", PLANNING_SIZES, "--append-sizes", "10,100", "--ext4-sizes", "10,100"),
        *("--runs", str(runs), "--campaign", str(PLANNING_WRITES), "--budget", str(BUDGET_S)),
        *("--count", str(DRAWN)),
    ]
    out = script_json("power_planning.py", argv, work)
    out["state_on"] = fs_type("/dev/shm" if os.path.isdir("/dev/shm") else work)
    return out


def add_plugin(results: dict[str, Any], p: dict[str, Any]) -> None:
    results["plugin"] = p
    h = results.setdefault("headline", {})
    h["plugin_over_no_plugin"] = p.get("installed", {}).get("ratio")
    h["plugin_over_no_plugin_cpu"] = p.get("installed", {}).get("cpu_ratio")
    h["plugin_alone_over_pytest_alone"] = p.get("alone", {}).get("ratio")
    h["plugin_alone_over_pytest_alone_cpu"] = p.get("alone", {}).get("cpu_ratio")
    h["plugin_printed"] = (
        any(p[k].get("printed") for k in ("installed", "alone")) if "installed" in p else None
    )


def per_state_growth(rows: list[dict[str, Any]], shape: str, model: str = "posix") -> Any:
    """Planning time per state at the most writes / at the fewest (linear: about 1), for the
    incremental planner on one state file and model; None without two sizes."""
    xs = {
        r["writes"]: r["us_per_state"]
        for r in rows
        if r["shape"] == shape
        and r.get("model", "posix") == model
        and r["planner"] != "from scratch"
    }
    return ratio(xs[max(xs)], xs[min(xs)]) if len(xs) > 1 else None


def campaign_of(pl: dict[str, Any], model: str, drawn: bool = False) -> dict[str, Any]:
    """The 1,000-write campaign of ``model`` (``drawn``: the one with ``count``), or {}."""
    for c in pl.get("campaigns", []):
        if c["model"] == model and bool(c.get("count")) == drawn:
            return dict(c)
    return {}


def add_planning(results: dict[str, Any], pl: dict[str, Any]) -> None:
    results["planning"] = pl
    h = results.setdefault("headline", {})
    rows = pl.get("rows", [])
    h["planning_per_state_1000_over_10"] = per_state_growth(rows, "growing")
    h["planning_fixed_per_state_1000_over_10"] = per_state_growth(rows, "fixed")
    for key, model, drawn in (
        ("campaign_1000_wall_over_budget", "posix", False),
        ("campaign_1000_ext4_wall_over_budget", "ext4-ordered", False),
        ("campaign_1000_drawn_wall_over_budget", "posix", True),
    ):
        h[key] = campaign_of(pl, model, drawn).get("wall_over_budget")


# -- driver ---------------------------------------------------------------------------------------


def peers_available(only: str | None = None) -> bool:
    """The peers the run needs are importable (``--only powerloss`` / ``fileop``: ckpt-chaos
    alone)."""
    import importlib.util

    if only in ("pg", "plugin", "planning"):  # pg_store.py reports a missing peer as skipped;
        return True  # the plugin and planning sections need no peer
    needed = (
        ["ckpt_chaos"]
        if only in ("powerloss", "fileop")
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
    with contextlib.suppress(OSError, subprocess.SubprocessError):  # which code was measured
        import crashpoint

        src = os.path.dirname(os.path.dirname(os.path.abspath(crashpoint.__file__)))
        head = subprocess.run(
            ["git", "-C", src, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", src, "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout.strip()
        if head:
            out["crashpoint"] += f" ({head}{' + changes' if dirty else ''})"
    return out


def machine() -> dict[str, Any]:
    cpu = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release()}


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def env_start(run: str) -> dict[str, Any]:
    """What a table's header says about where and when it was measured: the run it belongs to
    (``run``: when that run of run.py started), the section's own start, the machine (CPU
    model, cores, kernel), Python and package versions, the 1-minute load average at the
    start (``env_end`` adds the end's)."""
    return {
        "run": run,
        "when": now(),
        "machine": machine(),
        "versions": versions(),
        "load_start": round(os.getloadavg()[0], 2),
    }


def env_end(env: dict[str, Any]) -> dict[str, Any]:
    env["load_end"] = round(os.getloadavg()[0], 2)
    return env


def env_line(env: dict[str, Any] | None, fallback: dict[str, Any] | None = None) -> str:
    """One line: the run, the machine, the load, the versions (or, for a result saved before
    these were recorded, what it recorded)."""
    if not env:
        f = fallback or {}
        m = f.get("machine") or {}
        where = f"{m.get('cpus', '?')} CPUs ({m.get('cpu', '?')}), kernel {m.get('kernel', '?')}"
        vers = ", ".join(f"{k} {v}" for k, v in (f.get("versions") or {}).items())
        return (
            f"*Measured {f.get('when', '?')} on {where}; load average not recorded"
            + (f"; {vers}" if vers else "")
            + ".*"
        )
    m = env["machine"]
    vers = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    return (
        f"*Run of `benchmarks/run.py` started {env['run']}; this table measured from "
        f"{env['when']}: {m['cpu']}, {m['cpus']} cores, kernel {m['kernel']}; load average "
        f"(1 min) {env['load_start']} at its start, {env.get('load_end', '?')} at its end; "
        f"{vers}.*"
    )


def sub_json(flag: str, *argv: str) -> dict[str, Any]:
    """A section in a fresh interpreter (the peers leave threads behind): its last line of
    output is its JSON result; the lines before it are shown as they come."""
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), flag, *argv],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines = proc.stdout.strip().splitlines()
    for line in lines[:-1]:
        print(line, flush=True)
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer rounds and smaller N")
    ap.add_argument("--no-peers", action="store_true", help="skip LangGraph, DBOS and ckpt-chaos")
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
    ap.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="interleaved rounds of the power-loss and file-operation rows "
        "(default 5, 3 with --quick)",
    )
    ap.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--harness-only", nargs=2, metavar=("DIR", "TRIALS"), help=argparse.SUPPRESS)
    ap.add_argument("--powerloss-only", nargs=2, metavar=("DIR", "ROUNDS"), help=argparse.SUPPRESS)
    ap.add_argument("--fileop-only", nargs=2, metavar=("DIR", "ROUNDS"), help=argparse.SUPPRESS)
    ap.add_argument(
        "--only",
        choices=SECTIONS,
        help="run only this section and merge it into benchmarks/results/latest.json "
        "(then rewrite docs/BENCHMARKS.md; its tables say which run they come from)",
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="only rewrite docs/BENCHMARKS.md from benchmarks/results/latest.json",
    )
    args = ap.parse_args()
    if args.rounds is not None and not 1 <= args.rounds <= 100:
        ap.error(f"--rounds must be between 1 and 100, got {args.rounds}")
    if args.render:
        with open(os.path.join(HERE, "results", "latest.json")) as f:
            results = json.load(f)
        with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as f:
            f.write(markdown(results))
        return 0
    if args.only == "lifecycle":  # its own script: saves benchmarks/results/lifecycle_cli.json
        rc = run_lifecycle(args.quick, args.dir)
        render_latest()
        return rc
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
    if args.fileop_only:
        print(json.dumps(fileop(args.fileop_only[0], int(args.fileop_only[1]), peers)))
        return 0
    if peers and not peers_available(args.only):
        if args.in_venv:
            print("peers still not importable in the venv; run with --no-peers", file=sys.stderr)
            return 2
        return bootstrap(sys.argv[1:])
    os.makedirs(args.dir, exist_ok=True)
    pl_rounds = args.rounds or (3 if args.quick else 5)
    if args.only in ("powerloss", "fileop", "plugin", "planning"):
        return only_section(args, args.only, pl_rounds, peers)
    if args.only == "pg":  # its own script: saves benchmarks/results/pg_store.json
        rc = run_pg_store(args.quick)
        latest = os.path.join(HERE, "results", "latest.json")
        if os.path.exists(latest):  # re-render, so the section lands where a full run puts it
            with open(latest) as f:
                results = json.load(f)
            with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as f:
                f.write(markdown(results))
        return rc
    run = now()
    t_run = time.perf_counter()
    envs: dict[str, dict[str, Any]] = {}
    work = tempfile.mkdtemp(dir=args.dir)
    rounds, steps = (3, 200) if args.quick else (7, 1000)
    sizes = [10, 100, 1000] if args.quick else [10, 100, 1000, 10000]
    peer_sizes = [10, 100] if args.quick else [10, 100, 1000]
    try:
        print(f"step cost: {rounds} interleaved rounds x {steps} steps ...", flush=True)
        envs["step_cost"] = env_start(run)
        cost = step_cost(work, rounds, steps, peers)
        env_end(envs["step_cost"])
        print("growth ...", flush=True)
        envs["growth"] = env_start(run)
        grow = growth(work, sizes, peer_sizes, peers)
        env_end(envs["growth"])
        print("resume ...", flush=True)
        envs["resume"] = env_start(run)
        res = resume(work, sizes, 3 if args.quick else 5)
        env_end(envs["resume"])
        print(
            "harness throughput (in a fresh interpreter: the peers leave threads behind) ...",
            flush=True,
        )
        envs["harness"] = env_start(run)
        har = sub_json("--harness-only", work, str(20 if args.quick else 60))
        env_end(envs["harness"])
        print(
            f"power loss: {pl_rounds} interleaved rounds, crashpoint vs ckpt-chaos ...", flush=True
        )
        penv = env_start(run)
        pl = sub_json(
            "--powerloss-only", work, str(pl_rounds), *(["--no-peers"] if not peers else [])
        )
        pl["env"] = env_end(penv)
        print(
            f"file-operation kill sweep: {pl_rounds} interleaved rounds, crashpoint vs "
            "ckpt-chaos ...",
            flush=True,
        )
        fenv = env_start(run)
        fo = sub_json("--fileop-only", work, str(pl_rounds), *(["--no-peers"] if not peers else []))
        fo["env"] = env_end(fenv)
        genv = env_start(run)
        plug = plugin(work, args.quick)
        plug["env"] = env_end(genv)
        genv = env_start(run)
        plan = planning(work, args.quick)
        plan["env"] = env_end(genv)
        if not args.no_pg:
            run_pg_store(args.quick)
        run_lifecycle(args.quick, args.dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = summarize(cost, grow, res, har, sizes, args, fs_type(os.path.abspath(args.dir)))
    results["env"] = envs
    results["run"] = run
    results["run_s"] = round(time.perf_counter() - t_run, 1)
    add_powerloss(results, pl)
    add_fileop(results, fo)
    add_plugin(results, plug)
    add_planning(results, plan)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "latest.json"), "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as f:
        f.write(markdown(results))
    print(json.dumps(results["headline"], indent=2))
    print(f"whole run: {results['run_s']} s", flush=True)
    return 0


def run_lifecycle(quick: bool, work: str) -> int:
    """benchmarks/lifecycle_cli.py (each lifecycle command in a fresh process); it saves
    benchmarks/results/lifecycle_cli.json, which markdown() renders."""
    print(
        "lifecycle commands: one fresh process each (benchmarks/lifecycle_cli.py) ...", flush=True
    )
    argv = [
        sys.executable,
        os.path.join(HERE, "lifecycle_cli.py"),
        "--write-docs",
        "--dir",
        work,
        *(["--rounds", "3"] if quick else []),
    ]
    return subprocess.run(argv, check=False).returncode


def render_latest() -> None:
    """Rewrite docs/BENCHMARKS.md from latest.json, if there is one (after a row run alone)."""
    latest = os.path.join(HERE, "results", "latest.json")
    if os.path.exists(latest):
        with open(latest) as f:
            results = json.load(f)
        with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as f:
            f.write(markdown(results))


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


def only_section(args: argparse.Namespace, section: str, rounds: int, peers: bool) -> int:
    """``--only powerloss`` / ``fileop`` / ``plugin`` / ``planning``: run the section, merge
    it into latest.json (the other tables keep their own run's header), rewrite
    BENCHMARKS.md."""
    work = tempfile.mkdtemp(dir=args.dir)
    run = now()
    env = env_start(run)
    try:
        if section == "plugin":
            row = plugin(work, args.quick)
        elif section == "planning":
            row = planning(work, args.quick)
        elif section == "powerloss":
            print(
                f"power loss: {rounds} interleaved rounds, crashpoint vs ckpt-chaos ...",
                flush=True,
            )
            row = powerloss(work, rounds, peers)
        else:
            print(
                f"file-operation kill sweep: {rounds} interleaved rounds, crashpoint vs "
                "ckpt-chaos ...",
                flush=True,
            )
            row = fileop(work, rounds, peers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row["env"] = env_end(env)
    latest = os.path.join(HERE, "results", "latest.json")
    results: dict[str, Any] = {}
    if os.path.exists(latest):
        with open(latest) as f:
            results = json.load(f)
    else:  # no full run yet: a page with this row alone
        results = {"headline": {}, "quick": args.quick, "filesystem": row.get("state_on", "?")}
    adders = {
        "powerloss": add_powerloss,
        "fileop": add_fileop,
        "plugin": add_plugin,
        "planning": add_planning,
    }
    adders[section](results, row)
    os.makedirs(os.path.dirname(latest), exist_ok=True)
    with open(latest, "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as f:
        f.write(markdown(results))
    print(json.dumps(row, indent=2))
    return 0


def add_powerloss(results: dict[str, Any], pl: dict[str, Any]) -> None:
    results["powerloss"] = pl
    h = results.setdefault("headline", {})
    h["powerloss_states_per_s"] = pl.get("crashpoint", {}).get("per_s")
    h["ckpt_chaos_points_per_s"] = pl.get("ckpt_chaos", {}).get("per_s")
    h["powerloss_over_ckpt_chaos"] = pl.get("ratio")
    h["powerloss_fork_states_per_s"] = pl.get("crashpoint_fork", {}).get("per_s")
    h["powerloss_fork_over_ckpt_chaos"] = pl.get("ratio_fork")


def add_fileop(results: dict[str, Any], fo: dict[str, Any]) -> None:
    results["fileop"] = fo
    h = results.setdefault("headline", {})
    naive = fo.get("naive", {})
    h["fileop_per_point_over_ckpt_chaos"] = naive.get("per_point_ratio")
    h["fileop_fork_per_point_over_ckpt_chaos"] = naive.get("per_point_ratio_fork")
    h["fileop_verdict_s_over_ckpt_chaos"] = naive.get("verdict_ratio")
    h["fileop_fork_verdict_s_over_ckpt_chaos"] = naive.get("verdict_ratio_fork")
    h["fileop_verdicts"] = {
        tool: naive.get(tool, {}).get("verdict")
        for tool in ("crashpoint", "crashpoint_fork", "ckpt_chaos")
    }


def summarize(
    cost: dict[str, Any],
    grow: dict[str, Any],
    res: dict[str, Any],
    har: dict[str, Any],
    sizes: list[int],
    args: argparse.Namespace,
    fs: str,
) -> dict[str, Any]:
    p50 = {k: v.get("p50_us") for k, v in cost.items()}
    per_run = {k: v.get("run_p50_us") for k, v in cost.items()}
    per_run_mean = {k: v.get("run_mean_us") for k, v in cost.items()}
    big = max(sizes)
    ours = "ours_run_step_peer_n"  # Run.step at the peers' number of steps
    headline = {
        "append_p50_over_limit": ratio(p50["ours_always"], p50["limit"]),
        "batch10_p50_over_limit": ratio(p50["ours_batch10"], p50["limit_batch10"]),
        # like for like: per-run seconds / step on both sides, same steps, medians over rounds
        "sqlitesaver_overhead_over_ours": ratio(per_run.get("sqlitesaver_step"), per_run.get(ours)),
        "dbos_overhead_over_ours": ratio(per_run.get("dbos_step"), per_run.get(ours)),
        "sqlitesaver_overhead_over_ours_mean": ratio(
            per_run_mean.get("sqlitesaver_step"), per_run_mean.get(ours)
        ),
        "dbos_overhead_over_ours_mean": ratio(
            per_run_mean.get("dbos_step"), per_run_mean.get(ours)
        ),
        "bytes_per_step_10k_over_10": ratio(
            grow["ours"][big]["per_step"], grow["ours"][10]["per_step"]
        ),
        "resume_ms_10k": res[big]["p50_ms"],
        "fork_trials_per_s": har.get("fork_trials_per_s"),
        "spawn_trials_per_s": har.get("spawn_trials_per_s"),
        "fork_verdict_s": har.get("fork_verdict_s"),
        "spawn_verdict_s": har.get("spawn_verdict_s"),
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
        "when": now(),
    }


def sections(r: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """The tables on the page and the header (env) each was measured under (None: a result
    saved before headers were recorded)."""
    envs = r.get("env") or {}
    out: dict[str, dict[str, Any] | None] = {}
    if "step_cost" in r:
        for key in ("step_cost", "growth", "resume", "harness"):
            out[key] = envs.get(key)
    for key in ("powerloss", "fileop", "plugin", "planning"):
        if key in r:
            out[key] = r[key].get("env")
    return out


def _ci(v: dict[str, Any]) -> str:
    """`` [lo, hi]``: the 95% interval of a paired median ratio, where one was measured."""
    ci = v.get("ratio_ci")
    return f" [{ci[0]}, {ci[1]}]" if ci else ""


def markdown(r: dict[str, Any]) -> str:
    h = r["headline"]
    full = "step_cost" in r  # else: only rows run alone with --only so far
    secs = sections(r)

    def run_of(key: str) -> str:
        """When the run that measured a section started (before headers: when it saved)."""
        env = secs.get(key) or {}
        if env.get("run"):
            return str(env["run"])
        own = r.get(key, {}).get("when") if key in ("powerloss", "fileop") else None
        return str(own or r.get("when") or "?")

    runs = {run_of(k) for k in secs}
    multi = len(runs) > 1

    if multi:
        provenance = (
            f"This page combines {len(runs)} runs of `benchmarks/run.py` (an `--only` run "
            "re-measures one section and keeps the others): the headline's last column and "
            "each table's header say which run, machine and load a figure comes from. Every "
            "ratio is taken within one run."
        )
    else:
        took = f", {r['run_s']} s" if r.get("run_s") else ""
        provenance = (
            f"Every table `benchmarks/run.py` makes on this page comes from **one run** of it "
            f"(started {next(iter(runs))}{took}{', quick' if r.get('quick') else ''}) on one "
            "machine; each table's header gives the CPU, the load and the versions. The "
            'fork-server table (under "Reading these numbers") is the one table from elsewhere: '
            "two short runs of `benchmarks/fork_server.py` on the same machine the same "
            "morning, named where it stands."
        )
    lines = [
        "# Benchmarks",
        "",
        "Reproduce with `python benchmarks/run.py` (`--quick` for a short run, `--only "
        "powerloss` / `--only fileop` / `--only plugin` / `--only planning` for one section "
        "alone, `--only pg` for the PostgreSQL section alone). Figures are",
        "medians (p50) and p99 over interleaved rounds; the machines are shared and noisy, so",
        "read ratios, not absolute times. Both sides of a ratio use the same statistic.",
        "",
        provenance,
        "",
        "Whether the gate's verdicts are right (correct agents pass, buggy twins fail on the "
        "check that names their bug) is measured separately: [verdicts.md](verdicts.md), "
        "generated by `python benchmarks/verdicts.py` from the corpus in `tests/verdicts/`.",
        "",
        "## Headline ratios",
        "",
        "| metric | value | target |" + (" run |" if multi else ""),
        "|---|---:|---|" + ("---|" if multi else ""),
    ]

    def row(metric: str, value: Any, target: str, key: str) -> str:
        return f"| {metric} | {value} | {target} |" + (f" {run_of(key)} |" if multi else "")

    if full:

        def with_mean(key: str) -> str:
            mean = h.get(f"{key}_mean")
            return f"{h.get(key)}" + (f" (means of rounds: {mean})" if mean else "")

        like_for_like = "sqlitesaver_overhead_over_ours_mean" in h  # else: saved before
        peer_how = (
            "like for like (same steps, a 200 B result a step, no state growth), a run's time "
            "/ its steps on both sides, p50 of rounds"
            if like_for_like
            else "NOT like for like (saved before issue 24: their per-run mean with a growing "
            "state against our median single step)"
        )

        lines += [
            row(
                "one durable append (p50) / raw write+fdatasync",
                h["append_p50_over_limit"],
                "≤ 1.5",
                "step_cost",
            ),
            row(
                "batch(10) per step / batched raw limit",
                h["batch10_p50_over_limit"],
                "≤ 2",
                "step_cost",
            ),
            row(
                f"SqliteSaver per-step overhead / ours: {peer_how}",
                with_mean("sqlitesaver_overhead_over_ours"),
                "≥ 5",
                "step_cost",
            ),
            row(
                "DBOS per-step overhead / ours, the same way",
                with_mean("dbos_overhead_over_ours"),
                "≥ 20",
                "step_cost",
            ),
            row(
                f"bytes written per step, N={r['largest_n']} / N=10",
                h["bytes_per_step_10k_over_10"],
                "≤ 1.2",
                "growth",
            ),
            row(f"resume at N={r['largest_n']} (ms)", h["resume_ms_10k"], "< 50", "resume"),
            row(
                "fork-mode crash trials/s (demo, state on tmpfs); time to verdict (s, golden "
                "run included)",
                f"{h['fork_trials_per_s']}; {h.get('fork_verdict_s', '-')} s",
                "≥ 150",
                "harness",
            ),
            row(
                "spawn-mode crash trials/s; time to verdict (s)",
                f"{h['spawn_trials_per_s']}; {h.get('spawn_verdict_s', '-')} s",
                "-",
                "harness",
            ),
            row(
                "full systematic sweep of the demo run, fork mode: time to verdict (s)",
                h["systematic_sweep_s"],
                "< 2",
                "harness",
            ),
            row("the same sweep, spawn mode (s)", h["systematic_sweep_spawn_s"], "-", "harness"),
        ]
    if "powerloss" in r:
        lines += [
            row(
                "power-loss crash states judged/s (posix sweep) / ckpt-chaos torn crash "
                "points/s, same naive agent, both spawning it",
                h.get("powerloss_over_ckpt_chaos"),
                "≥ 3",
                "powerloss",
            ),
            row(
                "the same, crashpoint in fork mode",
                h.get("powerloss_fork_over_ckpt_chaos"),
                "≥ 3",
                "powerloss",
            ),
        ]
    if "fileop" in r:
        v = h.get("fileop_verdicts") or {}
        lines += [
            row(
                "kill sweep of every file operation, naive JSON-state agent: ckpt-chaos's "
                "seconds per crash point / crashpoint's, both spawning it",
                h.get("fileop_per_point_over_ckpt_chaos"),
                "≥ 3",
                "fileop",
            ),
            row(
                "the same, crashpoint in fork mode",
                h.get("fileop_fork_per_point_over_ckpt_chaos"),
                "≥ 3",
                "fileop",
            ),
            row(
                "that sweep's time to verdict, crashpoint / ckpt-chaos, both spawning it",
                h.get("fileop_verdict_s_over_ckpt_chaos"),
                "≤ 1",
                "fileop",
            ),
            row(
                "the same, crashpoint in fork mode",
                h.get("fileop_fork_verdict_s_over_ckpt_chaos"),
                "≤ 1",
                "fileop",
            ),
            row(
                "that sweep's verdicts: crashpoint spawn / fork / ckpt-chaos",
                " / ".join(
                    str(v.get(k) or "-") for k in ("crashpoint", "crashpoint_fork", "ckpt_chaos")
                ),
                "as measured (see below)",
                "fileop",
            ),
        ]
    if "plugin" in r:
        p = r["plugin"]
        printed = h.get("plugin_printed")
        lines += [
            row(
                "an unrelated one-test pytest project with the plugin / with `-p no:crashpoint` "
                f"(wall time, median of the ratios of {p.get('runs', '?')} ABBA pairs of runs, "
                "every installed plugin loaded; its 95% interval in brackets, then CPU time); "
                "did the plugin print anything",
                f"{h.get('plugin_over_no_plugin')}{_ci(p.get('installed', {}))} "
                f"(CPU {h.get('plugin_over_no_plugin_cpu')}); "
                + ("-" if printed is None else ("**printed**" if printed else "printed nothing")),
                "≤ 1.05; nothing",
                "plugin",
            ),
            row(
                "the same, pytest alone: with the plugin / with an empty plugin "
                "(`PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`, `PYTEST_PLUGINS=...`)",
                f"{h.get('plugin_alone_over_pytest_alone')}{_ci(p.get('alone', {}))} "
                f"(CPU {h.get('plugin_alone_over_pytest_alone_cpu')})",
                "≤ 1.05",
                "plugin",
            ),
        ]
    if "planning" in r:
        pl = r["planning"]
        posix = campaign_of(pl, "posix")
        ext4 = campaign_of(pl, "ext4-ordered")
        drawn = campaign_of(pl, "posix", drawn=True)
        lines += [
            row(
                "power-loss planning time per state at 1,000 unsynced writes / at 10 (posix, "
                "the naive agent's growing `state.json`; in brackets a fixed-size file)",
                f"{h.get('planning_per_state_1000_over_10')} "
                f"({h.get('planning_fixed_per_state_1000_over_10')})",
                "≈ 1 (linear)",
                "planning",
            ),
            row(
                "1,000-write power-loss campaign of the naive agent (posix, every state, "
                "spawned): wall time / budget",
                f"{h.get('campaign_1000_wall_over_budget')} ({campaign_brief(posix)})",
                "≤ 1",
                "planning",
            ),
            row(
                "the same under `model: ext4-ordered`",
                f"{h.get('campaign_1000_ext4_wall_over_budget')} ({campaign_brief(ext4)})",
                "≤ 1",
                "planning",
            ),
            row(
                f"the same, posix, {drawn.get('count') or DRAWN} states drawn (`count`)",
                f"{h.get('campaign_1000_drawn_wall_over_budget')} ({campaign_brief(drawn)})",
                "≤ 1",
                "planning",
            ),
        ]
    if full:
        lines += markdown_full(r, secs)
    if "powerloss" in r:
        lines += markdown_powerloss(r["powerloss"])
    if "fileop" in r:
        lines += markdown_fileop(r["fileop"])
    if "plugin" in r:
        lines += markdown_plugin(r["plugin"])
    if "planning" in r:
        lines += markdown_planning(r["planning"])
    with contextlib.suppress(ImportError):  # the PostgreSQL comparison, if it was measured
        sys.path.insert(0, HERE)
        import pg_store

        pg = pg_store.saved_markdown()
        if pg:
            lines += [
                "",
                "*The PostgreSQL section below is measured by `benchmarks/pg_store.py` (run by "
                "a full run of run.py unless `--no-pg`, or alone by `--only pg`); its own "
                "header line gives its date and machine.*",
                *pg,
            ]
    with contextlib.suppress(ImportError):  # the lifecycle commands, if they were measured
        sys.path.insert(0, HERE)
        import lifecycle_cli

        lines += lifecycle_cli.saved_markdown()
    notes = os.path.join(HERE, "NOTES.md")
    if os.path.exists(notes):
        with open(notes, encoding="utf-8") as f:
            lines += [f.read()]
    return "\n".join(lines)


def campaign_brief(c: dict[str, Any]) -> str:
    """A campaign's outcome in a few words, for the headline."""
    if not c:
        return "not run"
    if c.get("note"):
        return str(c["note"])
    b = f"{c['budget_s']:g} s budget"
    if c.get("planning_stopped"):
        return f"{b}: planning stopped by the budget, {c['ran']} trials ran, says so"
    if c.get("incomplete"):
        return f"{b}: {c['ran']:,} of {c['planned']:,} trials ran, stopped by the budget, says so"
    return f"{b}: all {c['ran']:,} trials ran, verdict {c['verdict']}"


def markdown_plugin(p: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## The pytest plugin's cost to a project that does not use it",
        "",
        env_line(p.get("env"), p),
        "",
    ]
    if "installed" not in p:
        return [*lines, f"Not measured: {p.get('note', '?')}", ""]
    lines += [
        "`benchmarks/plugin_overhead.py`: a one-test project (`pytest.ini` with `filterwarnings "
        "= error`, one test using no crashpoint fixture or marker) run by `python -m pytest` in "
        f"a fresh interpreter, with the plugin and without it: {p['runs']} pairs of runs "
        f"({p.get('alone_runs', p['runs'])} of the alone pair, whose runs are short), in ABBA "
        "order so the load falls on both alike, pairs added until each 95% interval is within "
        f"±{round(100 * p.get('ci_target', 0.03), 1):g}% or the cap is reached"
        + ("" if p.get("converged", True) else " (the cap was reached)")
        + " (bytecode cached, as after a first run; CPU is the child's user + system time). "
        "*Installed*: every pytest plugin "
        "of this environment loads, the plugin turned off by `-p no:crashpoint`. *Alone*: "
        "`PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`, pytest with the plugin alone "
        "(`PYTEST_PLUGINS=crashpoint.pytest_plugin`) against pytest with an empty plugin named "
        "the same way (so pytest's own cost of finding a named plugin falls on both sides): "
        "the plugin's own cost, not diluted by the other plugins'. "
        f"Python {p.get('python', '?')}; installed pytest plugins: "
        f"{', '.join(p.get('plugins', [])) or '?'}.",
        "",
        "| | with the plugin, wall ms (p50) | without, wall ms (p50) | ratio | ratio of the "
        "fastest runs | CPU ms with | CPU ms without | CPU ratio | printed by the plugin |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for key, label in (("installed", "installed (`-p no:crashpoint`)"), ("alone", "alone")):
        v = p[key]
        said = "; ".join(f"`{x}`" for x in v.get("printed", [])) or "nothing"
        ci, cpu_ci = (  # the 95% interval of a paired median ratio, where measured so
            f" [{v[k][0]}, {v[k][1]}]" if v.get(k) else "" for k in ("ratio_ci", "cpu_ratio_ci")
        )
        lines.append(
            f"| {label} | {v['with_ms']} | {v['without_ms']} | **{v['ratio']}**{ci} | "
            f"{v.get('min_ratio', '-')} | {v['cpu_with_ms']} | {v['cpu_without_ms']} | "
            f"{v['cpu_ratio']}{cpu_ci} | {said} |"
        )
    mods = p.get("modules", [])
    if p.get("statistic"):
        lines += ["", f"Ratios: {p['statistic']}; in brackets its 95% interval."]
    lines += [
        "",
        f"Target: ratio ≤ {p.get('target', 1.05)} and no output. Loaded by the end of a session "
        f"that never uses crashpoint: {len(mods)} crashpoint modules ("
        + ", ".join(f"`{m}`" for m in mods)
        + "); the harness, the checkpoint library and the faults are imported only when a test "
        "uses a crashpoint fixture or marker or a scenario file is collected.",
        "",
    ]
    return lines


def markdown_planning(pl: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Power-loss planning at 10 / 100 / 1,000 unsynced writes, and a campaign at 1,000",
        "",
        env_line(pl.get("env"), pl),
        "",
    ]
    if "rows" not in pl:
        return [*lines, f"Not measured: {pl.get('note', '?')}", ""]
    shapes = {
        "growing": "growing (the naive agent's `done` list)",
        "fixed": "fixed (~120 B)",
        "append": "append-only log, never synced",
    }
    lines += [
        "`benchmarks/power_planning.py` plans a systematic `power_loss` campaign over a "
        "synthetic golden run as `Campaign.run` does before its first trial (`Campaign.plans`: "
        "the crash states of every point, then one trial plan per state) for an agent that "
        "rewrites its state file in place N times without fsync (the trace of "
        "`naive_agent.py` with N steps); each figure a median of at least "
        f"{pl.get('runs', '?')} planning(s) (more at a small size, until half a second was "
        "spent), after a warm-up. "
        "The last column is the time per state against the fewest writes' (linear planning "
        "keeps it about 1; the states of a file that grows with N are hashed and compared "
        "whole, at C speed).",
        "",
        "| model | state file | writes | operations | states (trials) | seconds | states/s | "
        "µs/state | per state vs the fewest writes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in pl["rows"]:
        lines.append(
            f"| {x.get('model', 'posix')} | {shapes.get(x['shape'], x['shape'])} | "
            f"{x['writes']:,} | {x['operations']:,} | {x['states']:,} | {x['seconds']:.3f} | "
            f"{x['states_per_s'] or 0:,.0f} | {x['us_per_state']} | "
            f"{x['per_state_vs_smallest']} |"
        )
    camps = pl.get("campaigns", [])
    if camps:
        c0 = camps[0]
        lines += [
            "",
            f"Real campaigns, end to end: `benchmarks/naive_agent.py` with {c0['writes']:,} "
            f"steps ({c0['writes']:,} unsynced rewrites of `state.json`), spawned as a "
            f"`{{python}}` command, state on `{pl.get('state_on', '?')}`, each with a budget of "
            f"{c0['budget_s']:g} s (the scenario key `budget`): the whole wall time, its golden "
            "run included, must stay within it; a campaign the budget stops fails and says "
            "why. The golden run's phase is the agent under strace plus reading its trace; "
            "a trial is one crash state materialised and the agent resumed from it. The naive "
            "agent is not safe against a power cut (`state.json` rewritten in place, never "
            "synced): trials that ran find that, so a verdict is FAIL either way; what these "
            "rows show is the time.",
            "",
            "| model | states | golden run: the agent (its whole phase), s | planning, s | "
            "trials run / planned (failed) | trial p50, s | wall, s | wall / budget | verdict "
            "| why it stopped |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for c in camps:
            what = f"{c['count']} drawn" if c.get("count") else "all (systematic)"
            why = c.get("incomplete") or "ran every planned trial"
            why = why.split(". A campaign stopped by its budget fails")[0]
            stopped = " (stopped by the budget)" if c.get("planning_stopped") else ""
            lines.append(
                f"| {c['model']} | {what} | {c['golden_s']} ({c.get('golden_phase_s', '-')}) | "
                f"{c['planning_s']}{stopped} | {c['ran']:,} / {c['planned']:,} "
                f"({c.get('failed', '-')}) | "
                f"{c.get('trial_s') if c.get('trial_s') is not None else '-'} | {c['wall_s']} | "
                f"**{c['wall_over_budget']}** | {c['verdict']} | {why} |"
            )
        lines.append("")
        for c in camps:
            if c.get("projected_s") and c.get("incomplete"):
                lines.append(
                    f"- {c['model']}, every state: at this run's trial time the whole campaign "
                    f"({c['planned']:,} trials) would take about {c['projected_s']:,.0f} s; a "
                    "budget bounds it, `count: K` draws K states by the seed."
                )
        lines.append("")
    return lines


def markdown_full(r: dict[str, Any], secs: dict[str, dict[str, Any] | None]) -> list[str]:
    fallback = {k: r.get(k) for k in ("when", "machine", "versions")}
    lines = [
        "",
        "## Durable step cost",
        "",
        env_line(secs.get("step_cost"), fallback),
        "",
        "| variant | steps a run | p50 µs a step | p99 µs a step | samples | a run's µs / step, "
        "p50 of rounds | the same, mean of rounds | rounds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k, v in r["step_cost"].items():
        lines.append(
            f"| {k} | {v.get('steps', '-')} | {v.get('p50_us', '-')} | {v.get('p99_us', '-')} | "
            f"{v.get('n', '-')} | {v.get('run_p50_us', '-')} | {v.get('run_mean_us', '-')} | "
            f"{v.get('rounds', '-')} |"
        )
    lines += [
        "",
        "`limit` is `os.write` + `os.fdatasync` of the same framed bytes; `ours_*` are "
        "`RunJournal.append`; `ours_run_step` is a whole `Run.step` (the product path). "
        "The peers can only be timed a run at a time (a graph invocation, a workflow): their "
        "figure is a run's wall time minus the same graph / loop without persistence, over its "
        "steps, so the peer ratios compare that with the same figure of ours "
        "(`ours_run_step_peer_n`: a run of `Run.step` at the peers' number of steps, opening "
        "and closing the run included, fsync tails included on both sides). Like for like: "
        "each step of each system stores a 200 B result; the LangGraph state holds the last "
        "result and a counter (it does not grow), DBOS records each step's 200 B output.",
        "",
        "## Growth (bytes written, counted by /proc/self/io wchar)",
        "",
        env_line(secs.get("growth"), fallback),
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
        "SqliteSaver runs the like-for-like graph above (a 200 B result a step in place of the "
        "last); each checkpoint still rewrites the whole state and its metadata.",
        "",
        "## Resume (open + replay to the next step)",
        "",
        env_line(secs.get("resume"), fallback),
        "",
        "| N | p50 ms | max ms |",
        "|---:|---:|---:|",
    ]
    for n, v in r["resume"].items():
        lines.append(f"| {n} | {v['p50_ms']} | {v['max_ms']} |")
    har = r["harness"]
    lines += [
        "",
        "## Harness (the demo agent)",
        "",
        env_line(secs.get("harness"), fallback),
        "",
        f"State on `{har.get('state_on', '?')}`. Time to verdict is the whole campaign's wall "
        "time, its golden run (and in fork mode the zygote's start) included; trials/s counts "
        "the trials alone.",
        "",
        "| campaign | trials | trials/s (a sweep: over its time to verdict) | time to verdict "
        "(s) | verdict |",
        "|---|---:|---:|---:|---|",
    ]

    def ok(x: Any) -> str:
        return "-" if x is None else ("PASS" if x else "FAIL")

    def rate(n: Any, s: Any) -> Any:
        return round(n / s, 1) if n and s else "-"

    for label, trials, per_s, verdict_s, okey in (
        (
            "random kills, spawn",
            har.get("spawn_trials"),
            har.get("spawn_trials_per_s"),
            har.get("spawn_verdict_s"),
            "spawn_ok",
        ),
        (
            "random kills, fork",
            har.get("fork_trials"),
            har.get("fork_trials_per_s"),
            har.get("fork_verdict_s"),
            "fork_ok",
        ),
        (
            "kill at every boundary (a sweep), fork",
            har.get("systematic_fork_trials", har.get("systematic_trials")),
            rate(
                har.get("systematic_fork_trials", har.get("systematic_trials")),
                har.get("systematic_sweep_fork_s"),
            ),
            har.get("systematic_sweep_fork_s"),
            "systematic_fork_ok",
        ),
        (
            "kill at every boundary (a sweep), spawn",
            har.get("systematic_trials"),
            rate(har.get("systematic_trials"), har.get("systematic_sweep_spawn_s")),
            har.get("systematic_sweep_spawn_s"),
            "systematic_ok",
        ),
    ):
        lines.append(
            f"| {label} | {trials if trials is not None else '-'} | {per_s} | "
            f"{verdict_s if verdict_s is not None else '-'} | {ok(har.get(okey))} |"
        )
    if har.get("fork_note"):
        lines.append(f"\n{har['fork_note']}")
    lines += [""]
    return lines


def markdown_powerloss(pl: dict[str, Any]) -> list[str]:
    names = {
        "crashpoint": "crashpoint `power_loss: {model: posix}` (systematic), spawn mode",
        "crashpoint_fork": "the same, fork mode (`entry: naive_agent:run`)",
        "ckpt_chaos": "ckpt-chaos `run --modes torn`",
    }
    unit = pl.get("agent_run", {}).get("run_s")
    lines = [
        "",
        "## Power loss: crash states judged per second",
        "",
        env_line(pl.get("env"), pl),
        "",
        f"The same naive agent (`{pl['agent']}`: five steps, `state.json` rewritten in "
        'place with `open("w")` + `json.dump`, no fsync) under both tools, in '
        f"{pl['rounds']} interleaved rounds, state on `{pl['state_on']}`, one job at a "
        "time. A rate is crash points (states) judged per second of the whole run, its "
        "fault-free reference (golden) run included: the time to verdict."
        + (
            f" One plain run of the agent took {unit} s (p50): every figure below is a "
            "multiple of that start-up."
            if unit
            else ""
        ),
        "",
        "| tool | points per run | p50 points/s | p50 s per point | time to verdict (s, p50) | "
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


def markdown_fileop(fo: dict[str, Any]) -> list[str]:
    tools = {
        "crashpoint": "crashpoint `kill: {at: fileop}` (a sweep), spawn mode",
        "crashpoint_fork": "the same, fork mode (`entry: <agent>:run`)",
        "ckpt_chaos": "ckpt-chaos `run --modes before` (every event)",
    }
    agents = {
        "naive": "naive (`state.json` rewritten in place)",
        "atomic": "kill-safe twin (temp file + `os.replace`)",
    }
    unit = fo.get("agent_run_s")
    lines = [
        "",
        "## Kill at every file operation: crash points per second and time to verdict",
        "",
        env_line(fo.get("env"), fo),
        "",
        "Each tool sweeps one agent's file operations and kills it at each, one job at a time, "
        f"in {fo['rounds']} interleaved round{'s' if fo['rounds'] != 1 else ''}, state on "
        f"`{fo['state_on']}`: "
        "crashpoint's `kill: {at: fileop}` without `count` runs one trial per file operation "
        "of its golden run under `{state_dir}` (each open that creates or truncates, each "
        "write, fsync, rename, unlink), killed just before it, then resumes the agent until it "
        "finishes (up to 4 attempts) and checks the run; ckpt-chaos's `before` mode (its kill: "
        "`os._exit(137)` in the process, nothing flushed; `torn` and `unsynced` alter files "
        "the way a power cut does, `term` is a SIGTERM), with a point budget above its event "
        "count so every event is a point, hard-exits the agent before each file event it "
        "records (each open for write, rename, remove, mkdir), resumes it once, and judges the "
        "resume. Both spawn the same command line (`python <agent> <folder>`); crashpoint "
        "runs again in fork mode. Seconds per crash point = the whole run / its points; time "
        "to verdict = the whole run, its reference (golden) run, ckpt-chaos's control run and "
        "crashpoint's zygote start included. Medians over the rounds; a verdict is FAIL if "
        "any round failed."
        + (f" One plain run of the naive agent took {unit} s (p50)." if unit else ""),
        "",
        "Agents: "
        + ", ".join(f"`{fo['agents'][k]}`" for k in agents if k in fo.get("agents", {}))
        + ".",
        "",
        "| agent | tool | crash points | s per point (p50) | points/s (p50) | time to verdict "
        "(s, p50) | verdict (rounds) | trials / rows (last round) |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for agent, label in agents.items():
        row = fo.get(agent)
        if not row:
            continue
        for key, name in tools.items():
            v = row.get(key, {})
            if "s_per_point" not in v:
                lines.append(f"| {label} | {name} | - | - | - | - | - | {v.get('note', '')} |")
                continue
            verdicts = ", ".join(f"{k} {n}" for k, n in sorted(v.get("verdicts", {}).items()))
            note = f"; {v['note']}" if v.get("note") else ""
            lines.append(
                f"| {label} | {name} | {v['points']} | {v['s_per_point']} | {v['per_s']} | "
                f"{v['verdict_s']} | **{v['verdict']}** ({v['verdict_rounds']}) | "
                f"{verdicts}{note} |"
            )
    lines.append("")
    for agent, label in agents.items():
        row = fo.get(agent)
        if not row:
            continue
        lines.append(
            f"- {label}: ckpt-chaos's seconds per point / crashpoint's: spawn "
            f"**{row.get('per_point_ratio')}**, fork **{row.get('per_point_ratio_fork')}** "
            "(target ≥ 3); crashpoint's time to verdict / ckpt-chaos's: spawn "
            f"**{row.get('verdict_ratio')}**, fork **{row.get('verdict_ratio_fork')}** "
            "(target ≤ 1)."
        )
    lines.append("")
    for agent, label in agents.items():
        row = fo.get(agent) or {}
        for key in ("crashpoint", "crashpoint_fork"):
            v = row.get(key, {})
            if v.get("trial_s") is None:
                continue
            split = ""
            if v.get("failed_trial_s") is not None:
                split = (
                    f" (a passing one {v.get('passed_trial_s')} s, a failing one "
                    f"{v['failed_trial_s']} s: it is resumed until it gives up)"
                )
            lines.append(
                f"- {label}, {tools[key]}: golden run {v['golden_s']} s, one trial "
                f"{v['trial_s']} s (p50){split}, {v.get('attempts')} attempts a trial (p50)."
            )
        cc = row.get("ckpt_chaos", {})
        if cc.get("labels"):
            lines.append(
                f"- {label}, ckpt-chaos's crash points: {cc.get('events')} file events "
                f"({', '.join(cc['labels'])})."
            )
        for key in ("crashpoint", "ckpt_chaos"):
            ex = row.get(key, {}).get("example")
            if ex:
                lines.append(f"- {label}, {tools[key].split(' (')[0]}, a finding: {ex}")
    return [*lines, ""]


if __name__ == "__main__":
    sys.exit(main())
