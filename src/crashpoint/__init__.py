"""crashpoint: crash-proof checkpoints for agents, and a harness that proves it.

The package is a house of rooms in layers, the lowest at the bottom; a layer imports only
layers below it, and another package only through its face (its ``__init__``)::

    7 doors       pytest_plugin/  cli/  strategies.py
    6 adapters    adapters/ (LangGraph, DBOS)   agents/ (the demo agent)
    5 harness     harness/ (face) over _spec/ _standins/ _checker/ _report/ _engine/
    4 faults      faults/
    3 processes   _proc/
    2 library     checkpoint/ (with checkpoint/postgres/)
    1 base        errors  probe  _entry  _fsio  _units  _placeholders  _failpoints  _lazy  _version

This face is lazy (PEP 562): ``import crashpoint.probe``, what runs inside every agent the
harness spawns, loads this module, its lazy-import helper (``_lazy``), the probe and
:mod:`crashpoint.errors`, nothing more. The names below are imported on first use; every one is
listed in ``docs/reference/api.md``.
"""

from __future__ import annotations

from crashpoint._lazy import attach

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)

if TYPE_CHECKING:
    from crashpoint import probe
    from crashpoint._version import __version__
    from crashpoint.checkpoint import Durability, Secret, Store
    from crashpoint.errors import (
        CheckpointCorrupt,
        CheckpointError,
        CheckpointWriteError,
        CrashpointError,
        DiskBudgetExceeded,
        EffectInDoubt,
        InvalidRunId,
        ResumeMismatch,
        RunLocked,
        RunPaused,
    )

#: name -> the module it lives in (a module itself when the two are the same)
_WHERE = {
    "CheckpointCorrupt": "crashpoint.errors",
    "CheckpointError": "crashpoint.errors",
    "CheckpointWriteError": "crashpoint.errors",
    "CrashpointError": "crashpoint.errors",
    "DiskBudgetExceeded": "crashpoint.errors",
    "Durability": "crashpoint.checkpoint",
    "EffectInDoubt": "crashpoint.errors",
    "InvalidRunId": "crashpoint.errors",
    "ResumeMismatch": "crashpoint.errors",
    "RunLocked": "crashpoint.errors",
    "RunPaused": "crashpoint.errors",
    "Secret": "crashpoint.checkpoint",
    "Store": "crashpoint.checkpoint",
    "__version__": "crashpoint._version",
    "probe": "crashpoint.probe",
}

__all__ = [
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointWriteError",
    "CrashpointError",
    "DiskBudgetExceeded",
    "Durability",
    "EffectInDoubt",
    "InvalidRunId",
    "ResumeMismatch",
    "RunLocked",
    "RunPaused",
    "Secret",
    "Store",
    "__version__",
    "probe",
]


__getattr__, __dir__ = attach(__name__, _WHERE)
