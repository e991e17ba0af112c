"""crashpoint: crash-proof checkpoints for agents, and a harness that proves it."""

from crashpoint import probe
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

__version__ = "0.1.0"

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
