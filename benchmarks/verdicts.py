#!/usr/bin/env python3
"""crashpoint's own confusion matrix: correct agents must PASS, their buggy twins must FAIL on
the check that names their bug.

    python benchmarks/verdicts.py [--only SUBSTR ...] [--trials N] [--jobs J] [--out DIR]
                                  [--no-doc] [--render]

Runs every cell of ``tests/verdicts/matrix.yaml`` (24 agents across LangGraph, DBOS, the
OpenAI SDK, Node.js, shell on the lifecycle CLI and plain Python with SQLite or JSON state)
through the gate as users run it (``crashpoint run FILE --report DIR``), prints the matrix
(agent, variant, expected, got, checks failed, trials, seconds) and the totals (true pass,
true fail on the right check, false alarm, miss, wrong check), lists each false alarm and miss
with the check's message, hint and trial folder, and writes ``docs/verdicts.md`` and
``benchmarks/results/verdicts.json``.

* ``--only`` keeps cells whose id (``AGENT:VARIANT[@strict]``) contains one of the strings;
* ``--trials N`` sets the ``count`` of every drawn fault family (boundary sweeps stay whole);
* ``--jobs J`` runs J cells at once (each is one ``crashpoint run``);
* ``--render`` rewrites ``tests/verdicts/scenarios/`` from the manifest and exits.

Agents whose extras are missing (LangGraph, DBOS, the OpenAI SDK, node, PostgreSQL) are
shown as skipped with the reason. A PostgreSQL server is started for the DBOS-on-PostgreSQL
agent when the binaries are found.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "verdicts"))
sys.path.insert(0, str(ROOT / "src"))

import _matrix as m  # noqa: E402 (found through the path set above)

COLUMNS = ("agent", "variant", "expected", "got", "checks failed", "trials", "s", "outcome")


def row(r: m.CellResult) -> tuple[str, ...]:
    c = r.cell
    variant = c.variant + ("@strict" if c.settings == m.STRICT else "")
    failed = ", ".join(r.failed_checks) or ("-" if r.got != "skipped" else r.reason[:60])
    trials = f"{r.exercised}/{r.trials}" if r.trials else "-"
    return (c.agent.id, variant, c.expected, r.got, failed, trials, f"{r.seconds:.0f}", r.outcome)


def table(results: list[m.CellResult], markdown: bool) -> str:
    rows = [row(r) for r in results]
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        for cells in rows:
            outcome = cells[-1]
            bold = outcome in (m.FALSE_ALARM, m.MISS, m.WRONG_CHECK)
            lines.append(
                "| "
                + " | ".join(f"`{x}`" if i < 2 else x for i, x in enumerate(cells[:-1]))
                + f" | {'**' + outcome + '**' if bold else outcome} |"
            )
        return "\n".join(lines)
    widths = [max(len(COLUMNS[i]), *(len(r[i]) for r in rows)) for i in range(len(COLUMNS))]
    out = ["  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(x.ljust(w) for x, w in zip(cells, widths, strict=True)) for cells in rows]
    return "\n".join(out)


def totals(results: list[m.CellResult]) -> dict[str, int]:
    keys = (m.TRUE_PASS, m.TRUE_FAIL, m.FALSE_ALARM, m.MISS, m.WRONG_CHECK, m.SKIPPED, m.ERROR)
    return {k: sum(1 for r in results if r.outcome == k) for k in keys}


def findings(results: list[m.CellResult], markdown: bool) -> str:
    """Each false alarm, miss and wrong check with its evidence."""
    lines: list[str] = []
    for r in results:
        if r.outcome not in (m.FALSE_ALARM, m.MISS, m.WRONG_CHECK, m.ERROR):
            continue
        c = r.cell
        lines.append(
            f"{'- **' if markdown else '* '}{c.id}{'**' if markdown else ''}: {r.outcome} "
            f"(expected {c.expected}, got {r.got}"
            + (f": {', '.join(r.failed_checks)}" if r.failed_checks else "")
            + f"); scenario tests/verdicts/scenarios/{c.file_stem}.scenario.yaml"
        )
        if r.reason:
            lines.append(f"    reason: {r.reason[:600]}")
        shown: dict[str, int] = {}
        for f in r.failures:
            if f.check in c.checks:
                continue
            shown[f.check] = shown.get(f.check, 0) + 1
            if shown[f.check] > 2:
                continue
            where = f"trial {f.trial}" if f.trial is not None else "family"
            lines.append(f"    {f.check} [{f.campaign} {where}]: {f.message[:700]}")
            if f.hint:
                lines.append(f"      hint: {f.hint[:500]}")
            if f.folder:
                lines.append(f"      folder: {f.folder}")
        more = {k: n - 2 for k, n in shown.items() if n > 2}
        if more:
            lines.append("    (" + ", ".join(f"{n} more {k}" for k, n in more.items()) + ")")
    return "\n".join(lines)


def write_doc(results: list[m.CellResult], args: argparse.Namespace, out: Path) -> Path:
    t = totals(results)
    agents = sorted({r.cell.agent.id for r in results})
    doc = ROOT / "docs" / "verdicts.md"
    text = f"""# Verdicts: crashpoint's own confusion matrix

A FAIL must be proof and a PASS must mean something. This page is the result of
`python benchmarks/verdicts.py` on the corpus in `tests/verdicts/` (issue 23): {len(agents)}
agents written the ordinary way for LangGraph (`Send` fan-out, subgraphs, `interrupt()` and
`Command(resume=...)`, `invoke`/`stream`/`ainvoke`/`astream`, each durability mode, SqliteSaver,
AsyncSqliteSaver and CrashpointSaver), DBOS (SQLite and PostgreSQL system databases), the OpenAI
SDK (its own retries, scripted 503/429 and timeouts), Node.js (fetch and fs), POSIX shell on
the lifecycle CLI, and plain Python with SQLite or JSON state. Each has a correct variant and
buggy twins with exactly one planted bug that names the check which must catch it.

Each correct variant runs twice, with the scenario's default settings and with the strictest
documented ones (`expect: {{no_repeated_llm_calls: fail, max_state_bytes: 8MiB}}`); each twin
runs with the strict settings. Faults: kills at every boundary, kills before file operations,
power loss (and two resumers at once, or network failures, where the agent calls for them).
The manifest is `tests/verdicts/matrix.yaml`; each cell's scenario file is under
`tests/verdicts/scenarios/`.

- **true pass**: a correct variant passed; **true fail**: a twin failed on its named check;
- **FALSE ALARM**: a correct variant failed (a bug of the gate: it would switch a CI gate off);
- **MISS**: a twin passed; **WRONG CHECK**: a twin failed, but not on the check naming its bug.

`trials` is exercised/ran. This run: `--trials {args.trials or "(as in the manifest)"}`,
{len(results)} cells, {sum(r.seconds for r in results) / 60:.0f} min of cell time on
{os.cpu_count()} shared CPU(s)
({platform.python_version()}, {datetime.date.today().isoformat()}).

## Totals

| true pass | true fail | false alarm | miss | wrong check | skipped | error |
|---|---|---|---|---|---|---|
| {" | ".join(str(n) for n in t.values())} |

## The matrix

{table(results, markdown=True)}

## False alarms and misses

Trial folders are under the run's `--out` folder (shown as `OUT/`).

{findings(results, markdown=True).replace(str(out), "OUT") or "None."}

## Running it

```console
$ python benchmarks/verdicts.py --jobs 2                 # the whole matrix
$ python benchmarks/verdicts.py --only lg-fanout --trials 2
$ pytest tests/verdicts -m slow -p no:randomly --no-cov  # the same cells as tests
```
"""
    doc.write_text(text, encoding="utf-8")
    return doc


def rejudge(cell: m.Cell, folder: Path) -> m.CellResult:
    """The verdict of a cell already run into ``folder`` (``--rejudge``)."""
    reason = m.missing(cell.agent)
    if reason:
        return m.CellResult(cell, m.SKIPPED, "skipped", reason=reason)
    gate = folder / "report" / "gate.json"
    r = m.judge(cell, gate, folder / "gate.log")
    r.report = str(folder / "report")
    with contextlib.suppress(OSError, ValueError):
        camps = json.loads(gate.read_text(encoding="utf-8")).get("campaigns", [])
        r.seconds = sum(float(c.get("duration_s", 0)) for c in camps)
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", nargs="*", default=[], help="cells whose id contains one of these")
    ap.add_argument("--trials", type=int, default=None, help="count of each drawn fault family")
    ap.add_argument("--jobs", type=int, default=1, help="cells run at once")
    ap.add_argument(
        "--out", default="", help="folder for the cells' reports (default: a new temp folder)"
    )
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/verdicts.md")
    ap.add_argument("--render", action="store_true", help="rewrite the scenario files and exit")
    ap.add_argument(
        "--rejudge",
        action="store_true",
        help="run nothing: judge the reports already under --out against the manifest",
    )
    args = ap.parse_args()
    if args.render:
        for p in m.render_all():
            print(p.relative_to(ROOT))
        return 0
    _, agents = m.load()
    todo = [c for c in m.cells(agents) if not args.only or any(s in c.id for s in args.only)]
    out = Path(args.out or tempfile.mkdtemp(prefix="crashpoint-verdicts-")).resolve()
    print(f"reports under {out}", flush=True)
    settings = out / "run.json"  # how the cells were run: a --rejudge reports the same
    if args.rejudge:
        if args.trials is None and settings.is_file():
            args.trials = json.loads(settings.read_text(encoding="utf-8")).get("trials")
    else:
        out.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps({"trials": args.trials}) + "\n", encoding="utf-8")
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        pg = None
        if not args.rejudge and any(
            "postgres" in c.agent.needs and not m.missing(c.agent) for c in todo
        ):
            pg = stack.enter_context(m.postgres())

        def one(cell: m.Cell) -> m.CellResult:
            if args.rejudge:
                r = rejudge(cell, out / m.slug(cell.id))
            else:
                r = m.run_cell(cell, out / m.slug(cell.id), trials=args.trials, pg=pg)
            print(f"[{time.monotonic() - t0:6.0f}s] {'  '.join(row(r))}", flush=True)
            return r

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(one, todo))
    seconds = time.monotonic() - t0
    print()
    print(table(results, markdown=False))
    t = totals(results)
    print()
    print("totals: " + ", ".join(f"{k}: {n}" for k, n in t.items()))
    text = findings(results, markdown=False)
    if text:
        print("\nfalse alarms, misses, wrong checks and errors:\n" + text)
    data = [
        {
            "cell": r.cell.id,
            "agent": r.cell.agent.id,
            "family": r.cell.agent.family,
            "variant": r.cell.variant,
            "settings": r.cell.settings,
            "expected": r.cell.expected,
            "got": r.got,
            "outcome": r.outcome,
            "failed_checks": r.failed_checks,
            "trials": r.trials,
            "exercised": r.exercised,
            "seconds": round(r.seconds, 1),
            "reason": r.reason,
            "report": r.report,
            "failures": [f.__dict__ for f in r.failures[:5]],  # the first few: evidence
        }
        for r in results
    ]
    (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "results" / "verdicts.json").write_text(
        json.dumps({"trials": args.trials, "seconds": round(seconds), "cells": data}, indent=1)
        + "\n",
        encoding="utf-8",
    )
    if not args.no_doc and not args.only:
        print(f"\nwrote {write_doc(results, args, out).relative_to(ROOT)}")
    bad = t[m.FALSE_ALARM] + t[m.MISS] + t[m.WRONG_CHECK] + t[m.ERROR]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
