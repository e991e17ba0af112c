#!/usr/bin/env python3
"""LangGraph savers at 10 to 5,000 steps: CrashpointSaver, SqliteSaver and PostgresSaver.

    python benchmarks/saver_resume.py [--steps 10,100,1000,5000] [--resumes 5]
        [--state flat,grow] [--savers crashpoint,sqlite,postgres] [--dir DIR]
        [--json PATH] [--write-docs]

The graph: one node looping N times, ``durability="sync"`` (each step's checkpoint is written
before the next starts). Two states: ``flat`` (the step's 200 B result and a counter: the state
keeps its size, as an agent that keeps only its last result) and ``grow`` (a list channel with
an add reducer gaining 200 B a step, as a chat history grows: LangGraph hands the saver the
whole list at every step). For each saver, state and N, in fresh processes:

* write: one child process runs the N steps; step cost is (its time - the same graph without
  a checkpointer) / N; writer memory growth is the child's resident set after the run minus
  before it (``VmRSS``, after a garbage collection; the graph's own output is held in both);
  peak is ``VmHWM`` after minus ``VmRSS`` before;
* resume: ``--resumes`` more child processes per saver each open the saver and read the
  thread's latest checkpoint (``get_tuple``), timed from the saver's construction to the tuple
  in hand (wall clock and the process's CPU time, steadier on a shared machine); the savers'
  resumes are interleaved (the order turning each round) so each sees the same machine; the
  median is shown; each checks the state read is the state written;
* bytes on disk after the run (PostgresSaver: ``pg_total_relation_size`` of its tables).

PostgresSaver runs when a throw-away server can be started here
(:class:`crashpoint.harness.PostgresServer`, fsync on; the DSN with its password reaches the
children in their environment, never in argv); otherwise its column says why not. Not a
test: nothing here asserts a timing. ``--write-docs`` stores benchmarks/results/saver_resume.json
and rewrites the table in docs/reference/checkpointer-comparison.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "saver_resume.json")
DOCS = os.path.join(ROOT, "docs", "reference", "checkpointer-comparison.md")
BEGIN, END = "<!-- saver_resume:begin -->", "<!-- saver_resume:end -->"
PAYLOAD = "x" * 200
DSN_ENV = "CRASHPOINT_BENCH_DSN"  # the PostgreSQL DSN carries a password: never in argv
SAVERS = ("crashpoint", "sqlite", "postgres")
NAMES = {"crashpoint": "CrashpointSaver", "sqlite": "SqliteSaver", "postgres": "PostgresSaver"}


# -- in the child processes -----------------------------------------------------------------------


def graph(steps: int, state: str) -> Any:
    import operator
    from typing import Annotated, TypedDict

    from langgraph.graph import END as LG_END
    from langgraph.graph import StateGraph

    if state == "grow":
        S: Any = TypedDict("S", {"items": Annotated[list[str], operator.add], "n": int})

        def node(s: Any) -> dict[str, Any]:
            return {"items": [PAYLOAD], "n": s["n"] + 1}

    else:
        S = TypedDict("S", {"result": str, "n": int})  # noqa: UP013

        def node(s: Any) -> dict[str, Any]:
            return {"result": f"{s['n']:06d}" + PAYLOAD[6:], "n": s["n"] + 1}

    g = StateGraph(S)
    g.add_node("step", node)
    g.set_entry_point("step")
    g.add_conditional_edges("step", lambda s: LG_END if s["n"] >= steps else "step")
    return g


def first_input(state: str) -> dict[str, Any]:
    return {"items": [], "n": 0} if state == "grow" else {"result": "", "n": 0}


def saver_class(saver: str) -> Any:
    """Imported before anything is timed (a resume is not an import)."""
    if saver == "crashpoint":
        from crashpoint.adapters.langgraph_saver import CrashpointSaver

        return CrashpointSaver
    if saver == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        return SqliteSaver
    from langgraph.checkpoint.postgres import PostgresSaver

    return PostgresSaver


@contextlib.contextmanager
def opened(saver: str, folder: str) -> Iterator[Any]:
    cls = saver_class(saver)
    if saver == "crashpoint":
        with cls(os.path.join(folder, "cp")) as s:
            yield s
    elif saver == "sqlite":
        conn = sqlite3.connect(os.path.join(folder, "lg.sqlite"), check_same_thread=False)
        try:
            yield cls(conn)
        finally:
            conn.close()
    else:
        with cls.from_conn_string(os.environ[DSN_ENV]) as s:
            yield s


def proc_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def wchar() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def child_write(saver: str, folder: str, steps: int, state: str) -> dict[str, Any]:
    cfg: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": steps + 10}
    g = graph(steps, state)
    saver_class(saver)
    if saver == "postgres":
        with opened(saver, folder) as s:
            s.setup()
    gc.collect()
    rss0 = proc_kb("VmRSS")
    w0 = wchar()
    t = time.perf_counter()
    with opened(saver, folder) as s:
        out = g.compile(checkpointer=s).invoke(first_input(state), cfg, durability="sync")
    took = time.perf_counter() - t
    written = wchar() - w0
    gc.collect()
    rss1, hwm = proc_kb("VmRSS"), proc_kb("VmHWM")
    plain = g.compile()
    t = time.perf_counter()
    plain.invoke(first_input(state), {"recursion_limit": steps + 10})
    base = time.perf_counter() - t
    return {
        "step_s": max(0.0, (took - base) / steps),
        "rss_growth": (rss1 - rss0) * 1024,
        "peak_growth": (hwm - rss0) * 1024,
        "bytes_written": written,
        "n": out["n"],
    }


def child_resume(saver: str, folder: str, steps: int, state: str) -> dict[str, Any]:
    cfg: Any = {"configurable": {"thread_id": "t"}}
    saver_class(saver)
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    with opened(saver, folder) as s:
        t1 = time.perf_counter()
        tup = s.get_tuple(cfg)
        t2, c2 = time.perf_counter(), time.process_time()
    values = tup.checkpoint["channel_values"] if tup else {}
    ok = values.get("n") == steps and (
        len(values.get("items", ())) == steps if state == "grow" else True
    )
    return {"resume_s": t2 - t0, "resume_cpu_s": c2 - c0, "get_tuple_s": t2 - t1, "ok": ok}


# -- the parent -----------------------------------------------------------------------------------


def in_child(
    mode: str, saver: str, folder: str, steps: int, state: str, env: dict[str, str]
) -> Any:
    cmd = [sys.executable, __file__, "--child", mode, saver, folder, str(steps), state]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"{NAMES[saver]} {mode} at {steps} steps failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def dir_size(path: str) -> int:
    total = 0
    for dp, _d, files in os.walk(path):
        for n in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dp, n)).st_size
    return total


def pg_bytes(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg_toast%'"
        ).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def postgres(wanted: bool) -> Iterator[tuple[Any, str | None]]:
    """A throw-away server (or None and why not)."""
    if not wanted:
        yield None, "not asked for"
        return
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
        import psycopg  # noqa: F401

        from crashpoint.harness import PostgresServer
        from crashpoint.harness._standins._postgres import unavailable
    except ImportError as exc:
        yield None, f"not installed: {exc}"
        return
    why = unavailable()
    if why:
        yield None, why
        return
    with PostgresServer.start(fsync=True) as pg:
        yield pg, None


def written(saver: str, steps: int, state: str, work: str, pg: Any) -> dict[str, Any]:
    """One saver's thread of ``steps`` steps, written in a child: its figures, folder, env."""
    folder = tempfile.mkdtemp(dir=work)
    env = dict(os.environ)
    dsn = None
    if saver == "postgres":
        db = f"b_{state}_{steps}"
        pg.create_database(db)
        dsn = pg.dsn(db)
        env[DSN_ENV] = dsn
    w = in_child("write", saver, folder, steps, state, env)
    if w["n"] != steps:
        raise RuntimeError(f"{NAMES[saver]}: the run stopped at step {w['n']} of {steps}")
    disk = pg_bytes(dsn) if dsn else dir_size(folder)
    return {"w": w, "folder": folder, "env": env, "disk": disk}


def figures(saver: str, t: dict[str, Any], rs: list[dict[str, Any]]) -> dict[str, Any]:
    if not all(r["ok"] for r in rs):
        raise RuntimeError(f"{NAMES[saver]}: the state read back is not the state written")
    w = t["w"]
    return {
        "step_s": w["step_s"],
        "rss_growth": w["rss_growth"],
        "peak_growth": w["peak_growth"],
        "bytes_written": w["bytes_written"],
        "disk_bytes": t["disk"],
        "resume_s": statistics.median(r["resume_s"] for r in rs),
        "resume_cpu_s": statistics.median(r["resume_cpu_s"] for r in rs),
        "get_tuple_s": statistics.median(r["get_tuple_s"] for r in rs),
        "resumes": [r["resume_s"] for r in rs],
        "resumes_cpu": [r["resume_cpu_s"] for r in rs],
    }


def machine(work: str) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    cpu = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    fs, best = "?", ""
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and work.startswith(parts[1]) and len(parts[1]) > len(best):
                best, fs = parts[1], parts[2]
    out: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "fs": fs,
        "python": platform.python_version(),
    }
    for pkg in (
        "langgraph",
        "langgraph-checkpoint-sqlite",
        "langgraph-checkpoint-postgres",
        "psycopg",
    ):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "-"
    return out


def run(
    steps: list[int], states: list[str], savers: list[str], resumes: int, work: str
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with postgres("postgres" in savers) as (pg, why):
        if pg is not None:
            version = pg.psql("SHOW server_version").strip()
        for state in states:
            for n in steps:
                row: dict[str, Any] = {"state": state, "steps": n}
                threads: dict[str, dict[str, Any]] = {}
                try:
                    for saver in savers:
                        if saver == "postgres" and pg is None:
                            row[saver] = {"skipped": why}
                            continue
                        print(f"{state} x {n}: {NAMES[saver]} ...", file=sys.stderr, flush=True)
                        threads[saver] = written(saver, n, state, work, pg)
                    # resumes interleaved, the order turning: each saver sees the same machine
                    got: dict[str, list[dict[str, Any]]] = {s: [] for s in threads}
                    order = list(threads)
                    for r in range(resumes):
                        for saver in order[r % len(order) :] + order[: r % len(order)]:
                            t = threads[saver]
                            got[saver].append(
                                in_child("resume", saver, t["folder"], n, state, t["env"])
                            )
                    for saver, t in threads.items():
                        row[saver] = figures(saver, t, got[saver])
                finally:
                    for t in threads.values():
                        shutil.rmtree(t["folder"], ignore_errors=True)
                rows.append(row)
    info = machine(os.path.realpath(work))
    if pg is not None:
        info["postgresql"] = version
    return {
        "rows": rows,
        "resumes": resumes,
        "payload_bytes": len(PAYLOAD),
        "machine": info,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


# -- output ---------------------------------------------------------------------------------------


def _fmt(v: float, scale: float, nd: int) -> str:
    return f"{v * scale:,.{nd}f}"


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    savers = [s for s in SAVERS if any(s in row for row in r["rows"])]
    head = [NAMES[s] for s in savers]
    pg_note = ""
    skipped = {
        row[s].get("skipped") for row in r["rows"] for s in savers if "skipped" in row.get(s, {})
    }
    if skipped:
        pg_note = f" PostgresSaver not run: {'; '.join(sorted(str(x) for x in skipped))}."
    elif "postgres" in savers:
        pg_note = f" PostgreSQL {m.get('postgresql', '?')} on the same machine, fsync on."
    out = [
        f"One run on {r['date']}: {m['cpus']} CPUs ({m['cpu']}), kernel {m['kernel']}, "
        f"{m['fs']}, Python {m['python']}, langgraph {m['langgraph']}, "
        f"langgraph-checkpoint-sqlite {m['langgraph-checkpoint-sqlite']}, "
        f"langgraph-checkpoint-postgres {m['langgraph-checkpoint-postgres']}.{pg_note} "
        f"Resume: median of {r['resumes']} fresh processes.",
        "",
    ]
    metrics = [
        ("write, ms per step", "step_s", 1e3, 3),
        ("resume, ms (open + `get_tuple` of the latest, fresh process)", "resume_s", 1e3, 2),
        ("resume, CPU ms (the same)", "resume_cpu_s", 1e3, 2),
        ("writer memory growth, MB", "rss_growth", 1e-6, 1),
        ("bytes on disk", "disk_bytes", 1, 0),
    ]
    for state in dict.fromkeys(row["state"] for row in r["rows"]):
        rows = [row for row in r["rows"] if row["state"] == state]
        what = (
            "a 200 B result and a counter (the state keeps its size)"
            if state == "flat"
            else "a list gaining 200 B a step (a chat history)"
        )
        out += [f"State: {what}.", ""]
        out.append("| steps | metric | " + " | ".join(head) + " | ours / SqliteSaver |")
        out.append("|---:|---|" + "---:|" * len(head) + "---:|")
        for row in rows:
            for label, key, scale, nd in metrics:
                cells = []
                for s in savers:
                    cell = row.get(s, {})
                    cells.append("-" if key not in cell else _fmt(cell[key], scale, nd))
                ours = row.get("crashpoint", {}).get(key)
                sq = row.get("sqlite", {}).get(key)
                ratio = f"{ours / sq:.2f}" if ours is not None and sq else "-"
                out.append(f"| {row['steps']:,} | {label} | " + " | ".join(cells) + f" | {ratio} |")
        out.append("")
    return "\n".join(out)


def write_docs(r: dict[str, Any]) -> None:
    with open(DOCS) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOCS}: no {BEGIN} ... {END} block to replace")
    pre, rest = text.split(BEGIN, 1)
    _, post = rest.split(END, 1)
    with open(DOCS, "w") as f:
        f.write(pre + BEGIN + "\n" + markdown(r) + END + post)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        mode, saver, folder, steps, state = argv[1:6]
        fn = child_write if mode == "write" else child_resume
        print(json.dumps(fn(saver, folder, int(steps), state)))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", default="10,100,1000,5000")
    ap.add_argument("--state", default="flat,grow")
    ap.add_argument("--savers", default=",".join(SAVERS))
    ap.add_argument("--resumes", type=int, default=5)
    ap.add_argument("--dir", default=os.path.join(HERE, ".work"))
    ap.add_argument("--json", default=None, help="also write the result here")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    try:
        steps = [int(x) for x in args.steps.split(",") if x]
    except ValueError:
        ap.error(f"--steps: a comma-separated list of integers, not {args.steps!r}")
    states = [s for s in args.state.split(",") if s]
    savers = [s for s in args.savers.split(",") if s]
    for s in states:
        if s not in ("flat", "grow"):
            ap.error(f"--state: 'flat' and/or 'grow', not {s!r}")
    for s in savers:
        if s not in SAVERS:
            ap.error(f"--savers: some of {', '.join(SAVERS)}, not {s!r}")
    if not steps or min(steps) < 1 or args.resumes < 1:
        ap.error("--steps and --resumes must be positive")
    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(dir=args.dir)
    try:
        r = run(steps, states, savers, args.resumes, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2, sort_keys=True)
    if args.write_docs:
        os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
        with open(RESULTS, "w") as f:
            json.dump(r, f, indent=2, sort_keys=True)
        write_docs(r)
    print(markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
