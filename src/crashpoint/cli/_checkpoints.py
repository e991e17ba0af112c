"""``crashpoint checkpoints list|show|verify|prune|stale|approve|rollback|plan|dead``: upkeep.

The commands an operator runs against a checkpoint store: read it (``list``, ``show``,
``verify``, ``stale``, ``plan``: no lock taken, safe while agents write), and change it
(``prune`` removes finished runs, ``approve`` records a human decision, ``rollback`` discards the
steps after one, ``dead`` lists, retries and clears dead-lettered runs). Registered with the
frame (:mod:`crashpoint.cli._framework`) when :mod:`crashpoint.cli._main` imports this module.

Imports: the frame, and the public faces :mod:`crashpoint.checkpoint`, :mod:`crashpoint.errors`
and :mod:`crashpoint.harness` (its lazy face, for the formatting of sizes and durations only).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, TypeVar

from crashpoint.checkpoint import (
    Damage,
    Retention,
    RunInfo,
    Store,
    TornTail,
    any_reducer,
    decide,
    is_store_url,
    list_files,
    plan,
    rollback,
    run_reducer,
    stale_runs,
    state_at,
    validate_run_id,
)
from crashpoint.cli._framework import (
    EXIT_FOUND,
    EXIT_OK,
    Context,
    arg,
    command,
    count,
    duration,
    is_run_folder,
    plural,
    size,
)
from crashpoint.errors import CheckpointCorrupt, InvalidRunId, UsageError
from crashpoint.harness import format_duration, format_size

__all__: list[str] = []

T = TypeVar("T")

_JSON = arg("--json", action="store_true", help="print JSON instead of text")


def _runs(ctx: Context, store: Store) -> list[RunInfo]:
    """The store's runs: its sub-folders that hold a run's files (others are noted, skipped)."""
    runs: list[RunInfo] = []
    skipped: list[str] = []
    for r in store.runs():
        if is_run_folder(r.path):
            runs.append(r)
        else:
            skipped.append(r.run_id)
    if skipped:
        ctx.note(
            f"note: skipped {plural(len(skipped), 'folder')} that hold no run: "
            f"{', '.join(skipped[:10])}"
        )
    return runs


def _settled(read: Callable[[], T], attempts: int = 5) -> T:
    """``read()``, again if a file vanished under it: a live writer that takes a snapshot
    deletes the segments it covers, possibly between our listing and our open."""
    for _ in range(attempts - 1):
        try:
            return read()
        except FileNotFoundError:
            time.sleep(0.01)
    return read()


def _steps_done(store: Store, info: RunInfo) -> int | str:
    """Completed steps as the journal says (after any rollback) for a run of
    :func:`open_run`; the number of records for a journal of other records. ``"corrupt"``
    if the journal fails a check, ``"unreadable"`` if the OS refuses it. Never meta.json (a
    cache)."""
    try:
        try:
            loaded = _settled(lambda: store.read(info.run_id, reducer=run_reducer))
        except CheckpointCorrupt:  # damaged, or whole but not a run's records: which?
            return _settled(lambda: store.read(info.run_id)).seq
    except CheckpointCorrupt:
        return "corrupt"
    except OSError:
        return "unreadable"
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return "corrupt"  # records that pass their checksums but are not a run's records
    st = loaded.state
    order = st.get("order")
    if isinstance(order, list) and (st.get("attempts") or "steps" in st or order):
        return len(order)
    return loaded.seq


def _run_json(info: RunInfo, steps: int | str) -> dict[str, Any]:
    return {
        "run_id": info.run_id,
        "path": info.path,
        "status": info.status,
        "steps_done": steps if isinstance(steps, int) else None,
        "problem": steps if isinstance(steps, str) else None,
        "size": info.size,
        "updated": info.updated,
        "age_seconds": round(info.age, 3),
        "generation": info.generation,
        "locked": info.locked,
        "meta": info.meta,
    }


def _table(rows: Sequence[Sequence[str]], right: Iterable[int] = ()) -> list[str]:
    """Columns padded to their widest cell; columns in ``right`` aligned right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    ralign = set(right)
    lines = []
    for r in rows:
        cells = [
            c.rjust(w) if i in ralign else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


@command(
    "checkpoints",
    "list",
    help="list runs: status, steps done, size, age, generation, locked",
    description="List every run in the store. STEPS is the number of completed steps the "
    "journal holds (after any rollback); for a journal of other records, the "
    "number of records ('corrupt' if it cannot be read). AGE is the time since "
    "any of its files last changed. LOCKED says whether a live process holds the "
    "run open now.",
    args=[_JSON],
)
def _list(ctx: Context) -> int:
    store = ctx.store()
    runs = _runs(ctx, store)
    steps = {r.run_id: _steps_done(store, r) for r in runs}
    if ctx.args.json:
        holders = _leases(store, runs)
        ctx.json(
            [
                {
                    **_run_json(r, steps[r.run_id]),
                    **({"holder": holders.get(r.run_id) or None} if holders else {}),
                }
                for r in runs
            ]
        )
        return EXIT_OK
    if not runs:
        ctx.print(f"no runs in {store.root}")
        return EXIT_OK
    leases = _leases(store, runs)
    rows: list[tuple[str, ...]] = [("RUN", "STATUS", "STEPS", "SIZE", "AGE", "GEN", "LOCKED")]
    for r in runs:
        rows.append(
            (
                r.run_id,
                r.status,
                str(steps[r.run_id]),
                format_size(r.size),
                format_duration(r.age),
                str(r.generation),
                "yes" if r.locked else "no",
            )
        )
    if leases:  # a PostgresStore: who holds each run's lease (the fencing generation is GEN)
        rows = [
            (*row, "HOLDER" if i == 0 else leases.get(row[0], "-") or "-")
            for i, row in enumerate(rows)
        ]
    for line in _table(rows, right=(2, 3, 4, 5)):
        ctx.print(line)
    return EXIT_OK


def _leases(store: Any, runs: list[RunInfo]) -> dict[str, str]:
    """A PostgresStore's lease holders by run (``""``: released; ``(expired)`` marks a holder
    that stopped heartbeating); {} for a folder."""
    if not hasattr(store, "lease"):
        return {}
    out = {}
    for r in runs:
        lease = store.lease(r.run_id)
        holder = lease.holder if lease is not None else ""
        out[r.run_id] = f"{holder} (expired)" if holder and lease.expired else holder
    return out


def _find(store: Store, run_id: str) -> RunInfo:
    try:
        validate_run_id(run_id)
    except InvalidRunId as exc:
        raise UsageError(str(exc)) from None
    for r in store.runs():
        if r.run_id == run_id and is_run_folder(r.path):
            return r
    known = ", ".join(n for n in store.run_ids()[:10] if is_run_folder(store.path(n))) or "none"
    raise UsageError(
        f"no run {run_id!r} in {store.root} (runs: {known}); "
        "`crashpoint checkpoints list` shows them all"
    )


def _files(folder: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if is_store_url(folder):  # a PostgresStore's run: rows, no files
        return out
    with os.scandir(folder) as it:
        for e in sorted(it, key=lambda e: e.name):
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            out.append({"name": e.name, "size": st.st_size, "mtime": st.st_mtime})
    return out


@command(
    "checkpoints",
    "show",
    help="show one run: meta, generation, sequence, snapshot, files and state",
    description="Show one run without locking or repairing it: meta.json, the fencing "
    "generation, the last sequence number, the snapshot it loads from, its files, "
    "and its state (for the default reducer, the list of every record). A corrupt "
    "run prints where the damage is and exits 1. With --at STEP, the state as it "
    "was when STEP completed (the journal replayed up to that step's record).",
    args=[
        arg("run", metavar="RUN", help="the run id"),
        arg(
            "--at",
            metavar="STEP",
            default=None,
            help="show the state as it was when STEP (a name, or #N) completed; the latest "
            "completion if it ran again after a rollback",
        ),
        _JSON,
    ],
)
def _show(ctx: Context) -> int:
    store = ctx.store()
    info = _find(store, ctx.args.run)
    if ctx.args.at is not None:
        return _show_at(ctx, store, info)
    files = _files(info.path)
    head: dict[str, Any] = {
        "run_id": info.run_id,
        "path": info.path,
        "status": info.status,
        "locked": info.locked,
        "generation": info.generation,
        "size": info.size,
        "age_seconds": round(info.age, 3),
        "meta": info.meta,
        "files": files,
    }
    try:
        loaded = _settled(lambda: store.read(info.run_id))
    except CheckpointCorrupt as exc:
        if ctx.args.json:
            ctx.json(
                {
                    **head,
                    "error": {
                        "path": exc.path,
                        "offset": exc.offset,
                        "reason": exc.reason,
                        "message": str(exc),
                    },
                }
            )
        else:
            _show_head(ctx, head)
            ctx.note(str(exc))
        return EXIT_FOUND
    body = {
        "seq": loaded.seq,
        "records_generation": loaded.generation,
        "snapshot": (
            {"seq": loaded.snapshot_seq, "bytes": loaded.snapshot_bytes}
            if loaded.snapshot_seq
            else None
        ),
        "torn_tail": (
            None
            if loaded.torn is None
            else {
                "path": loaded.torn.path,
                "offset": loaded.torn.offset,
                "bytes": loaded.torn.dropped,
                "reason": loaded.torn.reason,
            }
        ),
        "state": loaded.state,
    }
    if ctx.args.json:
        ctx.json({**head, **body})
        return EXIT_OK
    _show_head(ctx, head)
    ctx.print(
        f"seq:        {loaded.seq} (records written by generation {loaded.generation or '-'})"
    )
    if loaded.snapshot_seq:
        ctx.print(
            f"snapshot:   after record {loaded.snapshot_seq} "
            f"({format_size(loaded.snapshot_bytes)}), "
            f"{plural(loaded.seq - loaded.snapshot_seq, 'record')} since"
        )
    else:
        ctx.print(f"snapshot:   none ({plural(loaded.seq, 'record')} in the journal)")
    if loaded.torn is not None:
        ctx.print(f"note:       torn tail, repaired on the next open: {loaded.torn}")
    ctx.print("state:")
    ctx.print(json.dumps(loaded.state, indent=2, sort_keys=True, ensure_ascii=False))
    return EXIT_OK


def _show_at(ctx: Context, store: Store, info: RunInfo) -> int:
    try:
        at = _settled(lambda: state_at(store, info.run_id, ctx.args.at))
    except CheckpointCorrupt as exc:
        ctx.note(str(exc))
        return EXIT_FOUND
    if ctx.args.json:
        ctx.json(
            {
                "run_id": info.run_id,
                "at": {
                    "step": at.step,
                    "position": at.position,
                    "seq": at.seq,
                    "discarded": at.discarded,
                },
                "state": at.state,
            }
        )
        return EXIT_OK
    ctx.print(f"run:        {info.run_id}")
    ctx.print(
        f"at:         #{at.position} {at.step} (record {at.seq})"
        + (", later discarded by a rollback" if at.discarded else "")
    )
    ctx.print("state:")
    ctx.print(json.dumps(at.state, indent=2, sort_keys=True, ensure_ascii=False))
    return EXIT_OK


def _show_head(ctx: Context, head: dict[str, Any]) -> None:
    ctx.print(f"run:        {head['run_id']}")
    ctx.print(f"path:       {head['path']}")
    ctx.print(f"status:     {head['status']}")
    ctx.print(f"locked:     {'yes' if head['locked'] else 'no'}")
    ctx.print(f"generation: {head['generation']}")
    ctx.print(f"size:       {format_size(head['size'])}")
    ctx.print(f"age:        {format_duration(head['age_seconds'])}")
    ctx.print("meta:")
    ctx.print(json.dumps(head["meta"], indent=2, sort_keys=True, ensure_ascii=False))
    ctx.print("files:")
    rows = [(f["name"], str(f["size"])) for f in head["files"]] or [("(none)", "")]
    for line in _table(rows, right=(1,)):
        ctx.print(f"  {line}")


def _verify_one(store: Store, run_id: str) -> tuple[list[Damage], list[TornTail]]:
    # the reducer the lifecycle commands read with: a run's records are checked as a run's,
    # so verify reports damage exactly when the commands refuse the run as corrupt
    return store.verify(run_id, reducer=any_reducer)[run_id]


def _checked_files(folder: str, store: Any = None, run_id: str = "") -> int:
    if is_store_url(folder):  # a PostgresStore: its rows (records and snapshots)
        return int(store.rows(run_id))
    snaps, segs = list_files(folder)
    return len(snaps) + len(segs)


@command(
    "checkpoints",
    "verify",
    help="check every checksum of one run or all; exit 1 naming file and offset of any damage",
    description="Check every record of every snapshot and journal segment: header and payload "
    "checksums, structure, sequence gaps and fencing generations. Prints one line "
    "per damage, 'PATH at byte OFFSET: REASON', and exits 1 if there is any. A torn "
    "tail (the partial last record a crash leaves) is a note, not damage: the next "
    "open repairs it.",
    args=[arg("run", metavar="RUN", nargs="?", help="one run id (default: every run)"), _JSON],
)
def _verify(ctx: Context) -> int:
    store = ctx.store()
    run_ids = (
        [r.run_id for r in _runs(ctx, store)]
        if ctx.args.run is None
        else [_find(store, ctx.args.run).run_id]
    )
    found = {rid: _settled(partial(_verify_one, store, rid)) for rid in run_ids}
    per_run = {rid: _checked_files(store.path(rid), store, rid) for rid in run_ids}
    nfiles = sum(per_run.values())
    empty = [rid for rid, n in per_run.items() if n == 0]
    ndamage = sum(len(d) for d, _ in found.values())
    if nfiles == 0:
        why = (
            f"no runs in {store.root}"
            if not run_ids
            else f"{plural(len(run_ids), 'run')} without a journal segment or snapshot "
            f"({', '.join(empty[:10])})"
        )
        if ctx.args.json:
            ctx.json(
                {
                    "ok": False,
                    "runs": len(run_ids),
                    "files": 0,
                    "damage": [],
                    "torn_tails": [],
                    "no_journal": empty,
                    "error": f"nothing verified: {why}",
                }
            )
        raise UsageError(
            f"nothing verified: {why}; check --store names the folder the agent "
            "passes to Store(...)"
        )
    if ctx.args.json:
        ctx.json(
            {
                "ok": ndamage == 0 and not empty,
                "runs": len(run_ids),
                "files": nfiles,
                "damage": [
                    {"run_id": rid, "path": d.path, "offset": d.offset, "reason": d.reason}
                    for rid, (ds, _) in found.items()
                    for d in ds
                ],
                "torn_tails": [
                    {
                        "run_id": rid,
                        "path": t.path,
                        "offset": t.offset,
                        "bytes": t.dropped,
                        "reason": t.reason,
                    }
                    for rid, (_, ts) in found.items()
                    for t in ts
                ],
                "no_journal": empty,
            }
        )
        return EXIT_FOUND if ndamage or empty else EXIT_OK
    for _rid, (damage, torn) in found.items():
        for d in damage:
            ctx.print(str(d))
        for t in torn:
            ctx.print(f"note: {t}; repaired on the next open, not damage")
    for rid in empty:
        ctx.print(
            f"{store.path(rid)}: no journal segment or snapshot: nothing of run {rid!r} "
            "could be verified (its journal is missing)"
        )
    if ndamage or empty:
        bad = sum(1 for rid, (d, _) in found.items() if d or rid in empty)
        problems = ndamage + len(empty)
        ctx.print(
            f"damage: {plural(problems, 'problem')} in {bad} of "
            f"{plural(len(run_ids), 'run')}; "
            "opening with on_corrupt='rollback' keeps the valid prefix"
        )
        return EXIT_FOUND
    ctx.print(f"ok: {plural(len(run_ids), 'run')}, {plural(nfiles, 'file')} verified")
    return EXIT_OK


@command(
    "checkpoints",
    "prune",
    help="remove finished runs by age, count or total size",
    description="Remove finished runs (status completed, denied or dead) that a limit selects, "
    "oldest first. Never a run that is unfinished, paused, of unknown status, or "
    "locked by a live process. Give at least one limit.",
    args=[
        arg(
            "--older-than",
            metavar="DURATION",
            type=duration,
            help="remove finished runs not written for this long (30m, 2h, 7d, 90s)",
        ),
        arg("--keep", metavar="N", type=count, help="keep at most N finished runs (the newest)"),
        arg(
            "--max-bytes",
            metavar="SIZE",
            type=size,
            help="keep at most SIZE of finished runs (64KiB, 10MB, 1GiB)",
        ),
        arg("--dry-run", action="store_true", help="print what would be removed, remove nothing"),
        _JSON,
    ],
)
def _prune(ctx: Context) -> int:
    a = ctx.args
    if a.older_than is None and a.keep is None and a.max_bytes is None:
        raise UsageError(
            "prune needs a limit: --older-than DURATION, --keep N or "
            "--max-bytes SIZE (finished runs beyond it are removed)"
        )
    store = ctx.store(
        retention=Retention(max_age=a.older_than, max_runs=a.keep, max_bytes=a.max_bytes)
    )
    removed = store.prune(dry_run=a.dry_run)
    if a.json:
        ctx.json(
            {
                "dry_run": a.dry_run,
                "removed": [
                    {
                        "run_id": r.run_id,
                        "status": r.status,
                        "size": r.size,
                        "age_seconds": round(r.age, 3),
                    }
                    for r in removed
                ],
                "freed": sum(r.size for r in removed),
            }
        )
        return EXIT_OK
    verb = "would remove" if a.dry_run else "removed"
    for r in removed:
        ctx.print(
            f"{verb} {r.run_id} status={r.status} size={format_size(r.size)} "
            f"age={format_duration(r.age)}"
        )
    if removed:
        total = format_size(sum(r.size for r in removed))
        ctx.print(f"{verb} {plural(len(removed), 'run')}, {total}")
    else:
        ctx.print("nothing to prune")
    return EXIT_OK


@command(
    "checkpoints",
    "stale",
    help="list unfinished runs nobody is working on; exit 1 if any (for cron / timers)",
    description="A monitor that needs no LLM: a run is stale when its status is not finished "
    "(not completed, denied or dead; unknown counts as unfinished), none of its "
    "files changed for --older-than, and no live process holds its lock. Prints "
    "one line per stale run, 'RUN status=STATUS age=AGE', and exits 1; prints "
    "nothing and exits 0 if there is none. With --notify (or $CRASHPOINT_NOTIFY) "
    "a 'stale' event per run goes to that command; a failing command is logged "
    "and does not change the exit code.",
    args=[
        arg(
            "--older-than",
            metavar="DURATION",
            type=duration,
            required=True,
            help="how long without a write makes an unlocked unfinished run stale (30m, 2h)",
        ),
        arg(
            "--notify",
            metavar="COMMAND",
            default=None,
            help="run COMMAND once per stale run with a JSON event on stdin (split into "
            "words, never run through a shell; default: $CRASHPOINT_NOTIFY if set)",
        ),
        _JSON,
    ],
)
def _stale(ctx: Context) -> int:
    store = ctx.store(notify=ctx.args.notify)
    stale = stale_runs(store, ctx.args.older_than, runs=_runs(ctx, store))
    if ctx.args.json:
        ctx.json(
            [
                {
                    "run_id": r.run_id,
                    "status": r.status,
                    "age_seconds": round(r.age, 3),
                    "updated": r.updated,
                    "generation": r.generation,
                    "path": r.path,
                }
                for r in stale
            ]
        )
    else:
        for r in stale:
            ctx.print(f"{r.run_id} status={r.status} age={format_duration(r.age)}")
    return EXIT_FOUND if stale else EXIT_OK


@command(
    "checkpoints",
    "approve",
    help="record a human decision for a paused run (approve, or --deny)",
    description="A paused run waits for a decision. `approve RUN` lets it go on when the agent "
    "is started again; `--deny` ends it as denied there. For an effect left in "
    "doubt with policy 'ask', approve means 'send again with the same key' and "
    "deny 'treat it as done'. The decision is durable before this returns. A refused "
    "decision (the run is not paused, or --step names another pause) changes "
    "nothing: no record, no new generation, the run's age stays.",
    args=[
        arg("run", metavar="RUN", help="the run id"),
        arg("--deny", action="store_true", help="refuse instead of approving"),
        arg("--note", default="", help="a note kept with the decision"),
        arg("--by", default="", help="who decided (default: $USER)"),
        arg(
            "--step",
            metavar="NAME",
            default=None,
            help="the pause this decision is for; refused (nothing recorded) if the run "
            "waits for another",
        ),
        arg(
            "--wait",
            metavar="DURATION",
            type=duration,
            default=0.0,
            help="wait this long for the run's lock (default: do not wait)",
        ),
    ],
)
def _approve(ctx: Context) -> int:
    store = ctx.store()
    run_id = validate_run_id(ctx.args.run)
    _find(store, run_id)
    name = decide(
        store,
        run_id,
        approved=not ctx.args.deny,
        note=ctx.args.note,
        by=ctx.args.by,
        lock_timeout=ctx.args.wait,
        step=ctx.args.step,
    )
    verb = "denied" if ctx.args.deny else "approved"
    ctx.print(
        f"{run_id}: {verb} {name}; start the agent again to "
        f"{'end the run as denied' if ctx.args.deny else 'continue'}"
    )
    return EXIT_OK


@command(
    "checkpoints",
    "rollback",
    help="roll a run back to a completed step: later steps run again on the next start",
    description="Discard every step after STEP, durably: a rollback record is appended (the "
    "journal keeps the history, nothing is erased). Effects recorded after STEP are "
    "printed as 'may need compensation': the outside world may have seen them, and "
    "the later steps perform them again under new keys. A finished run (completed, "
    "denied, failed, dead) is re-opened; a paused run loses a pause that came after "
    "STEP. The next start replays the steps up to STEP and runs the later ones. A "
    "step that is not completed is refused (exit 2) and nothing changes.",
    args=[
        arg("run", metavar="RUN", help="the run id"),
        arg(
            "--to",
            metavar="STEP",
            required=True,
            help="the last step to keep: its name, or #N for position N (from 0)",
        ),
        arg("--note", default="", help="a note kept with the rollback record"),
        arg("--by", default="", help="who rolled back (default: $USER)"),
        arg(
            "--wait",
            metavar="DURATION",
            type=duration,
            default=0.0,
            help="wait this long for the run's lock (default: do not wait)",
        ),
        _JSON,
    ],
)
def _rollback(ctx: Context) -> int:
    store = ctx.store()
    run_id = _find(store, ctx.args.run).run_id
    done = rollback(
        store, run_id, ctx.args.to, note=ctx.args.note, by=ctx.args.by, lock_timeout=ctx.args.wait
    )
    if ctx.args.json:
        ctx.json(
            {
                "run_id": done.run_id,
                "to": done.to,
                "position": done.position,
                "status_before": done.status_before,
                "discarded": list(done.discarded),
                "compensate": list(done.compensate),
                "pauses": list(done.pauses),
            }
        )
    else:
        ctx.print(done.describe())
    return EXIT_OK


@command(
    "checkpoints",
    "plan",
    help="dry run: what resuming a run would replay, re-run, or decide about effects in doubt",
    description="Reads the run (no lock, no change) and prints, for each step, whether it "
    "replays from its record or runs again, and for each effect left in doubt by "
    "a crash what its policy will do, and why.",
    args=[arg("run", metavar="RUN", help="the run id"), _JSON],
)
def _plan(ctx: Context) -> int:
    store = ctx.store()
    run_id = validate_run_id(ctx.args.run)
    _find(store, run_id)
    lines = _settled(lambda: plan(store, run_id))
    if ctx.args.json:
        ctx.json([{"action": ln.action, "what": ln.what, "why": ln.why} for ln in lines])
    else:
        width = max((len(ln.action) for ln in lines), default=0)
        for ln in lines:
            ctx.print(f"{ln.action.ljust(width)}  {ln.what}: {ln.why}")
    return EXIT_OK


# -- dead letters (issue 25): list, retry, clear -------------------------------------------------


def _dead_letters(store: Any) -> list[dict[str, Any]]:
    """Dead-lettered runs: a fleet's (a PostgresStore marks them; its journal is untouched)
    and a supervisor's (the run's journal ended as ``dead``), by run id."""
    out: dict[str, dict[str, Any]] = {}
    if hasattr(store, "dead_lettered"):
        for rid, attempts, reason in store.dead_lettered():
            out[rid] = {"run_id": rid, "by": "fleet", "attempts": attempts, "reason": reason}
    for r in store.runs():
        if r.status == "dead" and r.run_id not in out and is_run_folder(r.path):
            attempts = r.meta.get("resumes", 0)
            out[r.run_id] = {
                "run_id": r.run_id,
                "by": "supervisor",
                "attempts": attempts if isinstance(attempts, int) else 0,
                "reason": str(r.meta.get("reason", "")),
            }
    return [out[k] for k in sorted(out)]


@command(
    "checkpoints",
    "dead",
    help="list dead-lettered runs, --retry or --clear them (exit 1 if any is left)",
    description="A run that failed on every attempt allowed is dead-lettered: by a fleet (a "
    "PostgreSQL store marks the run and never claims it again; its journal is untouched) or by "
    "a supervisor (the run's journal ends as 'dead'). Without options, lists them with their "
    "attempts and last reason. --retry RUN gives a fleet's dead letter another chance: the mark "
    "is cleared and its attempt count starts again at 0, so the next free worker resumes it "
    "from its last completed step (a supervisor's dead run is re-opened with `rollback`). "
    "--clear RUN gives a dead letter up: the run is deleted (refused while a live process "
    "holds it). A run that is not dead-lettered is refused (exit 2) and nothing changes. "
    "Exit 0 if no dead letter is left, 1 if some are.",
    args=[
        arg("--retry", nargs="+", default=[], metavar="RUN", help="retry these dead letters"),
        arg("--clear", nargs="+", default=[], metavar="RUN", help="delete these dead letters"),
        _JSON,
    ],
)
def _dead(ctx: Context) -> int:
    store: Any = ctx.store()
    both = set(ctx.args.retry) & set(ctx.args.clear)
    if both:
        raise UsageError(f"--retry and --clear both name {', '.join(sorted(both))}: pick one")
    dead = {d["run_id"]: d for d in _dead_letters(store)}
    for rid in [*ctx.args.retry, *ctx.args.clear]:
        try:
            validate_run_id(rid)
        except InvalidRunId as exc:
            raise UsageError(str(exc)) from None
        if rid not in dead:
            raise UsageError(
                f"run {rid!r} in {store.root} is not dead-lettered (nothing changed); "
                f"dead letters: {', '.join(sorted(dead)[:10]) or 'none'}"
            )
        if rid in ctx.args.retry and dead[rid]["by"] != "fleet":
            raise UsageError(
                f"run {rid!r} was dead-lettered by a supervisor (its journal ended as dead; "
                f"nothing changed): re-open it with `crashpoint checkpoints rollback {rid} "
                "--to STEP`, and a supervisor resumes it"
            )
    say = ctx.note if ctx.args.json else ctx.print
    for rid in ctx.args.retry:
        had = store.retry_dead_letter(rid)
        say(f"{rid}: retried (it had {plural(had, 'attempt')}); a free worker claims it next")
    for rid in ctx.args.clear:
        if dead[rid]["by"] == "fleet":
            store.clear_dead_letter(rid)
        else:
            store.remove(rid)
        say(f"{rid}: cleared (the run is deleted)")
    left = _dead_letters(store)
    if ctx.args.json:
        ctx.json(left)
    elif not (ctx.args.retry or ctx.args.clear):
        if not left:
            ctx.print(f"no dead letters in {store.root}")
        for d in left:
            ctx.print(
                f"{d['run_id']}: dead-lettered by a {d['by']} after "
                f"{plural(d['attempts'], 'attempt')}: {d['reason'] or 'no reason recorded'}"
            )
    return EXIT_FOUND if left else EXIT_OK
