"""The checker: the checks of Contract 2 and their verdicts, judged from a trial's facts.

Layer 5, a room of the harness: it may import the specification (:mod:`.._spec`) and the base;
it starts no process and touches no file but the state folders it scans for a leaked secret.
``_facts`` is what a check may look at (:class:`TrialFacts`, gathered by the engine), ``_checks``
the built-in checks (:data:`BUILTIN_CHECKS`: each ``(TrialFacts) -> CheckResult``), ``_history``
the history checker (one pass over the ledger's events, each anomaly with its witness), and
``_verdict`` turns several failures into one root cause with a hint drawn from the evidence.
"""

from crashpoint.harness._checker._checks import BUILTIN_CHECKS, run_checks, scan_for_bytes
from crashpoint.harness._checker._facts import TrialFacts
from crashpoint.harness._checker._history import check_history, history_text
from crashpoint.harness._checker._loop import loop_text
from crashpoint.harness._checker._verdict import disk_trouble, explain

__all__ = [
    "BUILTIN_CHECKS",
    "TrialFacts",
    "check_history",
    "disk_trouble",
    "explain",
    "history_text",
    "loop_text",
    "run_checks",
    "scan_for_bytes",
]
