"""``{scenario_dir}`` end to end: a scenario whose agent script, working folder and
environment live beside the file runs from another folder with no absolute path in it; a
missing agent program is one line at collection, not a traceback."""

from __future__ import annotations

from typing import Any

import pytest

pytest_plugins = ["pytester"]

#: The tiny correct agent of conftest.py, plus checks that it was started as the scenario
#: says: from its own folder's data/ subfolder, with AGENT_HOME = the scenario's folder.
BESIDE_AGENT = """\
import os
import sys

from crashpoint import probe

here = os.path.dirname(os.path.abspath(__file__))
if os.getcwd() != os.path.join(here, "data") or os.environ.get("AGENT_HOME") != here:
    sys.exit(f"started wrong: cwd {os.getcwd()}, AGENT_HOME {os.environ.get('AGENT_HOME')}")
done = os.path.join(sys.argv[1], "done")
if not os.path.exists(done):
    probe.step_started("only")
    with open(done, "w") as f:
        f.write("done")
        f.flush()
        os.fsync(f.fileno())
    probe.step_completed("only")
print("done")
"""

SCENARIO = """\
name: agent beside its scenario
agent:
  command: ["{python}", "{scenario_dir}/beside_agent.py", "{state_dir}"]
  cwd: data
  env: {AGENT_HOME: "{scenario_dir}"}
  timeout: 20s
faults:
  - kill: {at: random, count: 2}
seed: 3
"""


def test_a_script_beside_the_scenario_runs_from_another_folder(inner: Any) -> None:
    gate = inner.path / "gate"
    (gate / "data").mkdir(parents=True)
    (gate / "beside_agent.py").write_text(BESIDE_AGENT)
    (gate / "beside.scenario.yaml").write_text(SCENARIO)
    result = inner.inprocess("gate", "--crashpoint-report", inner.path / "out")
    result.assert_outcomes(passed=1)
    # and it can fail: the same agent started from elsewhere refuses to run
    (gate / "beside.scenario.yaml").write_text(SCENARIO.replace("  cwd: data\n", "  cwd: .\n"))
    result = inner.inprocess("gate", "--crashpoint-report", inner.path / "out2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*started wrong: cwd *gate, AGENT_HOME *gate*"])


def test_a_missing_agent_program_is_one_collection_line(inner: Any) -> None:
    path = inner.scenario(
        "missing", "kill: {at: random, count: 1}", command='["myagnt", "--state", "{state_dir}"]'
    )
    result = inner.inprocess("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*ERROR collecting missing.scenario.yaml*",
            f"crashpoint scenario error: {path}:3 (key 'agent.command'): 'myagnt' not found on "
            "PATH; fix the name, install it, or give its path (e.g. '{scenario_dir}/my-agent')",
        ]
    )
    out = result.stdout.str()
    assert "Traceback" not in out
    assert sum("myagnt" in line for line in out.splitlines()) == 1
