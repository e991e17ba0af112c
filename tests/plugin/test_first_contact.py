"""The first five minutes with the plugin: the fixture's agent finds a module next to the test,
a golden run that fails is one line with the command as written, and a scenario saved under
the wrong name gets the name it should have. The inner sessions run in-process: the harness
spawns the agents either way, and the agent's PYTHONPATH comes from the session's ini and
environment, the same in both (a pytest subprocess costs ~1.3 s of CPU more)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from crashpoint.harness import AgentSpec
from crashpoint.harness._report import is_plain_path
from crashpoint.pytest_plugin._lookalike import lookalike, suggested_name

pytest_plugins = ["pytester"]

#: An agent on the bare probe: one step, then its output.
AGENT = """\
import json
import sys

from crashpoint import probe

probe.step_started("only")
probe.step_completed("only")
print(json.dumps({"from": __name__, "file": __file__.rsplit("/", 2)[-2]}))
"""


def _test(module: str, *, judge: bool = False) -> str:
    """A test running ``{python} -m module``; it prints the golden run's output, and fails
    with the failing trials if ``judge``."""
    return f"""
import pytest


@pytest.mark.crashpoint(faults=[{{"kill": {{"at": "every-boundary"}}}}])
def test_agent(crash_harness):
    result = crash_harness.run(["{{python}}", "-m", "{module}", "--state", "{{state_dir}}"])
    print("OUTPUT", result.golden.output)
    if {judge}:
        result.assert_ok()
"""


def test_a_module_named_in_the_ini_pythonpath_is_found(inner: Any) -> None:
    """``pythonpath = src`` in the ini file: the agent finds ``src/agentpkg`` as the test
    itself would (and the scenario-file route is untouched: no PYTHONPATH is added there)."""
    inner.pytester.makeini("[pytest]\npythonpath = src\n")
    pkg = inner.path / "src" / "agentpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(AGENT)
    inner.pytester.makepyfile(test_it=_test("agentpkg"))
    result = inner.inprocess("-s")
    result.assert_outcomes(passed=1)
    assert '"from": "__main__", "file": "agentpkg"' in result.stdout.str()


def test_the_agent_still_starts_in_its_own_empty_folder(inner: Any) -> None:
    """Only PYTHONPATH changes: the working folder is still the trial's {workdir}."""
    inner.script("cwd_agent.py", AGENT.replace("print(", "import os\nprint(os.getcwd())\nprint("))
    inner.pytester.makepyfile(test_it=_test("cwd_agent"))
    result = inner.inprocess("-s")
    result.assert_outcomes(passed=1)
    assert re.search(r"OUTPUT b'/\S+/trials/golden/work\\n", result.stdout.str())


def test_a_crashing_golden_run_is_one_line_with_stderrs_last_line(inner: Any) -> None:
    inner.script("crashy.py", "import sys\nprint('starting', file=sys.stderr)\n1 / 0\n")
    inner.pytester.makepyfile(test_it=_test("crashy"))
    result = inner.inprocess()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    (line,) = [x for x in out.splitlines() if x.startswith("crash_harness: ")]
    assert "did not complete: exit 1 (ZeroDivisionError: division by zero)." in line
    assert "Command: {python} -m crashy --state {state_dir};" in line
    assert "fix: " in line
    assert "Traceback" not in out.split("FAILURES")[1]  # no harness traceback (nor the agent's)


def test_an_agent_that_reports_nothing_is_one_line_too(inner: Any) -> None:
    inner.script("silent.py", "print('done')\n")
    inner.pytester.makepyfile(test_it=_test("silent"))
    result = inner.inprocess()
    result.assert_outcomes(failed=1)
    (line,) = [x for x in result.stdout.lines if x.startswith("crash_harness: ")]
    assert "fix: the agent must report steps" in line


def test_the_replay_keeps_the_agents_pythonpath(inner: Any) -> None:
    """A failing trial's recorded agent has the PYTHONPATH (paths are not secrets, and are not
    redacted): a replay from elsewhere finds the module too."""
    inner.pytester.makeini("[pytest]\npythonpath = src\n")
    (inner.path / "src").mkdir()
    inner.script(
        "src/forgetful.py",
        "import uuid\nfrom crashpoint import probe\n"
        "probe.step_started('a')\nprobe.effect('mail', {}, key=uuid.uuid4().hex)\n"
        "probe.step_completed('a')\nprint('ok')\n",
    )
    inner.pytester.makepyfile(test_it=_test("forgetful", judge=True))
    report = inner.path / "report"
    result = inner.inprocess(f"--crashpoint-report={report}")
    result.assert_outcomes(failed=1)
    runner = next(report.rglob("runner.json"))
    env = json.loads(runner.read_text())["agent"]["env"]
    assert env["PYTHONPATH"].split(":")[:2] == [str(inner.path), str(inner.path / "src")]


# -- scenario lookalikes ----------------------------------------------------------------------

SCENARIO = """\
name: x
agent: {command: ["{python}", "-m", "crashpoint.agents.demo", "--state", "{state_dir}"]}
faults:
  - kill: {at: every-boundary}
"""


@pytest.mark.parametrize(
    ("name", "better"),
    [
        ("foo.yml", "foo.scenario.yaml"),
        ("foo.yaml", "foo.scenario.yaml"),
        ("foo.scenario.yml", "foo.scenario.yaml"),
        ("foo-scenario.yaml", "foo.scenario.yaml"),
        ("foo_scenario.YML", "foo.scenario.yaml"),
        ("scenario.yml", "scenario.scenario.yaml"),
    ],
)
def test_suggested_name(name: str, better: str) -> None:
    assert suggested_name(name) == better


def test_lookalike_needs_both_keys_at_the_top(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text(SCENARIO)
    (tmp_path / "b.yml").write_text("agent: x\nsteps:\n  faults: 1\n")
    (tmp_path / "c.scenario.yaml").write_text(SCENARIO)
    (tmp_path / "d.txt").write_text(SCENARIO)
    assert lookalike(tmp_path / "a.yml") == "a.scenario.yaml"
    assert lookalike(tmp_path / "b.yml") is None  # faults: is not top-level
    assert lookalike(tmp_path / "c.scenario.yaml") is None  # collected already
    assert lookalike(tmp_path / "d.txt") is None
    assert lookalike(tmp_path / "missing.yml") is None


def test_a_lookalike_on_the_command_line_is_a_usage_error(inner: Any) -> None:
    inner.script("foo.yml", SCENARIO)
    result = inner.inprocess("foo.yml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: crashpoint: foo.yml looks like a crashpoint scenario*Did you mean "
            "`foo.scenario.yaml`?*"
        ]
    )


def test_a_lookalike_found_in_a_folder_gets_a_note_not_a_warning(inner: Any) -> None:
    inner.pytester.makeini("[pytest]\nfilterwarnings = error\n")
    (inner.path / "sc").mkdir()
    inner.script("sc/x.yml", SCENARIO)
    inner.script("sc/config.yml", "agent: 1\n")  # not a scenario: nothing said
    inner.script("outside.yml", SCENARIO)  # not under the argument: nothing said
    result = inner.inprocess("sc")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    notes = [x for x in result.outlines if x.startswith("crashpoint: note:")]
    assert len(notes) == 1, result.outlines
    assert "sc/x.yml looks like a crashpoint scenario" in notes[0]
    assert "Did you mean `sc/x.scenario.yaml`?" in notes[0]


def test_an_unrelated_yml_keeps_pytests_own_message(inner: Any) -> None:
    inner.script("ci.yml", "on: push\n")
    result = inner.inprocess("ci.yml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "crashpoint" not in result.stderr.str()


# -- the pieces under the fixture -------------------------------------------------------------


def test_agent_describe_shows_the_command_as_written() -> None:
    spec = AgentSpec(("{python}", "-m", "myagent", "--state", "{state_dir}", "a b"))
    assert spec.describe() == "{python} -m myagent --state {state_dir} 'a b'"
    assert AgentSpec(entry="pkg:main", args=("{state_dir}",)).describe() == (
        "entry pkg:main {state_dir}"
    )


def test_a_pythonpath_of_existing_folders_is_a_plain_path(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert is_plain_path("PYTHONPATH", f"{a}:{b}")
    assert not is_plain_path("PYTHONPATH", f"{a}:{tmp_path / 'gone'}")
    assert not is_plain_path("PYTHONPATH", f"{a}:relative")
    assert not is_plain_path("API_TOKEN", str(a))
    assert not is_plain_path("PYTHONPATH", "")
