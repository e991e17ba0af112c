"""The fast path of the ``crashpoint`` command: the lifecycle commands alone.

A shell agent runs ``crashpoint checkpoints start|step|effect|status|complete`` once per step,
each a fresh process, so these start in milliseconds: only the lifecycle's room
(:mod:`crashpoint.cli._lifecycle`) registers, the parser holds only its five commands (the same
definitions, so the same help and errors), and nothing else is imported: no other room, no
harness module, not the session's signal handlers (SIGTERM ends the process as by default; the
journal needs no ``finally`` block). :func:`crashpoint.cli.main` chooses this path;
``tests/contract/test_lean_lifecycle.py`` keeps its imports few.

Imports: the frame and the lifecycle's room.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from crashpoint.cli import _lifecycle  # noqa: F401  (imported for the commands it registers)
from crashpoint.cli._framework import build_parser, run

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run a lifecycle command; return the exit code."""
    return run(build_parser(), list(sys.argv[1:] if argv is None else argv), signals=False)
