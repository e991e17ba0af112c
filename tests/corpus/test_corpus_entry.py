"""One corpus entry end to end, as CI runs it: benchmarks/corpus.py builds the two
environments of langgraph-3668-retry-restarts from the registry (LangGraph 0.3.2 and 0.3.3,
each from its freeze; cached under ~/.cache/crashpoint/corpus/ after the first run), runs the
gate on both sides, and must find the broken side caught by its expected check and the fixed
side passing. The rest of the corpus is a benchmark (python benchmarks/corpus.py), not a test.

The cheapest entry: no PostgreSQL, four trials a side (about 11 s of gate each). A machine's
first run builds the environments (95 s in all here, pip's download cache warm); later runs
take about 30 s. It stays in the default run: CI runs one entry end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "langgraph-3668-retry-restarts"


def test_the_cheapest_entry_is_caught_on_its_broken_side_and_passes_on_its_fixed_side(
    tmp_path: Path,
) -> None:
    out = tmp_path / "corpus.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "corpus.py"), "--only", ENTRY]
    cmd += ["--force", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COV_", "PYTEST_"))}
    proc = subprocess.Popen(  # its own session: a timeout takes the gate's processes too
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        log, _ = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        raise AssertionError(f"benchmarks/corpus.py took over 900 s:\n{log[-3000:]}") from None
    assert proc.returncode == 0, log[-3000:]
    result = json.loads(out.read_text(encoding="utf-8"))["entries"][ENTRY]
    assert result["outcome"] == "caught", result["reason"]
    assert result["false_alarm"] is False, result["reason"]
    broken, fixed = result["broken"], result["fixed"]
    assert broken["pin"] == "langgraph==0.3.2"
    assert broken["versions"]["langgraph"] == "0.3.2"
    assert broken["verdict"] == "fail"
    assert broken["check"] == "resumes_from_last_completed"
    assert broken["expected"] is True
    assert "re-made a completed call" in broken["message"]
    assert fixed["pin"] == "langgraph==0.3.3"
    assert fixed["verdict"] == "pass"
    assert fixed["checks_fired"] == []
    assert broken["trials"] == fixed["trials"] > 0
    assert f"{ENTRY}: CAUGHT" in log
