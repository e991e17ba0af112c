"""The reference checkpoint / auto-resume library.

Imports neither pytest nor the harness: an agent imports this and nothing else.
"""

import os as _os
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from crashpoint._fsio import REAL as _REAL
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
from crashpoint.checkpoint.postgres._fleet import FleetOutcome, FleetWorker, submit

if _TYPE_CHECKING:
    from crashpoint.checkpoint.postgres._store import Lease, PostgresStore

_LAZY = {"PostgresStore", "Lease"}  # need psycopg: imported on first use, never at import


def __getattr__(name: str) -> _Any:
    if name in _LAZY:
        try:
            from crashpoint.checkpoint.postgres import _store as _pg
        except ImportError as exc:
            raise ImportError(
                f"crashpoint.checkpoint.{name} needs the PostgreSQL driver "
                f"psycopg 3 ({exc}): pip install 'crashpoint[postgres]'"
            ) from None
        return getattr(_pg, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_store_url(url_or_path: str | _os.PathLike[str]) -> bool:
    """True for a ``postgresql://`` or ``postgres://`` URL (a PostgresStore), else a folder."""
    s = _os.fspath(url_or_path)
    return isinstance(s, str) and s.lower().startswith(("postgresql://", "postgres://"))


def open_store(url_or_path: str | _os.PathLike[str], **kw: _Any) -> _Any:
    """A :class:`PostgresStore` for a ``postgresql://`` / ``postgres://`` URL, else a file
    :class:`Store` for the folder; ``kw`` are the store's options."""
    if is_store_url(url_or_path):
        return __getattr__("PostgresStore")(_os.fspath(url_or_path), **kw)
    return Store(url_or_path, **kw)


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
    "FleetOutcome",
    "FleetWorker",
    "HttpEffectError",
    "Lease",
    "Loaded",
    "MailEffectError",
    "PayloadError",
    "PlanLine",
    "PostgresStore",
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
    "is_store_url",
    "message_id_for",
    "notify_event",
    "open_run",
    "open_store",
    "plan",
    "records_reducer",
    "resume_interrupted",
    "rollback",
    "run_main",
    "run_reducer",
    "smtp_effect",
    "stale_runs",
    "state_at",
    "submit",
    "validate_run_id",
]
