"""The engine: runs golden runs, trials and campaigns; what the harness does over time.

Layer 5, the top room of the harness: it may import every other room's face (the
specification, the stand-ins, the checker, the report), the faults, process control and the
base. ``_trial`` (:class:`TrialRunner`: golden runs and trials of one agent) with
``_attempts`` (one method per fault kind that acts on an attempt), ``_recording`` (what the
golden run must learn), ``_scope`` (a trial's temp folders, secrets and evidence budget),
``_power`` (running a power cut), ``_accounting`` (did each planned fault take effect, and
where), ``_outside`` (what an agent wrote outside its folders); ``_campaign`` (a golden run
and N trials within a budget), ``_replay`` (one trial again, from its evidence folder),
``_zygote`` (the fork server: attempts forked from a warm interpreter) and ``_api``
(:class:`CrashHarness`, the small face the pytest fixture wraps).

The face is lazy (:mod:`crashpoint._lazy`): the fork server's own process imports ``_zygote``
and nothing else of the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crashpoint._lazy import attach

if TYPE_CHECKING:
    from crashpoint.harness._engine._accounting import (
        account,
        kill_at,
        net_fault,
    )
    from crashpoint.harness._engine._api import (
        AgentLike,
        CrashHarness,
        FaultsLike,
        HarnessResult,
        as_agent,
        as_families,
    )
    from crashpoint.harness._engine._backing import SharedPostgres
    from crashpoint.harness._engine._campaign import (
        Campaign,
        ProgressFn,
    )
    from crashpoint.harness._engine._memory import memory_unavailable
    from crashpoint.harness._engine._replay import (
        golden_from_json,
        replay,
        replay_inputs,
    )
    from crashpoint.harness._engine._trial import (
        CANARY_VAR,
        EVIDENCE_PER_CAMPAIGN,
        EVIDENCE_PER_TRIAL,
        RUN_ID,
        TrialRunner,
        canary_for,
        new_trial_id,
    )
    from crashpoint.harness._engine._zygote import (
        ForkedProcess,
        ForkPlan,
        Zygote,
        fork_plan,
        script_imports,
    )

_WHERE = {
    "AgentLike": "crashpoint.harness._engine._api",
    "CrashHarness": "crashpoint.harness._engine._api",
    "FaultsLike": "crashpoint.harness._engine._api",
    "HarnessResult": "crashpoint.harness._engine._api",
    "as_agent": "crashpoint.harness._engine._api",
    "as_families": "crashpoint.harness._engine._api",
    "SharedPostgres": "crashpoint.harness._engine._backing",
    "Campaign": "crashpoint.harness._engine._campaign",
    "ProgressFn": "crashpoint.harness._engine._campaign",
    "CANARY_VAR": "crashpoint.harness._engine._trial",
    "EVIDENCE_PER_CAMPAIGN": "crashpoint.harness._engine._trial",
    "EVIDENCE_PER_TRIAL": "crashpoint.harness._engine._trial",
    "RUN_ID": "crashpoint.harness._engine._trial",
    "TrialRunner": "crashpoint.harness._engine._trial",
    "canary_for": "crashpoint.harness._engine._trial",
    "new_trial_id": "crashpoint.harness._engine._trial",
    "golden_from_json": "crashpoint.harness._engine._replay",
    "replay": "crashpoint.harness._engine._replay",
    "replay_inputs": "crashpoint.harness._engine._replay",
    "ForkPlan": "crashpoint.harness._engine._zygote",
    "ForkedProcess": "crashpoint.harness._engine._zygote",
    "Zygote": "crashpoint.harness._engine._zygote",
    "fork_plan": "crashpoint.harness._engine._zygote",
    "script_imports": "crashpoint.harness._engine._zygote",
    "account": "crashpoint.harness._engine._accounting",
    "kill_at": "crashpoint.harness._engine._accounting",
    "net_fault": "crashpoint.harness._engine._accounting",
    "memory_unavailable": "crashpoint.harness._engine._memory",
}

__all__ = [
    "CANARY_VAR",
    "EVIDENCE_PER_CAMPAIGN",
    "EVIDENCE_PER_TRIAL",
    "RUN_ID",
    "AgentLike",
    "Campaign",
    "CrashHarness",
    "FaultsLike",
    "ForkPlan",
    "ForkedProcess",
    "HarnessResult",
    "ProgressFn",
    "SharedPostgres",
    "TrialRunner",
    "Zygote",
    "account",
    "as_agent",
    "as_families",
    "canary_for",
    "fork_plan",
    "golden_from_json",
    "kill_at",
    "memory_unavailable",
    "net_fault",
    "new_trial_id",
    "replay",
    "replay_inputs",
    "script_imports",
]

__getattr__, __dir__ = attach(__name__, _WHERE)
