"""The ``crashpoint`` command: ``crashpoint run | replay | checkpoints … | fleet …``.

A door (layer 7): it may import only the public faces (:mod:`crashpoint`,
:mod:`crashpoint.errors`, :mod:`crashpoint.probe`, :mod:`crashpoint.checkpoint`,
:mod:`crashpoint.checkpoint.postgres`, :mod:`crashpoint.faults`, :mod:`crashpoint.harness`) and
its own modules, never another package's private module. Its rooms:

- ``_framework``: the argparse frame (the command table, :func:`~crashpoint.cli._framework.command`
  and its arguments, the parser built from it, the context a command receives, the exit codes,
  the shared argument types); it imports no command module;
- one room per command group, each importing the frame and registering its commands:
  ``_checkpoints`` (``checkpoints list|show|verify|prune|stale|approve|rollback|plan|dead``: a
  store's upkeep), ``_lifecycle`` (``checkpoints start|step|effect|status|complete``:
  checkpoints for an agent in any language), ``_fleet`` (``fleet work|submit|dead``: workers
  over a PostgreSQL store), ``_gate`` (``run`` and ``replay``: the crash-recovery gate);
- ``_main``: the full entry, which imports every room (so they register) and runs a command;
  ``_fast``: the lifecycle commands' entry, which imports only theirs.

The lifecycle commands run once per step of a shell agent, so they start fast: this face
imports nothing but :mod:`sys`, and :func:`main` loads only the lifecycle's room for them (the
store, its journal and the run's records; no other room, no harness module); the gate's
(``run``, ``replay``, ``report``) load the gate's room alone; every other command loads every
room. No room imports pytest, psutil or a harness module when it is loaded
(the harness face is lazy; ``run`` imports pytest itself). The console script ``crashpoint``,
``python -m crashpoint`` and ``python -m crashpoint.cli`` all call :func:`console_main`, which
runs :func:`main` and, after a lifecycle command, ends the process without the interpreter's
teardown when nothing is owed at exit (:func:`crashpoint.cli._fast.exit_now`).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["console_main", "main"]

#: the lifecycle commands, ``crashpoint checkpoints NAME``: the fast path
_LIFECYCLE = frozenset({"complete", "effect", "start", "status", "step"})


def _lifecycle_command(argv: Sequence[str]) -> str | None:
    """The lifecycle command ``argv`` names (``checkpoints [--store DIR] NAME ...``), or None."""
    if not argv or argv[0] != "checkpoints":
        return None
    i = 1
    while i < len(argv) and argv[i].startswith("--store"):  # the group's one option
        i += 1 if "=" in argv[i] else 2
    return argv[i] if i < len(argv) and argv[i] in _LIFECYCLE else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = _lifecycle_command(args)
    if command is not None:
        # imported here, not above, for the cost: a lifecycle command loads its own room only
        from crashpoint.cli._fast import main as fast

        return fast(args, command)
    # imported here, not above, for the cost: importing this face loads nothing (the console
    # script does it before main runs)
    from crashpoint.cli._main import main as full

    return full(args)


def console_main() -> int:
    """The ``crashpoint`` command itself (the console script, ``python -m crashpoint``): run
    :func:`main` on ``sys.argv``; a lifecycle command then exits the process with its code at
    once, skipping the interpreter's teardown, when nothing is owed at exit (no ``atexit``
    callback, no other thread, output flushed); otherwise return the exit code."""
    args = sys.argv[1:]
    command = _lifecycle_command(args)
    if command is None:
        return main(args)
    # imported here, not above, for the cost (as in main)
    from crashpoint.cli._fast import exit_now
    from crashpoint.cli._fast import main as fast

    code = fast(args, command)
    exit_now(code)  # returns only if something is owed at exit: then the caller exits
    return code
