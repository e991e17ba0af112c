"""The fault-injection harness: spawn any agent, crash it at exact points, judge its recovery.

Imports no pytest. The pytest plugin and ``crashpoint run`` are thin doors onto this.
"""

from crashpoint.harness._checker._checks import BUILTIN_CHECKS, TrialFacts, run_checks
from crashpoint.harness._engine._api import CrashHarness, HarnessResult, as_agent, as_families
from crashpoint.harness._engine._campaign import (
    FAMILY_KINDS,
    Campaign,
    CampaignInterrupted,
    CampaignResult,
    FaultFamily,
    family_from_spec,
    plan_for,
    replay,
)
from crashpoint.harness._engine._trial import (
    CANARY_VAR,
    BudgetExceeded,
    GoldenRunFailed,
    TrialRunner,
)
from crashpoint.harness._spec._model import (
    CHECKS,
    FAULT_KINDS,
    AgentSpec,
    Attempt,
    Boundary,
    CheckResult,
    Expect,
    Fault,
    Golden,
    Plan,
    TrialResult,
)
from crashpoint.harness._standins._ledger import KillAt, Ledger, canonical

__all__ = [
    "BUILTIN_CHECKS",
    "CANARY_VAR",
    "CHECKS",
    "FAMILY_KINDS",
    "FAULT_KINDS",
    "AgentSpec",
    "Attempt",
    "Boundary",
    "BudgetExceeded",
    "Campaign",
    "CampaignInterrupted",
    "CampaignResult",
    "CheckResult",
    "CrashHarness",
    "Expect",
    "Fault",
    "FaultFamily",
    "Golden",
    "GoldenRunFailed",
    "HarnessResult",
    "KillAt",
    "Ledger",
    "Plan",
    "TrialFacts",
    "TrialResult",
    "TrialRunner",
    "as_agent",
    "as_families",
    "canonical",
    "family_from_spec",
    "plan_for",
    "replay",
    "run_checks",
]
