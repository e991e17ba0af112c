""":func:`crashpoint.cli.main` for tests that run the ``crashpoint`` command in this process,
with every room of the command imported when pytest collects the test module.

The command imports its rooms on first use, and each registers its commands with the frame
(:mod:`crashpoint.cli._framework`). A ``pytester`` test restores ``sys.modules`` when it ends:
modules first imported during one are dropped while the ``crashpoint.cli`` package keeps them as
attributes, so a later ``main`` in that process builds its parser on a frame imported afresh,
with no command ("argument COMMAND: invalid choice: 'run' (choose from )"). Imported at
collection, before any test runs, they stay.
"""

from __future__ import annotations

from crashpoint.cli import (  # noqa: F401  (imported for the commands they register)
    _checkpoints,
    _fast,
    _fleet,
    _framework,
    _gate,
    _init,
    _lifecycle,
    _main,
    _parser,
    main,
)

__all__ = ["main"]
