"""The reference checkpoint / auto-resume library.

Layer 2: imports the base (:mod:`crashpoint.errors`, :mod:`crashpoint.probe`, the low-level file
I/O and failpoints) and the standard library, never the harness, the faults or pytest: an agent
imports this and nothing else. Its rooms: the store and its journal (``_store``, ``_journal``,
``_record``, ``_lock``; ``_history`` reads it record by record), runs and effects (``_run``,
``_http``, ``_mail``, ``_redact``, ``_notify``), the lifecycle the command line drives for agents
in any language (``_lifecycle``), auto-resume (``_supervisor``), and the PostgreSQL store with
its fleet (:mod:`crashpoint.checkpoint.postgres`, whose names are imported here on first use:
psycopg is loaded only by an agent that uses them).
"""

import os as _os
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from crashpoint._fsio import REAL as _REAL
from crashpoint.checkpoint._history import JournalReader
from crashpoint.checkpoint._http import http_effect
from crashpoint.checkpoint._journal import (
    Damage,
    Loaded,
    TornTail,
    list_files,
    records_reducer,
    register_history_index,
)
from crashpoint.checkpoint._lifecycle import (
    EXIT_SKIP,
    EffectAnswer,
    LifecycleStatus,
    complete_run,
    exists_or_raise,
    record_effect,
    record_step,
    run_status,
    start_run,
)
from crashpoint.checkpoint._mail import message_id_for, smtp_effect
from crashpoint.checkpoint._notify import NOTIFY_ENV, notify_event
from crashpoint.checkpoint._record import decode_json
from crashpoint.checkpoint._redact import DEFAULT_SECRET_NAMES, REDACTED, Redactor, Secret
from crashpoint.checkpoint._run import (
    EXIT_CODES,
    Checkpointing,
    Decision,
    EffectPolicy,
    PlanLine,
    Rollback,
    Run,
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
from crashpoint.errors import (
    HttpEffectError,
    MailEffectError,
    PayloadError,
    RunDenied,
)

if _TYPE_CHECKING:
    from crashpoint.checkpoint.postgres import (
        FleetOutcome,
        FleetWorker,
        Lease,
        PostgresStore,
        submit,
    )

#: the PostgreSQL room's names: imported on first use (PostgresStore needs psycopg)
_LAZY = ("FleetOutcome", "FleetWorker", "Lease", "PostgresStore", "submit")


def __getattr__(name: str) -> _Any:
    if name in _LAZY:  # imported on first use: the PostgreSQL room loads psycopg (its face
        from crashpoint.checkpoint import postgres  # says which extra to install without it)

        return getattr(postgres, name)
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


def makedirs_durable(path: str | _os.PathLike[str]) -> None:
    """Create the folder ``path`` and its missing parents so that a power cut keeps them
    (each new folder fsynced into its parent), 0700."""
    _REAL.makedirs_durable(_os.fspath(path))


__all__ = [
    "ACTIVE_STATUSES",
    "DEFAULT_SECRET_NAMES",
    "EXIT_CODES",
    "EXIT_SKIP",
    "NOTIFY_ENV",
    "PRUNABLE_STATUSES",
    "REDACTED",
    "Checkpointing",
    "Damage",
    "Decision",
    "Durability",
    "EffectAnswer",
    "EffectPolicy",
    "FleetOutcome",
    "FleetWorker",
    "HttpEffectError",
    "JournalReader",
    "Lease",
    "LifecycleStatus",
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
    "complete_run",
    "decide",
    "decode_json",
    "exists_or_raise",
    "exit_code",
    "http_effect",
    "interrupted_runs",
    "is_store_url",
    "list_files",
    "makedirs_durable",
    "message_id_for",
    "notify_event",
    "open_run",
    "open_store",
    "plan",
    "record_effect",
    "record_step",
    "records_reducer",
    "register_history_index",
    "resume_interrupted",
    "rollback",
    "run_main",
    "run_reducer",
    "run_status",
    "smtp_effect",
    "stale_runs",
    "start_run",
    "state_at",
    "submit",
    "validate_run_id",
]
