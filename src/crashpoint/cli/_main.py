"""``main()`` of every command but the lifecycle's: the ``crashpoint`` command's full entry.

Imports the command rooms so that they register their commands with the frame
(:mod:`crashpoint.cli._framework`), builds the parser and runs the command the user named with
the frame's :func:`~crashpoint.cli._framework.run`: what goes wrong becomes one line on stderr
and an exit code (see the frame for the codes), never a traceback; SIGINT and SIGTERM end in
the commands' ``finally`` blocks. The lifecycle commands take the fast path instead
(:mod:`crashpoint.cli._fast`); :func:`crashpoint.cli.main` chooses.

Imports: the frame, its argparse parser and the rooms.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# the command rooms, imported for the commands they register; a group's help lists its commands
# in the order they register: _checkpoints (list ... plan) before _lifecycle (start ... complete)
from crashpoint.cli import _checkpoints, _fleet, _gate, _init, _lifecycle  # noqa: F401
from crashpoint.cli._framework import run
from crashpoint.cli._parser import build_parser

__all__ = ["main", "parser"]

_PARSER: list[argparse.ArgumentParser] = []  # built once per process


def parser() -> argparse.ArgumentParser:
    """The whole command line (every room's commands), built once."""
    if not _PARSER:
        _PARSER.append(build_parser())
    return _PARSER[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return run(lambda: parser().parse_args(args))
