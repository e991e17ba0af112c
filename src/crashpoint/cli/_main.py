"""``main()``: the ``crashpoint`` command's entry point.

Imports the command rooms so that they register their commands with the frame
(:mod:`crashpoint.cli._framework`), builds the parser, runs the command the user named and
turns what goes wrong into one line on stderr and an exit code (see the frame for the codes):
never a traceback. SIGINT and SIGTERM end in the commands' ``finally`` blocks.

Imports: the frame and the rooms, the public faces :mod:`crashpoint.errors` and
:mod:`crashpoint.harness` (its lazy face, for the session's signal handlers: process control's
small ``_cleanup`` module, no harness module).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from crashpoint import harness

# the command rooms, imported for the commands they register; a group's help lists its commands
# in the order they register: _checkpoints (list ... plan) before _lifecycle (start ... complete)
from crashpoint.cli import _checkpoints, _fleet, _gate, _init, _lifecycle  # noqa: F401
from crashpoint.cli._framework import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    PROG,
    Context,
    Handler,
    build_parser,
)
from crashpoint.errors import CrashpointError, UsageError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version end here
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        handler: Handler = args._handler
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
        return harness.exit_status(EXIT_INTERRUPTED)  # 130 SIGINT, 143 SIGTERM


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file (captured in a test): nothing to flush
        pass
