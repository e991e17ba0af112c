"""The gate against an agent whose state lives in PostgreSQL, as a user runs it: the demo agent
on a real server (``--store postgresql://...``), killed at every boundary and raced by two
resumers. State outside the trial's folders is named by ``{trial_id}``: fresh for each trial, so
no trial resumes another's run. The URL in the command line has no password: the agent gets it
in ``agent.env`` (``PGPASSWORD``), as a user should pass one (argv is world readable)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import _pgdb
from _forked import forking, warm
from crashpoint.harness import AgentSpec, Campaign, CampaignResult, Zygote, family_from_spec

# one database for the module, emptied before each test (not one created and dropped per test)
pg_module_database, pg_dsn = _pgdb.pg_module_database, _pgdb.pg_dsn


def _demo(pg_server: Any, dsn: str, run_id: str) -> AgentSpec:
    bare = pg_server.dsn(dsn.rsplit("/", 1)[1], password=False)
    return AgentSpec(
        command=(
            "{python}",
            "-m",
            "crashpoint.agents.demo",
            "--state",
            "{state_dir}",
            "--store",
            bare,
            "--run-id",
            run_id,
        ),
        timeout=60,
        env=(("PGPASSWORD", pg_server.password),),
    )


def _warm(spec: AgentSpec) -> AgentSpec:
    """``spec`` in fork mode, its zygote also importing the PostgreSQL store (psycopg: ~0.1 s of
    CPU that each forked attempt would pay again)."""
    return dataclasses.replace(warm(spec), warm=("*", "crashpoint.checkpoint.postgres._store"))


@pytest.fixture(scope="module")
def zygote(pg_server: Any, pg_module_database: str) -> Iterator[Zygote]:
    """One warm zygote for the module's campaigns (the demo agent, its run id aside, is the same
    in both): their attempts fork from it; these tests are about the store's state, not about
    spawning."""
    with forking(_warm(_demo(pg_server, pg_module_database, "{trial_id}"))) as z:
        yield z


def run(
    zygote: Zygote, pg_server: Any, dsn: str, run_id: str, families: list[Any], tmp_path: Path
) -> CampaignResult:
    spec = _warm(_demo(pg_server, dsn, run_id))
    return Campaign(spec, families, str(tmp_path), seed=7, launcher=zygote).run()


def test_the_demo_agent_on_postgresql_passes_kills_and_two_resumers(
    zygote: Zygote, pg_server: Any, pg_dsn: str, tmp_path: Path
) -> None:
    from crashpoint.checkpoint import open_store

    # 2 drawn kills, not the sweep of 16 boundaries (the demo's sweep: test_demo_resume.py; the
    # PostgreSQL store's kills at each point of a run: test_fleet.py); the attempts forked from
    # a warm zygote (this is about the store's state, not spawning)
    families = [
        family_from_spec({"kill": {"at": "random", "count": 2}}),
        family_from_spec({"resumers": {"count": 1}}),
    ]
    result = run(zygote, pg_server, pg_dsn, "{trial_id}", families, tmp_path)
    s = result.summary()
    assert result.ok, s["failures"] or result.unexercised()
    assert s["duplicate_effects"] == 0
    assert s["lost_effects"] == 0
    runs = open_store(pg_dsn).runs()
    # one run per trial and one for the golden run: no trial saw another's state
    assert len(runs) == len(result.trials) + 1
    assert {r.status for r in runs} == {"completed"}


def test_a_run_id_shared_by_every_trial_is_caught(
    zygote: Zygote, pg_server: Any, pg_dsn: str, tmp_path: Path
) -> None:
    """The same campaign naming its run ``{run_id}`` (one id for all trials): every trial finds
    the golden run's finished run and sends nothing, and the gate says the effects were lost
    (a shared outside state is never a silent pass)."""
    families = [family_from_spec({"kill": {"at": "random", "count": 2}})]
    result = run(zygote, pg_server, pg_dsn, "{run_id}", families, tmp_path)
    assert not result.ok
    assert result.summary()["lost_effects"] > 0


@pytest.mark.parametrize("placeholder", ["{trial_id}", "db_{trial_id}"])
def test_trial_id_is_fresh_per_trial_and_safe_as_a_name(placeholder: str) -> None:
    from crashpoint.harness._engine import new_trial_id

    ids = {new_trial_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(i.isalnum() and i[0].isalpha() and i.islower() for i in ids)
    spec = AgentSpec(command=("{python}", "agent.py", placeholder))
    one = spec.argv(state_dir="/s", workdir="/w", run_id="run-1", trial_id="tabc")
    assert one[-1] == placeholder.replace("{trial_id}", "tabc")
