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
- ``_main``: :func:`main`, which imports the rooms (so they register) and runs a command.

The lifecycle commands run once per step of a shell agent, so start-up is kept cheap: no room
imports pytest, psutil or a harness module when it is loaded (the harness face is lazy; ``run``
imports pytest itself). The console script ``crashpoint``, ``python -m crashpoint`` and
``python -m crashpoint.cli`` all call :func:`main`.
"""

from __future__ import annotations

from crashpoint.cli._main import main

__all__ = ["main"]
