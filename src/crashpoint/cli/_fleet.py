"""``crashpoint fleet work|submit|dead``: a fleet of workers over a PostgreSQL store.

``work`` claims unfinished, unleased runs and resumes each with ``CMD ... {run_id}`` (see
:class:`crashpoint.checkpoint.postgres.FleetWorker`); ``submit`` puts new runs in for workers to
pick up; ``dead`` lists dead-lettered runs. Registered with the frame
(:mod:`crashpoint.cli._framework`) when :mod:`crashpoint.cli._main` imports this module.

Imports: the frame, and the public faces :mod:`crashpoint.checkpoint.postgres` (lazy: psycopg is
loaded by the first fleet command that opens the store, never by importing this room) and
:mod:`crashpoint.errors`.
"""

from __future__ import annotations

import os
from typing import Any

from crashpoint.checkpoint import postgres
from crashpoint.cli._framework import EXIT_FOUND, EXIT_OK, STORE_ENV, Context, arg, command, group
from crashpoint.errors import UsageError

__all__: list[str] = []

group(
    "fleet",
    help="run a fleet of workers over a PostgreSQL store",
    description="Workers on any machine claim unfinished runs from a PostgreSQL store "
    "(one writer per run: leases with fencing) and resume them.",
    args=[
        arg("--store", metavar="URL", help="postgresql://... (default $CRASHPOINT_STORE)"),
        arg("--schema", default="crashpoint", help="the store's schema (default crashpoint)"),
        arg(
            "--lease-seconds",
            type=float,
            default=30.0,
            metavar="S",
            help="a lease lasts S seconds without a heartbeat (default 30)",
        ),
    ],
)


def _store(ctx: Context, worker: str | None = None) -> Any:
    url = ctx.args.store or os.environ.get(STORE_ENV, "")
    if not url.startswith(("postgresql://", "postgres://")):
        raise UsageError(
            f"--store {url or '(none)'}: a fleet needs a PostgreSQL store URL "
            "(postgresql://user@host/db); set --store or $CRASHPOINT_STORE"
        )
    return postgres.PostgresStore(
        url, schema=ctx.args.schema, worker=worker, lease_seconds=ctx.args.lease_seconds
    )


@command(
    "fleet",
    "work",
    help="claim and resume runs until stopped",
    description="Claim unfinished, unleased runs and resume each by running CMD (give it "
    "after --; {run_id} is replaced by the run id) with CRASHPOINT_WORKER set, "
    "renewing the lease while it runs. Exit 0, or 1 if a run was "
    "dead-lettered.",
    args=[
        arg("--worker", metavar="NAME", help="this worker's id (default host:pid)"),
        arg("--once", action="store_true", help="claim one run, work it, stop"),
        arg(
            "--until-idle", action="store_true", help="stop when no unfinished run is left to claim"
        ),
        arg("--max-attempts", type=int, default=3, metavar="N"),
        arg(
            "--timeout",
            type=float,
            default=600.0,
            metavar="S",
            help="kill an attempt after S seconds (default %(default)s)",
        ),
        arg("--poll", type=float, default=1.0, metavar="S"),
        arg("argv", nargs="+", metavar="CMD", help="-- CMD ... {run_id}"),
    ],
)
def _work(ctx: Context) -> int:
    argv = (
        [a for a in ctx.args.argv if a != "--"]
        if ctx.args.argv[:1] == ["--"]
        else list(ctx.args.argv)
    )
    if not any("{run_id}" in a for a in argv):
        raise UsageError(
            "fleet work: CMD must contain {run_id} (where the run id goes), e.g. "
            "crashpoint fleet work --store URL -- python agent.py --run {run_id}"
        )
    store = _store(ctx, ctx.args.worker)
    try:
        worker = postgres.FleetWorker(
            store,
            worker=ctx.args.worker,
            max_attempts=ctx.args.max_attempts,
            timeout=ctx.args.timeout,
            poll=ctx.args.poll,
            command=lambda rid: [a.replace("{run_id}", rid) for a in argv],
            log=ctx.print,
        )
        out = worker.run_once() if ctx.args.once else worker.run(until_idle=ctx.args.until_idle)
    finally:
        store.close()
    ctx.print(postgres.fleet_summary(out))
    return EXIT_FOUND if any(o.status == "dead" for o in out) else EXIT_OK


@command(
    "fleet",
    "submit",
    help="put new runs in the store for workers to claim",
    args=[arg("runs", nargs="+", metavar="RUN", help="run ids")],
)
def _submit(ctx: Context) -> int:
    store = _store(ctx)
    try:
        for rid in ctx.args.runs:
            ctx.print(
                f"{rid}: {'submitted' if postgres.submit(store, rid) else 'exists (left alone)'}"
            )
    finally:
        store.close()
    return EXIT_OK


@command("fleet", "dead", help="list dead-lettered runs (exit 1 if any)")
def _dead(ctx: Context) -> int:
    store = _store(ctx)
    try:
        dead = store.dead_lettered()
    finally:
        store.close()
    for rid, attempts, reason in dead:
        ctx.print(f"{rid}: {attempts} attempt(s): {reason}")
    return EXIT_FOUND if dead else EXIT_OK
