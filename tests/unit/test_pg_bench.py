"""benchmarks/pg_store.py runs end to end against a real PostgreSQL (no timing assertions)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "pg_store.py"


# slow: a benchmark; PostgreSQL's fast cover: test_pg_store.py, test_pg_gate.py
@pytest.mark.slow
def test_pg_bench_runs_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip(
        "psycopg",
        reason="psycopg (PostgreSQL driver) is not installed: pip install 'crashpoint[postgres]'",
    )
    from crashpoint.harness._standins._postgres import unavailable

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--steps", "5", "--repeat", "1", "--json", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        log, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.decode("utf-8", "replace")
    assert proc.returncode == 0, text
    r = json.loads(out.read_text())
    assert "skipped" not in r, r
    assert r["steps"] == 5
    ours = r["systems"]["ours"]
    # ours ran, stored something, resumed once at step N+1 without re-running the N done steps
    assert ours["ok"] is True, ours
    assert ours["step_s"] > 0
    assert ours["resume_s"] > 0
    assert ours["bytes_per_step"] > 0
    peers = {"langgraph": "langgraph.checkpoint.postgres", "dbos": "dbos"}
    for system, module in peers.items():
        v = r["systems"][system]
        try:
            installed = importlib.util.find_spec(module) is not None
        except ImportError:
            installed = False
        if not installed:
            assert "not installed" in v.get("skipped", ""), v
            continue
        assert "skipped" not in v, v  # installed: measured, not skipped or failed
        assert v["ok"] is True, v
        assert v["resume_s"] > 0, v
        assert v["step_s_x_ours"] > 0, v
    assert "| crashpoint `PostgresStore`" in text  # the table was printed
