"""Hypothesis strategies for fault plans, and a stateful machine to subclass.

Kill points are counters (an event index into the golden run, or an index within a later
attempt), never clock times, so a failing plan shrinks deterministically: to fewer faults, to
earlier kills, to the first corruption kind. Two ways in::

    from hypothesis import given, settings, strategies as st
    from crashpoint.harness import AgentSpec, TrialRunner
    from crashpoint.strategies import check_trial, fault_plans, golden_for

    AGENT = AgentSpec(("{python}", "-m", "my_agent", "--state", "{state_dir}"))

    @settings(deadline=None, max_examples=50)
    @given(data=st.data())
    def test_recovers(data, tmp_path_factory):
        golden = golden_for(AGENT)                       # computed once, cached
        plan = data.draw(fault_plans(golden))
        runner = TrialRunner(AGENT, str(tmp_path_factory.mktemp("trial")))
        check_trial(runner, plan, golden)                # fails with the replay command

or subclass :class:`CrashRecoveryMachine` (rules add faults to a growing plan; the plan runs
as one trial)::

    class MyAgentMachine(CrashRecoveryMachine):
        agent = AGENT

    TestMyAgent = MyAgentMachine.TestCase

Settings profiles are registered on import (not loaded): ``crashpoint-ci`` (derandomized, no
deadline, a moderate number of examples, the failure blob printed) and ``crashpoint-local``
(no deadline, more examples). In a ``conftest.py``::

    import crashpoint.strategies
    from hypothesis import settings
    settings.load_profile("crashpoint-ci")

Every failing trial's folder is kept and its replay command, ``crashpoint replay FOLDER``,
appears in the failure message and in Hypothesis's notes for the minimal example.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from crashpoint.errors import InvalidArgument, WrongArgumentType
from crashpoint.faults import CORRUPTIONS, FAILPOINTS, disk_capabilities
from crashpoint.harness import (
    AgentSpec,
    Boundary,
    Expect,
    Fault,
    Golden,
    Plan,
    TrialResult,
    TrialRunner,
)

__all__ = [
    "CI_PROFILE",
    "FAULT_PLAN_KINDS",
    "LOCAL_PROFILE",
    "CrashRecoveryMachine",
    "check_trial",
    "corruptions",
    "failure_report",
    "fault_plans",
    "golden_for",
    "kill_schedules",
]

#: Name of the CI settings profile: ``settings.load_profile(CI_PROFILE)``.
CI_PROFILE = "crashpoint-ci"
#: Name of the local settings profile: more examples, still no deadline.
LOCAL_PROFILE = "crashpoint-local"
#: The fault kinds :func:`fault_plans` can draw.
FAULT_PLAN_KINDS = ("kill", "corrupt", "failpoint", "disk_full")

#: Without a golden run, kill indices range over ``0..NO_GOLDEN_EVENTS - 1`` (a kill past the
#: end of an attempt's events never fires).
NO_GOLDEN_EVENTS = 50
_PHASES = ("before", "in_doubt")
_FAILPOINT_ACTIONS = ("kill", "enospc", "eio")
# disk_full capacities start at 64 KiB: a tmpfs smaller than the pages the state already uses
# cannot take the copy of it, and the harness then writes the truncated copy back (reported).
_CAPACITIES = (65536, 262144, 1048576)
_FAMILY = "hypothesis"

# Each example runs real processes: no deadline, and no explain phase (it re-runs the minimal
# failing example dozens of times to say which parts of it matter, a trial each).
_PHASES_RUN = tuple(p for p in Phase if p is not Phase.explain)
settings.register_profile(
    CI_PROFILE,
    derandomize=True,
    deadline=None,
    max_examples=50,
    print_blob=True,
    phases=_PHASES_RUN,
    suppress_health_check=[HealthCheck.too_slow],
)
# explicit derandomize=False: Hypothesis loads its own "ci" profile (derandomized) when $CI is
# set, and a profile registered then would inherit it
settings.register_profile(
    LOCAL_PROFILE,
    derandomize=False,
    deadline=None,
    max_examples=300,
    phases=_PHASES_RUN,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- golden runs ----------------------------------------------------------------------------------

_goldens: dict[AgentSpec, Golden | BaseException] = {}


def golden_for(agent: AgentSpec) -> Golden:
    """The golden (crash-free) run of ``agent``, computed once per process and cached.

    Runs in a temporary folder that is removed afterwards (the Golden is kept in memory; every
    trial folder gets its own ``golden.json``). A golden run that fails is cached too, and its
    :class:`~crashpoint.harness.GoldenRunFailed` is raised again on every call.
    """
    cached = _goldens.get(agent)
    if cached is None:
        folder = tempfile.mkdtemp(prefix="crashpoint-golden-")
        try:
            cached = TrialRunner(agent, folder).golden()
        except Exception as exc:  # cached so each example does not re-run a broken agent
            cached = exc
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        _goldens[agent] = cached
    if isinstance(cached, BaseException):
        raise cached.with_traceback(None)
    return cached


# -- kills ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _KillPoints:
    """Where a kill can land, as one counter ``point`` drawn before the attempt is known (a
    smaller point is an earlier kill, so shrinking moves kills earlier).

    Attempt 1: the golden run's boundaries in order (``point`` scaled to their number). A later
    attempt: ``point < events`` kills before event ``point`` of that attempt; ``events + i``
    kills in the in-doubt window of its event ``i`` (fires only if that event is an effect).
    """

    boundaries: tuple[tuple[int, str, str], ...]
    events: int

    @classmethod
    def of(cls, golden: Golden | None) -> _KillPoints:
        if golden is None or not golden.events:
            return cls((), NO_GOLDEN_EVENTS)
        return cls(
            tuple((b.index, b.phase, b.label) for b in golden.boundaries()), len(golden.events)
        )

    @property
    def size(self) -> int:
        return max(len(self.boundaries), 2 * self.events)

    def points(self) -> st.SearchStrategy[int]:
        return st.integers(0, self.size - 1)

    def fault(self, attempt: int, point: int) -> Fault:
        if attempt == 1 and self.boundaries:  # spread over the boundaries, order kept
            return _kill(1, *self.boundaries[point * len(self.boundaries) // self.size])
        point %= 2 * self.events
        return _kill(attempt, point % self.events, _PHASES[point // self.events])


def _kill(attempt: int, index: int, phase: str, label: str = "") -> Fault:
    if label:
        return Fault.make("kill", attempt, index=index, phase=phase, label=label)
    return Fault.make("kill", attempt, index=index, phase=phase)


def kill_schedules(
    golden: Golden | None = None, *, max_kills: int = 3, min_kills: int = 1
) -> st.SearchStrategy[list[Fault]]:
    """Lists of kills, one per attempt: kill ``i`` hits attempt ``i`` (1-based).

    A kill of attempt 1 lands on a boundary of ``golden`` (an event index and a phase, before
    the event or, for an effect, in its in-doubt window); a kill of a later attempt lands on an
    index within that attempt (``0..len(golden.events) - 1``; without ``golden``, ``0..49``).
    Indices are counters, so a failure shrinks to fewer and earlier kills.
    """
    if min_kills < 0 or max_kills < max(1, min_kills):
        raise InvalidArgument(
            f"need 0 <= min_kills <= max_kills and max_kills >= 1, got "
            f"min_kills={min_kills}, max_kills={max_kills}"
        )
    kp = _KillPoints.of(golden)
    points = st.lists(kp.points(), min_size=min_kills, max_size=max_kills)
    return _kill_schedules(kp, points)


# Composites rather than .map(): Hypothesis then prints a failing example as the value (a Plan,
# Faults), which reads and pastes back, not as a call of a private helper on internal drafts.


@st.composite
def _kill_schedules(
    draw: st.DrawFn, kp: _KillPoints, points: st.SearchStrategy[list[int]]
) -> list[Fault]:
    return [kp.fault(i + 1, p) for i, p in enumerate(draw(points))]


# -- corruptions ----------------------------------------------------------------------------------


def _check_hows(hows: Sequence[str]) -> tuple[str, ...]:
    hows = tuple(hows)
    bad = [h for h in hows if h not in CORRUPTIONS]
    if not hows or bad:
        raise InvalidArgument(
            f"corruption kinds must be a non-empty subset of "
            f"{', '.join(CORRUPTIONS)}; got {list(hows)}"
        )
    return hows


def _seeds() -> st.SearchStrategy[int]:
    return st.integers(0, (1 << 30) - 1)


def corruptions(
    *, hows: Sequence[str] = CORRUPTIONS, path: str = "{state_dir}/**", attempt: int = 2
) -> st.SearchStrategy[Fault]:
    """``Fault("corrupt", attempt, how=..., path=..., seed=...)``: applied to one file matching
    ``path`` just before ``attempt`` starts. ``how`` shrinks to the first of ``hows``, ``seed``
    to 0. ``stale-copy`` needs two crashes before it to have an older copy to roll back to."""
    hows = _check_hows(hows)
    if attempt < 2:
        raise InvalidArgument("a corruption hits the state an earlier attempt left: attempt >= 2")
    return _corruptions(hows, path, attempt)


@st.composite
def _corruptions(draw: st.DrawFn, hows: tuple[str, ...], path: str, attempt: int) -> Fault:
    return Fault.make(
        "corrupt", attempt, how=draw(st.sampled_from(hows)), path=path, seed=draw(_seeds())
    )


# -- whole plans ----------------------------------------------------------------------------------


def _disk_mechanism() -> str:
    caps = disk_capabilities()
    return "tmpfs" if caps.tmpfs else "rlimit" if caps.rlimit else "failpoint"


@dataclass(frozen=True, slots=True)
class _Draft:
    """One item of a plan before attempts are assigned (``point``: see :class:`_KillPoints`)."""

    kind: str
    point: int = 0
    how: str = ""
    seed: int = 0
    spec: str = ""
    capacity: int = 0
    nth: int = 1


def _drafts(kind: str, kp: _KillPoints, hows: tuple[str, ...]) -> st.SearchStrategy[_Draft]:
    if kind == "kill":
        return st.builds(_Draft, st.just("kill"), kp.points())
    if kind == "corrupt":
        return st.builds(
            _Draft, st.just("corrupt"), kp.points(), how=st.sampled_from(hows), seed=_seeds()
        )
    if kind == "failpoint":
        spec = st.builds(
            lambda name, action, nth: f"{name}={action}@{nth}",
            st.sampled_from(FAILPOINTS),
            st.sampled_from(_FAILPOINT_ACTIONS),
            st.integers(1, 3),
        )
        return st.builds(_Draft, st.just("failpoint"), spec=spec)
    if kind == "disk_full":
        return st.builds(
            _Draft,
            st.just("disk_full"),
            capacity=st.sampled_from(_CAPACITIES),
            nth=st.integers(2, 6),
        )
    raise InvalidArgument(f"fault_plans cannot draw {kind!r}; use {', '.join(FAULT_PLAN_KINDS)}")


def _assemble(
    drafts: list[_Draft], kp: _KillPoints, *, max_faults: int, restarts: int, path: str
) -> Plan:
    """Drafts in order -> a plan the trial runner can run.

    A kill, failpoint or disk_full hits the current attempt and moves on to the next one (at
    most ``restarts`` of them, so a fault-free attempt always remains). A corruption is applied
    just before the attempt that follows a kill; with no kill just before it, the draft brings
    its own (two faults), or only that kill when there is room for one fault.
    """
    faults: list[Fault] = []
    attempt = 1
    for d in drafts:
        room = max_faults - len(faults)
        if room <= 0:
            break
        ends_attempt = d.kind != "corrupt" or not faults or faults[-1].kind != "kill"
        if ends_attempt and attempt > restarts:
            continue
        if d.kind == "corrupt":
            if ends_attempt:
                faults.append(kp.fault(attempt, d.point))
                attempt += 1
                if room < 2:
                    continue
            faults.append(Fault.make("corrupt", attempt, how=d.how, path=path, seed=d.seed))
        elif d.kind == "kill":
            faults.append(kp.fault(attempt, d.point))
            attempt += 1
        elif d.kind == "failpoint":
            faults.append(Fault.make("failpoint", attempt, spec=d.spec))
            attempt += 1
        else:
            faults.append(
                Fault.make(
                    "disk_full",
                    attempt,
                    capacity=d.capacity,
                    mechanism=_disk_mechanism(),
                    nth=d.nth,
                )
            )
            attempt += 1
    return Plan(tuple(faults), _FAMILY)


def fault_plans(
    golden: Golden | None = None,
    *,
    max_faults: int = 3,
    kinds: Sequence[str] = FAULT_PLAN_KINDS,
    restarts: int = 3,
    hows: Sequence[str] = CORRUPTIONS,
    path: str = "{state_dir}/**",
) -> st.SearchStrategy[Plan]:
    """Plans of 1..``max_faults`` faults, in attempt order, that the trial runner can run.

    Drawn as a list of fault drafts (``min_size=1``), so a failure shrinks to fewer faults,
    then to kills (the first kind) at earlier events. Kill points: see :func:`kill_schedules`
    (without ``golden``, ``0..49``; a kill past the end of the stream never fires). A corrupt
    comes after a kill that ended an attempt (it brings its own kill if need be). At most
    ``restarts`` faults end attempts, so the trial runner (``TrialRunner(restarts=...)``, same
    value) always has a fault-free attempt left. ``disk_full`` uses the best mechanism this
    machine has (tmpfs, RLIMIT_FSIZE, or the reference library's ENOSPC failpoint);
    ``failpoint`` faults only act on agents built on ``crashpoint.checkpoint``.
    """
    kinds = tuple(kinds)
    if not kinds:
        raise InvalidArgument(f"kinds must name at least one of {', '.join(FAULT_PLAN_KINDS)}")
    if max_faults < 1:
        raise InvalidArgument(f"max_faults must be >= 1, got {max_faults}")
    if restarts < 1:
        raise InvalidArgument(
            f"restarts must be >= 1 (a fault that ends an attempt needs another "
            f"attempt to recover in), got {restarts}"
        )
    hows = _check_hows(hows)
    kp = _KillPoints.of(golden)
    drafts = st.one_of([_drafts(k, kp, hows) for k in kinds])
    return _fault_plans(
        st.lists(drafts, min_size=1, max_size=max_faults),
        kp,
        max_faults=max_faults,
        restarts=restarts,
        path=path,
    )


@st.composite
def _fault_plans(
    draw: st.DrawFn,
    drafts: st.SearchStrategy[list[_Draft]],
    kp: _KillPoints,
    *,
    max_faults: int,
    restarts: int,
    path: str,
) -> Plan:
    return _assemble(draw(drafts), kp, max_faults=max_faults, restarts=restarts, path=path)


# -- running a plan -------------------------------------------------------------------------------


def failure_report(result: TrialResult) -> str:
    """What failed in a trial, its attempts, its folder and the command that replays it."""
    lines = [f"crash-recovery trial failed under: {result.plan.describe()}"]
    lines += [f"  {a.describe()}" for a in result.attempts]
    lines += [f"  {c}" for c in result.failed]
    if result.folder:
        lines.append(f"  evidence: {result.folder}")
        lines.append(f"  replay: crashpoint replay {result.folder}")
    return "\n".join(lines)


def check_trial(
    runner: TrialRunner, plan: Plan, golden: Golden, *, cache: dict[Plan, TrialResult] | None = None
) -> TrialResult:
    """Run one trial of ``plan``; if a check fails, raise AssertionError with
    :func:`failure_report`. Inside a Hypothesis test the trial folder and the replay command are
    also recorded with :func:`hypothesis.note`, so they print with the minimal example. The
    failing trial's folder is kept (``TrialRunner`` removes passing ones).

    ``cache`` (a dict you keep across examples): a plan seen before is not run again. Trials
    are deterministic, and while shrinking Hypothesis often tries choices that map to a plan it
    has already run. Each new plan then runs as ``trial-NNNN`` (numbered by the cache), so the
    folders of earlier failures are not overwritten.
    """
    result = cache.get(plan) if cache is not None else None
    if result is None:
        numbered = plan if cache is None else replace(plan, index=len(cache))
        result = runner.run(numbered, golden)
        if cache is not None:
            cache[plan] = result
    if result.skipped and currently_in_test_context():
        note(f"crashpoint trial skipped: {result.skipped}")
    if not result.ok:
        if currently_in_test_context():
            note(f"crashpoint trial folder: {result.folder}")
            note(f"crashpoint replay {result.folder}")
        raise AssertionError(failure_report(result))
    return result


# -- the stateful machine ------------------------------------------------------------------------


def _points_for_next_kill(machine: CrashRecoveryMachine) -> st.SearchStrategy[Boundary]:
    if machine.attempt == 1:
        return st.sampled_from(machine.golden.boundaries())
    events = max(1, len(machine.golden.events))
    return _later_boundaries(events)


@st.composite
def _later_boundaries(draw: st.DrawFn, events: int) -> Boundary:
    return Boundary(draw(st.integers(0, events - 1)), draw(st.sampled_from(_PHASES)), "")


class CrashRecoveryMachine(RuleBasedStateMachine):
    """Subclass, set ``agent``, and collect ``YourMachine.TestCase``.

    Each example builds a plan from rules (kill the current attempt at its k-th event, corrupt
    a file after a kill, fill the disk, arm a failpoint), then runs it as one trial with
    :class:`~crashpoint.harness.TrialRunner` (rule ``run_trial``, or at teardown) in a fresh
    temporary folder against a golden run computed once per agent, and asserts every check
    held. A failure names the checks and ``crashpoint replay FOLDER``; the folder of the last
    failing example (the minimal one Hypothesis reports) is kept, the others removed.

    Class attributes to override: ``agent`` (required), ``expect``, ``restarts``, ``max_faults``,
    ``kinds`` (of ``kill``, ``corrupt``, ``disk_full``, ``failpoint``), ``hows`` (corruption
    kinds), ``corrupt_path``, ``folder`` (where example folders go; default: the temp dir).
    """

    agent: ClassVar[AgentSpec | None] = None
    expect: ClassVar[Expect] = Expect()
    restarts: ClassVar[int] = 3
    max_faults: ClassVar[int] = 3
    kinds: ClassVar[tuple[str, ...]] = ("kill", "corrupt", "disk_full", "failpoint")
    hows: ClassVar[tuple[str, ...]] = CORRUPTIONS
    corrupt_path: ClassVar[str] = "{state_dir}/**"
    folder: ClassVar[str | None] = None

    # per machine class: the kept folder of its last failure, and the plans that passed
    # (trials are deterministic; shrinking often rebuilds a plan that already ran)
    _kept: ClassVar[dict[str, str]] = {}
    _passed: ClassVar[dict[str, set[Plan]]] = {}

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        if cls.agent is None:
            raise WrongArgumentType(f"{cls.__name__}: set agent = AgentSpec(...) on the class")
        bad = [k for k in cls.kinds if k not in FAULT_PLAN_KINDS]
        if bad or ("corrupt" in cls.kinds and "kill" not in cls.kinds):
            raise WrongArgumentType(
                f"{cls.__name__}.kinds: use kinds from "
                f"{', '.join(FAULT_PLAN_KINDS)} (corrupt needs kill); got {cls.kinds}"
            )
        _check_hows(cls.hows)
        if cls.restarts < 1 or cls.max_faults < 1:
            raise WrongArgumentType(f"{cls.__name__}: restarts and max_faults must be >= 1")
        self.golden = golden_for(cls.agent)
        self.faults: list[Fault] = []
        self.attempt = 1
        self.done = False
        self.result: TrialResult | None = None
        self._root = ""

    # -- building the plan --------------------------------------------------------------------

    def _can_add(self, kind: str, ends_attempt: bool = True) -> bool:
        return (
            not self.done
            and kind in self.kinds
            and len(self.faults) < self.max_faults
            and (not ends_attempt or self.attempt <= self.restarts)
        )

    @property
    def plan(self) -> Plan:
        return Plan(tuple(self.faults), f"{_FAMILY}:{type(self).__name__}")

    @precondition(lambda self: self._can_add("kill"))
    @rule(at=st.runner().flatmap(_points_for_next_kill))
    def kill(self, at: Boundary) -> None:
        """Kill the current attempt at its ``at.index``-th event; the next attempt resumes."""
        self.faults.append(_kill(self.attempt, at.index, at.phase, at.label))
        self.attempt += 1

    @precondition(
        lambda self: (
            self._can_add("corrupt", ends_attempt=False)
            and bool(self.faults)
            and self.faults[-1].kind == "kill"
        )
    )
    @rule(how=st.runner().flatmap(lambda m: st.sampled_from(m.hows)), seed=_seeds())
    def corrupt(self, how: str, seed: int) -> None:
        """Damage one state file the killed attempt left, before the next attempt starts."""
        self.faults.append(
            Fault.make("corrupt", self.attempt, how=how, path=self.corrupt_path, seed=seed)
        )

    @precondition(lambda self: self._can_add("disk_full"))
    @rule(capacity=st.sampled_from(_CAPACITIES), nth=st.integers(2, 6))
    def disk_full(self, capacity: int, nth: int) -> None:
        """Run the current attempt on a disk of ``capacity`` bytes."""
        self.faults.append(
            Fault.make(
                "disk_full", self.attempt, capacity=capacity, mechanism=_disk_mechanism(), nth=nth
            )
        )
        self.attempt += 1

    @precondition(lambda self: self._can_add("failpoint"))
    @rule(
        name=st.sampled_from(FAILPOINTS),
        action=st.sampled_from(_FAILPOINT_ACTIONS),
        nth=st.integers(1, 3),
    )
    def failpoint(self, name: str, action: str, nth: int) -> None:
        """Arm a failpoint of the reference library in the current attempt."""
        self.faults.append(Fault.make("failpoint", self.attempt, spec=f"{name}={action}@{nth}"))
        self.attempt += 1

    # -- running it ---------------------------------------------------------------------------

    @precondition(lambda self: bool(self.faults) or self.done)
    @rule()
    def run_trial(self) -> None:
        """Run the plan built so far as one trial and check it (once; later calls do nothing)."""
        self.done = True
        if self.result is None and self.faults:
            self._run()

    @classmethod
    def _key(cls) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"

    def _run(self) -> None:
        agent = type(self).agent
        assert agent is not None
        plan = self.plan
        passed = self._passed.setdefault(self._key(), set())
        if plan in passed:
            return
        base = self.folder or tempfile.gettempdir()
        self._root = tempfile.mkdtemp(prefix=f"crashpoint-{type(self).__name__}-", dir=base)
        runner = TrialRunner(agent, self._root, restarts=self.restarts, expect=self.expect)
        self.result = runner.run(plan, self.golden)
        if self.result.skipped:
            note(f"crashpoint trial skipped: {self.result.skipped}")
        if not self.result.ok:
            self._keep(self._root)
            self._root = ""
            note(f"crashpoint trial folder: {self.result.folder}")
            note(f"crashpoint replay {self.result.folder}")
            raise AssertionError(failure_report(self.result))
        passed.add(plan)

    def _keep(self, root: str) -> None:
        key = self._key()
        old = self._kept.get(key)
        if old and old != root:
            shutil.rmtree(old, ignore_errors=True)
        self._kept[key] = root

    def teardown(self) -> None:
        try:
            if self.result is None and self.faults:
                self._run()
        finally:
            if self._root:
                with contextlib.suppress(OSError):
                    shutil.rmtree(self._root)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(plan={self.plan.describe()!r})"
