"""Through the pytest plugin, a scenario file's items share one PostgreSQL server (one
``initdb`` per file, not one per item), stopped when the file's items are done. Skipped with
the reason where no server can run or psycopg is missing."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from crashpoint.harness import postgres_unavailable

pytest_plugins = ["pytester"]

PG_AGENT = Path(__file__).resolve().parents[2] / "tests" / "agents" / "pg_steps.py"

#: counts the servers the inner session starts, and says at its end whether one is still up
CONFTEST = """\
from crashpoint.harness import SharedPostgres

STARTED = []
LEFT = []
_start, _close = SharedPostgres.start, SharedPostgres.close


def start(self):
    if self.server is None:
        STARTED.append(id(self))
    return _start(self)


def close(self):
    _close(self)
    LEFT.append(self.server)


SharedPostgres.start, SharedPostgres.close = start, close


def pytest_unconfigure(config):
    up = sum(1 for s in LEFT if s)
    print(f"\\nSERVERS-STARTED {len(STARTED)} CLOSED {len(LEFT)} LEFT-UP {up}")
"""


@pytest.mark.slow  # ~35 s (a server, two items); fast cover: tests/crash/test_shared_postgres.py
def test_a_scenario_files_items_share_one_server(inner: Any) -> None:
    if postgres_unavailable():
        pytest.skip(str(postgres_unavailable()))
    pytest.importorskip(
        "psycopg", reason="the agent uses psycopg: pip install 'crashpoint[postgres]'"
    )
    inner.pytester.makeconftest(CONFTEST)
    inner.scenario(
        "pg",
        """\
        backing: {service: postgres, do: restart, for: 1s, count: 1}
        backing: {service: postgres, do: partition, for: 1s, count: 1}
        """,
        command=f'["{sys.executable}", "{PG_AGENT}", "{{postgres}}", "--retry"]',
        extra=textwrap.dedent(
            """\
            restarts: 2
            seed: 11
            """
        ),
    )
    result = inner.subprocess("-s", "pg.scenario.yaml", timeout=300)
    result.assert_outcomes(passed=2)
    # one server for the file's two items, closed (once) with the file, none left running
    result.stdout.fnmatch_lines(["*SERVERS-STARTED 1 CLOSED 1 LEFT-UP 0*"])
