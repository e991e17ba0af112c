"""A campaign: a golden run, then N trials drawn from fault families by a seed.

Every trial is reproducible from (seed, index): its plan is a pure function of the golden run,
the families, the seed and the index (:func:`crashpoint.harness._spec.plan_for`). Systematic
families cover every point of the golden run (each boundary, file operation, write point,
crash state or network call) once; random families draw ``count`` trials each (or share
``trials``). A campaign runs within its time budget; interrupted, it stops cleanly and its
reports say so.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from crashpoint._proc import received, shielded, signal_name
from crashpoint._units import format_duration
from crashpoint.errors import (
    BudgetExceeded,
    CampaignInterrupted,
    GoldenRunFailed,
    NoBoundaries,
)
from crashpoint.harness._checker import TrialFacts
from crashpoint.harness._engine._backing import SharedPostgres
from crashpoint.harness._engine._pycache import cache_for
from crashpoint.harness._engine._trial import (
    EVIDENCE_PER_CAMPAIGN,
    EVIDENCE_PER_TRIAL,
    TrialRunner,
    canary_for,
)
from crashpoint.harness._report import CampaignResult
from crashpoint.harness._spec import (
    ADD_PROBE_CALLS,
    BUDGET_HOW,
    DEFAULT_BUDGET,
    AgentSpec,
    CheckResult,
    Expect,
    FaultFamily,
    Golden,
    Plan,
    TrialResult,
    plan_for,
)

__all__ = ["Campaign", "ProgressFn"]


def _distinct(fam: FaultFamily, golden: Golden, n: int) -> tuple[int, str]:
    """How many drawn trials family ``fam`` runs when asked for ``n``, and why fewer: a lone
    file-operation kill draws its operations without replacement, so it runs each recorded
    operation once at most (one trial that says so when none was recorded)."""
    kind, opts = fam.chain[0]
    if len(fam.chain) != 1 or kind != "kill" or dict(opts).get("at") != "fileop":
        return n, ""
    distinct = fam.points(golden)  # the operations it may hit (``max`` applied), 1 at least
    if n <= distinct:
        return n, ""
    if not golden.fileops:
        return 1, (
            f"family {fam.name}: asked for {n} trials; the golden run recorded no file "
            "operation, so one trial runs (and says so)"
        )
    return distinct, (
        f"family {fam.name}: asked for {n} trials, but the golden run recorded "
        f"{distinct} distinct file operation(s) to kill before: each runs once "
        f"({distinct} trial{'s' if distinct != 1 else ''}), none twice"
    )


ProgressFn = Callable[[int, int, int, TrialResult], None]


def _replay_note(plans: list[Plan], golden: Golden) -> str:
    """How many of the kills of attempt 1 run as replays of the golden run's recorded state,
    and why the others are real (the first reasons), or "" when none could be."""
    kills = [
        f
        for p in plans
        for f in p.faults
        if f.attempt == 1 and (f.kind == "fileop" or (f.kind == "kill" and f.arg("op")))
    ]
    if not kills or not (golden.fileop_replay or golden.boundary_replay):
        return ""
    replayed = sum(1 for f in kills if f.arg("replay"))
    whys: list[str] = []
    for r in (*golden.boundary_replay, *golden.fileop_replay):
        why = str(r.get("why", ""))
        if why and why not in whys:
            whys.append(why)
    text = (
        f"{replayed} of {len(kills)} kill(s) of attempt 1 replayed from the golden run's "
        "recorded state (the restart only; `replay: false` runs them for real)"
    )
    if replayed < len(kills) and whys:
        text += "; the others are real kills: " + "; ".join(whys[:2])
    return text


def _launcher_ready(launcher: Any) -> None:
    """Wait for a fork-mode launcher started without waiting (``Zygote.start(wait=False)``:
    its start overlaps the golden run, which is spawned under a trace anyway); raise what it
    failed with (EntryError, ZygoteError)."""
    ready = getattr(launcher, "ready", None)
    if callable(ready):
        ready()


def _wrap_up_margin(budget: float) -> float:
    """The part of a campaign's time ``budget`` kept for stopping: the trial running at the
    deadline is killed and collected, the runner closed and the reports written after it, which
    took 0.05-0.2 s on a loaded machine; the deadline trials and planning see is this much before
    the budget's end, so that the campaign ends within its budget. 2% of the budget, at least
    1 s but never more than a tenth of the budget, and at most 5 s."""
    return min(0.1 * budget, max(1.0, 0.02 * budget), 5.0)


@dataclass
class Campaign:
    """Run ``families`` against ``agent``; see the module docstring."""

    agent: AgentSpec
    families: list[FaultFamily]
    report_dir: str
    name: str = "campaign"
    trials: int = 50
    seed: int = 0
    restarts: int = 3
    mode: str | None = None  # None (as the families say) | systematic | random
    expect: Expect = field(default_factory=Expect)
    shard: tuple[int, int] | None = None  # (i, n), 1-based
    keep_passing: bool = False
    extra_checks: dict[str, Callable[[TrialFacts], CheckResult]] = field(default_factory=dict)
    launcher: Any = None
    plan_hook: Callable[[FaultFamily, Golden, int, int], Plan | None] | None = None
    #: seconds for the whole campaign (golden run and trials); math.inf: no limit. Past it the
    #: running attempt is stopped, the rest is not run, and the campaign fails
    budget: float = DEFAULT_BUDGET
    evidence_per_trial: int = EVIDENCE_PER_TRIAL  # bytes a kept trial folder may hold
    evidence_per_campaign: int = EVIDENCE_PER_CAMPAIGN  # bytes all kept trial folders may hold
    source: str = ""  # the scenario file (runner.json names it: replay reads agent.env there)
    #: what the golden run must record besides what these families need (``fileops``,
    #: ``writes``): a scenario file's families share one golden run
    record: frozenset[str] = frozenset()
    #: a PostgreSQL server for an agent that uses {postgres}, shared with other campaigns
    #: (its owner closes it; the pytest plugin shares one per scenario file); None: the
    #: campaign's runner starts its own
    postgres: SharedPostgres | None = None
    #: what :meth:`plans` planned differently from what the families asked, and why (set by
    #: each call; the result's ``notes``)
    notes: list[str] = field(default_factory=list, init=False)
    #: why :meth:`plans` stopped planning at its deadline ("" when it did not; one of notes)
    planning_stopped: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.report_dir = os.path.abspath(self.report_dir)

    @property
    def needs(self) -> frozenset[str]:
        """What the golden run must record (see :attr:`FaultFamily.needs`)."""
        return self.record.union(*(f.needs for f in self.families))

    def runner(self) -> TrialRunner:
        return TrialRunner(
            self.agent,
            os.path.join(self.report_dir, "trials"),
            restarts=self.restarts,
            expect=self.expect,
            keep_passing=self.keep_passing,
            extra_checks=self.extra_checks,
            launcher=self.launcher,
            evidence_per_trial=self.evidence_per_trial,
            evidence_per_campaign=self.evidence_per_campaign,
            source=self.source,
            shared_postgres=self.postgres,
        )

    def plans(self, golden: Golden, deadline: float | None = None) -> list[Plan]:
        """Every plan of the campaign, in index order (before sharding).

        Costly planning (power-loss crash states) stops at ``deadline`` (a
        ``time.monotonic()`` time) with what it has; :attr:`planning_stopped` then says so.
        Raises :class:`NoBoundaries` when the golden run reported no event and no file
        operation: a campaign would then test nothing."""
        if not golden.events and not golden.fileops and not golden.plog.get("ops"):
            raise NoBoundaries(
                f"campaign {self.name!r}: the agent's golden run reported no event (no step, "
                f"no effect) and no file operation was recorded, so there is no boundary to "
                f"crash it at and nothing to judge a trial by. {ADD_PROBE_CALLS}."
            )
        plans: list[Plan] = []
        self.notes = []
        self.planning_stopped = ""
        for fam in self.families:
            why = fam.prepare(golden, deadline)
            if why and why not in self.notes:
                self.notes.append(why)
                self.planning_stopped = why
        systematic = [
            f
            for f in self.families
            if self.mode != "random"
            and (
                f.systematic
                or (
                    self.mode == "systematic"
                    and len(f.chain) == 1
                    and (
                        f.chain[0][0] in ("power_loss", "network")
                        or (
                            f.chain[0][0] == "kill"
                            and dict(f.chain[0][1]).get("at", "random") == "random"
                        )
                    )
                )
            )
        ]
        randoms = [f for f in self.families if f not in systematic]
        for fam in systematic:
            sweep = fam.systematic or fam.chain[0][0] in ("power_loss", "network")
            points = fam.points(golden) if sweep else len(golden.boundaries())
            if not points:  # kills at boundaries of a run that reported none: no trial
                self.notes.append(
                    f"family {fam.name}: no trial: the golden run had no boundary (no probe "
                    "event, no request to a stand-in service); the other families still "
                    f"test it. To add boundaries: {ADD_PROBE_CALLS}"
                )
            for b in range(points):
                plans.append(self._plan(fam, golden, len(plans), boundary=b))
        if randoms:
            explicit = sum(f.count or 0 for f in randoms)
            shared = [f for f in randoms if f.count is None]
            left = max(0, self.trials - explicit)
            for j, fam in enumerate(randoms):
                n = (
                    fam.count
                    if fam.count is not None
                    else left // len(shared) + (1 if j < left % len(shared) else 0)
                )
                n, note = _distinct(fam, golden, n)
                if note:
                    self.notes.append(note)
                for k in range(n):
                    plans.append(self._plan(fam, golden, len(plans), draw=k))
        note = _replay_note(plans, golden)
        if note:
            self.notes.append(note)
        return plans

    def _plan(
        self,
        fam: FaultFamily,
        golden: Golden,
        index: int,
        boundary: int | None = None,
        draw: int | None = None,
    ) -> Plan:
        if self.plan_hook is not None:
            custom = self.plan_hook(fam, golden, self.seed, index)
            if custom is not None:
                return custom
        return plan_for(fam, golden, self.seed, index, boundary=boundary, mode=self.mode, draw=draw)

    def selected(self, plans: list[Plan]) -> list[Plan]:
        if self.shard is None:
            return plans
        i, n = self.shard
        return [p for p in plans if p.index % n == i - 1]

    def run(
        self,
        progress: ProgressFn | None = None,
        only: Sequence[int] | None = None,
        golden: Golden | None = None,
    ) -> CampaignResult:
        """Run the golden run (unless given) and every selected trial, in index order.

        Within :attr:`budget` (else the campaign stops and fails, see :meth:`_over_budget`).
        Interrupted (SIGINT/SIGTERM, Ctrl-C), it kills what runs, removes its temporary
        folders, writes its reports marked incomplete and raises :class:`CampaignInterrupted`.
        """
        t0 = time.monotonic()
        runner = self.runner()
        if math.isfinite(self.budget):
            runner.deadline = t0 + self.budget - _wrap_up_margin(self.budget)
        results: list[TrialResult] = []
        plans: list[Plan] = []
        stopped = ""
        try:
            try:
                # a given golden run is run again only for what this runner would record
                # (fork mode records nothing for replayed kills: it was run again for them)
                needs = runner.recording_needs(self.needs)
                if golden is None or (needs and not golden.recorded_by):
                    try:
                        golden = runner.golden(needs)
                    except GoldenRunFailed:  # an entry that does not import says so
                        _launcher_ready(runner.launcher)  # (a zygote started without wait)
                        raise
                _launcher_ready(runner.launcher)  # its failure before any trial, as before
                plans = self.selected(self.plans(golden, runner.deadline))
                if only is not None:
                    plans = [p for p in plans if p.index in set(only)]
                if self.planning_stopped:  # the budget ran out while planning
                    raise BudgetExceeded(self.planning_stopped)
                failures = 0
                for k, plan in enumerate(plans):
                    if runner.deadline is not None and time.monotonic() >= runner.deadline:
                        raise BudgetExceeded("")
                    res = runner.run(plan, golden)
                    failures += 0 if res.ok else 1
                    results.append(res)
                    if progress is not None:
                        progress(k + 1, len(plans), failures, res)
            except BudgetExceeded as exc:
                stopped = self._over_budget(str(exc), len(results), len(plans))
            except KeyboardInterrupt as exc:
                with shielded():
                    sig = received()
                    by = signal_name(sig) if sig is not None else "SIGINT"
                    where = (
                        f"after {len(results)} of {len(plans)} trials"
                        if plans
                        else "during the golden run"
                    )
                    partial = self._result(
                        golden, results, plans, t0, f"interrupted by {by} {where}", by, runner
                    )
                    with contextlib.suppress(Exception):
                        partial.write_reports()
                raise CampaignInterrupted(partial) from exc
        finally:
            with shielded():
                runner.close()
        return self._result(golden, results, plans, t0, stopped, "", runner)

    def _result(
        self,
        golden: Golden | None,
        results: list[TrialResult],
        plans: list[Plan],
        t0: float,
        incomplete: str,
        interrupted_by: str,
        runner: TrialRunner | None = None,
    ) -> CampaignResult:
        cache = cache_for(dict(self.agent.env))
        # no cache at all (one asked for, or every place, refused): one of the notes too
        notes = [*self.notes, *([cache.note] if cache.note and not cache.path else [])]
        notes += runner.launch_notes if runner is not None else []
        return CampaignResult(
            self.name,
            golden or Golden([], [], Counter(), b"", 0.0),
            results,
            time.monotonic() - t0,
            self.seed,
            self.report_dir,
            incomplete,
            interrupted_by,
            plans[len(results) :] if incomplete else [],
            notes,
            runner.secrets(canary_for(0, -1)) if runner is not None else {},
            cache.to_json(),
            self.expect.required,
        )

    def _over_budget(self, detail: str, ran: int, planned: int) -> str:
        what = f"{ran} of {planned} trials ran" if planned else "no trial ran"
        left = planned - ran
        return (
            f"the campaign's time budget of {format_duration(self.budget)} ran out: {what}"
            f"{f' ({detail})' if detail else ''}"
            f"{f', {left} not run' if left else ''}. A campaign stopped by its budget "
            f"fails: {BUDGET_HOW}"
        )
