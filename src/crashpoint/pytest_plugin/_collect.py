"""Collect ``*.scenario.yaml`` files: one item per scenario and fault family.

Imported by the plugin when a session first needs it (a scenario file found, items counted):
it imports pytest's collection machinery and the harness's names at module level, the
plugin's options and campaigns, never the plugin's ``__init__``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from crashpoint.errors import EntryError
from crashpoint.harness import (
    CampaignInterrupted,
    CampaignResult,
    FaultFamily,
    Golden,
    GoldenRunFailed,
    HarnessResult,
    NoBoundaries,
    Scenario,
    ScenarioError,
    ScenarioFamily,
    SharedPostgres,
    Zygote,
    ZygoteError,
    fork_plan,
    load_scenario,
    memory_unavailable,
    postgres_unavailable,
)
from crashpoint.pytest_plugin._campaigns import make_harness, record_campaign, record_interrupted
from crashpoint.pytest_plugin._options import SETTINGS

GOLDEN = pytest.StashKey[Golden]()
#: the item whose golden run failed: the file's other items point at it instead of repeating it
GOLDEN_FAILED = pytest.StashKey[str]()
#: the file's fork-mode zygote (agent.warm), shared by its items, closed with the file; or why
#: the agent is spawned instead
LAUNCHER = pytest.StashKey[Any]()
LAUNCH_NOTE = pytest.StashKey[str]()
#: the file's PostgreSQL ({postgres}), shared by its items (a database per trial, a proxy per
#: item), stopped with the file: one initdb per file, not one per item
POSTGRES = pytest.StashKey[SharedPostgres]()
#: the file's zygote said it is ready (it starts beside the first golden run, unwaited)
LAUNCH_READY = pytest.StashKey[bool]()


class ScenarioFailed(Exception):
    """A campaign of a scenario item had failing trials."""

    def __init__(self, result: CampaignResult) -> None:
        super().__init__(result.name)
        self.result = result


class ScenarioFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        try:
            scenario = load_scenario(self.path)
        except ScenarioError as exc:
            raise self.CollectError(f"crashpoint scenario error: {exc}") from None
        override = self.config.stash[SETTINGS].trials
        counts = [
            c if (override is None or f.family.systematic) else override
            for f, c in zip(scenario.families, _split_trials(scenario), strict=True)
        ]
        names: dict[str, int] = {}
        # the harness's own PostgreSQL ({postgres}), where one can run: else skipped, saying why
        why = postgres_unavailable() if scenario.agent.uses("postgres") else None
        for fam, count in zip(scenario.families, counts, strict=True):
            base = fam.family.name
            names[base] = names.get(base, 0) + 1
            name = base if names[base] == 1 else f"{base}#{names[base]}"
            item = ScenarioItem.from_parent(
                self, name=name, scenario=scenario, family=fam, count=count
            )
            if why:
                reason = f"the agent uses {{postgres}}, and no PostgreSQL can run here: {why}"
                item.add_marker(pytest.mark.skip(reason=reason))
            elif any(kind == "memory" for kind, _o in fam.family.chain):
                no_memory = memory_unavailable()  # a memory cgroup of its own, where one can be
                if no_memory:
                    item.add_marker(
                        pytest.mark.skip(
                            reason=f"memory faults: no memory cgroup here: {no_memory}"
                        )
                    )
            for mark in scenario.marks:
                try:
                    item.add_marker(getattr(pytest.mark, mark))
                except pytest.fail.Exception as exc:  # --strict-markers and not registered
                    raise self.CollectError(
                        f"crashpoint scenario error: {self.path} (key 'marks'): {exc.msg}"
                    ) from None
            yield item


def _split_trials(scenario: Scenario) -> list[int | None]:
    """Random families without their own ``count`` share the scenario's ``trials``."""
    shared = [f for f in scenario.families if not f.family.systematic and f.family.count is None]
    explicit = sum(f.family.count or 0 for f in scenario.families if not f.family.systematic)
    left = max(0, scenario.trials - explicit)
    out: list[int | None] = []
    k = 0
    for f in scenario.families:
        if f.family.systematic or f.family.count is not None:
            out.append(f.family.count)
        else:
            out.append(left // len(shared) + (1 if k < left % len(shared) else 0))
            k += 1
    return out


class ScenarioItem(pytest.Item):
    def __init__(
        self, *, scenario: Scenario, family: ScenarioFamily, count: int | None, **kw: Any
    ) -> None:
        super().__init__(**kw)
        self.scenario = scenario
        self.family = family
        self.count = count

    def runtest(self) -> None:
        sc = self.scenario
        settings = self.config.stash[SETTINGS]
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{sc.slug}-{self.name}").strip("_")
        base = settings.report or os.path.join(
            self.config.invocation_params.dir, "crashpoint-report"
        )
        folder = os.path.join(base, "scenarios")
        harness = make_harness(
            self.config, folder, seed=sc.seed, restarts=sc.restarts, item=f"{sc.slug} [{self.name}]"
        )
        harness.launcher = self._launcher()
        forks = getattr(harness.launcher, "forks", 0)
        fam = self.family.family
        if self.count is not None and fam.count != self.count:
            last_kind, last_opts = fam.chain[-1]
            opts = {**dict(last_opts), "count": self.count}
            fam = FaultFamily((*fam.chain[:-1], (last_kind, tuple(sorted(opts.items())))))
        campaign = harness.campaign(
            sc.agent,
            faults=fam,
            trials=self.count or 0,
            expect=sc.expect,
            name=safe,
            mode=sc.mode,
            budget=sc.budget,
        )
        if settings.mode is not None:
            campaign.mode = settings.mode
        campaign.source = sc.path  # replay takes the redacted agent.env values from it
        campaign.postgres = self._postgres()
        # the file's families share one golden run: it records what any of them needs
        campaign.record = frozenset().union(*(f.family.needs for f in sc.families))
        parent = self.parent
        assert parent is not None
        golden = parent.stash.get(GOLDEN, None)
        first = parent.stash.get(GOLDEN_FAILED, None)
        if first is not None:
            raise ScenarioError(
                sc.path,
                sc.agent_line,
                "agent",
                f"not run: the golden run of this file failed (shown once, under [{first}])",
            )
        try:
            result = campaign.run(progress=harness.progress, golden=golden)
        except (ZygoteError, EntryError) as exc:  # the file's zygote did not start
            if harness.launcher is None or parent.stash.get(LAUNCH_READY, False):
                raise
            err = ScenarioError(sc.path, sc.agent_line, "agent.warm", str(exc))
            parent.stash[LAUNCHER] = err  # the file's other items say it too
            harness.launcher.close()
            raise err from None
        except GoldenRunFailed as exc:
            parent.stash[GOLDEN_FAILED] = self.name
            raise ScenarioError(sc.path, sc.agent_line, "agent", str(exc)) from None
        except NoBoundaries as exc:  # the agent reports nothing: the campaign tests nothing
            # the gate could not judge it (exit 3), which a failure of the agent's is not
            self.user_properties.append(("crashpoint_not_judged", "no boundary"))
            raise ScenarioError(sc.path, sc.agent_line, "agent", str(exc)) from None
        except CampaignInterrupted as exc:  # what ran goes into the (incomplete) gate report
            record_interrupted(
                self,
                exc.result,
                scenario=sc.name,
                file=sc.path,
                family=self.name,
                reports=exc.result.report_dir,
                line=self.family.line,
            )
            raise
        if not result.incomplete or result.trials or result.not_run:  # a golden run it cut
            parent.stash[GOLDEN] = result.golden  # short is not kept
        if harness.launcher is not None and not parent.stash.get(LAUNCH_READY, False):
            self._launcher_ready(harness.launcher)
        paths = result.write_reports()
        if harness.launcher is not None:  # say how many attempts fork mode served
            attempts = sum(len(t.attempts) for t in result.trials) + (golden is None)
            self.user_properties.append(
                (
                    "crashpoint_launch",
                    f"fork mode: {harness.launcher.forks - forks} of "
                    f"{attempts} attempts forked from a warm interpreter (others need a fresh one: "
                    "fileop kills, rlimit disk-full, tmpfs, a recorded golden run, an upgrade's "
                    "version B)",
                )
            )
        launch = "; ".join(str(v) for k, v in self.user_properties if k == "crashpoint_launch")
        record_campaign(
            self,
            result,
            scenario=sc.name,
            file=sc.path,
            family=self.name,
            reports=paths,
            line=self.family.line,  # the fault entry's line: for CI annotations
            **({"launch": launch} if launch else {}),
        )
        if not result.ok:
            raise ScenarioFailed(result)

    def _postgres(self) -> SharedPostgres | None:
        """The file's shared PostgreSQL when the agent uses ``{postgres}`` (started by the
        first item's golden run, stopped when the file's items are done); None otherwise."""
        if not self.scenario.agent.uses("postgres"):
            return None
        parent = self.parent
        assert parent is not None
        if POSTGRES not in parent.stash:
            shared = SharedPostgres()
            parent.stash[POSTGRES] = shared
            parent.addfinalizer(shared.close)
        return parent.stash[POSTGRES]

    def _launcher(self) -> Any:
        """The file's zygote when ``agent.warm`` asks for fork mode (started once per file,
        closed when the file's items are done); None (spawn) otherwise. An agent that cannot
        be forked is spawned, and the reason is shown, never silently."""
        sc = self.scenario
        if sc.agent.warm is None:
            return None
        parent = self.parent
        assert parent is not None
        if LAUNCHER not in parent.stash:
            plan = fork_plan(sc.agent)
            if isinstance(plan, str):
                parent.stash[LAUNCHER] = None
                parent.stash[LAUNCH_NOTE] = f"fork mode off, attempts are spawned: {plan}"
            else:
                parent.stash[LAUNCHER] = self._start_zygote(Zygote.for_agent(sc.agent))
        note = parent.stash.get(LAUNCH_NOTE, "")
        if note:
            self.user_properties.append(("crashpoint_launch", note))
        launcher = parent.stash[LAUNCHER]
        if isinstance(launcher, ScenarioError):
            raise launcher
        return launcher

    def _start_zygote(self, zygote: Any) -> Any:
        """``zygote`` starting (closed with the file; its start overlaps the first golden run,
        and the campaign waits for it before any trial: a failure is then this item's
        ScenarioError, see :meth:`runtest`), or the ScenarioError it could not start with."""
        sc = self.scenario
        parent = self.parent
        assert parent is not None
        try:
            zygote.start(wait=False)
        except (ZygoteError, ImportError, OSError) as exc:
            return ScenarioError(sc.path, sc.agent_line, "agent.warm", str(exc))
        parent.addfinalizer(zygote.close)
        return zygote

    def _launcher_ready(self, zygote: Any) -> None:
        """Once per file, when its zygote is ready: the note of the warm modules it skipped."""
        parent = self.parent
        assert parent is not None
        parent.stash[LAUNCH_READY] = True
        if zygote.skipped and not parent.stash.get(LAUNCH_NOTE, ""):
            parent.stash[LAUNCH_NOTE] = (
                "fork mode: not pre-imported (they fail to import in the warm interpreter; "
                f"each attempt imports them itself): {', '.join(zygote.skipped)}"
            )
            self.user_properties.append(("crashpoint_launch", parent.stash[LAUNCH_NOTE]))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            return (
                f"scenario {self.scenario.name!r} [{self.name}] "
                f"({self.scenario.path}:{self.family.line})\n"
                + HarnessResult(excinfo.value.result).report()
            )
        if isinstance(excinfo.value, ScenarioError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[os.PathLike[str] | str, int | None, str]:
        return self.path, self.family.line - 1, f"scenario: {self.scenario.name} [{self.name}]"
