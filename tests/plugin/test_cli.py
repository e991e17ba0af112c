"""``crashpoint run``, the gate, as a user runs it: its exit code, its output and its reports.

A subprocess (``python -m crashpoint``) where the process is the point: one run for each exit
code (0 passing, in a project with ``filterwarnings = error``; 1 failing; 2 a missing path; 3
nothing found). The other runs call the command's :func:`crashpoint.cli.main` in this process
(:func:`run_here`), which the console script exits with: a pytest start is ~0.5 s of CPU a run,
and their agents (and ``-n 2``'s workers) are real processes either way.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from _cli_main import main

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("no_unrelated_plugins")


def crashpoint(inner: Any, *args: Any) -> pytest.RunResult:
    """``crashpoint ARGS...`` in the pytester folder (``python -m crashpoint``: the console
    script's code, without depending on PATH)."""
    result: pytest.RunResult = inner.pytester.run(
        sys.executable, "-m", "crashpoint", *map(str, args), timeout=180
    )
    return result


def run_here(inner: Any, capsys: pytest.CaptureFixture[str], *args: Any) -> pytest.RunResult:
    """``crashpoint ARGS`` in this process, in the pytester folder: :func:`crashpoint.cli.main`
    (what the console script runs and exits with), its output read from ``capsys``."""
    assert Path.cwd() == inner.path
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return pytest.RunResult(code, out.splitlines(), err.splitlines(), 0.0)


def junit_suite(report: Path) -> ET.Element:
    root = ET.parse(report / "junit.xml").getroot()  # noqa: S314 - the gate's own report
    suite = root.find("testsuite")
    assert suite is not None
    return suite


def test_passing_scenarios_exit_0_with_table_and_reports(inner: Any) -> None:
    """In a project whose configuration turns warnings into errors, as downstream repositories
    often do (``filterwarnings = error``): the gate must not trip over its own import (pytest
    9.2 warns "Module already imported so cannot be rewritten"). A process: a gate started in
    this one does not see that warning."""
    inner.pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
    inner.scenario("demo_kills", "kill: {at: random, count: 2}", folder="gate", extra="seed: 21")
    report = inner.path / "out"
    result = crashpoint(inner, "run", "gate", "--report", report)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert "Warning" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            # progress, on by default: the item, the overall count, an ETA
            "?crashpoint 0/1 items, * trials, 0 failed, * elapsed, ETA *? "
            "demo_kills ?kill@random?: trials 2/2, failures so far: 0",
            "crashpoint gate: 1 campaigns, seed 21",
            "scenario ?family?*trials*faults*checks ok*dup*lost*resume p50*verdict",
            "demo kills ?kill@random?*2*kill:2*0*0*ms*PASS",
            f"crashpoint reports: {report / 'gate.json'}*",
        ]
    )
    gate = json.loads((report / "gate.json").read_text())
    assert gate["ok"] is True
    assert [(c["scenario"], c["family"], c["ran"]) for c in gate["campaigns"]] == [
        ("demo kills", "kill@random", 2)
    ]
    suite = junit_suite(report)
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "0")
    # each campaign's own reports and verdicts
    (campaign,) = (report / "scenarios").iterdir()
    assert {p.name for p in campaign.iterdir()} >= {"summary.json", "verdicts.json", "junit.xml"}


def test_failing_scenario_exits_1_naming_checks_and_replays(
    inner: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Then a replay of one of its trials with a hand-edited plan is a usage error (on the same
    report: one gate run for both, not two; the replay refuses before it runs anything, in this
    process)."""
    inner.scenario(
        "broken",
        "kill: {at: random, count: 2}",
        folder="gate",
        extra="seed: 1",
        command=inner.command(inner.broken_agent),
    )
    report = inner.path / "out"
    result = crashpoint(inner, "run", "gate", "--report", report, "--quiet")
    assert result.ret == 1, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "crashpoint gate: 1 campaigns, seed 1",
            "broken ?kill@random?*2*kill:2*FAIL (*)",
            "FAILED broken ?kill@random? trial *: *: FAIL*",
            f"  replay: crashpoint replay {report}/scenarios/*/trials/trial-000*",
        ]
    )
    assert "trials 2/2" not in result.stdout.str()  # --quiet: no progress lines
    gate = json.loads((report / "gate.json").read_text())
    assert gate["ok"] is False
    suite = junit_suite(report)
    assert suite.get("failures") == "1"

    # the replay of a hand-edited plan
    folder = sorted(report.glob("scenarios/*/trials/trial-*"))[0]
    plan = json.loads((folder / "plan.json").read_text())
    plan["faults"] = [
        {"kind": "fileop", "attempt": 1, "fileop": {"op": "write", "path": "/etc/passwd", "n": 1}}
    ]
    (folder / "plan.json").write_text(json.dumps(plan))
    result = run_here(inner, capsys, "replay", folder)
    assert result.ret == 2, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(
        [f"crashpoint: error: {folder}: its plan.json cannot be replayed: *path*"]
    )
    assert "Traceback" not in result.stderr.str()


def test_no_scenario_found_exits_3_could_not_judge(inner: Any) -> None:
    (inner.path / "empty").mkdir()
    (inner.path / "empty" / "notes.yaml").write_text("name: not a scenario\n")
    out = inner.path / "out"
    out.mkdir(mode=0o700)
    (out / "gate.json").write_text('{"ok": true, "campaigns": []}')  # a previous run's
    result = crashpoint(inner, "run", "empty", "--report", out)
    assert result.ret == 3, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(
        ["crashpoint: no *.scenario.yaml found under empty: nothing was judged"]
    )
    assert not (out / "gate.json").exists()  # the old success is gone, no marker is left
    assert not (out / "report.html").exists()


def test_missing_path_exits_2(inner: Any) -> None:
    result = crashpoint(inner, "run", "no-such-folder")
    assert result.ret == 2
    result.stderr.fnmatch_lines(["crashpoint: error: no such file or folder: no-such-folder *"])
    assert not (inner.path / "crashpoint-report").exists()


def test_bad_scenario_file_exits_2_naming_file_line_and_key(
    inner: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = inner.path / "gate" / "bad.scenario.yaml"
    bad.parent.mkdir()
    bad.write_text("name: x\nagent:\n  command: [a]\nfaults:\n  - kill: {at: sometimes}\n")
    result = run_here(inner, capsys, "run", "gate", "--report", inner.path / "out")
    assert result.ret == 2, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            f"crashpoint scenario error: {bad}:5 (key 'faults?0?.kill.at'"
            "): kill.at must be one of every-boundary, *, got 'sometimes'"
        ]
    )
    result.stderr.fnmatch_lines(
        [
            "crashpoint: gate verdict: bad input (exit 2): gate/bad.scenario.yaml:5 "
            "(key 'faults?0?.kill.at'): kill.at must be one of *"
        ]
    )
    gate = json.loads((inner.path / "out" / "gate.json").read_text())
    assert (gate["ok"], gate["verdict"], gate["exit_code"]) == (False, "bad input", 2)
    assert gate["reasons"][0].startswith("gate/bad.scenario.yaml:5 (key 'faults[0].kill.at'): ")
    # off GitHub (the suite's conftest drops GITHUB_ACTIONS): no workflow annotation
    assert "::error" not in result.stdout.str() + result.stderr.str()


def test_a_family_none_of_whose_faults_fired_exits_3(
    inner: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    inner.scenario(
        "nothing",
        'corrupt: {path: "{state_dir}/no-such-*", how: [truncate], count: 1}',
        folder="gate",
        command=inner.command(inner.tiny_agent),
    )
    out = inner.path / "out"
    result = run_here(inner, capsys, "run", "gate", "--report", out, "--quiet")
    assert result.ret == 3, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(
        ["crashpoint: gate verdict: not judged (exit 3): nothing ?corrupt@truncate?: family *"]
    )
    gate = json.loads((out / "gate.json").read_text())
    assert (gate["ok"], gate["verdict"], gate["exit_code"]) == (False, "not judged", 3)
    assert "none of its 1 trial(s) was exercised" in gate["reasons"][0]


@pytest.mark.parametrize("asked", [True, False], ids=["asked-for", "default"])
def test_a_check_asked_for_by_name_with_nothing_to_judge_exits_3(
    inner: Any, asked: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny agent makes no effect: ``expect: {exactly_once: true}`` asks for a check no
    trial can judge, which is not a pass (3); left at its default, the check is skipped in
    each trial (shown as such) and the gate passes on what it did judge."""
    inner.scenario(
        "no effects",
        "kill: {at: every-boundary}",
        folder="gate",
        command=inner.command(inner.tiny_agent),
        extra="expect: {exactly_once: true}" if asked else "",
    )
    out = inner.path / "out"
    result = run_here(inner, capsys, "run", "gate", "--report", out, "--quiet")
    gate = json.loads((out / "gate.json").read_text())
    [campaign] = gate["campaigns"]
    assert campaign["checks"]["exactly_once"]["skipped"] == campaign["ran"] > 0
    assert campaign["checks"]["exactly_once"]["passed"] == 0
    if not asked:
        assert result.ret == 0, result.stdout.str() + result.stderr.str()
        return
    assert result.ret == 3, result.stdout.str() + result.stderr.str()
    assert (gate["verdict"], gate["exit_code"]) == ("not judged", 3)
    assert gate["reasons"] == [
        f"no effects: expect.exactly_once asks for exactly_once, and none of its "
        f"{campaign['ran']} trial(s) gave it anything to judge "
        f"({campaign['checks']['exactly_once']['why_skipped']})"
    ]
    assert "nothing to judge" in gate["reasons"][0]


def test_an_agent_that_reports_no_boundary_exits_3(
    inner: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    inner.scenario(
        "silent",
        "kill: {at: random, count: 1}",
        folder="gate",
        command='["{python}", "-c", "pass"]',
    )
    result = run_here(inner, capsys, "run", "gate", "--report", inner.path / "out", "--quiet")
    assert result.ret == 3, result.stdout.str() + result.stderr.str()
    gate = json.loads((inner.path / "out" / "gate.json").read_text())
    assert (gate["verdict"], gate["exit_code"]) == ("not judged", 3)
    assert "reported no event" in gate["reasons"][0]


def test_precedence_bad_scenario_over_failed_trial_over_not_judged(
    inner: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Several at once: a failed trial (1) beats a family that proved nothing (3); a
    malformed scenario file (2) beats both. The second run with -n 2: each file's collection on
    its own worker, so the good files run beside the bad one and the workers' verdicts merge in
    the controller (this process; the first run needs no workers: two more interpreters cost
    ~2.5 s of CPU)."""
    inner.scenario(
        "nothing",
        'corrupt: {path: "{state_dir}/no-such-*", how: [truncate], count: 1}',
        folder="gate",
        command=inner.command(inner.tiny_agent),
    )
    inner.scenario(
        "broken", "kill: {at: random, count: 1}", folder="gate", extra="seed: 1",
        command=inner.command(inner.broken_agent),
    )  # fmt: skip
    out = inner.path / "out"
    failed = run_here(inner, capsys, "run", "gate", "--report", out, "--quiet")
    assert failed.ret == 1, failed.stdout.str() + failed.stderr.str()
    gate = json.loads((out / "gate.json").read_text())
    assert (gate["verdict"], gate["exit_code"]) == ("fail", 1)
    assert [r.split(":")[0] for r in gate["reasons"]] == [
        "broken [kill@random]",
        "nothing [corrupt@truncate]",
    ]
    (inner.path / "gate" / "bad.scenario.yaml").write_text(
        "name: x\nagent: {command: [a]}\nnope: 1\n"
    )
    bad = run_here(inner, capsys, "run", "gate", "-n", "2", "--report", out, "--quiet")
    assert bad.ret == 2, bad.stdout.str() + bad.stderr.str()
    gate = json.loads((out / "gate.json").read_text())
    assert (gate["verdict"], gate["exit_code"]) == ("bad input", 2)
    assert gate["reasons"][0].startswith("gate/bad.scenario.yaml:3 (key 'nope')"), gate["reasons"]


def test_bad_option_value_exits_2(inner: Any, capsys: pytest.CaptureFixture[str]) -> None:
    inner.scenario("demo_kills", "kill: {at: random, count: 1}", folder="gate")
    result = run_here(
        inner, capsys, "run", "gate", "--shard", "5/2", "--report", inner.path / "out"
    )
    result.stderr.fnmatch_lines(
        [
            "ERROR: crashpoint: bad value '5/2' for --crashpoint-shard "
            "(command line): expected I/N with 1 <= I <= N, e.g. 1/4"
        ]
    )
    assert result.ret == 2


SLOW_AGENT = """\
import os, sys, time
from crashpoint import probe

done = os.path.join(sys.argv[1], "done")
if not os.path.exists(done):
    probe.step_started("only")
    time.sleep(0.6)
    with open(done, "w") as f:
        f.write("done")
        f.flush()
        os.fsync(f.fileno())
    probe.step_completed("only")
print("done")
"""


# slow: fast cover: test_passing_scenarios_exit_0_with_table_and_reports (one worker)
@pytest.mark.slow
def test_parallel_workers_show_combined_progress_and_same_verdicts(inner: Any) -> None:
    """``-n 2`` works out of the box (pytest-xdist is a dependency); the controller prints the
    workers' progress as one line with the overall count and an ETA."""
    # an agent that works 0.6 s in its step: the gate lasts past the watcher's 2 s interval
    # however fast the machine is, so a combined line is printed while items run
    slow = inner.script("slow_agent.py", SLOW_AGENT)
    for stem in ("one", "two"):
        inner.scenario(
            stem,
            "kill: {at: random, count: 3}\nkill: {at: every-boundary}",
            folder="gate",
            command=inner.command(slow),
        )
    result = crashpoint(inner, "run", "gate", "-n", "2", "--report", inner.path / "out")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*?crashpoint */4 items, * trials, 0 failed, * ETA *?*gw*: *"])
    result.stdout.fnmatch_lines(["crashpoint gate: 4 campaigns*"])
    gate = json.loads((inner.path / "out" / "gate.json").read_text())
    assert sorted((c["scenario"], c["family"], c["ran"], c["ok"]) for c in gate["campaigns"]) == [
        ("one", "kill@every-boundary", 2, True),
        ("one", "kill@random", 3, True),
        ("two", "kill@every-boundary", 2, True),
        ("two", "kill@random", 3, True),
    ]


def test_golden_run_failure_is_shown_once_per_file_at_the_agent_line(
    inner: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = inner.path / "gate" / "bad.scenario.yaml"
    bad.parent.mkdir()
    bad.write_text(
        "name: bad\nseed: 3\n\nagent:\n"
        "  command: [sh, -c, 'echo the-agent-said-boom >&2; exit 3']\n"
        "faults:\n  - kill: {at: random, count: 2}\n  - corrupt: {how: [bitflip]}\n"
    )
    result = run_here(inner, capsys, "run", "gate", "--report", inner.path / "out", "--quiet")
    assert result.ret == 1  # the agent failed with no fault at all: a failure, not bad input
    result.stderr.fnmatch_lines(["crashpoint: gate verdict: fail (exit 1): *the golden run*"])
    out = result.stdout.str()
    # the stderr tail, once among the failures (pytest's short summary repeats each failure's
    # message, whole where it detects CI)
    failures = out.split("short test summary info")[0]
    assert failures.splitlines().count("the-agent-said-boom") == 1, out
    result.stdout.fnmatch_lines(
        [
            f"{bad}:4 (key 'agent'): the golden run (no faults) did not complete: exit 3*",
            f"{bad}:4 (key 'agent'): not run: the golden run of this file failed (shown once, "
            "under ?kill@random?)",
        ]
    )


def test_a_link_planted_at_junit_xml_is_refused_and_its_target_untouched(
    inner: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """pytest's own --junitxml writes through a link; the gate refuses to start instead."""
    inner.scenario(
        "tiny",
        "kill: {at: random, count: 1}",
        folder="gate",
        command=inner.command(inner.tiny_agent),
    )
    report = inner.path / "out"
    report.mkdir(mode=0o700)
    target = inner.path / "precious.txt"
    target.write_text("keep me")
    (report / "junit.xml").symlink_to(target)
    result = run_here(inner, capsys, "run", "gate", "--report", report)
    assert result.ret == 2, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(
        ["crashpoint: error: */junit.xml exists and is not a regular file (a link?)*"]
    )
    assert target.read_text() == "keep me"
    assert not (report / "gate.json").exists()
