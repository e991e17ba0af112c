"""Every scenario value is checked when the file is loaded: a bad one is a ScenarioError that
names the file, the line and the key, says what is wrong and the bound or the known names.
Bounds of the file itself (size, nesting, aliases), placeholders, and first contact (the
agent's program, script or module must exist) too. The shipped scenarios all still load."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from crashpoint.errors import FaultSpecError
from crashpoint.harness import AgentSpec, family_from_spec
from crashpoint.harness._spec._scenario import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    ScenarioError,
    load_scenario,
)

SHIPPED = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.scenario.yaml"))

#: A valid scenario; each case swaps one piece. Line numbers: name 1, agent 2, command 3,
#: timeout 4, faults 5, first fault 6.
BASE = """\
name: x
agent:
  command: ["{python}", "-c", "pass"]
  timeout: 5s
faults:
  - FAULT
"""


def write(tmp_path: Path, text: str, name: str = "case.scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refused(path: Path) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert "\n" not in message, message  # one line
    return info.value


# -- fault options -------------------------------------------------------------------------------

FAULT_CASES = [
    # (fault item, key, line, what the message says)
    ("kill: {at: random, count: 0}", "faults[0].kill.count", 6, "0 runs no trial"),
    ("kill: {at: random, count: 1000000000}", "faults[0].kill.count", 6, "above the cap of 100000"),
    ("kill: {at: random, count: lots}", "faults[0].kill.count", 6, "must be a whole number"),
    ("kill: {at: random, count: true}", "faults[0].kill.count", 6, "must be a whole number"),
    ("kill: {at: fileop, max: -3}", "faults[0].kill.max", 6, "must be at least 1, got -3"),
    ("kill: {at: fileop, max: lots}", "faults[0].kill.max", 6, "must be a whole number"),
    ("kill: {at: random, max: 5}", "faults[0].kill.max", 6, "goes with at: fileop"),
    (
        "kill: {at: failpoint, names: [journal.after_sync, journal.nope]}",
        "faults[0].kill.names",
        6,
        "unknown failpoint(s) 'journal.nope'; known: journal.write",
    ),
    ("kill: {at: failpoint, names: []}", "faults[0].kill.names", 6, "non-empty list"),
    (
        "kill: {at: random, names: [journal.write]}",
        "faults[0].kill.names",
        6,
        "goes with at: failpoint",
    ),
    ("kill: {at: sometimes}", "faults[0].kill.at", 6, "must be one of every-boundary"),
    ("kill: {at: [random]}", "faults[0].kill.at", 6, "must be one of"),
    ("kill: {at: random, when: 3}", "faults[0].kill.when", 6, "unknown option(s) when"),
    ("[]", "faults[0]", 6, "an empty chain"),
    (
        "[kill: {at: random, count: 2}, kill: {at: time}]",
        "faults[0][0].kill.count",
        6,
        "put count on the last fault of a chain",
    ),
    ("[kill: {at: random}, kill: {at: nope}]", "faults[0][1].kill.at", 6, "must be one of"),
    ("kill", "faults[0]", 6, "write 'kill:' with a colon"),
    ("signal: {sig: TERM, grace: 1h}", "faults[0].signal.grace", 6, "above the cap of 600s"),
    ("signal: {sig: TERM, grace: -1}", "faults[0].signal.grace", 6, "zero or more"),
    ("signal: {sig: TERM, grace: '3'}", "faults[0].signal.grace", 6, "has no unit"),
    ("signal: {sig: STOP, pause: 2h}", "faults[0].signal.pause", 6, "above the cap"),
    ("signal: {sig: TERM, pause: 1}", "faults[0].signal.pause", 6, "goes with sig: STOP"),
    ("signal: {sig: KILL}", "faults[0].signal.sig", 6, "must be TERM or STOP"),
    ("kill: {at: random, within: 1s}", "faults[0].kill.within", 6, "goes with at: time"),
    ("kill: {at: time, within: -3s}", "faults[0].kill.within", 6, "negative"),
    ("kill: {at: time, within: 0s}", "faults[0].kill.within", 6, "more than 0"),
    ("kill: {at: time, within: 2h}", "faults[0].kill.within", 6, "at most 3600s"),
    ("signal: {within: forever}", "faults[0].signal.within", 6, "is not a duration"),
    ("disk_full: {capacity: 0}", "faults[0].disk_full.capacity", 6, "more than 0"),
    ("disk_full: {capacity: 2GiB}", "faults[0].disk_full.capacity", 6, "at most 1 GiB"),
    ("disk_full: {capacity: lots}", "faults[0].disk_full.capacity", 6, "is not a size"),
    ("disk_full: {capacity: -5}", "faults[0].disk_full.capacity", 6, "negative"),
    ("disk_full: {mechanism: [tmpfs]}", "faults[0].disk_full.mechanism", 6, "must be one of"),
    ("disk_full: {nth: 0}", "faults[0].disk_full.nth", 6, "at least 1"),
    ("corrupt: {how: []}", "faults[0].corrupt.how", 6, "non-empty list"),
    ("corrupt: {how: 3}", "faults[0].corrupt.how", 6, "must be a corruption"),
    ("corrupt: {how: [shred]}", "faults[0].corrupt.how", 6, "unknown how ['shred']"),
    ("resumers: {count: 0}", "faults[0].resumers.count", 6, "at least 1"),
    ("resumers: {processes: 1}", "faults[0].resumers.processes", 6, "must be at least 2, got 1"),
    ("resumers: {processes: 33}", "faults[0].resumers.processes", 6, "above the cap of 32"),
    ("resumers: {processes: all}", "faults[0].resumers.processes", 6, "whole number from 2"),
    ("hang: {count: -1}", "faults[0].hang.count", 6, "at least 1"),
]


@pytest.mark.parametrize(
    ("fault", "key", "line", "says"), FAULT_CASES, ids=[c[0] for c in FAULT_CASES]
)
def test_a_bad_fault_option_is_refused_at_its_line(
    tmp_path: Path, fault: str, key: str, line: int, says: str
) -> None:
    path = write(tmp_path, BASE.replace("FAULT", fault))
    err = refused(path)
    assert (err.line, err.key) == (line, key), str(err)
    assert f"{path}:{line} (key '{key}'):" in str(err)
    assert says in err.message


def test_k_resumers_need_restarts_for_the_group_and_one_attempt_after_it(
    tmp_path: Path,
) -> None:
    fault = "resumers: {processes: 8}"
    err = refused(write(tmp_path, BASE.replace("FAULT", fault) + "restarts: 3\n"))
    assert (err.line, err.key) == (7, "restarts"), str(err)
    assert "the 8 attempts started at once count as 8" in err.message
    assert err.message.endswith("raise restarts to 8 or more")
    chain = "[kill: {at: random}, resumers: {processes: 3}]"
    err = refused(write(tmp_path, BASE.replace("FAULT", chain) + "restarts: 3\n"))
    assert "(after 1 before them in the chain)" in err.message, err.message
    assert load_scenario(write(tmp_path, BASE.replace("FAULT", fault) + "restarts: 8\n"))
    assert load_scenario(write(tmp_path, BASE.replace("FAULT", "resumers: {}") + "restarts: 0\n"))


def test_a_bad_option_on_its_own_line_is_pointed_at(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        BASE.replace("- FAULT", "- kill:\n      at: fileop\n      count: 2\n      max: lots"),
    )
    err = refused(path)
    assert (err.line, err.key) == (9, "faults[0].kill.max")


# -- corrupt.path: the trial's own folders only --------------------------------------------------

BAD_PATHS = [
    ("/etc/**", "must start with {state_dir} or {workdir}"),
    ("{state_dir}/../../**", "climbs out with '..'"),
    ("{state_dir}/a/../../../x", "climbs out with '..'"),
    ("{workdir}/..", "climbs out with '..'"),
    ("{state_dir}x/**", "names a sibling of {state_dir}"),
    ("{state_dir}../**", "names a sibling"),
    ("**", "must start with"),
    ("../**", "must start with"),
    ("~/x", "must start with"),
    ("x/{state_dir}/**", "must start with"),
    ("{state_dir}/{workdir}", "name no other placeholder"),
    ("{python}/**", "unknown placeholder {python}"),
    ("{state_dir:>99999999}/**", "is not a placeholder"),
    ("{state_dir!r}/**", "is not a placeholder"),
    ("{state_dir.x}/**", "is not a placeholder"),
    ("{state_dir}/{", "unbalanced braces"),
]


@pytest.mark.parametrize(("pattern", "says"), BAD_PATHS, ids=[p for p, _ in BAD_PATHS])
def test_a_corrupt_path_outside_the_trial_is_refused_at_collection(
    tmp_path: Path, pattern: str, says: str
) -> None:
    path = write(tmp_path, BASE.replace("FAULT", f"corrupt: {{path: '{pattern}'}}"))
    err = refused(path)
    assert (err.line, err.key) == (6, "faults[0].corrupt.path"), str(err)
    assert says in err.message
    with pytest.raises(FaultSpecError, match=r"corrupt\.path"):  # the Python API too
        family_from_spec({"corrupt": {"path": pattern}})


@pytest.mark.parametrize(
    "pattern",
    [
        "{state_dir}/**",
        "{state_dir}",
        "{workdir}/cache/*.json",
        "{state_dir}/./seg-*.log",
        "{state_dir}/{{odd}}/x",
    ],
)
def test_a_corrupt_path_inside_the_trial_loads(tmp_path: Path, pattern: str) -> None:
    path = write(tmp_path, BASE.replace("FAULT", f"corrupt: {{path: '{pattern}'}}"))
    assert load_scenario(path).families[0].family.chain[0][1]


# -- top-level, agent and expect values -----------------------------------------------------------

AGENT_CASES = [
    # (replace what, by what, key, line, says)
    ("  timeout: 5s", "  timeout: 0", "agent.timeout", 4, "more than 0"),
    ("  timeout: 5s", "  timeout: 2d", "agent.timeout", 4, "at most 24h"),
    ("  timeout: 5s", "  timeout: -1", "agent.timeout", 4, "zero or more"),
    ("  timeout: 5s", "  timeout: '30'", "agent.timeout", 4, "has no unit"),
    ('"-c", "pass"]', '"-c", "pass\\0"]', "agent.command", 3, "NUL byte"),
    ('"-c", "pass"]', '"-c", true]', "agent.command", 3, "must be a string"),
    ('["{python}", "-c", "pass"]', '["", "x"]', "agent.command", 3, "is empty"),
    (
        '"{python}"',
        '"{python:2000000000}"',
        "agent.command",
        3,
        "{python:2000000000} in '{python:2000000000}' is not a placeholder",
    ),
    ('"{python}"', '"{python!r}"', "agent.command", 3, "is not a placeholder"),
    ('"{python}"', '"{python.__class__}"', "agent.command", 3, "is not a placeholder"),
    ('"{python}"', '"{python[0]}"', "agent.command", 3, "is not a placeholder"),
    ('"{python}"', '"{}"', "agent.command", 3, "is not a placeholder"),
    ('"-c", "pass"]', '"-c", "pass", "}"]', "agent.command", 3, "unbalanced braces"),
    ("  timeout: 5s", '  timeout: 5s\n  env: {A: "x\\0y"}', "agent.env", 5, "NUL byte"),
    (
        "  timeout: 5s",
        '  timeout: 5s\n  env: {"A\\0": x}',
        "agent.env",
        5,
        "is not a variable name",
    ),
    ("  timeout: 5s", "  timeout: 5s\n  env: {1BAD: x}", "agent.env", 5, "is not a variable name"),
    ("  timeout: 5s", "  timeout: 5s\n  env: {A-B: x}", "agent.env", 5, "is not a variable name"),
    ("  timeout: 5s", "  timeout: 5s\n  env: {A: [1]}", "agent.env", 5, "must be a string"),
    ("  timeout: 5s", "  timeout: 5s\n  env: {DEBUG: yes}", "agent.env", 5, "quote it"),
    ("  timeout: 5s", "  timeout: 5s\n  env: {A: null}", "agent.env", 5, "must be a string"),
    ("  timeout: 5s", "  timeout: 5s\n  env: [A]", "agent.env", 5, "must be a mapping"),
    ("  timeout: 5s", "  timeout: 5s\n  cwd: no/such/folder", "agent.cwd", 5, "does not exist"),
    ("  timeout: 5s", '  timeout: 5s\n  cwd: "a\\0b"', "agent.cwd", 5, "NUL byte"),
    (
        "  timeout: 5s",
        '  timeout: 5s\n  cwd: "{state_dir}"',
        "agent.cwd",
        5,
        "unknown placeholder {state_dir}",
    ),
    (
        'command: ["{python}", "-c", "pass"]',
        'entry: "mod:func"\n  args: ["a\\0"]',
        "agent.args",
        4,
        "NUL byte",
    ),
    (
        'command: ["{python}", "-c", "pass"]',
        'entry: "mod:func"\n  args: ["{python:9}"]',
        "agent.args",
        4,
        "is not a placeholder",
    ),
    (
        'command: ["{python}", "-c", "pass"]',
        'entry: "mod:func-x"',
        "agent.entry",
        3,
        "dotted Python names",
    ),
    ("faults:", "restarts: -1\nfaults:", "restarts", 5, "from 0 to 100"),
    ("faults:", "restarts: 1000\nfaults:", "restarts", 5, "from 0 to 100"),
    ("faults:", "trials: 0\nfaults:", "trials", 5, "from 1 to 100000"),
    ("faults:", "trials: 1000000\nfaults:", "trials", 5, "from 1 to 100000"),
    ("faults:", "seed: -1\nfaults:", "seed", 5, "from 0 to"),
    ("faults:", "seed: 18446744073709551616\nfaults:", "seed", 5, "from 0 to"),
    ("faults:", "seed: x\nfaults:", "seed", 5, "must be a whole number"),
    (
        "faults:",
        "expect: {max_state_bytes: 0}\nfaults:",
        "expect.max_state_bytes",
        5,
        "more than 0",
    ),
    (
        "faults:",
        "expect: {max_state_bytes: 2TiB}\nfaults:",
        "expect.max_state_bytes",
        5,
        "at most 1 TiB",
    ),
    (
        "faults:",
        "expect: {max_state_bytes: lots}\nfaults:",
        "expect.max_state_bytes",
        5,
        "is not a size",
    ),
    (
        "faults:",
        "expect: {fail_stop_codes: [true]}\nfaults:",
        "expect.fail_stop_codes",
        5,
        "exit codes 1-255",
    ),
    (
        "faults:",
        "expect: {refuse_codes: [0]}\nfaults:",
        "expect.refuse_codes",
        5,
        "exit codes 1-255",
    ),
    (
        "faults:",
        "expect: {refuse_patterns: ['(unclosed']}\nfaults:",
        "expect.refuse_patterns",
        5,
        "is not a valid regular expression",
    ),
    (
        "faults:",
        "expect: {refuse_patterns: corrupt}\nfaults:",
        "expect.refuse_patterns",
        5,
        "must be a list of regular expressions",
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "key", "line", "says"), AGENT_CASES, ids=[f"{c[2]}:{c[1]}" for c in AGENT_CASES]
)
def test_a_bad_value_is_refused_naming_key_and_line(
    tmp_path: Path, old: str, new: str, key: str, line: int, says: str
) -> None:
    text = BASE.replace("FAULT", "kill: {at: random, count: 1}")
    assert old in text
    path = write(tmp_path, text.replace(old, new, 1))
    err = refused(path)
    assert (err.line, err.key) == (line, key), str(err)
    assert f"{path}:{line} (key '{key}'):" in str(err)
    assert says in err.message


def test_the_good_base_loads(tmp_path: Path) -> None:
    """The cases above differ from this file in one value each."""
    path = write(
        tmp_path,
        BASE.replace("FAULT", "kill: {at: random, count: 1}")
        + "restarts: 100\ntrials: 100000\nseed: 9223372036854775807\n",
    )
    sc = load_scenario(path)
    assert (sc.restarts, sc.trials, sc.seed) == (100, 100000, 2**63 - 1)
    assert sc.agent.scenario_dir == str(tmp_path)


# -- bounds of the file itself -----------------------------------------------------------------


@pytest.mark.parametrize("nesting", ["flow", "block"])
def test_yaml_nested_thousands_deep_is_a_scenario_error(tmp_path: Path, nesting: str) -> None:
    if nesting == "flow":
        deep = "[" * 5000 + "]" * 5000
        body = BASE.replace("FAULT", "kill: {at: random}") + f"description: {deep}\n"
    else:
        body = (
            BASE.replace("FAULT", "kill: {at: random}")
            + "description:\n"
            + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(1000))
            + " " * 1001
            + "x\n"
        )
    err = refused(write(tmp_path, body))
    assert f"nested more than {MAX_DEPTH} levels deep" in err.message
    assert err.line is not None
    assert err.line >= 7


def test_a_file_above_the_size_limit_is_refused_naming_the_limit(tmp_path: Path) -> None:
    body = (
        BASE.replace("FAULT", "kill: {at: random}") + "description: " + "x" * MAX_FILE_BYTES + "\n"
    )
    err = refused(write(tmp_path, body))
    assert "larger than 1 MiB, the limit for a scenario file" in err.message


def test_aliases_that_expand_without_bound_are_refused(tmp_path: Path) -> None:
    laughs = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        laughs.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    body = (
        BASE.replace("FAULT", "kill: {at: random}") + "description:\n  " + "\n".join(laughs) + "\n"
    )
    err = refused(write(tmp_path, body))
    assert "aliases expand to more than" in err.message


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    body = BASE.replace("FAULT", "kill: {at: random}") + "description: &d [x, *d]\n"
    err = refused(write(tmp_path, body))
    assert "alias" in err.message


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    body = BASE.replace("FAULT", "kill: &k {at: random, count: 1}\n  - kill: *k")
    assert len(load_scenario(write(tmp_path, body)).families) == 2


# -- first contact: the agent exists ------------------------------------------------------------


def agent_file(tmp_path: Path, command: str, extra: str = "") -> Path:
    return write(
        tmp_path,
        f"name: x\nagent:\n  command: {command}\n{extra}faults:\n  - kill: {{at: random}}\n",
    )


def test_a_missing_program_is_one_line_naming_it_and_the_line(tmp_path: Path) -> None:
    err = refused(agent_file(tmp_path, '["myagnt", "--state", "{state_dir}"]'))
    assert (err.line, err.key) == (3, "agent.command")
    assert err.message.startswith("'myagnt' not found on PATH; fix the name")


def test_a_program_is_looked_up_on_the_agents_path(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    prog = tmp_path / "bin" / "myagnt"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o755)
    path = agent_file(tmp_path, '["myagnt"]', '  env: {PATH: "{scenario_dir}/bin"}\n')
    assert load_scenario(path).agent.env == (("PATH", f"{tmp_path}/bin"),)


def test_a_program_path_must_exist_and_be_executable(tmp_path: Path) -> None:
    err = refused(agent_file(tmp_path, '["{scenario_dir}/run.sh"]'))
    assert err.message.startswith(f"the program {tmp_path}/run.sh does not exist")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "run.sh").chmod(0o644)  # no x bit: not even root may run it
    err = refused(agent_file(tmp_path, '["{scenario_dir}/run.sh"]'))
    assert err.message.startswith(f"the program {tmp_path}/run.sh is not executable")
    (tmp_path / "run.sh").chmod(0o755)
    assert load_scenario(agent_file(tmp_path, '["{scenario_dir}/run.sh"]'))


def test_a_relative_program_or_script_without_cwd_says_where_it_would_run(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("print('done')\n")
    err = refused(agent_file(tmp_path, '["{python}", "agent.py", "{state_dir}"]'))
    assert err.key == "agent.command"
    assert "starts in the trial's empty {workdir}" in err.message
    assert "write '{scenario_dir}/agent.py'" in err.message
    err = refused(agent_file(tmp_path, '["./agent.sh"]'))
    assert "the program './agent.sh' is relative" in err.message


def test_a_missing_python_script_is_one_line(tmp_path: Path) -> None:
    err = refused(agent_file(tmp_path, '["{python}", "-u", "{scenario_dir}/agnt.py"]'))
    assert (err.line, err.key) == (3, "agent.command")
    assert err.message.startswith(f"the script {tmp_path}/agnt.py does not exist")
    err = refused(agent_file(tmp_path, '["{python}", "agnt.py"]', "  cwd: .\n"))
    assert err.message == f"the script 'agnt.py' not found in the agent's working folder {tmp_path}"


def test_scripts_beside_the_scenario_load(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("print('done')\n")
    for command, extra in [
        ('["{python}", "{scenario_dir}/agent.py", "{state_dir}"]', ""),
        ('["{python}", "-X", "dev", "agent.py"]', "  cwd: .\n"),
        ('["{python}", "agent.py"]', '  cwd: "{scenario_dir}"\n'),
        ('["{python}", "{state_dir}/made-by-setup.py"]', ""),
        ('["{python}", "-c", "print(1)"]', ""),
    ]:
        assert load_scenario(agent_file(tmp_path, command, extra))


def test_a_missing_module_is_one_line(tmp_path: Path) -> None:
    err = refused(agent_file(tmp_path, '["{python}", "-m", "no_such_agent_mod.main"]'))
    assert err.message.startswith("module 'no_such_agent_mod.main' (after -m) not found")
    path = write(
        tmp_path,
        'name: x\nagent:\n  entry: "no_such_agent_mod:main"\nfaults:\n  - kill: {at: random}\n',
    )
    err = refused(path)
    assert (err.line, err.key) == (3, "agent.entry")
    assert err.message.startswith("module 'no_such_agent_mod' not found")


def test_an_entry_module_beside_the_scenario_is_found_through_cwd(tmp_path: Path) -> None:
    (tmp_path / "cp_beside_agent.py").write_text("def main(args):\n    return 0\n")
    body = (
        'name: x\nagent:\n  entry: "cp_beside_agent:main"\n  cwd: "{scenario_dir}"\n'
        "faults:\n  - kill: {at: random}\n"
    )
    assert "cp_beside_agent" not in sys.modules
    assert load_scenario(write(tmp_path, body)).agent.cwd == str(tmp_path)
    assert "cp_beside_agent" not in sys.modules  # found, not imported
    refused(write(tmp_path, body.replace('  cwd: "{scenario_dir}"\n', "")))


def test_structure_errors_come_before_first_contact(tmp_path: Path) -> None:
    """A file with a typo and a missing program reports the typo (what the author fixes
    first); the existing test suite's files with `command: [a]` rely on it."""
    err = refused(
        write(tmp_path, "name: x\nagent:\n  command: [a]\nfaults:\n  - kill: {at: sometimes}\n")
    )
    assert err.key == "faults[0].kill.at"


# -- {scenario_dir} in AgentSpec -----------------------------------------------------------------


def test_agentspec_fills_scenario_dir_and_round_trips(tmp_path: Path) -> None:
    spec = AgentSpec(
        ("{python}", "{scenario_dir}/a.py", "{state_dir}"), timeout=3, scenario_dir=str(tmp_path)
    )
    assert spec.argv(state_dir="/s", workdir="/w", run_id="r") == [
        sys.executable,
        f"{tmp_path}/a.py",
        "/s",
    ]
    assert AgentSpec.from_json(spec.to_json()) == spec
    entry = AgentSpec(entry="m:f", args=("{scenario_dir}", "{{x}}"), scenario_dir="/d")
    assert entry.argv(state_dir="/s", workdir="/w", run_id="r")[-2:] == ["/d", "{x}"]
    assert AgentSpec.from_json(entry.to_json()) == entry
    old = {k: v for k, v in spec.to_json().items() if k != "scenario_dir"}
    assert AgentSpec.from_json({**old, "command": ["x"]}).scenario_dir == ""  # old runner.json


@pytest.mark.parametrize(
    "part", ["{python:2000000000}", "{scenario_dir}/a.py", "{nope}", "{python!s}", "{"]
)
def test_agentspec_refuses_bad_placeholders_when_built(part: str) -> None:
    with pytest.raises(ValueError, match=r"placeholder|scenario_dir|braces"):
        AgentSpec(("{python}", part))


# -- the shipped gate ------------------------------------------------------------------------


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_scenario_loads(path: Path) -> None:
    sc = load_scenario(path)
    assert sc.families
    assert sc.agent.scenario_dir == str(path.parent)


def test_scenarios_readme_example_loads(tmp_path: Path) -> None:
    """The format example of scenarios/README.md, with its cwd made to exist."""
    readme = (SHIPPED[0].parent / "README.md").read_text()
    block = readme.split("## The format", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    (tmp_path / "data").mkdir()
    sc = load_scenario(write(tmp_path, textwrap.dedent(block)))
    assert sc.agent.cwd == str(tmp_path / "data")
