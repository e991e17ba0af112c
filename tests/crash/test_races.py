"""Two resumers that really race, and two writers that are seen (real processes, no mocks).

``resumers`` starts two attempts of one run at once; the barrier releases them together at
their first boundary, and the fault counts as fired only when their work overlapped or one
waited or was refused. ``single_writer`` then judges from step events and from the files the
two live attempts changed (a syscall trace, or without strace the audit hook), so an agent that
names no step and keys its requests is judged too, and one with nothing to judge is "not
judged", never a pass.

Agents: ``tests/agents/plain_writer.py`` (no crashpoint import: state in a JSON file, POSTs with
an Idempotency-Key; ``--lock wait|refuse``, ``--idle``), ``no_lock.py`` and ``good_agent.py``
(on the bare probe).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from crashpoint.faults import strace_available
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CheckResult,
    Fault,
    Plan,
    TrialResult,
    TrialRunner,
    family_from_spec,
)

AGENTS = Path(__file__).resolve().parents[1] / "agents"


def _plain(*args: str, env: tuple[tuple[str, str], ...] = ()) -> AgentSpec:
    return AgentSpec(
        command=("{python}", str(AGENTS / "plain_writer.py"), "{state_dir}", *args),
        timeout=30,
        env=env,
    )


def _probe_agent(name: str, env: tuple[tuple[str, str], ...] = ()) -> AgentSpec:
    return AgentSpec(
        command=("{python}", str(AGENTS / f"{name}.py"), "--state", "{state_dir}"),
        timeout=30,
        env=env,
    )


def _one_trial(agent: AgentSpec, tmp_path: Path, name: str = "races") -> TrialResult:
    """One ``resumers`` trial of ``agent`` (its golden run first), through a campaign."""
    result = Campaign(
        agent,
        [family_from_spec({"resumers": {"count": 1}})],
        report_dir=str(tmp_path / "report"),
        name=name,
        seed=1,
    ).run()
    (trial,) = result.trials
    return trial


def _check(trial: TrialResult, name: str = "single_writer") -> CheckResult:
    return next(c for c in trial.checks if c.name == name)


def _explain(trial: TrialResult) -> str:
    return "\n".join([*map(str, trial.outcomes), *map(str, trial.checks)])


@pytest.fixture(params=["strace", "audit"])
def recorded_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """File operations recorded by strace, or (strace switched off) by the audit hook."""
    if request.param == "strace":
        ok, why = strace_available()
        if not ok:
            pytest.skip(f"strace cannot trace here: {why}")
    else:
        monkeypatch.setenv("CRASHPOINT_NO_STRACE", "1")
    return str(request.param)


def test_an_unmodified_agent_without_a_lock_fails_single_writer_naming_the_file(
    tmp_path: Path, recorded_by: str
) -> None:
    """No step names, every POST deduplicated by its key: only the file shows two writers."""
    trial = _one_trial(_plain(), tmp_path)
    (outcome,) = trial.outcomes
    assert outcome.fired, _explain(trial)
    assert "released together at their first boundaries" in outcome.where, outcome
    sw = _check(trial)
    assert not sw.ok, _explain(trial)
    assert sw.message.startswith(
        "attempts 1 and 2 both changed {state_dir}/state.json while both were at work"
    ), sw.message
    assert f"recorded by {'strace' if recorded_by == 'strace' else 'audit hook'}" in sw.message
    assert _check(trial, "exactly_once").ok  # the keys kept the service right: not the bug
    # the requests carried no attempt header: each was attributed by the process that sent it
    assert {e["attempt"] for e in trial.events if e["op"] == "effect"} == {1, 2}
    race = json.loads((Path(trial.folder) / "race.json").read_text())  # the evidence kept
    assert race["barrier"]["how"] == "together", race["barrier"]
    assert {w["attempt"] for w in race["writes"] if w["path"] == "{state_dir}/state.json"} == {
        1,
        2,
    }


@pytest.mark.parametrize(
    ("lock", "how"), [("wait", "attempt [12] waited"), ("refuse", "attempt [12] was refused")]
)
def test_the_same_agent_holding_an_flock_passes_and_the_race_fired(
    tmp_path: Path, lock: str, how: str
) -> None:
    trial = _one_trial(_plain("--lock", lock), tmp_path)
    (outcome,) = trial.outcomes
    assert outcome.fired, _explain(trial)
    assert re.match(how, outcome.where), outcome
    assert trial.ok, _explain(trial)
    sw = _check(trial)
    assert sw.ok, sw
    assert not sw.skipped, sw
    assert "no file was changed by both while both were at work" in sw.message, sw
    codes = sorted(a.returncode for a in trial.attempts[:2])  # the pair (a refusal: restarted)
    assert codes == ([0, 0] if lock == "wait" else [0, 75]), codes


def test_an_instrumented_agent_without_a_lock_fails_even_with_fast_steps(
    tmp_path: Path,
) -> None:
    """Steps of no length: without the barrier the second attempt would start after the
    first had done; released together, their steps interleave, and their files too."""
    trial = _one_trial(_probe_agent("no_lock"), tmp_path, "no_lock")
    assert trial.outcomes[0].fired, _explain(trial)
    sw = _check(trial)
    assert not sw.ok, _explain(trial)
    assert "attempts 1 and 2 both changed {state_dir}/" in sw.message or (
        "executed steps at the same time" in sw.message
    ), sw.message


def test_the_instrumented_agent_with_its_lock_passes_and_the_race_fired(tmp_path: Path) -> None:
    trial = _one_trial(_probe_agent("good_agent"), tmp_path, "good_agent")
    (outcome,) = trial.outcomes
    assert outcome.fired, _explain(trial)
    # the second attempt waits on the flock, then finds every step done and exits 0 with no
    # event: "waited". Under heavy load the recorded time of the first attempt's last write
    # (strace's wall clock, mapped to the harness's) can fall after the second one's end, and
    # the same race reads as "refused ... without doing anything": fired either way
    assert re.match(r"attempt \d (waited|was refused: it exited 0 without doing)", outcome.where), (
        outcome
    )
    assert trial.ok, _explain(trial)
    sw = _check(trial)
    assert sw.ok, sw
    assert not sw.skipped, sw


def test_an_agent_that_does_nothing_observable_is_not_judged(tmp_path: Path) -> None:
    """No event, no file: single_writer says so (skipped), and the race did not fire."""
    with TrialRunner(_plain("--idle"), str(tmp_path / "report")) as runner:
        golden = runner.golden()
        trial = runner.run(Plan((Fault.make("resumers", 1),), "resumers", 1, 0), golden)
    sw = _check(trial)
    assert sw.skipped, sw
    assert sw.message.startswith("not judged: no attempt reported a step"), sw.message
    assert "neither attempt 1 nor 2 changed a file" in sw.message or (
        "not recorded" in sw.message
    ), sw.message
    (outcome,) = trial.outcomes
    assert not outcome.fired, outcome
    assert "nothing shows that they raced" in outcome.why_not, outcome
    assert trial.status == "not exercised", trial.status


def test_the_barrier_releases_a_slow_starting_pair_together(tmp_path: Path) -> None:
    """Each attempt sleeps 1 s before its first request and the second 0.8 s more: started
    at once, the first would have done its ~0.3 s of work before the second began. The
    barrier holds the first at its first request until the second arrives: their work
    overlaps, the fault fires, and the missing lock is seen."""
    env = (
        ("PLAIN_STARTUP_SECONDS", "1.0"),
        ("PLAIN_STAGGER_SECONDS", "0.8"),
        ("PLAIN_STEP_SECONDS", "0.05"),
    )
    trial = _one_trial(_plain(env=env), tmp_path)
    (outcome,) = trial.outcomes
    assert outcome.fired, _explain(trial)
    assert outcome.where.startswith("attempts 1 and 2 worked at the same time"), outcome
    assert "released together" in outcome.where, outcome
    first: dict[int, float] = {}
    for e in trial.events:
        first.setdefault(int(e["attempt"]), float(e["t"]))
    assert abs(first[1] - first[2]) < 0.4, first  # released together, not 0.8 s apart
    assert not _check(trial).ok, _explain(trial)


def test_the_reference_library_keeps_one_writer_and_its_lock_files_are_not_judged(
    tmp_path: Path,
) -> None:
    """The demo agent's second resumer refuses (exit 73) after it touched the store-wide
    ledger in ``.store-lock`` under its flock, as the first did: coordination, not a second
    writer of the run."""
    demo = AgentSpec(
        command=("{python}", "-m", "crashpoint.agents.demo", "--state", "{state_dir}"),
        timeout=30,
    )
    result = Campaign(
        demo,
        [family_from_spec({"resumers": {"count": 3}})],
        report_dir=str(tmp_path / "report"),
        name="demo",
        seed=3,
    ).run()
    assert result.ok, "\n".join(_explain(t) for t in result.trials)
    for trial in result.trials:
        assert trial.outcomes[0].fired, _explain(trial)
        sw = _check(trial)
        assert not sw.skipped, sw
        assert "lock files, not judged: {state_dir}/checkpoints/.store-lock" in sw.message, sw


# -- k resumers at once -------------------------------------------------------------------------


def _k_trial(name: str, tmp_path: Path, k: int = 3) -> TrialResult:
    result = Campaign(
        _probe_agent(name),
        [family_from_spec({"resumers": {"count": 1, "processes": k}})],
        report_dir=str(tmp_path / "report"),
        name=name,
        seed=1,
        restarts=k,
    ).run()
    (trial,) = result.trials
    return trial


def test_three_resumers_without_a_lock_are_released_together_and_fail_with_a_witness(
    tmp_path: Path,
) -> None:
    trial = _k_trial("no_lock", tmp_path)
    (outcome,) = trial.outcomes
    assert outcome.fired, _explain(trial)
    assert re.match(r"[23] of 3 attempts raced \(", outcome.where), outcome
    assert "released together at their first boundaries" in outcome.where, outcome
    assert {int(e["attempt"]) for e in trial.events} == {1, 2, 3}
    sw = _check(trial)
    assert not sw.ok, _explain(trial)
    assert "executed steps at the same time" in sw.message, sw.message
    race = json.loads((Path(trial.folder) / "race.json").read_text())
    assert race["attempts"] == [1, 2, 3]
    assert race["barrier"]["how"] == "together", race["barrier"]
    assert set(race["barrier"]["arrived"]) == {"1", "2", "3"}
    text = (Path(trial.folder) / "anomalies.txt").read_text()
    assert text.startswith("history check: "), text
    assert "\nsingle_writer: attempts " in text, text
    assert re.search(r"\n  attempt \d event #\d+ step_started 'fetch' at \+", text), text


def test_three_resumers_with_an_flock_take_turns_and_pass(tmp_path: Path) -> None:
    trial = _k_trial("good_agent", tmp_path)
    (outcome,) = trial.outcomes
    assert outcome.fired, _explain(trial)
    # under load the third may start after the first is done: two still took turns
    assert re.match(r"[23] of 3 attempts raced \(", outcome.where), outcome
    assert trial.ok, _explain(trial)
    sw = _check(trial)
    assert not sw.skipped, sw
    assert "no file was changed by two while both were at work" in sw.message, sw
    assert [a.number for a in trial.attempts] == [1, 2, 3]
