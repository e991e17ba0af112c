"""One PostgreSQL server per scenario file: campaigns share a :class:`SharedPostgres`.

Two campaigns of a psycopg agent (``tests/agents/pg_steps.py``), a restart and a partition, run
on one shared server: one ``initdb``, not two; each trial still gets a database of its own
(dropped after it) and each campaign a proxy of its own, so the faults fire and the agent passes
as on a server of its own. The server outlives a campaign and stops when its owner closes it.
(tests/plugin/test_shared_postgres.py: a scenario file's items share one.) This is also the
default run's passing side of the retrying agent in tests/crash/test_backing_faults.py (whose
copy of this restart and partition is slow). Skipped with the reason where no server can run
or psycopg is missing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CampaignResult,
    SharedPostgres,
    family_from_spec,
    postgres_unavailable,
)

ROOT = Path(__file__).resolve().parents[2]
PG_AGENT = ROOT / "tests" / "agents" / "pg_steps.py"
OUTPUT = b"fetch: 7\nparse: 14\nrank: 21\nsummarise: 28\npublish: 35\n"


@pytest.fixture(scope="module", autouse=True)
def _postgres() -> None:
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    pytest.importorskip(
        "psycopg", reason="the agent uses psycopg: pip install 'crashpoint[postgres]'"
    )


AGENT = AgentSpec(command=(sys.executable, str(PG_AGENT), "{postgres}", "--retry"), timeout=60)


def outage(do: str) -> dict[str, Any]:
    return {"backing": {"service": "postgres", "do": do, "for": "1s", "count": 1}}


def campaign(
    tmp_path: Path, name: str, do: str, shared: SharedPostgres, **kw: Any
) -> CampaignResult:
    return Campaign(
        AGENT,
        [family_from_spec(outage(do))],
        str(tmp_path / name),
        name=name,
        seed=11,
        restarts=2,
        postgres=shared,
    ).run(**kw)


def databases(shared: SharedPostgres) -> set[str]:
    assert shared.server is not None
    out = shared.server.psql("SELECT datname FROM pg_database")
    return set(out.split()) - {"postgres", "template0", "template1"}


def test_two_campaigns_share_one_server_and_keep_their_trials_apart(tmp_path: Path) -> None:
    with SharedPostgres() as shared:
        first = campaign(tmp_path, "restart", "restart", shared)
        server = shared.server
        assert server is not None  # still up after the first campaign closed its runner
        folder = server.folder
        second = campaign(tmp_path, "partition", "partition", shared, golden=first.golden)
        assert shared.server is server
        assert shared.starts == 1  # one initdb for both
        for r in (first, second):
            (t,) = r.trials
            assert t.exercised, t.landed()
            assert t.status == "passed", [str(c) for c in t.failed] + [t.landed()]
            assert t.attempts[-1].stdout == OUTPUT  # rode the outage out: every step, once
        restart = first.trials[0].landed()
        assert "PostgreSQL restart (immediate shutdown) at attempt 1 event #" in restart
        assert "connection(s) cut" in restart
        partition = second.trials[0].landed()
        assert "PostgreSQL partition (reset) at attempt 1 event #" in partition
        assert databases(shared) == set()  # each trial's database dropped after it
        assert server.running
    assert shared.server is None
    assert not os.path.exists(folder)  # stopped, its folder removed
