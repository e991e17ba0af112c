"""The frame of the ``crashpoint`` command: the command table, the parser built from it, what a
command receives, the exit codes, and the argument types and helpers several commands share.

It imports no command module: each command room (``_checkpoints``, ``_lifecycle``, ``_fleet``,
``_gate``) imports this frame and registers its commands with :func:`command`, and ``_main``
imports the rooms, then builds the parser. Adding a command is one decorated function: it
declares its place and arguments, receives a :class:`Context`, and returns the exit code::

    @command("checkpoints", "approve", help="record a human decision for a paused run",
             args=[arg("run", metavar="RUN", help="the run id"),
                   arg("--deny", action="store_true", help="refuse instead of approving")])
    def _approve(ctx: Context) -> int:
        store = ctx.store()
        ...
        return EXIT_OK

The ``checkpoints`` group is declared here because two rooms put commands in it (the store's
maintenance in ``_checkpoints``, the lifecycle in ``_lifecycle``).

Exit codes: 0 success (nothing found), 1 the command found a problem (damage, a stale run, a
corrupt run, a failed trial), 2 the command could not do its job (bad usage or input, a
malformed scenario file, no store, unknown run, an OS error), 3 ``run`` only: the gate could not
judge (no scenario found, a family none of whose faults fired), 130 interrupted (SIGINT,
Ctrl-C), 143 stopped by SIGTERM, 141 the reader of the output went away (``| head``).

Imports: the standard library and the public faces :mod:`crashpoint` (the version),
:mod:`crashpoint.checkpoint`, :mod:`crashpoint.errors` and :mod:`crashpoint.harness` (its lazy
face: the units of sizes and durations and the session's signal handlers, each loaded when first
used; no harness module). This module is imported by every command, the lifecycle commands a
shell agent runs once per step included: keep it cheap.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable

from crashpoint.checkpoint import Store, is_store_url
from crashpoint.errors import CrashpointError, InvalidArgument, UnitError, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    import argparse
    from typing import Any, TextIO

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FOUND",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_JUDGED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "PROG",
    "STORE_ENV",
    "Arg",
    "Command",
    "Context",
    "Group",
    "Handler",
    "arg",
    "command",
    "commands",
    "count",
    "duration",
    "group",
    "groups",
    "is_run_folder",
    "plural",
    "run",
    "size",
]

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2
EXIT_NOT_JUDGED = 3  # `run`: the gate could not judge (no scenario found, a family not exercised)
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM: stopped by SIGTERM (cleanly: KeyboardInterrupt path)
EXIT_BROKEN_PIPE = 141  # what a shell reports for a command killed by SIGPIPE
STORE_ENV = "CRASHPOINT_STORE"
PROG = "crashpoint"


# -- the command table ------------------------------------------------------------------------


class Arg:
    """One ``add_argument`` call, kept for later: flags and keyword arguments."""

    __slots__ = ("flags", "kwargs")

    def __init__(self, flags: tuple[str, ...], kwargs: dict[str, Any]) -> None:
        self.flags = flags
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"Arg({self.flags!r}, {self.kwargs!r})"


def arg(*flags: str, **kwargs: Any) -> Arg:
    """Declare an argument exactly as ``ArgumentParser.add_argument`` takes it."""
    return Arg(flags, kwargs)


Handler = Callable[["Context"], int]


# (plain classes, not dataclasses: the lifecycle commands start without importing dataclasses)
class Group:
    __slots__ = ("args", "description", "help", "name")

    def __init__(self, name: str, help: str, description: str, args: tuple[Arg, ...]) -> None:
        self.name, self.help, self.description, self.args = name, help, description, args


class Command:
    __slots__ = ("args", "description", "epilog", "func", "help", "path")

    def __init__(
        self,
        path: tuple[str, ...],
        help: str,
        description: str,
        args: tuple[Arg, ...],
        func: Handler,
        epilog: str = "",
    ) -> None:
        self.path, self.help, self.description, self.args = path, help, description, args
        self.func, self.epilog = func, epilog


_GROUPS: dict[str, Group] = {}
_COMMANDS: dict[tuple[str, ...], Command] = {}


def group(name: str, *, help: str, description: str = "", args: Iterable[Arg] = ()) -> None:
    """Declare a top-level command that holds subcommands (``checkpoints``); ``args`` are
    accepted both before and after the subcommand's name."""
    _GROUPS[name] = Group(name, help, description or help, tuple(args))


def groups() -> dict[str, Group]:
    """The command groups declared so far, by name."""
    return _GROUPS


def commands() -> dict[tuple[str, ...], Command]:
    """The commands registered so far (by the rooms imported), by path."""
    return _COMMANDS


def command(
    *path: str, help: str, description: str = "", args: Iterable[Arg] = (), epilog: str = ""
) -> Callable[[Handler], Handler]:
    """Register ``func`` as the command at ``path``: ``("checkpoints", "list")`` or ``("run",)``.

    A two-part path needs its group declared with :func:`group` first. ``epilog``: text shown
    after the options in ``--help`` (e.g. the command's exit codes).
    """
    if not 1 <= len(path) <= 2:
        raise InvalidArgument(f"a command path has one or two names, got {path!r}")
    if len(path) == 2 and path[0] not in _GROUPS:
        raise InvalidArgument(f"declare the group {path[0]!r} with group() before its commands")

    def register(func: Handler) -> Handler:
        _COMMANDS[path] = Command(path, help, description or help, tuple(args), func, epilog)
        return func

    return register


def run(parse: Callable[[], Any], *, signals: bool = True) -> int:
    """Parse the command line with ``parse()`` (an argparse parser's ``parse_args``, or the
    lifecycle's fast parser), run its command and return the exit code; what goes wrong becomes
    one line on stderr and a code (see the module's docstring), never a traceback.

    ``signals``: SIGINT and SIGTERM end in the command's ``finally`` blocks (the session's
    handlers). Without (the lifecycle commands), SIGTERM ends the process as its default does:
    a journal needs no ``finally`` block (an append cut short is a torn tail, repaired on the
    next open) and a shell reports 143 either way."""
    try:
        try:
            args = parse()
        except SystemExit as exc:  # --help and --version end here
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        handler: Handler = args._handler
        if not signals:
            return handler(Context(args))
        from crashpoint import harness  # its lazy face: the fast path never loads it

        restore = harness.install_signal_handlers()  # SIGTERM, too, ends in the finally blocks
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
        print(f"{PROG}: interrupted", file=sys.stderr)
        if not signals:
            return EXIT_INTERRUPTED  # without the session's handlers only SIGINT gets here
        from crashpoint import harness  # its lazy face: the fast path never loads it

        return harness.exit_status(EXIT_INTERRUPTED)  # 130 SIGINT, 143 SIGTERM


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file (captured in a test): nothing to flush
        pass


# -- what a command receives ----------------------------------------------------------------


class Context:
    """The parsed arguments (an :class:`argparse.Namespace`, or the fast path's namespace with
    the same attributes) and the streams; :meth:`store` opens the store the user named."""

    __slots__ = ("args", "err", "out")

    def __init__(self, args: Any, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.args = args
        self.out: TextIO = sys.stdout if out is None else out
        self.err: TextIO = sys.stderr if err is None else err

    def __repr__(self) -> str:
        return f"Context({self.args!r})"

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
            # imported here, not above, for the cost: a lifecycle command never loads it
            from crashpoint.checkpoint import open_store

            return open_store(root, **kwargs)  # type: ignore[no-any-return]
        _check_store(root, "--store" if getattr(self.args, "store", None) else STORE_ENV)
        return Store(root, **kwargs)


#: The names a run's folder holds (moved-aside damaged files keep their prefix).
_RUN_FILE = r"(lock|meta\.json|seg-\d{12}\.log|snap-\d{12}\.cps)"  # compiled on first use


def is_run_folder(path: str) -> bool:
    """True if ``path`` holds a run's files (a lock, meta.json, a segment or a snapshot).
    Reads only the folder's names: no file is opened. A PostgresStore's run is always one."""
    if is_store_url(path):
        return True
    try:
        return any(re.match(_RUN_FILE, n) for n in os.listdir(path))
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
    if any(is_run_folder(os.path.join(root, n)) for n in subs):
        return
    if is_run_folder(root):
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
        if any(is_run_folder(os.path.join(root, n, m)) for m in _subfolders(os.path.join(root, n)))
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
        f"{plural(len(subs), 'folder')} ({', '.join(subs[:5])}"
        f"{', ...' if len(subs) > 5 else ''}) holds a run (no journal, meta.json or "
        f"lock){hint}"
    )


# -- argument types (argparse names each by its function: invalid count value) ----------------


def _type_error(message: str) -> argparse.ArgumentTypeError:
    import argparse  # loaded already: argparse calls the types below

    return argparse.ArgumentTypeError(message)


def duration(text: str) -> float:
    """``30m``, ``2h``, ``90s``, ``7d``: seconds."""
    from crashpoint import harness  # only for an option that takes one: not the lifecycle's

    try:
        return harness.parse_duration(text, what="")
    except UnitError as exc:
        raise _type_error(str(exc)) from None


def size(text: str) -> int:
    """``64KiB``, ``10MB``, ``1GiB``: bytes."""
    from crashpoint import harness  # only for an option that takes one: not the lifecycle's

    try:
        return harness.parse_size(text, what="")
    except UnitError as exc:
        raise _type_error(str(exc)) from None


def count(text: str) -> int:
    """A whole number, 0 or more."""
    try:
        n = int(text)
    except ValueError:
        raise _type_error(f"{text!r} is not a whole number") from None
    if n < 0:
        raise _type_error(f"{text} is negative; give 0 or more")
    return n


def plural(n: int, noun: str) -> str:
    """``1 run``, ``2 runs``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# -- the group two rooms share ----------------------------------------------------------------

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
