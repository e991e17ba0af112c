"""Run an agent against a :class:`FakeTarget`, restart it after kills, and judge the trial.

A *trial* is a fresh state folder, one armed kill (or none: the golden run) and as many
attempts as it takes the agent to finish. :func:`violations` compares a trial with the golden
run on the black-box invariants of ARCHITECTURE.md (completes, same_output, exactly_once,
resumes_from_last_completed) and returns what broke, one line each; an empty list is a pass.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fake_target import Event, FakeTarget, Window

__all__ = [
    "DEMO",
    "Attempt",
    "Finished",
    "Golden",
    "Trial",
    "failures",
    "kill_points",
    "run_attempt",
    "run_to_end",
    "run_trial",
    "sweep",
    "violations",
]

DEMO = [sys.executable, "-m", "crashpoint.agents.demo"]
PAUSED, DENIED = 75, 77


@dataclass(frozen=True, slots=True)
class Attempt:
    number: int
    returncode: int
    stdout: bytes
    stderr: bytes
    events: tuple[Event, ...]


@dataclass
class Trial:
    argv: list[str]
    kill: tuple[int, Window] | None
    attempts: list[Attempt] = field(default_factory=list)
    applications: list[tuple[str, str, str]] = field(default_factory=list)
    target_errors: list[str] = field(default_factory=list)

    @property
    def events(self) -> list[Event]:
        return [e for a in self.attempts for e in a.events]

    def describe(self) -> str:
        codes = ", ".join(str(a.returncode) for a in self.attempts)
        where = (
            "no kill" if self.kill is None else f"kill at event #{self.kill[0]} ({self.kill[1]})"
        )
        return f"{where}; exit codes [{codes}]; command: {' '.join(self.argv)}"


@dataclass(frozen=True, slots=True)
class Golden:
    """What a crash-free run produced."""

    stdout: bytes
    returncode: int
    steps: tuple[str, ...]
    effects: Counter[tuple[str, str]]
    events: tuple[Event, ...]

    @classmethod
    def of(cls, trial: Trial) -> Golden:
        assert trial.kill is None, "a golden run is a trial without a kill"
        assert trial.attempts
        last = trial.attempts[-1]
        steps = tuple(e.name for e in trial.events if e.op == "step_started")
        return cls(
            last.stdout,
            last.returncode,
            steps,
            Counter((k, p) for k, p, _ in trial.applications),
            tuple(trial.events),
        )


class Spawner(Protocol):
    """What :func:`run_attempt` needs: the ``children`` fixture of tests/conftest.py."""

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None) -> Any: ...


@dataclass(frozen=True, slots=True)
class Finished:
    returncode: int
    stdout: bytes
    stderr: bytes


def run_to_end(
    children: Spawner,
    argv: Sequence[str],
    *,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 30.0,
) -> Finished:
    """Run ``argv`` as a reaped child (own session) to its end; its exit code and output."""
    child = children.spawn(list(argv), env=env)
    lines = []
    while (line := child.read_line(timeout)) is not None:
        lines.append(line + "\n")
    code = child.wait(timeout)
    child.reap()  # whatever is left of its process group
    return Finished(code, "".join(lines).encode(), child.stderr_text().encode())


def run_attempt(
    children: Spawner,
    argv: Sequence[str],
    *,
    env: Mapping[str, str | None],
    number: int,
    target: FakeTarget,
    timeout: float = 30.0,
) -> Attempt:
    """One attempt of the agent, talking to ``target``; its events are those it sent."""
    first = len(target.events)
    end = run_to_end(
        children, argv, env={**env, "CRASHPOINT_ATTEMPT": str(number)}, timeout=timeout
    )
    events = tuple(e for e in target.events[first:] if e.attempt == str(number))
    return Attempt(number, end.returncode, end.stdout, end.stderr, events)


def run_trial(
    children: Spawner,
    argv: Sequence[str],
    *,
    kill: tuple[int, Window] | None = None,
    env: Mapping[str, str | None] | None = None,
    max_restarts: int = 5,
    final: Sequence[int] = (0,),
    on_exit: Callable[[Attempt], None] | None = None,
) -> Trial:
    """Start the agent, arm ``kill``, restart it until it exits with a ``final`` code (at most
    ``max_restarts`` restarts). ``on_exit(attempt)`` runs after each non-final attempt (e.g. to
    record an approval before the next one)."""
    trial = Trial(list(argv), kill)
    base = dict(env or {})
    with FakeTarget() as target:
        if kill is not None:
            target.arm_kill(*kill)
        base["CRASHPOINT_LEDGER"] = target.address
        for number in range(1, max_restarts + 2):
            attempt = run_attempt(children, argv, env=base, number=number, target=target)
            trial.attempts.append(attempt)
            base.pop("CRASHPOINT_FAILPOINTS", None)  # failpoints arm the first attempt only
            if attempt.returncode in final:
                break
            if on_exit is not None:
                on_exit(attempt)
        trial.applications = list(target.applications)
        trial.target_errors = list(target.errors)
    return trial


def kill_points(golden: Golden) -> list[tuple[int, Window]]:
    """Every step boundary of the golden run, and every effect both before it reaches the
    target and inside its in-doubt window (applied, the agent not yet told)."""
    points: list[tuple[int, Window]] = []
    for e in golden.events:
        if e.op in ("step_started", "step_completed"):
            points.append((e.index, "before"))
        elif e.op == "effect":
            points += [(e.index, "before"), (e.index, "in_doubt")]
    return points


def violations(golden: Golden, trial: Trial, *, max_restarts: int = 5) -> list[str]:
    """Every black-box invariant the trial broke, one line each (empty: it passed)."""
    out = [f"fake target: {e}" for e in trial.target_errors]
    last = trial.attempts[-1]
    # completes
    if last.returncode != golden.returncode:
        out.append(
            f"completes: last attempt exited {last.returncode}, golden "
            f"{golden.returncode} (stderr: {last.stderr.decode(errors='replace')[-300:]!r})"
        )
    if len(trial.attempts) - 1 > max_restarts:
        out.append(f"completes: {len(trial.attempts) - 1} restarts > {max_restarts}")
    # same_output
    if last.stdout != golden.stdout:
        out.append(f"same_output: {last.stdout!r} != golden {golden.stdout!r}")
    # exactly_once: each golden effect (kind + payload) applied once, nothing else applied
    seen = Counter((k, p) for k, p, _ in trial.applications)
    for eff in sorted(set(seen) | set(golden.effects)):
        want, got = golden.effects.get(eff, 0), seen.get(eff, 0)
        if got < want:
            out.append(f"exactly_once: effect {eff[0]} {eff[1]} lost (applied {got}x)")
        elif got > want:
            out.append(
                f"exactly_once: effect {eff[0]} {eff[1]} duplicated (applied {got}x, "
                f"keys {[key for k, p, key in trial.applications if (k, p) == eff]})"
            )
    # resumes_from_last_completed
    completed: list[str] = []
    for i, attempt in enumerate(trial.attempts):
        started = [e.name for e in attempt.events if e.op == "step_started"]
        if i:
            again = [s for s in started if s in completed]
            if again:
                out.append(
                    f"resumes_from_last_completed: attempt {attempt.number} started "
                    f"{again} again, reported completed before"
                )
            todo = [s for s in golden.steps if s not in completed]
            if started and todo and started[0] != todo[0]:
                out.append(
                    f"resumes_from_last_completed: attempt {attempt.number} started at "
                    f"{started[0]!r}, the first step not completed is {todo[0]!r}"
                )
        completed += [e.name for e in attempt.events if e.op == "step_completed"]
    return out


def sweep(
    children: Spawner,
    argv_for: Callable[[Path], list[str]],
    golden: Golden,
    root: Path,
    *,
    on_exit_for: Callable[[Path], Callable[[Attempt], None]] | None = None,
    workers: int | None = None,
) -> list[Trial]:
    """One trial per kill point of ``golden``, each in a fresh folder under ``root`` (trials
    are independent processes with their own target, so they run a few at a time)."""

    def one(n: int, point: tuple[int, Window]) -> Trial:
        state = root / f"kill-{n}"
        return run_trial(
            children,
            argv_for(state),
            kill=point,
            on_exit=on_exit_for(state) if on_exit_for else None,
        )

    with ThreadPoolExecutor(workers or os.cpu_count() or 2) as pool:
        return list(pool.map(one, *zip(*enumerate(kill_points(golden)), strict=False)))


def failures(golden: Golden, trials: Sequence[Trial]) -> list[str]:
    """Every violation of every trial, each line naming its trial."""
    return [f"{t.describe()}: {v}" for t in trials for v in violations(golden, t)]
