"""``main()`` of every command but the lifecycle's: the ``crashpoint`` command's full entry.

Imports the command rooms so that they register their commands with the frame
(:mod:`crashpoint.cli._framework`), builds the parser and runs the command the user named with
the frame's :func:`~crashpoint.cli._framework.run`: what goes wrong becomes one line on stderr
and an exit code (see the frame for the codes), never a traceback; SIGINT and SIGTERM end in
the commands' ``finally`` blocks. The lifecycle commands take the fast path instead
(:mod:`crashpoint.cli._fast`); :func:`crashpoint.cli.main` chooses. The gate's commands
(``run``, ``replay``, ``report``), which CI and the suite start most, import their own room
alone and parse with a parser of that command only (the same usage, help and errors): the other
rooms and their parsers were ~40 ms of CPU a start.

Imports: the frame, its argparse parser and the rooms.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from crashpoint.cli._framework import run
from crashpoint.cli._parser import build_parser

__all__ = ["main", "parser"]

#: the gate's commands: their room (``_gate``) alone, and a parser of the command alone
_GATE_COMMANDS = frozenset({"replay", "report", "run"})

_PARSERS: dict[tuple[str, ...] | None, argparse.ArgumentParser] = {}  # built once per process


def parser(only: tuple[str, ...] | None = None) -> argparse.ArgumentParser:
    """The whole command line (every room's commands), built once; ``only``: a parser of that
    gate command alone (``("run",)``), its room alone imported."""
    if only is None:
        # the command rooms, imported for the commands they register; a group's help lists its
        # commands in the order they register: _checkpoints (list ... plan) before _lifecycle
        from crashpoint.cli import _checkpoints, _fleet, _gate, _init, _lifecycle  # noqa: F401
    else:
        from crashpoint.cli import _gate  # noqa: F401
    if only not in _PARSERS:
        _PARSERS[only] = build_parser(only)
    return _PARSERS[only]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    only = (args[0],) if args and args[0] in _GATE_COMMANDS else None
    return run(lambda: parser(only).parse_args(args))
