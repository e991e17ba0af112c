"""Put LangGraph checkpointers through the conformance cells and print the comparison table.

Each ``*.scenario.yaml`` beside this file is one cell (a fault family, or a few); the agent is
``agent.py`` with ``--saver`` replaced by each checkpointer given here (``module:factory``;
``factory(state_dir)`` returns the saver; modules beside this file are importable, e.g.
``savers:sqlite``). Every cell's families run through the real harness, and the table says per
checkpointer and family: trials exercised / passed / failed / not exercised. A family none of
whose faults fired is shown as NOT EXERCISED, never as PASS.

    python examples/langgraph-checkpointers/cells.py \\
        --saver savers:crashpoint --saver savers:sqlite [--saver mypkg.mod:make] \\
        [--cells kill-every-boundary,corruption] [--report DIR] [--json FILE]

Exit 0 when every cell of the first checkpointer passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def with_saver(command: tuple[str, ...], spec: str) -> tuple[str, ...]:
    out = list(command)
    if "--saver" in out:
        out[out.index("--saver") + 1] = spec
    else:
        out += ["--saver", spec]
    return tuple(out)


def verdict(d: dict[str, Any]) -> str:
    if d["failed"]:
        return "FAIL"
    if not d["ran"]:
        return "SKIPPED"
    if not d["exercised"]:
        return "NOT EXERCISED"
    return "PASS"


def run_cells(
    savers: list[str],
    cells: list[str],
    report: str,
    progress: bool = True,
    count: int | None = None,
    only: list[int] | None = None,
) -> list[dict[str, Any]]:
    """One row per (checkpointer, cell, family); ``count`` caps each drawn family's trials,
    ``only`` runs only these trial indices of a sweep (every-boundary)."""
    from crashpoint.errors import GoldenRunFailed
    from crashpoint.harness import Campaign, FaultFamily, NoBoundaries, load_scenario

    rows: list[dict[str, Any]] = []
    for spec in savers:
        for path in cells:
            sc = load_scenario(path)
            agent = dataclasses.replace(sc.agent, command=with_saver(sc.agent.command, spec))
            record = frozenset().union(*(f.family.needs for f in sc.families))
            golden = None
            for fam in sc.families:
                family = fam.family
                if count is not None and not family.systematic:
                    kind, opts = family.chain[-1]
                    capped = tuple(sorted({**dict(opts), "count": count}.items()))
                    family = FaultFamily((*family.chain[:-1], (kind, capped)))
                elif count is not None and family.chain[-1][0] == "kill":
                    kind, opts = family.chain[-1]
                    if dict(opts).get("at") == "fileop":
                        capped = tuple(sorted({**dict(opts), "max": count}.items()))
                        family = FaultFamily((*family.chain[:-1], (kind, capped)))
                name = f"{sc.slug}-{family.name}-{spec}".replace(":", "_").replace("/", "_")
                camp = Campaign(
                    agent,
                    [family],
                    os.path.join(report, name),
                    name=name,
                    trials=sc.trials,
                    seed=sc.seed,
                    restarts=sc.restarts,
                    mode=sc.mode,
                    expect=sc.expect,
                    source=sc.path,
                    record=record,
                )
                row: dict[str, Any] = {"saver": spec, "cell": sc.slug, "family": family.name}
                t0 = time.monotonic()
                try:
                    res = camp.run(golden=golden, only=only if family.systematic else None)
                except (GoldenRunFailed, NoBoundaries) as exc:
                    row.update(verdict="GOLDEN FAILED", detail=str(exc).splitlines()[0])
                    rows.append(row)
                    break
                golden = res.golden
                fams = res.families()
                d = (
                    fams.get(family.name)
                    or next(iter(fams.values()), None)
                    or {
                        "ran": 0,
                        "exercised": 0,
                        "passed": 0,
                        "failed": 0,
                        "not_exercised": 0,
                        "not_fired": [],
                    }
                )
                failed_checks = sorted({c.name for t in res.failures for c in t.failed})
                row.update(
                    ran=d["ran"],
                    exercised=d["exercised"],
                    passed=d["passed"],
                    failed=d["failed"],
                    not_exercised=d["not_exercised"],
                    verdict=verdict(d),
                    failed_checks=failed_checks,
                    why_not=d["not_fired"][:1],
                    seconds=round(time.monotonic() - t0, 1),
                )
                if res.incomplete:
                    row["verdict"] = "INCOMPLETE"
                    row["detail"] = res.incomplete
                rows.append(row)
                if progress:
                    print(
                        f"{spec:28} {sc.slug:22} {family.name:34} {row['verdict']}"
                        f" ({d['exercised']}/{d['ran']} exercised, {d['failed']} failed"
                        f"{': ' + ', '.join(failed_checks) if failed_checks else ''})",
                        file=sys.stderr,
                        flush=True,
                    )
    return rows


def table(rows: list[dict[str, Any]], savers: list[str]) -> str:
    """Markdown: one line per cell and family, one column per checkpointer."""
    keys: list[tuple[str, str]] = []
    for r in rows:
        if (r["cell"], r["family"]) not in keys:
            keys.append((r["cell"], r["family"]))
    by = {(r["saver"], r["cell"], r["family"]): r for r in rows}
    out = [
        "| cell | family | " + " | ".join(f"`{s}`" for s in savers) + " |",
        "|---|---|" + "---|" * len(savers),
    ]
    for cell, fam in keys:
        cols = []
        for s in savers:
            r = by.get((s, cell, fam))
            if r is None:
                cols.append("not run")
            elif "ran" not in r:
                cols.append(f"{r['verdict']}")
            else:
                text = (
                    f"**{r['verdict']}** {r['exercised']}/{r['ran']} exercised, "
                    f"{r['passed']} passed, {r['failed']} failed"
                )
                if r["not_exercised"]:
                    text += f", {r['not_exercised']} not exercised"
                if r["failed_checks"]:
                    text += f" ({', '.join(r['failed_checks'])})"
                cols.append(text)
        out.append(f"| {cell} | `{fam}` | " + " | ".join(cols) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--saver",
        action="append",
        metavar="MODULE:FACTORY",
        help="a checkpointer factory (repeat; default: savers:crashpoint, savers:sqlite)",
    )
    ap.add_argument("--cells", default="", help="comma-separated cell names (default: all)")
    ap.add_argument("--report", default="", help="folder for the harness reports")
    ap.add_argument("--json", default="", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    savers = args.saver or ["savers:crashpoint", "savers:sqlite"]
    for s in savers:
        if s.count(":") != 1 or not all(s.split(":")):
            ap.error(f"--saver {s!r}: give module:factory, e.g. savers:sqlite")
    paths = sorted(glob.glob(os.path.join(HERE, "*.scenario.yaml")))
    if args.cells:
        wanted = [c.strip() for c in args.cells.split(",") if c.strip()]
        known = {os.path.basename(p)[: -len(".scenario.yaml")]: p for p in paths}
        unknown = [c for c in wanted if c not in known]
        if unknown:
            ap.error(f"--cells: unknown {', '.join(unknown)}; known: {', '.join(known)}")
        paths = [known[c] for c in wanted]
    report = args.report or tempfile.mkdtemp(prefix="lg-cells-")
    rows = run_cells(savers, paths, report)
    print(table(rows, savers))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "savers": savers,
                    "rows": rows,
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                },
                f,
                indent=1,
            )
    first = [r for r in rows if r["saver"] == savers[0]]
    return 0 if first and all(r["verdict"] == "PASS" for r in first) else 1


if __name__ == "__main__":
    sys.exit(main())
