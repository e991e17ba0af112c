"""The checkpoint store in PostgreSQL, its leases, and a fleet of workers over it.

Part of the library (layer 2), inside :mod:`crashpoint.checkpoint`: it builds on the file
store's journal format, records and runs, and may import them and the base; nothing above. The
PostgreSQL driver (psycopg 3, the extra ``crashpoint[postgres]``) is imported here only, and
only when a name that needs it is first used: this face is lazy (:mod:`crashpoint._lazy`), so
``crashpoint.checkpoint`` never loads psycopg for an agent that keeps its state in files.

- :class:`PostgresStore` (``_store``): the file store's interface on four tables (runs,
  records, snapshots, leases); one writer per run across machines through a lease with a
  fencing generation (see ``docs/concepts/lease-model.md``).
- :class:`FleetWorker`, :func:`submit` (``_fleet``): workers on any machine claim unfinished
  runs and resume them; poison runs are dead-lettered (``docs/how-to/run-a-fleet.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crashpoint._lazy import attach

if TYPE_CHECKING:
    from crashpoint.checkpoint.postgres._fleet import (
        FleetOutcome,
        FleetWorker,
        fleet_summary,
        submit,
    )
    from crashpoint.checkpoint.postgres._store import (
        WORKER_ENV,
        Lease,
        PgJournal,
        PostgresStore,
        default_worker,
        redact_dsn,
    )

_FLEET = "crashpoint.checkpoint.postgres._fleet"
_STORE = "crashpoint.checkpoint.postgres._store"
_WHERE = {
    "FleetOutcome": _FLEET,
    "FleetWorker": _FLEET,
    "Lease": _STORE,
    "PgJournal": _STORE,
    "PostgresStore": _STORE,
    "WORKER_ENV": _STORE,
    "default_worker": _STORE,
    "fleet_summary": _FLEET,
    "redact_dsn": _STORE,
    "submit": _FLEET,
}

__all__ = [
    "WORKER_ENV",
    "FleetOutcome",
    "FleetWorker",
    "Lease",
    "PgJournal",
    "PostgresStore",
    "default_worker",
    "fleet_summary",
    "redact_dsn",
    "submit",
]

__getattr__, __dir__ = attach(__name__, _WHERE, extra="postgres")
