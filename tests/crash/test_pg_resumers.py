"""k resumers of one run whose state is in PostgreSQL (``{postgres}``), raced from k processes.

Each resumer is a process tree of its own that reaches the run's state only over TCP, through
the runner's proxy to the harness's throw-away server (what k workers on k hosts sharing one
database see; they are not in separate network namespaces here). The barrier releases them
together at their first boundaries, and the history checker judges the trial's whole history
(every attempt's steps, not pair by pair):

- the demo agent on the reference library's PostgreSQL store (``--store {postgres}``; the
  example ``examples/backing/postgres-resumers.scenario.yaml``) takes the run's lease: one
  resumer proceeds, the others are refused; it passes, and the race fired;
- ``tests/agents/pg_steps.py`` keeps its progress in rows with no lease: the resumers run the
  same steps at the same time, and ``single_writer`` fails with a minimal witness.

With ``hosts: true`` each resumer runs in a pid and UTS namespace of its own: the store can no
longer tell whether another's process lives (it can only on its own machine), so the lease
alone keeps one writer, as across hosts.

Skipped with the reason where no server can run or psycopg is missing.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CheckResult,
    SharedPostgres,
    TrialResult,
    family_from_spec,
    load_scenario,
    postgres_unavailable,
)

ROOT = Path(__file__).resolve().parents[2]
PG_AGENT = ROOT / "tests" / "agents" / "pg_steps.py"
EXAMPLE = ROOT / "examples" / "backing" / "postgres-resumers.scenario.yaml"
FLEET = ROOT / "examples" / "backing" / "fleet-resumers.scenario.yaml"
K = 4


@pytest.fixture(scope="module")
def shared() -> Iterator[SharedPostgres]:
    """One server for the module's campaigns (each trial still gets its own database)."""
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    pytest.importorskip(
        "psycopg", reason="the agents use psycopg: pip install 'crashpoint[postgres]'"
    )
    with SharedPostgres() as server:
        yield server


def race(
    agent: AgentSpec, tmp_path: Path, shared: SharedPostgres, k: int = K, **opts: Any
) -> TrialResult:
    result = Campaign(
        agent,
        [family_from_spec({"resumers": {"count": 1, "processes": k, **opts}})],
        str(tmp_path / "report"),
        name="pg-resumers",
        seed=3,
        restarts=k,
        postgres=shared,
    ).run()
    (trial,) = result.trials
    return trial


def single_writer(t: TrialResult) -> CheckResult:
    return next(c for c in t.checks if c.name == "single_writer")


def explain(t: TrialResult) -> str:
    return "\n".join(
        [t.landed(), *(str(c) for c in t.failed)]
        + [f"attempt {a.number}: {a.exit} {a.stderr.decode()[-300:]}" for a in t.attempts]
    )


@pytest.mark.slow  # ~20 s on two shared cores; fast cover: the lease-less agent below, and
# tests/crash/test_pg_gate.py (two resumers of the demo on the PostgreSQL store)
def test_resumers_on_the_postgresql_store_take_turns_and_pass(
    tmp_path: Path, shared: SharedPostgres
) -> None:
    """The example (examples/backing/postgres-resumers.scenario.yaml), as its file says."""
    sc = load_scenario(EXAMPLE)
    ((kind, opts),) = sc.families[0].family.chain
    assert (kind, dict(opts)["processes"], sc.restarts) == ("resumers", K, K)
    demo = sc.agent
    t = race(demo, tmp_path, shared)
    (outcome,) = t.outcomes
    assert outcome.fired, explain(t)
    assert re.match(rf"[2-{K}] of {K} attempts raced \(", outcome.where), outcome
    assert t.ok, explain(t)
    sw = single_writer(t)
    assert sw.ok, sw
    assert not sw.skipped, sw
    assert [a.number for a in t.attempts][:K] == list(range(1, K + 1))  # (then restarts)
    assert "refused" in outcome.where or "waited" in outcome.where, outcome.where
    # every attempt talked to the server through the runner's proxy only
    assert all("{postgres}" not in " ".join(a.argv) for a in t.attempts)
    assert len({a.argv[a.argv.index("--store") + 1] for a in t.attempts}) == 1


def test_resumers_without_a_lease_on_postgresql_fail_single_writer_with_a_witness(
    tmp_path: Path, shared: SharedPostgres
) -> None:
    agent = AgentSpec(command=(sys.executable, str(PG_AGENT), "{postgres}"), timeout=60)
    t = race(agent, tmp_path, shared)
    (outcome,) = t.outcomes
    assert outcome.fired, explain(t)
    sw = single_writer(t)
    assert not sw.ok, explain(t)
    assert "executed steps at the same time" in sw.message, sw.message
    text = (Path(t.folder) / "anomalies.txt").read_text()
    assert "\nsingle_writer: attempts " in text, text


@pytest.mark.slow  # ~17 s; fast cover: tests/unit/test_resumer_hosts.py (the wrapper, for real)
def test_resumers_as_on_hosts_of_their_own_keep_one_writer(
    tmp_path: Path, shared: SharedPostgres
) -> None:
    """``hosts: true``: each resumer in a pid and UTS namespace of its own, so the store cannot
    tell whether another's process lives (it only can on its own machine): the lease alone keeps
    one writer, as across hosts. The refusals name the holder by its own host name."""
    from crashpoint._proc import hosts_unavailable

    if hosts_unavailable():
        pytest.skip(str(hosts_unavailable()))
    demo = load_scenario(EXAMPLE).agent
    t = race(demo, tmp_path, shared, k=3, hosts=True)
    (outcome,) = t.outcomes
    assert outcome.fired, explain(t)
    assert "each in a pid and UTS namespace of its own" in outcome.where, outcome.where
    assert t.ok, explain(t)
    assert single_writer(t).ok
    refusals = " ".join(a.stderr.decode() for a in t.attempts[:3])
    assert re.search(r"held by worker crashpoint-resumer-\d:", refusals), refusals


@pytest.mark.slow  # ~25 s a case (four fleet workers, each a CLI and a demo agent)
@pytest.mark.parametrize("hosts", [False, True], ids=["one-host", "hosts"])
def test_fleet_workers_racing_for_one_run_let_one_claim_it(
    tmp_path: Path, shared: SharedPostgres, hosts: bool
) -> None:
    """The example examples/backing/fleet-resumers.scenario.yaml: four ``crashpoint fleet work
    --once`` workers released together; one claims the run and resumes it, the others find
    nothing to claim."""
    from crashpoint._proc import hosts_unavailable

    if hosts and hosts_unavailable():
        pytest.skip(str(hosts_unavailable()))
    sc = load_scenario(FLEET)
    t = race(sc.agent, tmp_path, shared, **({"hosts": True} if hosts else {}))
    (outcome,) = t.outcomes
    assert outcome.fired, explain(t)
    assert re.match(rf"{K} of {K} attempts raced \(refused: attempts ", outcome.where), outcome
    assert "exited 0 without doing anything while attempt" in outcome.where, outcome.where
    assert t.ok, explain(t)
    assert single_writer(t).ok
    started = {int(e["attempt"]) for e in t.events if e["op"] == "step_started"}
    assert len(started) == 1, started  # one worker ran the run's steps
