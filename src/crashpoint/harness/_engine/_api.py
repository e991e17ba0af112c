"""The small public face of the harness: ``CrashHarness(folder).run(agent, faults=...)``.

No pytest here: the ``crash_harness`` fixture and ``crashpoint run`` both wrap this.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crashpoint.errors import InvalidArgument, WrongArgumentType
from crashpoint.harness._checker import TrialFacts
from crashpoint.harness._engine._campaign import Campaign, ProgressFn
from crashpoint.harness._report import CampaignResult
from crashpoint.harness._spec import (
    DEFAULT_BUDGET,
    AgentSpec,
    CheckResult,
    Expect,
    FaultFamily,
    Golden,
    Plan,
    family_from_spec,
)

__all__ = ["AgentLike", "CrashHarness", "FaultsLike", "HarnessResult", "as_agent", "as_families"]

AgentLike = AgentSpec | str | Sequence[str]
FaultsLike = str | Mapping[str, Any] | Sequence[Any] | FaultFamily | None


def as_agent(agent: AgentLike, *, timeout: float = 30.0) -> AgentSpec:
    """An AgentSpec from a spec, a ``module:function`` string, a command string or an argv."""
    if isinstance(agent, AgentSpec):
        return agent
    if isinstance(agent, str):
        if ":" in agent and " " not in agent and "/" not in agent:
            return AgentSpec(entry=agent, timeout=timeout)
        return AgentSpec(tuple(shlex.split(agent)), timeout=timeout)
    if isinstance(agent, Mapping):  # its keys would become the command line
        raise WrongArgumentType(
            "an agent is an AgentSpec, a command string, a 'module:function' entry or an argv "
            f"list, not a mapping ({', '.join(map(str, agent))}): write "
            "AgentSpec(('python', 'agent.py', '--state', '{state_dir}'), timeout=30), or put "
            "the mapping under agent: in a scenario file"
        )
    argv = tuple(str(a) for a in agent)
    if not argv:
        raise InvalidArgument("an agent command needs at least one argument")
    return AgentSpec(argv, timeout=timeout)


def as_families(faults: FaultsLike) -> list[FaultFamily]:
    """Fault families from ``"kill"``, ``{"kill": {"at": "random"}}``, a list of those (a
    nested list is a chain within one trial), or FaultFamily objects. None: kill at every
    boundary."""
    if faults is None:
        return [family_from_spec({"kill": {"at": "every-boundary"}})]
    if isinstance(faults, FaultFamily):
        return [faults]
    if isinstance(faults, str):
        return [family_from_spec({faults: {}})]
    if isinstance(faults, Mapping):
        return [family_from_spec({k: v}) for k, v in faults.items()]
    out = []
    for item in faults:
        if isinstance(item, FaultFamily):
            out.append(item)
        elif isinstance(item, str):
            out.append(family_from_spec({item: {}}))
        else:
            out.append(family_from_spec(item))
    return out


@dataclass
class HarnessResult:
    """A campaign's result with test-friendly helpers."""

    campaign: CampaignResult

    @property
    def ok(self) -> bool:
        return self.campaign.ok

    @property
    def trials(self) -> list[Any]:
        return self.campaign.trials

    @property
    def failures(self) -> list[Any]:
        return self.campaign.failures

    @property
    def golden(self) -> Golden:
        return self.campaign.golden

    def summary(self) -> dict[str, Any]:
        return self.campaign.summary()

    def verdicts(self) -> list[dict[str, Any]]:
        return [t.verdict() for t in self.campaign.trials]

    def failed_checks(self) -> set[str]:
        return {c.name for t in self.campaign.failures for c in t.failed}

    def report(self, limit: int = 5) -> str:
        """What failed, where, and the command that replays each failure."""
        s = self.summary()
        lines = [
            f"crashpoint: {s['failed']} of {s['ran']} trials failed, "
            f"{s['exercised']} exercised (seed {s['seed']}, {s['skipped']} skipped)"
        ]
        if self.campaign.incomplete:
            lines.append(f"STOPPED: {self.campaign.incomplete}")
        lines += [f"NOT EXERCISED: {m}" for m in self.campaign.unexercised()]
        lines += [f"NOTE: {m}" for m in self.campaign.notes]
        for t in self.campaign.failures[:limit]:
            lines.append(f"- trial {t.plan.index} [{t.plan.family}]: {t.plan.describe()}")
            lines.append(f"    landed: {t.landed()}")
            for a in t.attempts:
                lines.append(f"    {a.describe()}")
            root = t.root_cause
            if root is not None:
                lines.append(f"    ROOT CAUSE {root}")
            for c in t.failed:
                if c is not root:
                    lines.append(f"    {c}" if c.cause else f"    also: {c}")
            for c in t.warnings:  # e.g. a re-billed model call beside the failure
                lines.append(f"    also: {c}")
            lines.append(f"    replay: crashpoint replay {t.folder}")
        warned = [t for t in self.campaign.trials if t.ok and t.warnings]
        for t in warned[:limit]:  # passed, with something to report
            for c in t.warnings:
                lines.append(f"- warning, trial {t.plan.index} [{t.plan.family}]: {c}")
        if len(self.campaign.failures) > limit:
            lines.append(
                f"... and {len(self.campaign.failures) - limit} more failing trials "
                f"(see {self.campaign.report_dir})"
            )
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raise AssertionError naming the failing checks and their replay commands."""
        if not self.ok:
            raise AssertionError(self.report())


@dataclass
class CrashHarness:
    """Runs campaigns into ``folder`` with a fixed seed (what the ``crash_harness`` fixture is)."""

    folder: str
    seed: int = 0
    trials: int | None = None
    mode: str | None = None
    shard: tuple[int, int] | None = None
    restarts: int = 3
    launcher: Any = None
    extra_checks: dict[str, Callable[[TrialFacts], CheckResult]] = field(default_factory=dict)
    plan_hook: Callable[[FaultFamily, Golden, int, int], Plan | None] | None = None
    progress: ProgressFn | None = None
    keep_passing: bool = False
    default_faults: FaultsLike = None  # from the crashpoint marker
    default_trials: int | None = None  # from the crashpoint marker
    budget: float | None = None  # seconds per campaign (math.inf: none); None: DEFAULT_BUDGET
    _runs: int = 0

    def __post_init__(self) -> None:
        self.folder = os.path.abspath(self.folder)

    def campaign(
        self,
        agent: AgentLike,
        *,
        faults: FaultsLike = None,
        trials: int | None = None,
        restarts: int | None = None,
        expect: Expect | None = None,
        seed: int | None = None,
        name: str = "",
        mode: str | None = None,
        budget: float | None = None,
        **expect_kw: Any,
    ) -> Campaign:
        """A campaign; ``budget`` (seconds, ``math.inf`` for none) applies unless the harness
        has its own (the ``--crashpoint-budget`` option); default :data:`DEFAULT_BUDGET`."""
        self._runs += 1
        name = name or f"campaign-{self._runs}"
        if expect is None:
            expect = Expect(**expect_kw)
        elif expect_kw:
            raise WrongArgumentType("give expect= or expectation keywords, not both")
        n = (
            self.trials
            if self.trials is not None
            else trials
            if trials is not None
            else self.default_trials
        )
        if faults is None:
            faults = self.default_faults
        return Campaign(
            as_agent(agent),
            as_families(faults),
            os.path.join(self.folder, name),
            name=name,
            trials=n if n is not None else 20,
            seed=self.seed if seed is None else seed,
            restarts=self.restarts if restarts is None else restarts,
            mode=mode or self.mode,
            expect=expect,
            shard=self.shard,
            keep_passing=self.keep_passing,
            extra_checks=dict(self.extra_checks),
            launcher=self.launcher,
            plan_hook=self.plan_hook,
            budget=self.budget
            if self.budget is not None
            else budget
            if budget is not None
            else DEFAULT_BUDGET,
        )

    def run(self, agent: AgentLike, **kw: Any) -> HarnessResult:
        """Run a campaign of ``agent`` under ``faults``; see :meth:`campaign` for the options."""
        camp = self.campaign(agent, **kw)
        result = camp.run(progress=self.progress)
        result.write_reports()
        return HarnessResult(result)
