"""The argparse parser of the ``crashpoint`` command, built from the frame's command table.

:func:`build_parser` makes it from the commands the rooms imported so far registered (the full
entry, ``_main``, imports them all); ``only`` builds one command alone (the fast path's fallback,
when its own parser leaves a command line to argparse: help, errors, abbreviations). Usage
errors exit 2 with the subcommand's usage line, through :func:`~crashpoint.cli._framework.run`.

Imports: argparse and the frame.
"""

from __future__ import annotations

import argparse
import os
import sys

from crashpoint import __version__
from crashpoint.cli._framework import PROG, Arg, Command, commands, groups
from crashpoint.errors import UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["ROOMS", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 2 with the subcommand's usage line, as argparse does, but through
    ``main`` rather than ``sys.exit`` deep inside argparse."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise UsageError(message)

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes one for each argument added; its own asks shutil for the terminal's
        # width, and importing shutil (bz2, lzma, fnmatch) is a tenth of a lifecycle command
        # (every HelpFormatter takes width; typeshed's protocol names prog only)
        return self.formatter_class(prog=self.prog, width=_columns() - 2)  # type: ignore[call-arg]


def _columns() -> int:
    """The terminal's width as :func:`shutil.get_terminal_size` gives it, without shutil."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


def _add(parser: argparse.ArgumentParser, a: Arg, *, suppress_default: bool = False) -> None:
    kwargs = dict(a.kwargs)
    if suppress_default:  # a subparser's default must not overwrite the value given before it
        kwargs["default"] = argparse.SUPPRESS
    parser.add_argument(*a.flags, **kwargs)


#: the rooms in the order their commands are listed (whatever order they were imported in: the
#: fast path imports the lifecycle's room alone, maybe before the others in one process)
ROOMS = ("_checkpoints", "_fleet", "_gate", "_init", "_lifecycle")


def _room_rank(item: tuple[tuple[str, ...], Command]) -> int:
    room = item[1].func.__module__.rpartition(".")[2]
    return ROOMS.index(room) if room in ROOMS else len(ROOMS)


def build_parser(only: tuple[str, ...] | None = None) -> argparse.ArgumentParser:
    """The whole command line, built from the table (the commands of the rooms imported);
    ``only``: just that command (``("checkpoints", "step")``) and its group, which parses it
    alike in a tenth of the time (argparse looks up a translation for every parser it makes)."""
    parser = _Parser(
        prog=PROG,
        description="Crash-proof checkpoints for agents, and a harness that proves it.",
        epilog="Exit codes: 0 ok, 1 a problem was found (damage, a stale run, a failed "
        "trial), 2 the command could not do its job (bad usage or input, a malformed scenario "
        "file, no store, an OS error), 3 `run` could not judge (see `crashpoint run --help`), "
        "130/143 interrupted by SIGINT/SIGTERM.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    top = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    subs: dict[str, argparse._SubParsersAction[_Parser]] = {}
    for g in groups().values():
        if only is not None and (len(only) != 2 or only[0] != g.name):
            continue
        gp = top.add_parser(g.name, help=g.help, description=g.description)
        for a in g.args:
            _add(gp, a)
        subs[g.name] = gp.add_subparsers(
            dest="subcommand", metavar="SUBCOMMAND", required=True, parser_class=_Parser
        )
    for path, c in sorted(commands().items(), key=_room_rank):
        if only is not None and path != only:
            continue
        where = top if len(path) == 1 else subs[path[0]]
        cp = where.add_parser(
            path[-1], help=c.help, description=c.description, epilog=c.epilog or None
        )
        if len(path) == 2:
            for a in groups()[path[0]].args:
                _add(cp, a, suppress_default=True)
        for a in c.args:
            _add(cp, a)
        cp.set_defaults(_handler=c.func)
    return parser
