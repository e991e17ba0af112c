"""The fault-injection harness: spawn any agent, crash it at exact points, judge its recovery.

Layer 5. This face is what the doors (the pytest plugin, ``crashpoint run``, the Hypothesis
strategies) and users import; behind it, five rooms, each with a face of its own and imported
only through it:

- ``_spec``: the specification: scenario files, agents, faults, fault families and their
  options, the plan generator, power-loss crash states, the stand-ins' scripted replies, the
  event vocabulary (pure data: no process, no file written);
- ``_standins``: the outside world during a trial: the ledger (the probe's socket and the
  kill switch) and its HTTP front, the HTTP, LLM and SMTP stand-ins, a throw-away PostgreSQL;
- ``_checker``: the checks of Contract 2 and their verdicts and hints;
- ``_report``: safe report folders, evidence folders with their replay command, JSON, JUnit,
  HTML;
- ``_engine``: golden runs, trials and their attempts, campaigns, replay, the fork server.

The rooms are layered: ``_spec`` at the bottom; ``_standins``, ``_checker`` and ``_report``
above it, independent of one another; ``_engine`` on top. The harness imports the faults,
process control, the library and the base; never pytest.

This face is lazy (:mod:`crashpoint._lazy`): a name is imported when first used, so the pytest
plugin can reach the session's signal handlers at start-up without loading the harness. It
also carries the session helpers the doors need from process control (signal handlers, the
reaper of what a killed harness left) and the units of options and scenario files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crashpoint._lazy import attach

if TYPE_CHECKING:
    from crashpoint._proc import (
        AgentProcess,
        cleanup_all,
        exit_status,
        install_signal_handlers,
        kill_tree,
        reap_stale,
        received,
        signal_children,
        signal_name,
    )
    from crashpoint._units import (
        format_duration,
        format_size,
        parse_duration,
        parse_size,
    )
    from crashpoint.errors import (
        BudgetExceeded,
        CampaignInterrupted,
        FaultSpecError,
        GoldenRunFailed,
        NoBoundaries,
        ReplayError,
        ScenarioError,
        UnitError,
        UnsafeReportFolder,
        ZygoteError,
    )
    from crashpoint.harness._checker import (
        BUILTIN_CHECKS,
        TrialFacts,
        run_checks,
    )
    from crashpoint.harness._engine import (
        CANARY_VAR,
        AgentLike,
        Campaign,
        CrashHarness,
        FaultsLike,
        HarnessResult,
        ProgressFn,
        TrialRunner,
        Zygote,
        as_agent,
        as_families,
        fork_plan,
        replay,
    )
    from crashpoint.harness._report import (
        CampaignResult,
        check_report_folder,
        human_size,
        render_html,
        secure_dir,
        write_file,
    )
    from crashpoint.harness._spec import (
        CHECKS,
        DEFAULT_BUDGET,
        FAMILY_KINDS,
        FAULT_KINDS,
        SUFFIX,
        AgentSpec,
        Attempt,
        Boundary,
        CheckResult,
        Expect,
        Fault,
        FaultFamily,
        Golden,
        KillAt,
        Outcome,
        Plan,
        Scenario,
        ScenarioFamily,
        TrialResult,
        canonical,
        family_from_spec,
        load_scenario,
        parse_budget,
        plan_for,
    )
    from crashpoint.harness._standins import (
        Ledger,
        PostgresServer,
    )

_WHERE = {
    "CHECKS": "crashpoint.harness._spec",
    "DEFAULT_BUDGET": "crashpoint.harness._spec",
    "FAMILY_KINDS": "crashpoint.harness._spec",
    "FAULT_KINDS": "crashpoint.harness._spec",
    "SUFFIX": "crashpoint.harness._spec",
    "AgentSpec": "crashpoint.harness._spec",
    "Attempt": "crashpoint.harness._spec",
    "Boundary": "crashpoint.harness._spec",
    "CheckResult": "crashpoint.harness._spec",
    "Expect": "crashpoint.harness._spec",
    "Fault": "crashpoint.harness._spec",
    "FaultFamily": "crashpoint.harness._spec",
    "Golden": "crashpoint.harness._spec",
    "KillAt": "crashpoint.harness._spec",
    "Outcome": "crashpoint.harness._spec",
    "Plan": "crashpoint.harness._spec",
    "Scenario": "crashpoint.harness._spec",
    "ScenarioFamily": "crashpoint.harness._spec",
    "TrialResult": "crashpoint.harness._spec",
    "canonical": "crashpoint.harness._spec",
    "family_from_spec": "crashpoint.harness._spec",
    "load_scenario": "crashpoint.harness._spec",
    "parse_budget": "crashpoint.harness._spec",
    "plan_for": "crashpoint.harness._spec",
    "BUILTIN_CHECKS": "crashpoint.harness._checker",
    "TrialFacts": "crashpoint.harness._checker",
    "run_checks": "crashpoint.harness._checker",
    "Ledger": "crashpoint.harness._standins",
    "PostgresServer": "crashpoint.harness._standins",
    "CampaignResult": "crashpoint.harness._report",
    "check_report_folder": "crashpoint.harness._report",
    "human_size": "crashpoint.harness._report",
    "render_html": "crashpoint.harness._report",
    "secure_dir": "crashpoint.harness._report",
    "write_file": "crashpoint.harness._report",
    "CANARY_VAR": "crashpoint.harness._engine",
    "AgentLike": "crashpoint.harness._engine",
    "Campaign": "crashpoint.harness._engine",
    "CrashHarness": "crashpoint.harness._engine",
    "FaultsLike": "crashpoint.harness._engine",
    "HarnessResult": "crashpoint.harness._engine",
    "ProgressFn": "crashpoint.harness._engine",
    "TrialRunner": "crashpoint.harness._engine",
    "Zygote": "crashpoint.harness._engine",
    "as_agent": "crashpoint.harness._engine",
    "as_families": "crashpoint.harness._engine",
    "fork_plan": "crashpoint.harness._engine",
    "replay": "crashpoint.harness._engine",
    "AgentProcess": "crashpoint._proc",
    "cleanup_all": "crashpoint._proc",
    "exit_status": "crashpoint._proc",
    "install_signal_handlers": "crashpoint._proc",
    "kill_tree": "crashpoint._proc",
    "reap_stale": "crashpoint._proc",
    "received": "crashpoint._proc",
    "signal_children": "crashpoint._proc",
    "signal_name": "crashpoint._proc",
    "format_duration": "crashpoint._units",
    "format_size": "crashpoint._units",
    "parse_duration": "crashpoint._units",
    "parse_size": "crashpoint._units",
    "BudgetExceeded": "crashpoint.errors",
    "CampaignInterrupted": "crashpoint.errors",
    "FaultSpecError": "crashpoint.errors",
    "GoldenRunFailed": "crashpoint.errors",
    "NoBoundaries": "crashpoint.errors",
    "ReplayError": "crashpoint.errors",
    "ScenarioError": "crashpoint.errors",
    "UnitError": "crashpoint.errors",
    "UnsafeReportFolder": "crashpoint.errors",
    "ZygoteError": "crashpoint.errors",
}

__all__ = [
    "BUILTIN_CHECKS",
    "CANARY_VAR",
    "CHECKS",
    "DEFAULT_BUDGET",
    "FAMILY_KINDS",
    "FAULT_KINDS",
    "SUFFIX",
    "AgentLike",
    "AgentProcess",
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
    "FaultSpecError",
    "FaultsLike",
    "Golden",
    "GoldenRunFailed",
    "HarnessResult",
    "KillAt",
    "Ledger",
    "NoBoundaries",
    "Outcome",
    "Plan",
    "PostgresServer",
    "ProgressFn",
    "ReplayError",
    "Scenario",
    "ScenarioError",
    "ScenarioFamily",
    "TrialFacts",
    "TrialResult",
    "TrialRunner",
    "UnitError",
    "UnsafeReportFolder",
    "Zygote",
    "ZygoteError",
    "as_agent",
    "as_families",
    "canonical",
    "check_report_folder",
    "cleanup_all",
    "exit_status",
    "family_from_spec",
    "fork_plan",
    "format_duration",
    "format_size",
    "human_size",
    "install_signal_handlers",
    "kill_tree",
    "load_scenario",
    "parse_budget",
    "parse_duration",
    "parse_size",
    "plan_for",
    "reap_stale",
    "received",
    "render_html",
    "replay",
    "run_checks",
    "secure_dir",
    "signal_children",
    "signal_name",
    "write_file",
]

__getattr__, __dir__ = attach(__name__, _WHERE)
