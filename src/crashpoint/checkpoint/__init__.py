"""The reference checkpoint / auto-resume library.

Imports neither pytest nor the harness: an agent imports this and nothing else.
"""

import os as _os

from crashpoint.checkpoint._fsio import REAL as _REAL
from crashpoint.checkpoint._http import HttpEffectError, http_effect
from crashpoint.checkpoint._journal import Damage, Loaded, PayloadError, TornTail, records_reducer
from crashpoint.checkpoint._mail import MailEffectError, message_id_for, smtp_effect
from crashpoint.checkpoint._notify import NOTIFY_ENV, notify_event
from crashpoint.checkpoint._redact import DEFAULT_SECRET_NAMES, REDACTED, Redactor, Secret
from crashpoint.checkpoint._run import (
    EXIT_CODES,
    Checkpointing,
    Decision,
    EffectPolicy,
    PlanLine,
    Rollback,
    Run,
    RunDenied,
    StateAt,
    decide,
    exit_code,
    open_run,
    plan,
    rollback,
    run_main,
    run_reducer,
    state_at,
)
from crashpoint.checkpoint._store import (
    ACTIVE_STATUSES,
    PRUNABLE_STATUSES,
    Durability,
    Recovery,
    Retention,
    RunInfo,
    RunJournal,
    SnapshotPolicy,
    Store,
    validate_run_id,
)
from crashpoint.checkpoint._supervisor import (
    ResumeOutcome,
    Supervisor,
    interrupted_runs,
    resume_interrupted,
    stale_runs,
)


def atomic_write(path: str | _os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old file or the new one, whole
    (same-folder temp file, fsync, ``os.replace``, fsync the folder)."""
    _REAL.write_atomic(_os.fspath(path), data)


__all__ = [
    "ACTIVE_STATUSES",
    "DEFAULT_SECRET_NAMES",
    "EXIT_CODES",
    "NOTIFY_ENV",
    "PRUNABLE_STATUSES",
    "REDACTED",
    "Checkpointing",
    "Damage",
    "Decision",
    "Durability",
    "EffectPolicy",
    "HttpEffectError",
    "Loaded",
    "MailEffectError",
    "PayloadError",
    "PlanLine",
    "Recovery",
    "Redactor",
    "ResumeOutcome",
    "Retention",
    "Rollback",
    "Run",
    "RunDenied",
    "RunInfo",
    "RunJournal",
    "Secret",
    "SnapshotPolicy",
    "StateAt",
    "Store",
    "Supervisor",
    "TornTail",
    "atomic_write",
    "decide",
    "exit_code",
    "http_effect",
    "interrupted_runs",
    "message_id_for",
    "notify_event",
    "open_run",
    "plan",
    "records_reducer",
    "resume_interrupted",
    "rollback",
    "run_main",
    "run_reducer",
    "smtp_effect",
    "stale_runs",
    "state_at",
    "validate_run_id",
]
