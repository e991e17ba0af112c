"""Backing-service faults end to end: real agents whose database goes away mid-step.

- SQLite (``tests/agents/sqlite_steps.py``, the standard library): the harness's own connection
  holds the write lock of the agent's database from the start of a step, then kills the agent
  at its next step report. With a busy timeout the agent waits the lock out (passes); one that
  stops on ``database is locked`` with exit 1 is resumed (passes); one that swallows the error
  and reports the step completed loses an acknowledged write (``resumes_from_last_completed``,
  "acknowledged but not durable"); one that prints the error and exits 0 is caught by
  ``no_silent_failure``. The accounting: fired only when the agent's lock requests were
  refused while it was inside a step.
- PostgreSQL (``tests/agents/pg_steps.py``, psycopg): the harness's throw-away server, given as
  ``{postgres}``, restarts or is partitioned mid-step; an agent that reconnects and retries
  passes, one that swallows ``OperationalError`` or exits 0 on it is caught. Skipped with the
  reason where no server can run or psycopg is missing.
- The shipped example (``examples/backing/agent.py``): with ``--fixed`` it passes, without it
  it is caught.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crashpoint.faults import strace_available
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CampaignResult,
    CheckResult,
    SharedPostgres,
    TrialResult,
    family_from_spec,
    load_scenario,
    postgres_unavailable,
)

ROOT = Path(__file__).resolve().parents[2]
SQLITE_AGENT = ROOT / "tests" / "agents" / "sqlite_steps.py"
PG_AGENT = ROOT / "tests" / "agents" / "pg_steps.py"
EXAMPLE = ROOT / "examples" / "backing" / "agent.py"
OUTPUT = b"fetch: 7\nparse: 14\nrank: 21\nsummarise: 28\npublish: 35\n"

traced = pytest.mark.skipif(
    not strace_available()[0],
    reason=f"the lock's evidence is a trace of the agent: {strace_available()[1]}",
)


def sqlite_agent(*flags: str) -> AgentSpec:
    return AgentSpec(command=(sys.executable, str(SQLITE_AGENT), "{state_dir}", *flags), timeout=30)


def campaign(
    spec: AgentSpec,
    faults: list[dict[str, Any]],
    tmp_path: Path,
    seed: int = 11,
    postgres: SharedPostgres | None = None,
) -> CampaignResult:
    return Campaign(
        spec,
        [family_from_spec(f) for f in faults],
        str(tmp_path / "report"),
        name="backing",
        seed=seed,
        restarts=2,
        postgres=postgres,
    ).run()


def lock(**opts: Any) -> dict[str, Any]:
    return {"backing": {"service": "sqlite", "for": "0.3s", **opts}}


def failing(t: TrialResult) -> list[str]:
    return [str(c) for c in t.failed] + [t.landed()]


def root(t: TrialResult, name: str) -> CheckResult:
    """The trial's root cause, which must be check ``name``."""
    got = t.root_cause
    assert got is not None, failing(t)
    assert got.name == name, failing(t)
    return got


# -- SQLite ---------------------------------------------------------------------------------


@traced
def test_an_agent_with_a_busy_timeout_waits_the_lock_out_at_every_step(tmp_path: Path) -> None:
    result = campaign(sqlite_agent("--busy-timeout", "5"), [lock(at="every-step")], tmp_path)
    assert len(result.trials) == 5  # one per step of the golden run
    for t in result.trials:
        assert t.exercised, t.landed()
        assert t.status == "passed", failing(t)
        assert "lock request(s) of the agent on progress.db refused" in t.landed()
        first, last = t.attempts
        assert first.signal == 9
        assert "step_completed" in first.killed_by
        assert last.returncode == 0
        assert last.stdout == OUTPUT
    assert result.ok


@traced
@pytest.mark.parametrize("flags", [(), ("--wal",)], ids=["fail-stop", "wal-busy-timeout"])
def test_a_fail_stop_and_a_wal_agent_pass(tmp_path: Path, flags: tuple[str, ...]) -> None:
    spec = sqlite_agent(*flags, *(("--busy-timeout", "5") if flags else ()))
    result = campaign(spec, [lock(count=1, lock="exclusive")], tmp_path)
    (t,) = result.trials
    assert t.exercised, t.landed()
    assert t.status == "passed", failing(t)
    if not flags:  # "database is locked" ended attempt 1 with exit 1; attempt 2 resumed
        assert t.attempts[0].returncode == 1
        assert b"database is locked" in t.attempts[0].stderr


@traced
def test_an_agent_that_swallows_sqlite_busy_loses_an_acknowledged_write(tmp_path: Path) -> None:
    result = campaign(sqlite_agent("--swallow"), [lock(count=2)], tmp_path)
    for t in result.trials:
        assert t.exercised, t.landed()
        assert t.status == "failed"
        cause = root(t, "resumes_from_last_completed")
        assert cause.message.startswith("acknowledged but not durable: re-ran a completed step")
        assert "after the SQLite immediate lock at attempt 1 event #" in cause.hint
        assert "busy timeout" in cause.hint
        assert b"database is locked" in t.attempts[0].stderr
    assert not result.ok


@traced
def test_an_agent_that_exits_0_on_a_failed_write_is_caught(tmp_path: Path) -> None:
    result = campaign(sqlite_agent("--bail"), [lock(count=1)], tmp_path)
    (t,) = result.trials
    assert t.exercised, t.landed()
    assert t.attempts[-1].returncode == 0  # nothing crashed: it said it was done
    cause = root(t, "no_silent_failure")
    assert "exited 0 but never completed step" in cause.message
    assert "database is locked" in cause.message
    same = next(c for c in t.checks if c.name == "same_output")
    assert same.cause == "no_silent_failure"


@traced
def test_a_lock_no_write_meets_is_not_exercised(tmp_path: Path) -> None:
    """The lock on a database the agent does not write during the step: no lock request was
    refused, so the fault did not fire (not a pass)."""
    fault = lock(count=1, path="{state_dir}/aux.db")
    result = campaign(sqlite_agent("--aux", "--swallow"), [fault], tmp_path)
    (t,) = result.trials
    assert t.status == "not exercised", failing(t)
    (o,) = t.outcomes
    assert "inside step" in o.why_not
    assert "made no write to aux.db meanwhile (no refused lock request in its trace)" in o.why_not


def test_a_lock_on_no_database_is_not_exercised(tmp_path: Path) -> None:
    result = campaign(sqlite_agent(), [lock(count=1, path="{workdir}/**")], tmp_path)
    (t,) = result.trials
    assert t.status == "not exercised"
    assert "no SQLite database matched {workdir}/**" in t.outcomes[0].why_not


@traced
def test_a_lock_at_an_instant_while_a_step_runs(tmp_path: Path) -> None:
    fault = lock(count=2, at="time", within="0.08s")
    # steps of 0.25 s: a lock whose timer fires late on a loaded machine (it once fired after a
    # run of 0.02 s steps had ended) still lands while a step works, before its write
    result = campaign(sqlite_agent("--busy-timeout", "5", "--work", "0.25"), [fault], tmp_path)
    for t in result.trials:
        assert t.exercised, t.landed()
        assert "s after the first event of attempt 1" in t.landed()
        assert t.status == "passed", failing(t)


@pytest.mark.slow  # fast cover: the every-step sweep above (5 of 5)
@traced
def test_a_held_lock_fires_in_at_least_95_percent_of_trials(tmp_path: Path) -> None:
    result = campaign(
        sqlite_agent("--busy-timeout", "5"), [lock(count=20, **{"for": "0.2s"})], tmp_path, 28
    )
    fired = sum(t.exercised for t in result.trials)
    assert fired >= 19, [t.landed() for t in result.trials if not t.exercised]
    assert result.ok


# -- PostgreSQL -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def psycopg_agent() -> Iterator[SharedPostgres]:
    """One server (one ``initdb``) for the module's campaigns, as the pytest plugin shares one
    per scenario file; each trial still gets a database of its own."""
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    pytest.importorskip(
        "psycopg", reason="the agent uses psycopg: pip install 'crashpoint[postgres]'"
    )
    with SharedPostgres() as server:
        yield server


def pg_agent(*flags: str) -> AgentSpec:
    return AgentSpec(command=(sys.executable, str(PG_AGENT), "{postgres}", *flags), timeout=60)


def outage(do: str, **opts: Any) -> dict[str, Any]:
    return {"backing": {"service": "postgres", "do": do, "for": "1s", "count": 1, **opts}}


# slow: fast cover: test_shared_postgres.py::test_two_campaigns_share_one_server_and_keep_their_
# trials_apart (this agent through the same restart and partition, passing; same assertions)
@pytest.mark.slow
def test_a_psycopg_agent_that_retries_rides_out_a_restart_and_a_partition(
    tmp_path: Path, psycopg_agent: SharedPostgres
) -> None:
    result = campaign(
        pg_agent("--retry"),
        [outage("restart"), outage("partition")],
        tmp_path,
        postgres=psycopg_agent,
    )
    restart, partition = result.trials
    for t in result.trials:
        assert t.exercised, t.landed()
        assert t.status == "passed", failing(t) + [a.stderr.decode()[-400:] for a in t.attempts]
        assert t.attempts[-1].stdout == OUTPUT
    assert "PostgreSQL restart (immediate shutdown) at attempt 1 event #" in restart.landed()
    assert "PostgreSQL partition (reset) at attempt 1 event #" in partition.landed()
    assert "connection(s) cut" in restart.landed()


def test_a_psycopg_agent_that_swallows_operational_error_is_caught(
    tmp_path: Path, psycopg_agent: SharedPostgres
) -> None:
    result = campaign(pg_agent("--swallow"), [outage("restart")], tmp_path, postgres=psycopg_agent)
    (t,) = result.trials
    assert t.exercised, t.landed()
    cause = root(t, "resumes_from_last_completed")
    assert cause.message.startswith("acknowledged but not durable")
    assert "after the PostgreSQL restart" in cause.hint


@pytest.mark.slow  # fast cover: the swallowing agent above, and the SQLite --bail one
def test_a_psycopg_agent_that_exits_0_and_a_blackhole(
    tmp_path: Path, psycopg_agent: SharedPostgres
) -> None:
    bail = campaign(
        pg_agent("--bail"), [outage("partition")], tmp_path / "bail", postgres=psycopg_agent
    )
    (t,) = bail.trials
    assert t.exercised, t.landed()
    root(t, "no_silent_failure")
    hole = campaign(
        pg_agent("--retry"),
        [outage("partition", how="blackhole")],
        tmp_path / "blackhole",
        postgres=psycopg_agent,
    )
    (t,) = hole.trials
    assert t.exercised, t.landed()
    assert t.status == "passed", failing(t)


def test_a_postgres_fault_on_an_agent_without_postgres_is_not_exercised(tmp_path: Path) -> None:
    result = campaign(sqlite_agent(), [outage("restart")], tmp_path)
    (t,) = result.trials
    assert t.status == "not exercised"
    assert "the agent does not use {postgres}" in t.outcomes[0].why_not


# -- the shipped example ----------------------------------------------------------------------


@traced
@pytest.mark.parametrize("fixed", [True, False], ids=["fixed", "broken"])
def test_the_shipped_sqlite_example(tmp_path: Path, fixed: bool) -> None:
    sc = load_scenario(ROOT / "scenarios" / "sqlite-lock.scenario.yaml")
    assert "--fixed" in sc.agent.command
    command = sc.agent.command if fixed else tuple(a for a in sc.agent.command if a != "--fixed")
    spec = AgentSpec(command=command, timeout=30, scenario_dir=sc.agent.scenario_dir)
    fam = family_from_spec({"backing": {"service": "sqlite", "for": "0.3s", "count": 1}})
    result = Campaign(
        spec, [fam], str(tmp_path), seed=sc.seed, restarts=sc.restarts, expect=sc.expect
    ).run()
    (t,) = result.trials
    assert t.exercised, t.landed()
    assert t.status == ("passed" if fixed else "failed"), failing(t)
    if not fixed:
        root(t, "resumes_from_last_completed")
