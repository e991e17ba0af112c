"""The reference checkpoint / auto-resume library.

Imports neither pytest nor the harness: an agent imports this and nothing else.
"""

from crashpoint.checkpoint._journal import Damage, Loaded, TornTail, records_reducer
from crashpoint.checkpoint._redact import DEFAULT_SECRET_NAMES, REDACTED, Redactor, Secret
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

__all__ = [
    "ACTIVE_STATUSES",
    "DEFAULT_SECRET_NAMES",
    "PRUNABLE_STATUSES",
    "REDACTED",
    "Damage",
    "Durability",
    "Loaded",
    "Recovery",
    "Redactor",
    "Retention",
    "RunInfo",
    "RunJournal",
    "Secret",
    "SnapshotPolicy",
    "Store",
    "TornTail",
    "records_reducer",
    "validate_run_id",
]
