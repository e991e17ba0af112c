"""Every ``--crashpoint-*`` option: good values reach the harness, bad ones are usage errors
that say where the value came from, and CLI > environment > ini > marker > default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]

#: An inner test that builds (does not run) a campaign through the crash_harness fixture and
#: writes what the harness received. Its golden run is made up: three boundaries, no agent.
DUMP_TEST = """
import json
from collections import Counter

import pytest
from crashpoint.harness import Golden

GOLDEN = Golden(["a", "b"], [{{"op": "step_started", "step": "a"}},
                             {{"op": "step_completed", "step": "a"}},
                             {{"op": "step_started", "step": "b"}}], Counter(), b"", 0.1)

{marker}
def test_dump(crash_harness):
    c = crash_harness.campaign(["agent"], faults={faults!r})
    plans = c.selected(c.plans(GOLDEN))
    with open("settings.json", "w") as f:
        json.dump({{"seed": c.seed, "trials": c.trials, "mode": c.mode,
                   "shard": list(c.shard) if c.shard else None, "report_dir": c.report_dir,
                   "progress": crash_harness.progress is not None,
                   "restarts": c.restarts, "families": [x.name for x in c.families],
                   "plans": [p.index for p in plans]}}, f)
"""

RANDOM_KILL = [{"kill": {"at": "random"}}]


def dump(inner: Any, *args: Any, marker: str = "", faults: Any = RANDOM_KILL) -> dict[str, Any]:
    """Run the dumping test with ``args``; return what the harness received."""
    inner.pytester.makepyfile(test_dump=DUMP_TEST.format(marker=marker, faults=faults))
    result = inner.inprocess(*args)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    settings: dict[str, Any] = json.loads((inner.path / "settings.json").read_text())
    return settings


# -- good values, from each source, and precedence ----------------------------------------------

# Three distinct valid values per option: A in the ini file, B in the environment, C on the
# command line. Each run adds one source; the newest source must win for every option at once.
VALUES = {
    #         ini (A)   env (B)        cli (C)
    "seed": ("101", "202", "303"),
    "trials": ("4", "5", "6"),
    "mode": ("random", "systematic", "random"),
    "shard": ("1/2", "2/3", "3/3"),
    "progress": ("true", "false", "<a flag>"),
}


def _ini(inner: Any, report: Path) -> None:
    lines = [f"crashpoint_{k} = {v[0]}" for k, v in VALUES.items()]
    inner.pytester.makeini("[pytest]\n" + "\n".join(lines) + f"\ncrashpoint_report = {report}\n")


def _env(monkeypatch: pytest.MonkeyPatch, report: Path) -> None:
    for k, v in VALUES.items():
        monkeypatch.setenv(f"CRASHPOINT_{k.upper()}", v[1])
    monkeypatch.setenv("CRASHPOINT_REPORT", str(report))


def _cli(report: Path) -> list[str]:
    args = [f"--crashpoint-{k}={v[2]}" for k, v in VALUES.items() if k != "progress"]
    return [*args, "--crashpoint-progress", f"--crashpoint-report={report}"]


def test_ini_values_reach_the_harness(inner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _ini(inner, inner.path / "rep-ini")
    monkeypatch.setenv("CRASHPOINT_SEED", "")  # empty: as if unset
    got = dump(inner)
    assert got["seed"] == 101
    assert got["trials"] == 4
    assert got["mode"] == "random"
    assert got["shard"] == [1, 2]
    assert got["progress"] is True
    assert got["report_dir"].startswith(str(inner.path / "rep-ini"))
    assert got["plans"] == [0, 2]  # 4 random trials; shard 1 of 2 keeps the even indexes


def test_environment_beats_ini(inner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _ini(inner, inner.path / "rep-ini")
    _env(monkeypatch, inner.path / "rep-env")
    got = dump(inner)
    assert got["seed"] == 202
    assert got["trials"] == 5
    assert got["mode"] == "systematic"
    assert got["shard"] == [2, 3]
    assert got["progress"] is False
    assert got["report_dir"].startswith(str(inner.path / "rep-env"))
    # systematic: the kill family covers each of the 3 boundaries; shard 2/3 keeps index 1
    assert got["plans"] == [1]


def test_command_line_beats_environment_and_ini(
    inner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ini(inner, inner.path / "rep-ini")
    _env(monkeypatch, inner.path / "rep-env")
    got = dump(inner, *_cli(inner.path / "rep-cli"))
    assert got["seed"] == 303
    assert got["trials"] == 6
    assert got["mode"] == "random"
    assert got["shard"] == [3, 3]
    assert got["progress"] is True
    assert got["report_dir"].startswith(str(inner.path / "rep-cli"))
    assert got["plans"] == [2, 5]


def test_defaults_without_any_option(inner: Any) -> None:
    got = dump(inner)
    assert got["seed"] == 0
    assert got["trials"] == 20  # the harness's default for random families
    assert got["mode"] is None
    assert got["shard"] is None
    assert got["progress"] is False
    assert got["restarts"] == 3
    assert "rep-" not in got["report_dir"]  # under the test's tmp_path
    assert got["plans"] == list(range(20))


def test_marker_is_the_lowest_source(inner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = "@pytest.mark.crashpoint(seed=7, trials=3)"
    got = dump(inner, marker=marker)
    assert (got["seed"], got["trials"]) == (7, 3)
    inner.pytester.makeini("[pytest]\ncrashpoint_seed = 8\ncrashpoint_trials = 2\n")
    got = dump(inner, marker=marker)
    assert (got["seed"], got["trials"]) == (8, 2)
    monkeypatch.setenv("CRASHPOINT_SEED", "9")
    got = dump(inner, marker=marker)
    assert (got["seed"], got["trials"]) == (9, 2)
    got = dump(inner, "--crashpoint-seed=10", "--crashpoint-trials=1", marker=marker)
    assert (got["seed"], got["trials"]) == (10, 1)


def test_only_the_source_in_use_is_read(inner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad ini or environment value under a good command-line value is not an error."""
    inner.pytester.makeini("[pytest]\ncrashpoint_seed = abc\n")
    monkeypatch.setenv("CRASHPOINT_SEED", "also-bad")
    assert dump(inner, "--crashpoint-seed=5")["seed"] == 5


def test_report_header_shows_seed_and_plan(inner: Any) -> None:
    inner.pytester.makepyfile("def test_nothing():\n    pass\n")
    report = inner.path / "rep"
    result = inner.inprocess(
        "--crashpoint-seed=42",
        "--crashpoint-trials=5",
        "--crashpoint-mode=random",
        "--crashpoint-shard=2/4",
        f"--crashpoint-report={report}",
    )
    result.stdout.fnmatch_lines(
        [f"crashpoint: seed=42 trials=5 mode=random shard=2/4 report={report}"]
    )
    result.assert_outcomes(passed=1)


def test_report_header_defaults_when_a_scenario_file_is_named(inner: Any) -> None:
    path = inner.scenario("header", "kill: {at: every-boundary}")
    result = inner.inprocess("--collect-only", path)
    result.stdout.fnmatch_lines(
        [
            "crashpoint: seed=per test (default 0) trials=per test "
            "mode=as declared shard=all report=tmp_path (fixtures), "
            "./crashpoint-report (scenarios)"
        ]
    )


def test_a_session_that_does_not_use_crashpoint_gets_no_header(inner: Any) -> None:
    inner.pytester.makepyfile("def test_nothing():\n    pass\n")
    result = inner.inprocess()
    result.assert_outcomes(passed=1)
    assert "crashpoint:" not in result.stdout.str()


def test_options_are_in_help_with_their_twins(inner: Any) -> None:
    result = inner.inprocess("--help")
    result.stdout.fnmatch_lines(["crash-recovery testing (crashpoint):"])
    out = result.stdout.str()
    for name in ("seed", "trials", "mode", "report", "shard", "progress"):
        assert f"--crashpoint-{name}" in out
        assert f"crashpoint_{name} " in out  # the ini twin, listed under [pytest] ini-options
        assert f"CRASHPOINT_{name.upper()}" in out


# -- bad values: a usage error naming the option and where it came from -----------------------

BAD = {
    "seed": ("abc", "expected a whole number"),
    "trials": ("-1", "expected a number >= 0"),
    "mode": ("chaos", "expected one of: systematic, random"),
    "shard": ("3/2", "expected I/N with 1 <= I <= N, e.g. 1/4"),
    "progress": ("maybe", "expected true or false"),
    "report": ("<an existing file>", "it is an existing file; expected a folder path"),
}


def _bad(inner: Any, name: str) -> tuple[str, str]:
    raw, why = BAD[name]
    if name == "report":  # an existing file cannot be the report folder
        f = inner.path / "not-a-folder.txt"
        f.write_text("x")
        raw = str(f)
    return raw, why


def _assert_usage_error(result: pytest.RunResult, line: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([line])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("name", [n for n in BAD if n != "progress"])
def test_bad_value_on_command_line(inner: Any, name: str) -> None:
    raw, why = _bad(inner, name)
    result = inner.inprocess(f"--crashpoint-{name}={raw}")
    _assert_usage_error(
        result,
        f"ERROR: crashpoint: bad value '{raw}' for --crashpoint-{name} (command line): {why}",
    )


def test_empty_report_on_command_line(inner: Any) -> None:
    result = inner.inprocess("--crashpoint-report=")
    _assert_usage_error(
        result,
        "ERROR: crashpoint: bad value '' for --crashpoint-report "
        "(command line): expected a folder path",
    )


def test_progress_on_command_line_is_a_flag(inner: Any) -> None:
    result = inner.inprocess("--crashpoint-progress=maybe")
    _assert_usage_error(
        result, "*argument --crashpoint-progress: ignored explicit argument 'maybe'"
    )


@pytest.mark.parametrize("name", list(BAD))
def test_bad_value_in_environment(inner: Any, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    raw, why = _bad(inner, name)
    monkeypatch.setenv(f"CRASHPOINT_{name.upper()}", raw)
    result = inner.inprocess()
    _assert_usage_error(
        result,
        f"ERROR: crashpoint: bad value '{raw}' for CRASHPOINT_{name.upper()} (environment): {why}",
    )


@pytest.mark.parametrize("name", list(BAD))
def test_bad_value_in_ini_file(inner: Any, name: str) -> None:
    raw, why = _bad(inner, name)
    ini = inner.pytester.makeini(f"[pytest]\ncrashpoint_{name} = {raw}\n")
    result = inner.inprocess()
    _assert_usage_error(
        result,
        f"ERROR: crashpoint: bad value '{raw}' for crashpoint_{name} (ini file {ini}): {why}",
    )


# -- a real campaign: the values reach the run, its summary and the reports -------------------

REAL_TEST = """
import pytest

@pytest.mark.crashpoint(faults=[{{"kill": {{"at": "random"}}}}])
def test_tiny(crash_harness):
    result = crash_harness.run({argv!r})
    result.assert_ok()
    assert result.summary()["seed"] == 11
    assert result.summary()["ran"] == 2
"""


def test_values_reach_a_real_campaign(inner: Any) -> None:
    """A crash_harness test and a scenario file in one session: seed and trials reach both
    campaigns, progress is shown, and the reports are written where --crashpoint-report says."""
    inner.pytester.makepyfile(test_real=REAL_TEST.format(argv=inner.argv(inner.tiny_agent)))
    inner.scenario("tiny", "kill: {at: random, count: 5}", command=inner.command(inner.tiny_agent))
    report = inner.path / "rep"
    result = inner.inprocess(
        "--crashpoint-seed=11",
        "--crashpoint-trials=2",
        "--crashpoint-progress",
        f"--crashpoint-report={report}",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "crashpoint: seed=11 trials=2 *",
            "?crashpoint */2 items, * trials, 0 failed, * elapsed, ETA *? "
            "test_real.py::test_tiny: trials 2/2, failures so far: 0",
            "*?crashpoint */2 items, * ETA *? tiny ?kill@random?: trials 2/2, failures so far: 0",
            "crashpoint gate: 2 campaigns, seed 11",
            "test_real.py::test_tiny ?campaign-1?*2*kill:2*PASS",
            "tiny ?kill@random?*2*kill:2*PASS",  # the option beats the file's count: 5
            f"crashpoint reports: {report / 'gate.json'}*",
        ]
    )
    gate = json.loads((report / "gate.json").read_text())
    assert gate["ok"] is True
    assert [(c["seed"], c["ran"]) for c in gate["campaigns"]] == [(11, 2), (11, 2)]
    assert {t["seed"] for c in gate["campaigns"] for t in c["trial_results"]} == {11}
    summary = json.loads(
        (report / "test_real.py_test_tiny" / "campaign-1" / "summary.json").read_text()
    )
    assert summary["seed"] == 11
    assert (
        json.loads((report / "scenarios" / "tiny-kill_random" / "summary.json").read_text())["seed"]
        == 11
    )
