"""The reference checkpoint / auto-resume library.

Layer 2: imports the base (:mod:`crashpoint.errors`, :mod:`crashpoint.probe`, the low-level file
I/O and failpoints) and the standard library, never the harness, the faults or pytest: an agent
imports this and nothing else. Its rooms: the store and its journal (``_store``, ``_journal``,
``_record``, ``_lock``; ``_history`` reads it record by record), runs and effects (``_run``,
``_http``, ``_mail``, ``_redact``, ``_notify``), the lifecycle the command line drives for agents
in any language (``_lifecycle``), auto-resume (``_supervisor``), and the PostgreSQL store with
its fleet (:mod:`crashpoint.checkpoint.postgres`, whose names are imported here on first use:
psycopg is loaded only by an agent that uses them).

This face is lazy (:mod:`crashpoint._lazy`): a name is imported from its module on first use.
The lifecycle commands (``crashpoint checkpoints start|step|effect|status|complete``) run once
per step of a shell agent and load only the store, the journal and the run; the effects over
HTTP and SMTP (urllib, smtplib, email), the supervisor and PostgreSQL stay unloaded.
"""

from __future__ import annotations

from crashpoint._lazy import attach

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)

if TYPE_CHECKING:
    from crashpoint.checkpoint._facts import (
        Recovery,
        RunInfo,
    )
    from crashpoint.checkpoint._history import (
        JournalReader,
    )
    from crashpoint.checkpoint._http import (
        http_effect,
    )
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
    from crashpoint.checkpoint._mail import (
        message_id_for,
        smtp_effect,
    )
    from crashpoint.checkpoint._notify import (
        NOTIFY_ENV,
        notify_event,
    )
    from crashpoint.checkpoint._open import (
        open_store,
    )
    from crashpoint.checkpoint._record import (
        decode_json,
    )
    from crashpoint.checkpoint._redact import (
        DEFAULT_SECRET_NAMES,
        REDACTED,
        Redactor,
        Secret,
    )
    from crashpoint.checkpoint._run import (
        Checkpointing,
        Decision,
        EffectPolicy,
        PlanLine,
        Rollback,
        Run,
        StateAt,
        decide,
        open_run,
        plan,
        rollback,
        run_main,
        state_at,
    )
    from crashpoint.checkpoint._runstate import (
        EXIT_CODES,
        any_reducer,
        exit_code,
        run_reducer,
    )
    from crashpoint.checkpoint._store import (
        ACTIVE_STATUSES,
        PRUNABLE_STATUSES,
        Durability,
        Retention,
        RunJournal,
        SnapshotPolicy,
        Store,
        atomic_write,
        is_store_url,
        makedirs_durable,
        validate_run_id,
    )
    from crashpoint.checkpoint._supervisor import (
        ResumeOutcome,
        Supervisor,
        interrupted_runs,
        resume_interrupted,
        stale_runs,
    )
    from crashpoint.checkpoint.postgres import (
        FleetOutcome,
        FleetWorker,
        Lease,
        PostgresStore,
        submit,
    )
    from crashpoint.errors import (
        HttpEffectError,
        MailEffectError,
        PayloadError,
        RunDenied,
    )

#: where each public name lives; imported on first use (the PostgreSQL room's names need
#: psycopg: without it, they say which extra to install)
_WHERE = {
    "ACTIVE_STATUSES": "crashpoint.checkpoint._store",
    "DEFAULT_SECRET_NAMES": "crashpoint.checkpoint._redact",
    "EXIT_CODES": "crashpoint.checkpoint._runstate",
    "EXIT_SKIP": "crashpoint.checkpoint._lifecycle",
    "NOTIFY_ENV": "crashpoint.checkpoint._notify",
    "PRUNABLE_STATUSES": "crashpoint.checkpoint._store",
    "REDACTED": "crashpoint.checkpoint._redact",
    "Checkpointing": "crashpoint.checkpoint._run",
    "Damage": "crashpoint.checkpoint._journal",
    "Decision": "crashpoint.checkpoint._run",
    "Durability": "crashpoint.checkpoint._store",
    "EffectAnswer": "crashpoint.checkpoint._lifecycle",
    "EffectPolicy": "crashpoint.checkpoint._run",
    "FleetOutcome": "crashpoint.checkpoint.postgres",
    "FleetWorker": "crashpoint.checkpoint.postgres",
    "HttpEffectError": "crashpoint.errors",
    "JournalReader": "crashpoint.checkpoint._history",
    "Lease": "crashpoint.checkpoint.postgres",
    "LifecycleStatus": "crashpoint.checkpoint._lifecycle",
    "Loaded": "crashpoint.checkpoint._journal",
    "MailEffectError": "crashpoint.errors",
    "PayloadError": "crashpoint.errors",
    "PlanLine": "crashpoint.checkpoint._run",
    "PostgresStore": "crashpoint.checkpoint.postgres",
    "Recovery": "crashpoint.checkpoint._facts",
    "Redactor": "crashpoint.checkpoint._redact",
    "ResumeOutcome": "crashpoint.checkpoint._supervisor",
    "Retention": "crashpoint.checkpoint._store",
    "Rollback": "crashpoint.checkpoint._run",
    "Run": "crashpoint.checkpoint._run",
    "RunDenied": "crashpoint.errors",
    "RunInfo": "crashpoint.checkpoint._facts",
    "RunJournal": "crashpoint.checkpoint._store",
    "Secret": "crashpoint.checkpoint._redact",
    "SnapshotPolicy": "crashpoint.checkpoint._store",
    "StateAt": "crashpoint.checkpoint._run",
    "Store": "crashpoint.checkpoint._store",
    "Supervisor": "crashpoint.checkpoint._supervisor",
    "TornTail": "crashpoint.checkpoint._journal",
    "any_reducer": "crashpoint.checkpoint._runstate",
    "atomic_write": "crashpoint.checkpoint._store",
    "complete_run": "crashpoint.checkpoint._lifecycle",
    "decide": "crashpoint.checkpoint._run",
    "decode_json": "crashpoint.checkpoint._record",
    "exists_or_raise": "crashpoint.checkpoint._lifecycle",
    "exit_code": "crashpoint.checkpoint._runstate",
    "http_effect": "crashpoint.checkpoint._http",
    "interrupted_runs": "crashpoint.checkpoint._supervisor",
    "is_store_url": "crashpoint.checkpoint._store",
    "list_files": "crashpoint.checkpoint._journal",
    "makedirs_durable": "crashpoint.checkpoint._store",
    "message_id_for": "crashpoint.checkpoint._mail",
    "notify_event": "crashpoint.checkpoint._notify",
    "open_run": "crashpoint.checkpoint._run",
    "open_store": "crashpoint.checkpoint._open",
    "plan": "crashpoint.checkpoint._run",
    "record_effect": "crashpoint.checkpoint._lifecycle",
    "record_step": "crashpoint.checkpoint._lifecycle",
    "records_reducer": "crashpoint.checkpoint._journal",
    "register_history_index": "crashpoint.checkpoint._journal",
    "resume_interrupted": "crashpoint.checkpoint._supervisor",
    "rollback": "crashpoint.checkpoint._run",
    "run_main": "crashpoint.checkpoint._run",
    "run_reducer": "crashpoint.checkpoint._runstate",
    "run_status": "crashpoint.checkpoint._lifecycle",
    "smtp_effect": "crashpoint.checkpoint._mail",
    "stale_runs": "crashpoint.checkpoint._supervisor",
    "start_run": "crashpoint.checkpoint._lifecycle",
    "state_at": "crashpoint.checkpoint._run",
    "submit": "crashpoint.checkpoint.postgres",
    "validate_run_id": "crashpoint.checkpoint._store",
}

__getattr__, __dir__ = attach(__name__, _WHERE)

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
    "any_reducer",
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
