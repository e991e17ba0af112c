"""``*.scenario.yaml`` collection (items, locations, marks, errors) and the
``pytest_crashpoint_*`` hooks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]


# -- collection -----------------------------------------------------------------------------------


def test_one_item_per_family_pointing_at_its_line(inner: Any) -> None:
    path = inner.scenario(
        "demo_kills",
        """
        kill: {at: random, count: 1}
        kill: {at: every-boundary}
        corrupt: {how: [bitflip, truncate]}
        kill: {at: random, count: 2}
        [disk_full: {capacity: 64KiB}, kill: {at: random}]
    """,
    )
    items = inner.genitems()
    assert [i.name for i in items] == [
        "kill@random",
        "kill@every-boundary",
        "corrupt@bitflip|truncate",
        "kill@random#2",
        "disk_full+kill@random",
    ]
    assert items[0].nodeid == "demo_kills.scenario.yaml::kill@random"
    # the faults list starts at line 6 of the file: item k is on line 6 + k
    for k, item in enumerate(items):
        fspath, lineno, where = item.reportinfo()
        assert (Path(fspath), lineno) == (path, 5 + k)  # reportinfo is 0-based
        assert where == f"scenario: demo kills [{item.name}]"
        assert item.location == (path.name, 5 + k, where)


def test_only_scenario_yaml_files_are_collected(inner: Any) -> None:
    inner.scenario("good", "kill: {at: random, count: 1}")
    (inner.path / "other.yaml").write_text("name: not a scenario\n")
    (inner.path / "good.scenario.yml").write_text("name: wrong suffix\n")
    result = inner.inprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines(["good.scenario.yaml::kill@random", "1 test collected*"])


def test_marks_from_the_file(inner: Any) -> None:
    inner.pytester.makeini("[pytest]\nmarkers =\n    nightly: slow scenarios\n")
    inner.scenario("marked", "kill: {at: random, count: 1}", extra="marks: [nightly]")
    inner.scenario("unmarked", "kill: {at: random, count: 1}")
    items = inner.genitems()
    marked = {i.nodeid: i.get_closest_marker("nightly") is not None for i in items}
    assert marked == {
        "marked.scenario.yaml::kill@random": True,
        "unmarked.scenario.yaml::kill@random": False,
    }
    result = inner.inprocess("--collect-only", "-q", "--strict-markers", "-m", "not nightly")
    result.stdout.fnmatch_lines(
        ["unmarked.scenario.yaml::kill@random", "1/2 tests collected (1 deselected)*"]
    )


def test_unregistered_mark_under_strict_markers_names_the_file(inner: Any) -> None:
    # a name no other test registers: pytest.mark remembers known names across in-process runs
    path = inner.scenario("marked", "kill: {at: random, count: 1}", extra="marks: [weekly_only]")
    result = inner.inprocess("--collect-only", "--strict-markers")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            f"crashpoint scenario error: {path} (key 'marks'): "
            "'weekly_only' not found in `markers` configuration option"
        ]
    )


#: malformed scenario files: (name, body, where, message)
BAD_SCENARIOS = [
    (
        "typo",
        "name: x\nagent:\n  command: [a]\nfaults:\n  - kill: {at: random}\ntrails: 3\n",
        ":6 (key 'trails')",
        "unknown key; did you mean 'trials'?",
    ),
    (
        "fault-kind",
        "name: x\nagent:\n  command: [a]\nfaults:\n  - kill: {at: random}\n  - explode: {}\n",
        ":6 (key 'faults[1]')",
        "unknown fault kind 'explode'",
    ),
    (
        "placeholder",
        "name: x\nagent:\n  command: ['{pyhton}']\nfaults:\n  - kill: {at: random}\n",
        ":3 (key 'agent.command')",
        "unknown placeholder",
    ),
    (
        "missing-key",
        "name: x\nagent:\n  command: [a]\n",
        ":1 (key 'faults')",
        "missing required key 'faults'",
    ),
    ("yaml", "name: x\nagent: [oops\n", ":3", "not valid YAML"),
    ("empty", "", ":1", "the file is empty"),
]


def test_bad_scenarios_are_collection_errors_naming_file_line_key(inner: Any) -> None:
    """Six malformed files in one session (one session for all: each file is collected on its
    own), each a collection error of its own naming its file, line and key."""
    bad = []
    for name, body, where, message in BAD_SCENARIOS:
        path = inner.path / f"bad-{name}.scenario.yaml"
        path.write_text(body)
        bad.append((path, where, message))
    inner.scenario("good", "kill: {at: random, count: 1}")
    result = inner.inprocess("--collect-only", "-q")
    # pytest's own behaviour for any collection error: the other files are still collected,
    # nothing runs, the session is "Interrupted" (exit 2)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "good.scenario.yaml::kill@random",
            *[
                line
                for path, where, message in sorted(bad)
                for line in (
                    f"*ERROR collecting {path.name}*",
                    f"crashpoint scenario error: {path}{where}: {message}*".replace("[", "[[]"),
                )
            ],
            f"*Interrupted: {len(bad)} errors during collection*",
            f"1 test collected, {len(bad)} errors in *",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_other_scenarios_run_with_continue_on_collection_errors(inner: Any) -> None:
    (inner.path / "bad.scenario.yaml").write_text("name: x\n")
    inner.scenario("good", "kill: {at: random, count: 1}", command=inner.command(inner.tiny_agent))
    result = inner.inprocess("--continue-on-collection-errors")
    result.assert_outcomes(passed=1, errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED


# -- hooks ----------------------------------------------------------------------------------------

CHECKS_CONFTEST = """
    import json

    from crashpoint.harness import CheckResult

    def pytest_crashpoint_checks(config):
        def at_most_one_restart(facts):
            n = len(facts.attempts)
            return CheckResult("at_most_one_restart", n <= 1, f"{n} attempts")

        def prints_done(facts):
            return CheckResult("prints_done", facts.final.stdout.strip() == b"done")

        return {"at_most_one_restart": at_most_one_restart, "prints_done": prints_done}

    def pytest_crashpoint_campaign_finished(config, name, result):
        with open("finished.jsonl", "a") as f:
            f.write(json.dumps({"name": name, "ok": result.ok,
                                "trials": len(result.trials)}) + "\\n")
"""


def _verdicts(report: Path) -> list[dict[str, Any]]:
    (path,) = report.glob("scenarios/*/verdicts.json")
    verdicts: list[dict[str, Any]] = json.loads(path.read_text())
    return verdicts


def test_checks_hook_adds_a_check_that_can_fail_a_campaign(inner: Any) -> None:
    """One session, two doors: a scenario file and a crash_harness test both get the check."""
    inner.pytester.makeconftest(CHECKS_CONFTEST)
    inner.scenario("tiny", "kill: {at: random, count: 2}", command=inner.command(inner.tiny_agent))
    inner.pytester.makepyfile(f"""
        import pytest

        @pytest.mark.crashpoint(faults=[{{"kill": {{"at": "random", "count": 1}}}}])
        def test_fixture_door(crash_harness):
            crash_harness.run({inner.argv(inner.tiny_agent)!r}).assert_ok()
    """)
    report = inner.path / "rep"
    result = inner.inprocess(f"--crashpoint-report={report}")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_fixture_door _*",
            "E   *AssertionError: crashpoint: 1 of 1 trials failed, 1 exercised "
            "(seed 0, 0 skipped)",
            "E   *at_most_one_restart: FAIL: 2 attempts",
            "E   *replay: crashpoint replay *",
            "*_ scenario: tiny ?kill@random? _*",  # the failure is headed by reportinfo
            "scenario 'tiny' ?kill@random? (*tiny.scenario.yaml:6)",
            "crashpoint: 2 of 2 trials failed, 2 exercised (seed 0, 0 skipped)",
            "*at_most_one_restart: FAIL: 2 attempts",
            "*replay: crashpoint replay *",
        ]
    )
    assert "prints_done: FAIL" not in result.stdout.str()
    for v in _verdicts(report):
        assert v["checks"]["at_most_one_restart"] is False
        assert v["checks"]["prints_done"] is True
        assert v["checks"]["completes"] is True
    gate = json.loads((report / "gate.json").read_text())
    assert gate["ok"] is False
    assert [c["checks"]["at_most_one_restart"] for c in gate["campaigns"]] == [
        {"passed": 0, "failed": 1, "skipped": 0},
        {"passed": 0, "failed": 2, "skipped": 0},
    ]
    finished = [
        json.loads(line) for line in (inner.path / "finished.jsonl").read_text().splitlines()
    ]
    assert finished == [
        {"name": "campaign-1", "ok": False, "trials": 1},
        {"name": "tiny-kill_random", "ok": False, "trials": 2},
    ]


PLAN_CONFTEST = """
    from crashpoint.harness import Fault, Plan

    def pytest_crashpoint_plan(config, family, golden, seed, index):
        if index == 0:  # no fault at all
            return Plan((), family.name, seed, index)
        if index == 1:  # a kill at the first event of the first attempt
            return Plan((Fault.make("kill", 1, index=0, phase="before", label="custom"),),
                        family.name, seed, index)
        return None  # the built-in plan
"""


def test_plan_hook_replaces_plans(inner: Any) -> None:
    inner.pytester.makeconftest(PLAN_CONFTEST)
    inner.scenario(
        "tiny",
        "kill: {at: random, count: 3}",
        command=inner.command(inner.tiny_agent),
        extra="seed: 4",
    )
    report = inner.path / "rep"
    result = inner.inprocess(f"--crashpoint-report={report}")
    result.assert_outcomes(passed=1)
    plans = [v["plan"] for v in _verdicts(report)]
    assert plans[0] == "no fault"
    assert plans[1] == "kill attempt 1 at event #0 custom (before)"  # a hand-made plan: by index
    assert plans[2].startswith("kill attempt 1 at step_")  # drawn by the built-in plan
    gate = json.loads((report / "gate.json").read_text())
    attempts = [len(t["attempts"]) for t in gate["campaigns"][0]["trial_results"]]
    assert attempts == [1, 2, 2]
