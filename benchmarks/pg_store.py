#!/usr/bin/env python3
"""PostgreSQL checkpointing side by side: crashpoint's PostgresStore, LangGraph's PostgresSaver
and DBOS, on ONE real PostgreSQL server (fsync on) started by this script, in one run.

    python benchmarks/pg_store.py [--steps N] [--repeat K] [--json PATH] [--write-docs]

For each system, K times (interleaved): N steps of a 200 B result appended durably (step cost,
wall time of the N steps / N), then a reopen in a fresh connection that replays the N done
steps and reaches step N+1 (resume). Each system has a database of its own on the server, so
the bytes it stores per step are the growth of ``pg_total_relation_size`` over its tables
(indexes and TOAST included) across the N steps. Figures are medians over the K repeats.

- crashpoint: ``open_run(open_store(dsn), run_id, steps=[N+1 names])`` and ``run.step``
  (one fenced transaction per step, committed before ``step`` returns).
- LangGraph: an agent-shaped graph (node ``step`` looping N times, then node ``last``)
  compiled with ``PostgresSaver``, ``interrupt_before`` the last node, ``invoke(...,
  durability="sync")`` (each super-step's checkpoint committed before the next runs: the same
  promise as ours; LangGraph's default, "async", writes in the background). A real graph
  rather than bare ``saver.put`` calls, because the graph decides what a checkpoint holds
  (channel versions, pending writes) and that is what users pay for; a loop rather than a chain
  of N distinct nodes, because every node adds channels to every checkpoint (a 200-node chain
  stored ~8 KB per step here). Resume: new connection, compile, ``invoke(None, config)`` until
  the last node runs; also ``get_tuple`` alone (load the latest checkpoint).
- DBOS: a workflow of N ``@DBOS.step()`` calls, system database on the same server. DBOS is a
  process-wide singleton, so it runs in child processes: each one launches DBOS (which
  recovers the workflow the previous child left PENDING by dying inside step N+1, timed from
  ``DBOS(config)`` to step N+1 running), runs an N-step workflow, then dies the same way.

Skipped with the reason (never a crash) when no server can be started or psycopg is missing;
a peer that is not installed is reported as skipped. Benchmarks are not tests: nothing here
asserts a timing. ``--write-docs`` stores the result in benchmarks/results/pg_store.json and
rewrites the PostgreSQL section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "pg_store.json")
DOCS = os.path.join(ROOT, "docs", "BENCHMARKS.md")
BEGIN, END = "<!-- pg_store:begin -->", "<!-- pg_store:end -->"
PAYLOAD = "x" * 200  # one step's result


def med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def db_bytes(dsn: str) -> int:
    """Bytes of every user table of the database (indexes and TOAST included)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg_toast%'"
        ).fetchone()
    return int(row[0]) if row else 0


def fs_type(path: str) -> str:
    best, kind = "", "?"
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and path.startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


def unavailable() -> str | None:
    """Why this benchmark cannot run here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install 'crashpoint[postgres]'"
    try:
        from crashpoint.harness._standins._postgres import unavailable as server_unavailable
    except ImportError as e:
        return f"crashpoint is not importable ({e}): pip install -e ."
    return server_unavailable()


def peer_missing(module: str, extra: str) -> str | None:
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:
        found = False
    return None if found else f"{module} is not installed (pip install {extra})"


# -- crashpoint ---------------------------------------------------------------------------------


def ours_once(dsn: str, steps: int, rep: int) -> dict[str, Any]:
    from crashpoint.checkpoint import open_run, open_store

    names = [f"s{i}" for i in range(steps + 1)]
    rid = f"bench-{rep}"
    store = open_store(dsn)
    try:
        store.run_ids()  # connect and create the schema outside the timing
        before = db_bytes(dsn)
        with open_run(store, rid, steps=names) as run:
            t = time.perf_counter()
            for name in names[:-1]:
                run.step(name, lambda: PAYLOAD)
            took = time.perf_counter() - t
        stored = db_bytes(dsn) - before
    finally:
        store.close()
    calls = {"replayed": 0, "next": 0}
    reached = 0.0

    def replayed() -> str:
        calls["replayed"] += 1
        return PAYLOAD

    def nxt() -> str:
        nonlocal reached
        reached = time.perf_counter()
        calls["next"] += 1
        return PAYLOAD

    t0 = time.perf_counter()
    store = open_store(dsn)  # a fresh connection, as a restarted worker has
    try:
        with open_run(store, rid, steps=names) as run:
            for name in names[:-1]:
                run.step(name, replayed)
            run.step(names[-1], nxt)
            run.finish("done")
    finally:
        store.close()
    return {
        "step_s": took / steps,
        "bytes_per_step": stored / steps,
        "resume_s": reached - t0,
        "ok": calls == {"replayed": 0, "next": 1},
        "calls": calls,
    }


# -- LangGraph ------------------------------------------------------------------------------------


def langgraph_builder(steps: int, marks: dict[str, float]) -> Any:
    """An agent-shaped graph: node ``step`` loops N times, then node ``last`` (step N+1)."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    S = TypedDict("S", {"result": str, "n": int})  # noqa: UP013

    def step(s: Any) -> dict[str, Any]:
        return {"result": PAYLOAD, "n": s["n"] + 1}

    def last(s: Any) -> dict[str, Any]:
        marks["next"] = time.perf_counter()
        marks["next_calls"] = marks.get("next_calls", 0) + 1
        return {"result": PAYLOAD, "n": s["n"] + 1}

    g = StateGraph(S)
    g.add_node("step", step)
    g.add_node("last", last)
    g.add_edge(START, "step")
    g.add_conditional_edges(
        "step", lambda s: "last" if s["n"] >= steps else "step", ["step", "last"]
    )
    g.add_edge("last", END)
    return g


def langgraph_once(dsn: str, steps: int, rep: int) -> dict[str, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    marks: dict[str, float] = {}
    g = langgraph_builder(steps, marks)
    last = "last"
    config: Any = {"configurable": {"thread_id": f"bench-{rep}"}, "recursion_limit": steps + 10}
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        app = g.compile(checkpointer=saver, interrupt_before=[last])
        before = db_bytes(dsn)
        t = time.perf_counter()
        app.invoke({"result": "", "n": 0}, config, durability="sync")
        took = time.perf_counter() - t
        stored = db_bytes(dsn) - before
    t0 = time.perf_counter()
    with PostgresSaver.from_conn_string(dsn) as saver:
        tup = saver.get_tuple(config)
        get_tuple_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with PostgresSaver.from_conn_string(dsn) as saver:
        app = g.compile(checkpointer=saver, interrupt_before=[last])
        out = app.invoke(None, config, durability="sync")
    resumed_n = tup.checkpoint["channel_values"].get("n") if tup else None
    # baseline: the same graph with no checkpointer (LangGraph's own per-step cost)
    plain = g.compile()
    t = time.perf_counter()
    plain.invoke({"result": "", "n": 0}, {"recursion_limit": steps + 10})
    base = (time.perf_counter() - t) / (steps + 1)
    return {
        "step_s": took / steps,
        "bytes_per_step": stored / steps,
        "resume_s": marks.get("next", t0) - t0,
        "get_tuple_s": get_tuple_s,
        "no_checkpointer_step_s": base,
        "ok": resumed_n == steps and out.get("n") == steps + 1 and marks.get("next_calls") == 2,
    }  # once resumed, once in the baseline


# -- DBOS (in child processes) ------------------------------------------------------------------


def dbos_child(dsn: str, steps: int, rep: int, mode: str, out: str) -> int:
    """One DBOS process: recover ``crash-{rep-1}`` if rep > 0, then (mode "run") run the
    ``steps-{rep}`` workflow, write the figures to ``out``, start ``crash-{rep}`` and die inside
    its step N+1 (mode "last": recover only, then exit cleanly)."""
    import logging

    logging.getLogger("dbos").setLevel(logging.WARNING)
    from dbos import DBOS, SetWorkflowID

    flags = {"crash": False}
    marks: dict[str, Any] = {"executed": 0}
    result: dict[str, Any] = {}

    @DBOS.step()
    def step(i: int) -> str:
        marks["executed"] += 1
        if i == steps:
            marks["next"] = time.perf_counter()
            if flags["crash"]:
                os._exit(0)  # a crash inside step N+1: the workflow stays PENDING
        return PAYLOAD

    @DBOS.workflow()
    def flow(n: int, upto: int) -> int:
        marks.setdefault("entered", time.perf_counter())  # the recovered workflow's body
        for i in range(upto):
            step(i)
        return n

    t0 = time.perf_counter()
    DBOS(config={"name": "crashpoint-pg-bench", "system_database_url": dsn, "log_level": "WARNING"})
    DBOS.launch()
    result["launch_s"] = time.perf_counter() - t0
    if rep > 0:
        value: Any = DBOS.retrieve_workflow(f"crash-{rep - 1}").get_result()
        result["resume_s"] = marks.get("next", t0) - t0
        result["workflow_entered_s"] = marks.get("entered", t0) - t0
        result["resume_ok"] = value == steps and marks["executed"] == 1
    if mode == "run":
        before = db_bytes(dsn)
        marks["executed"] = 0
        with SetWorkflowID(f"steps-{rep}"):
            t = time.perf_counter()
            flow(steps, steps)
            result["step_s"] = (time.perf_counter() - t) / steps
        result["bytes_per_step"] = (db_bytes(dsn) - before) / steps
        result["steps_ok"] = marks["executed"] == steps
    with open(out, "w") as f:
        json.dump(result, f)
    if mode == "run":
        flags["crash"] = True
        with SetWorkflowID(f"crash-{rep}"):
            flow(steps, steps + 1)
        return 3  # not reached: step N+1 exits the process
    DBOS.destroy()
    return 0


#: How the DBOS child gets its DSN: in the environment, since the DSN carries the server's
#: password and a command line is world readable.
DSN_VAR = "CRASHPOINT_BENCH_DSN"


def dbos_in_child(dsn: str, steps: int, rep: int, mode: str, work: str) -> dict[str, Any]:
    out = os.path.join(work, f"dbos-{rep}.json")
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.abspath(__file__),
            "--dbos-child",
            str(steps),
            str(rep),
            mode,
            out,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, DSN_VAR: dsn},
    )
    try:
        log, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise RuntimeError("a DBOS child process did not finish within 180 s") from None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its leftovers, if any
    if not os.path.exists(out):
        tail = log.decode("utf-8", "replace").strip()[-1500:]
        raise RuntimeError(f"DBOS child exited {proc.returncode} without a result: {tail}")
    with open(out) as f:
        return dict(json.load(f))


# -- the run --------------------------------------------------------------------------------------


@contextlib.contextmanager
def server() -> Iterator[Any]:
    from crashpoint.harness import PostgresServer

    with PostgresServer.start(fsync=True) as pg:
        yield pg


def bench(steps: int, repeat: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    reason = unavailable()
    if reason:
        return {"skipped": reason}
    lg_missing = peer_missing("langgraph.checkpoint.postgres", "langgraph-checkpoint-postgres")
    dbos_missing = peer_missing("dbos", "'crashpoint[dbos]'")
    samples: dict[str, dict[str, list[float]]] = {"ours": {}, "langgraph": {}, "dbos": {}}
    ok: dict[str, bool] = {"ours": True, "langgraph": True, "dbos": True}
    errors: dict[str, str] = {}

    def add(system: str, figures: dict[str, Any]) -> None:
        for k, v in figures.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                samples[system].setdefault(k, []).append(float(v))
        for k in ("ok", "steps_ok", "resume_ok"):
            if k in figures:
                ok[system] = ok[system] and bool(figures[k])

    with server() as pg, tempfile.TemporaryDirectory(prefix="crashpoint-pgbench-") as work:
        version = pg.psql("SHOW server_version").strip()
        filesystem = fs_type(os.path.realpath(pg.data_dir))
        dsn = {s: pg.create_database(f"bench_{s}") for s in samples}
        log(
            f"PostgreSQL {version} (fsync on, data on {filesystem}) on 127.0.0.1:{pg.port}; "
            f"{repeat} x {steps} steps per system"
        )
        runners: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
            ("ours", lambda r: ours_once(dsn["ours"], steps, r))
        ]
        if lg_missing is None:
            runners.append(("langgraph", lambda r: langgraph_once(dsn["langgraph"], steps, r)))
        if dbos_missing is None:
            runners.append(("dbos", lambda r: dbos_in_child(dsn["dbos"], steps, r, "run", work)))
        for rep in range(repeat):
            order = runners if rep % 2 == 0 else list(reversed(runners))
            for system, fn in order:
                if system in errors:
                    continue
                try:
                    add(system, fn(rep))
                except Exception as e:  # a peer's failure skips its column, never the run
                    errors[system] = f"{type(e).__name__}: {str(e).strip()[:600]}"
                    log(f"{system}: failed: {errors[system]}")
        if dbos_missing is None and "dbos" not in errors:
            try:  # the last child recovers the workflow the previous one left behind
                add("dbos", dbos_in_child(dsn["dbos"], steps, repeat, "last", work))
            except Exception as e:
                errors["dbos"] = f"{type(e).__name__}: {str(e).strip()[:600]}"
    skipped = {"langgraph": lg_missing, "dbos": dbos_missing}
    result: dict[str, Any] = {
        "steps": steps,
        "repeat": repeat,
        "payload_bytes": len(PAYLOAD),
        "postgres": version,
        "filesystem": filesystem,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "versions": versions(),
        "systems": {},
    }
    for system, figs in samples.items():
        if skipped.get(system) or system in errors:
            result["systems"][system] = {
                "skipped": skipped.get(system) or f"failed: {errors[system]}"
            }
            continue
        result["systems"][system] = {
            **{k: med(v) for k, v in figs.items()},
            "ok": ok[system],
            "resumes": len(figs.get("resume_s", [])),
        }
    base = result["systems"]["ours"]
    for v in result["systems"].values():
        for k in ("step_s", "resume_s", "bytes_per_step"):
            if v.get(k) is not None and base.get(k):
                v[f"{k}_x_ours"] = round(v[k] / base[k], 2)
    return result


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("crashpoint", "psycopg", "langgraph", "langgraph-checkpoint-postgres", "dbos"):
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


# -- output ---------------------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.3f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(r: dict[str, Any]) -> list[str]:
    """The side-by-side table (markdown), from a :func:`bench` result."""
    if "skipped" in r:
        return [f"Skipped: {r['skipped']}."]
    s = r["systems"]
    lines = [
        "| system | per step ms (p50) | x ours | bytes stored per step | x ours | "
        "resume ms (p50) | x ours | checks |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    names = {
        "ours": "crashpoint `PostgresStore` (`Run.step`)",
        "langgraph": 'LangGraph `PostgresSaver` (graph, `durability="sync"`)',
        "dbos": "DBOS (`@DBOS.step` in a workflow)",
    }
    for key, name in names.items():
        v = s[key]
        if "skipped" in v:
            lines.append(f"| {name} | - | - | - | - | - | - | skipped: {v['skipped']} |")
            continue
        bps = v.get("bytes_per_step")
        lines.append(
            f"| {name} | {_ms(v.get('step_s'))} | {_x(v.get('step_s_x_ours'))} | "
            f"{'-' if bps is None else round(bps)} | {_x(v.get('bytes_per_step_x_ours'))} | "
            f"{_ms(v.get('resume_s'))} | {_x(v.get('resume_s_x_ours'))} | "
            f"{'ok' if v.get('ok') else 'FAILED'} |"
        )
    lg, db = s["langgraph"], s["dbos"]
    if "skipped" not in lg:
        lines.append(
            f"| LangGraph, same graph without a checkpointer | "
            f"{_ms(lg.get('no_checkpointer_step_s'))} | - | 0 | - | - | - | - |"
        )
        lines.append(
            f"| LangGraph `get_tuple` alone (open + load the latest checkpoint) | - | - "
            f"| - | - | {_ms(lg.get('get_tuple_s'))} | "
            f"{_x(ratio(lg.get('get_tuple_s'), s['ours'].get('resume_s')))} | - |"
        )
    if "skipped" not in db and db.get("launch_s") is not None:
        lines.append(
            f"| DBOS `DBOS(config)` + `launch()` alone (included in its resume) | - | "
            f"- | - | - | {_ms(db.get('launch_s'))} | - | - |"
        )
    if "skipped" not in db and db.get("workflow_entered_s") is not None:
        lines.append(
            "| DBOS until the recovered workflow's body starts (recovery re-enqueues it "
            "on an internal queue; a poller dequeues it) | - | - | - | - | "
            f"{_ms(db.get('workflow_entered_s'))} | - | - |"
        )
    return lines


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def saved_markdown() -> list[str]:
    """The section for the result saved by ``--write-docs`` (none yet: no lines)."""
    if not os.path.exists(RESULTS):
        return []
    with open(RESULTS) as f:
        return ["", *markdown(json.load(f))]


def markdown(r: dict[str, Any]) -> list[str]:
    """The docs/BENCHMARKS.md section for a :func:`bench` result."""
    lines = [BEGIN, "## PostgreSQL: crashpoint vs LangGraph's PostgresSaver vs DBOS", ""]
    if "skipped" in r:
        return [*lines, f"Not measured: {r['skipped']}.", "", END]
    m, ver = r["machine"], r["versions"]
    lines += [
        f"One PostgreSQL {r['postgres']} server (fsync on, `synchronous_commit=on`, data on "
        f"`{r.get('filesystem', '?')}`, loopback) "
        "started by the script; each system in a database of its own; "
        f"N={r['steps']} steps of a {r['payload_bytes']} B result, {r['repeat']} interleaved "
        f"repeats, medians. Measured {r['when']} on {m['cpus']} CPUs ({m['cpu']}), kernel "
        f"{m['kernel']}; " + ", ".join(f"{k} {v}" for k, v in ver.items()) + ". "
        "Reproduce: `python benchmarks/pg_store.py [--steps N] [--repeat K] [--write-docs]` "
        "(or `python benchmarks/run.py --only pg`).",
        "",
        *table(r),
        "",
        "- **Per step**: wall time of the N durable steps / N. Ours is one fenced transaction "
        "per step (lease generation checked, record appended, committed). LangGraph runs a "
        "graph whose node `step` loops N times before node `last`, interrupted before `last`, "
        "with "
        '`durability="sync"` (each checkpoint committed before the next node: our promise; '
        "its default `async` writes in the background); a real graph, not bare `saver.put` "
        "calls, because the graph decides what each checkpoint holds (a loop, not a chain of N "
        "distinct nodes: each node adds channels to every checkpoint). DBOS: one workflow of N "
        "`@DBOS.step()` calls, its system database on the same server.",
        "- **Bytes stored per step**: growth of `pg_total_relation_size` (indexes and TOAST "
        "included) of the system's tables over the N steps / N; PostgreSQL allocates 8 KiB "
        "pages, so small N is coarse.",
        "- **Resume**: a fresh connection (a restarted worker), from opening to step N+1 "
        "running. Ours: `open_store` + `open_run` + replay of the N done steps (their "
        "functions are not called). LangGraph: `compile` + `invoke(None, config)` until the "
        "last node runs. DBOS: a new process after the previous one died inside step N+1: "
        "`DBOS(config)` + `launch()` (whose startup recovery re-runs the PENDING workflow, the "
        "N recorded steps returning their stored outputs) until step N+1 runs; that recovery "
        "re-enqueues the workflow on an internal queue that a thread polls, which is most of "
        "its figure. `checks`: the "
        "replayed steps were not re-executed and step N+1 ran once.",
        "",
        END,
    ]
    return lines


def write_docs(r: dict[str, Any]) -> None:
    if "skipped" in r and os.path.exists(RESULTS):
        print(f"not measured ({r['skipped']}); keeping the previous result in {RESULTS}")
        return
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(r, f, indent=2, sort_keys=True)
    section = "\n".join(markdown(r))
    text = ""
    if os.path.exists(DOCS):
        with open(DOCS, encoding="utf-8") as f:
            text = f.read()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(DOCS, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=200, help="steps per run (default 200)")
    ap.add_argument("--repeat", type=int, default=5, help="repeats per system (default 5)")
    ap.add_argument("--json", metavar="PATH", help="also write the result as JSON to PATH")
    ap.add_argument(
        "--write-docs",
        action="store_true",
        help="store the result in benchmarks/results/pg_store.json and rewrite the "
        "PostgreSQL section of docs/BENCHMARKS.md",
    )
    ap.add_argument(
        "--dbos-child",
        nargs=4,
        metavar=("STEPS", "REP", "MODE", "OUT"),
        help=argparse.SUPPRESS,
    )
    args = ap.parse_args(argv)
    if args.dbos_child:
        n, rep, mode, out = args.dbos_child
        return dbos_child(os.environ[DSN_VAR], int(n), int(rep), mode, out)
    if args.steps < 1 or args.repeat < 1:
        ap.error("--steps and --repeat must be at least 1")
    r = bench(args.steps, args.repeat, log=lambda s: print(s, flush=True))
    print("\n".join(table(r)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2, sort_keys=True)
    if args.write_docs:
        write_docs(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
