"""The ``crashpoint`` command.

``crashpoint checkpoints --store DIR COMMAND`` inspects and maintains a checkpoint store
(``list``, ``show``, ``verify``, ``prune``, ``stale``, ``approve``, ``rollback``, ``plan``).
``crashpoint run`` is the crash-recovery gate over scenario files; ``crashpoint replay`` re-runs
one failing trial.

Adding a command is one decorated function: it declares its place and arguments, receives a
:class:`Context`, and returns the exit code::

    @command("checkpoints", "approve", help="record a human decision for a paused run",
             args=[arg("run", metavar="RUN", help="the run id"),
                   arg("--deny", action="store_true", help="refuse instead of approving")])
    def _approve(ctx: Context) -> int:
        store = ctx.store()
        ...
        return EXIT_OK

Exit codes: 0 success (nothing found), 1 the command found a problem (damage, a stale run, a
corrupt run), 2 the command could not do its job (bad usage or input, no store, unknown run, an
OS error), 130 interrupted (SIGINT, Ctrl-C), 143 stopped by SIGTERM, 141 the reader of the
output went away (``| head``). Errors are one
message on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn, TextIO, TypeVar

from crashpoint import __version__
from crashpoint._units import UnitError, format_duration, format_size, parse_duration, parse_size
from crashpoint.checkpoint import (
    Damage,
    Retention,
    RunInfo,
    Store,
    TornTail,
    is_store_url,
    validate_run_id,
)
from crashpoint.checkpoint._journal import list_files
from crashpoint.errors import CheckpointCorrupt, CrashpointError, InvalidRunId, UsageError

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FOUND",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "STORE_ENV",
    "Arg",
    "Context",
    "UsageError",
    "arg",
    "build_parser",
    "command",
    "group",
    "main",
]

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM: stopped by SIGTERM (cleanly: KeyboardInterrupt path)
EXIT_BROKEN_PIPE = 141  # what a shell reports for a command killed by SIGPIPE
STORE_ENV = "CRASHPOINT_STORE"
PROG = "crashpoint"
T = TypeVar("T")


# -- the command table ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arg:
    """One ``add_argument`` call, kept for later: flags and keyword arguments."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any]


def arg(*flags: str, **kwargs: Any) -> Arg:
    """Declare an argument exactly as ``ArgumentParser.add_argument`` takes it."""
    return Arg(flags, kwargs)


Handler = Callable[["Context"], int]


@dataclass(frozen=True, slots=True)
class _Group:
    name: str
    help: str
    description: str
    args: tuple[Arg, ...]


@dataclass(frozen=True, slots=True)
class _Command:
    path: tuple[str, ...]
    help: str
    description: str
    args: tuple[Arg, ...]
    func: Handler


_GROUPS: dict[str, _Group] = {}
_COMMANDS: dict[tuple[str, ...], _Command] = {}


def group(name: str, *, help: str, description: str = "", args: Iterable[Arg] = ()) -> None:
    """Declare a top-level command that holds subcommands (``checkpoints``); ``args`` are
    accepted both before and after the subcommand's name."""
    _GROUPS[name] = _Group(name, help, description or help, tuple(args))


def command(
    *path: str, help: str, description: str = "", args: Iterable[Arg] = ()
) -> Callable[[Handler], Handler]:
    """Register ``func`` as the command at ``path``: ``("checkpoints", "list")`` or ``("run",)``.

    A two-part path needs its group declared with :func:`group` first.
    """
    if not 1 <= len(path) <= 2:
        raise ValueError(f"a command path has one or two names, got {path!r}")
    if len(path) == 2 and path[0] not in _GROUPS:
        raise ValueError(f"declare the group {path[0]!r} with group() before its commands")

    def register(func: Handler) -> Handler:
        _COMMANDS[path] = _Command(path, help, description or help, tuple(args), func)
        return func

    return register


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 2 with the subcommand's usage line, as argparse does, but through
    ``main`` rather than ``sys.exit`` deep inside argparse."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise UsageError(message)


def _add(parser: argparse.ArgumentParser, a: Arg, *, suppress_default: bool = False) -> None:
    kwargs = dict(a.kwargs)
    if suppress_default:  # a subparser's default must not overwrite the value given before it
        kwargs["default"] = argparse.SUPPRESS
    parser.add_argument(*a.flags, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, built from the table."""
    parser = _Parser(
        prog=PROG,
        description="Crash-proof checkpoints for agents, and a harness that proves it.",
        epilog="Exit codes: 0 ok, 1 a problem was found (damage, a stale run), 2 the command "
        "could not do its job (bad usage or input, no store, an OS error).",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    top = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    subs: dict[str, argparse._SubParsersAction[_Parser]] = {}
    for g in _GROUPS.values():
        gp = top.add_parser(g.name, help=g.help, description=g.description)
        for a in g.args:
            _add(gp, a)
        subs[g.name] = gp.add_subparsers(
            dest="subcommand", metavar="SUBCOMMAND", required=True, parser_class=_Parser
        )
    for path, c in _COMMANDS.items():
        where = top if len(path) == 1 else subs[path[0]]
        cp = where.add_parser(path[-1], help=c.help, description=c.description)
        if len(path) == 2:
            for a in _GROUPS[path[0]].args:
                _add(cp, a, suppress_default=True)
        for a in c.args:
            _add(cp, a)
        cp.set_defaults(_handler=c.func)
    return parser


# -- what a command receives ----------------------------------------------------------------


@dataclass(slots=True)
class Context:
    """The parsed arguments and the streams; :meth:`store` opens the store the user named."""

    args: argparse.Namespace
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)

    def print(self, *parts: object) -> None:
        print(*parts, file=self.out)

    def note(self, *parts: object) -> None:
        print(*parts, file=self.err)

    def json(self, obj: Any) -> None:
        json.dump(obj, self.out, indent=2, sort_keys=True, ensure_ascii=False)
        self.out.write("\n")

    def store_root(self) -> str:
        """``--store``, else ``$CRASHPOINT_STORE``; the folder must exist."""
        root = getattr(self.args, "store", None) or os.environ.get(STORE_ENV, "")
        if not root:
            raise UsageError(
                f"no store given: pass --store DIR or set {STORE_ENV}=DIR "
                "(the folder that holds one sub-folder per run)"
            )
        where = "--store" if getattr(self.args, "store", None) else STORE_ENV
        if is_store_url(root):  # a PostgresStore: no folder to check
            return root
        if not os.path.exists(root):
            raise UsageError(f"no store at {root} (from {where}): the folder does not exist")
        if not os.path.isdir(root):
            raise UsageError(f"{root} (from {where}) is not a folder")
        return root

    def store(self, **kwargs: Any) -> Store:
        """The store named by ``--store`` / ``$CRASHPOINT_STORE``; ``kwargs`` go to ``Store``.

        A folder that is not a store (its sub-folders hold no run, or it is one run's own
        folder) is refused, naming the store(s) found inside it or above it."""
        root = self.store_root()
        if is_store_url(root):  # postgresql://...: a PostgresStore (issue 14)
            from crashpoint.checkpoint import open_store

            return open_store(root, **kwargs)  # type: ignore[no-any-return]
        _check_store(root, "--store" if getattr(self.args, "store", None) else STORE_ENV)
        return Store(root, **kwargs)


#: The names a run's folder holds (moved-aside damaged files keep their prefix).
_RUN_FILE = re.compile(r"^(lock|meta\.json|seg-\d{12}\.log|snap-\d{12}\.cps)")


def _is_run_folder(path: str) -> bool:
    """True if ``path`` holds a run's files (a lock, meta.json, a segment or a snapshot).
    Reads only the folder's names: no file is opened. A PostgresStore's run is always one."""
    if is_store_url(path):
        return True
    try:
        return any(_RUN_FILE.match(n) for n in os.listdir(path))
    except OSError:
        return False


def _subfolders(path: str) -> list[str]:
    try:
        names = os.listdir(path)
    except OSError:
        return []
    return sorted(
        n for n in names if not n.startswith(".") and os.path.isdir(os.path.join(path, n))
    )


def _check_store(root: str, where: str) -> None:
    """Refuse ``root`` unless it can be a store: empty, or at least one sub-folder is a run."""
    subs = _subfolders(root)
    if any(_is_run_folder(os.path.join(root, n)) for n in subs):
        return
    if _is_run_folder(root):
        parent = os.path.dirname(os.path.abspath(root))
        raise UsageError(
            f"{root} (from {where}) is one run's folder, not a store: a store holds one "
            f"sub-folder per run; use --store {parent} and name the run "
            f"{os.path.basename(os.path.abspath(root))!r}"
        )
    if not subs:
        return  # an empty store: nothing in it yet
    inside = [
        os.path.join(root, n)
        for n in subs
        if any(_is_run_folder(os.path.join(root, n, m)) for m in _subfolders(os.path.join(root, n)))
    ]
    hint = (
        f"; the store inside it is --store {inside[0]}"
        if len(inside) == 1
        else f"; stores inside it: {', '.join(inside[:5])}"
        if inside
        else "; point --store at the folder the agent passes to Store(...)"
    )
    raise UsageError(
        f"{root} (from {where}) is not a checkpoint store: none of its "
        f"{_plural(len(subs), 'folder')} ({', '.join(subs[:5])}"
        f"{', ...' if len(subs) > 5 else ''}) holds a run (no journal, meta.json or "
        f"lock){hint}"
    )


def _runs(ctx: Context, store: Store) -> list[RunInfo]:
    """The store's runs: its sub-folders that hold a run's files (others are noted, skipped)."""
    runs: list[RunInfo] = []
    skipped: list[str] = []
    for r in store.runs():
        if _is_run_folder(r.path):
            runs.append(r)
        else:
            skipped.append(r.run_id)
    if skipped:
        ctx.note(
            f"note: skipped {_plural(len(skipped), 'folder')} that hold no run: "
            f"{', '.join(skipped[:10])}"
        )
    return runs


# -- argument types -------------------------------------------------------------------------


def _duration(text: str) -> float:
    try:
        return parse_duration(text, what="")
    except UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(text: str) -> int:
    try:
        return parse_size(text, what="")
    except UnitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative; give 0 or more")
    return n


_duration.__name__ = "duration"  # argparse names the type in "invalid duration value"
_size.__name__ = "size"
_count.__name__ = "count"

_JSON = arg("--json", action="store_true", help="print JSON instead of text")


# -- crashpoint checkpoints ... -------------------------------------------------------------

group(
    "checkpoints",
    help="inspect and maintain a checkpoint store",
    description="Inspect and maintain a checkpoint store: one folder per run under DIR. "
    "`list`, `show`, `verify`, `stale` and `plan` only read: safe while agents "
    "write. `prune` deletes finished runs; `approve` records a human decision.",
    args=[
        arg(
            "--store",
            metavar="DIR",
            help=f"the store's folder or postgresql:// URL (default: ${STORE_ENV})",
        )
    ],
)


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
    from crashpoint.checkpoint import run_reducer

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


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


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
        if r.run_id == run_id and _is_run_folder(r.path):
            return r
    known = ", ".join(n for n in store.run_ids()[:10] if _is_run_folder(store.path(n))) or "none"
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
            f"{_plural(loaded.seq - loaded.snapshot_seq, 'record')} since"
        )
    else:
        ctx.print(f"snapshot:   none ({_plural(loaded.seq, 'record')} in the journal)")
    if loaded.torn is not None:
        ctx.print(f"note:       torn tail, repaired on the next open: {loaded.torn}")
    ctx.print("state:")
    ctx.print(json.dumps(loaded.state, indent=2, sort_keys=True, ensure_ascii=False))
    return EXIT_OK


def _show_at(ctx: Context, store: Store, info: RunInfo) -> int:
    from crashpoint.checkpoint import state_at

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
    return store.verify(run_id)[run_id]


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
            else f"{_plural(len(run_ids), 'run')} without a journal segment or snapshot "
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
            f"damage: {_plural(problems, 'problem')} in {bad} of "
            f"{_plural(len(run_ids), 'run')}; "
            "opening with on_corrupt='rollback' keeps the valid prefix"
        )
        return EXIT_FOUND
    ctx.print(f"ok: {_plural(len(run_ids), 'run')}, {_plural(nfiles, 'file')} verified")
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
            type=_duration,
            help="remove finished runs not written for this long (30m, 2h, 7d, 90s)",
        ),
        arg("--keep", metavar="N", type=_count, help="keep at most N finished runs (the newest)"),
        arg(
            "--max-bytes",
            metavar="SIZE",
            type=_size,
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
        ctx.print(f"{verb} {_plural(len(removed), 'run')}, {total}")
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
            type=_duration,
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
    from crashpoint.checkpoint import stale_runs

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
            type=_duration,
            default=0.0,
            help="wait this long for the run's lock (default: do not wait)",
        ),
    ],
)
def _approve(ctx: Context) -> int:
    from crashpoint.checkpoint import decide

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
            type=_duration,
            default=0.0,
            help="wait this long for the run's lock (default: do not wait)",
        ),
        _JSON,
    ],
)
def _rollback(ctx: Context) -> int:
    from crashpoint.checkpoint import rollback

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
    from crashpoint.checkpoint import plan

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


# the lifecycle commands for agents in any language: start, step, effect, status, complete
from crashpoint.cli import (  # noqa: E402  (registers the commands; after `plan`)
    _fleet,  # noqa: F401  (crashpoint fleet work|submit|dead)
    _lifecycle,  # noqa: F401  (registers them; after `plan`)
)

# -- crashpoint run / replay (the harness) ---------------------------------------------------


@command(
    "run",
    help="the crash-recovery gate: run scenario files, print a table, write reports",
    description="Runs every *.scenario.yaml under PATH (default: scenarios/) through pytest "
    "with the crashpoint plugin (one engine, two doors), shows progress, ends "
    "with a table per scenario, writes JSON, JUnit and HTML reports to --report, "
    "and exits 0 if every trial passed, 1 otherwise. SIGINT (Ctrl-C) or SIGTERM "
    "stops it cleanly (agents killed, temporary folders removed, the report "
    "marked incomplete): exit 130 or 143.",
    args=[
        arg("paths", nargs="*", metavar="PATH", help="scenario files or folders"),
        arg("--seed", type=_count, help="campaign seed (default: each scenario's own)"),
        arg("--trials", type=_count, help="random trials per scenario (overrides files)"),
        arg("--mode", choices=("systematic", "random"), help="override every scenario's mode"),
        arg(
            "--report",
            metavar="DIR",
            default="crashpoint-report",
            help="where reports and failing trials go (default: ./crashpoint-report)",
        ),
        arg("--shard", metavar="I/N", help="run shard I of N of every campaign"),
        arg(
            "-n",
            dest="workers",
            metavar="N",
            help="parallel workers (pytest-xdist: a number or auto)",
        ),
        arg("-k", dest="keyword", metavar="EXPR", help="only scenarios matching EXPR"),
        arg("-x", dest="exitfirst", action="store_true", help="stop at the first failure"),
        arg(
            "--budget",
            metavar="DURATION",
            help="time budget per campaign, e.g. 10m or none (default: each scenario's "
            "budget, else 10m); past it the campaign stops and fails",
        ),
        arg("--quiet", action="store_true", help="no progress lines"),
    ],
)
def _run(ctx: Context) -> int:
    import pytest

    a = ctx.args
    paths = a.paths or ["scenarios"]
    for p in paths:
        if not os.path.exists(p):
            raise UsageError(
                f"no such file or folder: {p} (give scenario files or folders; "
                "the default is ./scenarios)"
            )
    if a.workers is not None:
        import importlib.util

        if importlib.util.find_spec("xdist") is None:
            raise UsageError(
                "-n needs pytest-xdist, a dependency of crashpoint that is not "
                "installed in this environment: `python3 -m pip install "
                "pytest-xdist`, or run without -n"
            )
    report = os.path.abspath(a.report)
    # --assert=plain: scenario items assert nothing, and rewriting would warn that crashpoint
    # (imported by this command) is "already imported", which filterwarnings=error, common in
    # a project's own configuration, turns into a crash of the gate
    argv = [
        *paths,
        "-o",
        "addopts=",
        "-p",
        "no:cacheprovider",
        "--assert=plain",
        "-q",
        "-rfE",
        "--crashpoint-report",
        report,
        f"--junitxml={os.path.join(report, 'junit.xml')}",
    ]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        argv += ["-p", "crashpoint"]  # the entry point's name: loads it when autoload is off
    for flag, value in (
        ("--crashpoint-seed", a.seed),
        ("--crashpoint-trials", a.trials),
        ("--crashpoint-mode", a.mode),
        ("--crashpoint-shard", a.shard),
        ("--crashpoint-budget", a.budget),
        ("-n", a.workers),
        ("-k", a.keyword),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if a.workers is not None:  # a file's items on one worker: one golden run per file
        argv += ["--dist", "loadfile"]
    if a.exitfirst:
        argv.append("-x")
    if not a.quiet:
        argv.append("--crashpoint-progress")
    from crashpoint._proc._cleanup import (
        cleanup_all,
        install_signal_handlers,
        reap_stale,
        received,
        signal_name,
    )

    # SIGTERM as well as SIGINT stops the gate cleanly: the plugin session kills the agents,
    # removes mounts and temporary folders, writes the report marked incomplete
    restore = install_signal_handlers()
    try:
        reaped = reap_stale()
        if reaped.harnesses:
            ctx.note(
                f"{PROG}: reaped what {reaped.harnesses} killed harness(es) left: "
                f"{reaped.describe()}"
            )
        _safe_report_folder(report)
        _gate_running(report, on=True)
        code = int(pytest.main(argv))
    finally:
        if received() is not None:
            cleanup_all()
        restore()
    _gate_running(report, on=False)
    sig = received()
    if sig is not None:
        ctx.note(
            f"{PROG}: interrupted by {signal_name(sig)}: agents stopped, temporary "
            f"folders removed; the report in {report} is marked incomplete"
        )
        return 128 + sig
    if code == int(pytest.ExitCode.NO_TESTS_COLLECTED):
        ctx.note(f"{PROG}: no *.scenario.yaml found under {' '.join(paths)}")
        return EXIT_FOUND
    if code == int(pytest.ExitCode.USAGE_ERROR):
        return EXIT_USAGE  # a bad option value: the message is above
    if code not in (0, 1):
        ctx.note(f"{PROG}: the gate did not run cleanly (pytest exit {code}); see above")
    return EXIT_OK if code == 0 else EXIT_FOUND


#: gate.json while the gate runs (the plugin writes the same at the start of its session)
_GATE_RUNNING = {"ok": False, "incomplete": True, "status": "running"}


def _safe_report_folder(report: str) -> None:
    """The report folder, created 0700 without following a link, and refused (exit 2) if
    another user owns it or can write in it; pytest's own ``--junitxml`` would write through a
    link planted at ``junit.xml``, so anything there but a regular file is refused too."""
    import stat

    from crashpoint.harness._report._safe import UnsafeReportFolder, secure_dir

    try:
        secure_dir(report)
    except UnsafeReportFolder as exc:
        raise UsageError(str(exc)) from None
    junit = os.path.join(report, "junit.xml")
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(junit).st_mode):
            raise UsageError(
                f"{junit} exists and is not a regular file (a link?): the gate "
                "will not write through it; remove it or choose another --report "
                "folder"
            )


def _gate_running(report: str, *, on: bool) -> None:
    """Replace gate.json by :data:`_GATE_RUNNING` (``on``); afterwards remove that marker if no
    session replaced it (pytest stopped before running anything, e.g. a bad option value).
    Either way an earlier run's ``"ok": true`` is never left behind. The folder is safe by
    then (:func:`_safe_report_folder`); a link planted at gate.json is refused, not followed."""
    from crashpoint.harness._report._safe import write_file

    path = os.path.join(report, "gate.json")
    with contextlib.suppress(OSError, ValueError):
        if on:
            write_file(path, json.dumps(_GATE_RUNNING))
            return
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as f:
            still = json.load(f) == _GATE_RUNNING
        if still:
            os.unlink(path)


@command(
    "replay",
    help="re-run exactly one failing trial from its folder and print its checks",
    description="FOLDER is a failing trial's folder (it holds plan.json, golden.json, "
    "runner.json and REPLAY). The same plan runs again against the same golden "
    "run; exit 1 if a check fails again (reproduced), 0 if every check passes.",
    args=[arg("folder", metavar="FOLDER", help="a trial folder from a report")],
)
def _replay(ctx: Context) -> int:
    from crashpoint.harness import replay

    folder = ctx.args.folder
    if not os.path.isdir(folder):
        raise UsageError(f"no such folder: {folder}")
    try:
        result = replay(folder)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # a plan.json edited by hand: a file operation or write point
        if isinstance(exc, CrashpointError):
            raise
        raise UsageError(
            f"{folder}: its plan.json cannot be replayed: {exc} (run the trial's "
            "campaign again to get a fresh plan)"
        ) from None
    ctx.print(f"trial {result.plan.index} [{result.plan.family}]: {result.plan.describe()}")
    ctx.print(f"  landed: {result.landed()}")
    for att in result.attempts:
        ctx.print(f"  {att.describe()}")
    for c in result.checks:
        ctx.print(f"  {c}")
    ctx.print(f"evidence: {result.folder}")
    if result.ok:
        how = (
            "every check passed this time"
            if result.exercised
            else "every check passed, but a planned fault did not take effect this time"
        )
        ctx.print(f"did not reproduce: {how}")
        return EXIT_OK
    ctx.print(f"reproduced: {', '.join(c.name for c in result.failed)} failed")
    return EXIT_FOUND


# -- entry point ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version end here
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        handler: Handler = args._handler
        from crashpoint._proc._cleanup import install_signal_handlers

        restore = install_signal_handlers()  # SIGTERM, too, ends in the finally blocks
        try:
            return handler(Context(args))
        finally:
            restore()
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `crashpoint checkpoints list | head`: the reader left, not an error
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except (CrashpointError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        from crashpoint._proc._cleanup import exit_status

        print(f"{PROG}: interrupted", file=sys.stderr)
        return exit_status(EXIT_INTERRUPTED)  # 130 SIGINT, 143 SIGTERM


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file (captured in a test): nothing to flush
        pass


if __name__ == "__main__":
    sys.exit(main())
