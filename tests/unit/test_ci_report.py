"""The CI side of the gate's reports, on crafted gates: the Markdown summary, GitHub's workflow
annotations (and their escaping), a gate.json read back, and what changed since a baseline
(new failures, fixed, flaky, changed plans)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from crashpoint import harness
from crashpoint.errors import GateFileError
from crashpoint.pytest_plugin._annotations import (
    annotation,
    annotations_enabled,
    bad_scenario_from_report,
    campaign_annotations,
    escape_data,
    escape_property,
    scenario_annotations,
)
from crashpoint.pytest_plugin._summary import write_step_summary


def trial(index: int, status: str, *, plan: str = "", seed: int = 7) -> dict[str, Any]:
    return {
        "index": index,
        "seed": seed,
        "plan": plan or f"kill attempt 1 at boundary {index}",
        "status": status,
        "ok": status != "failed",
        "root_cause": "exactly_once: FAIL: effect sent twice" if status == "failed" else None,
    }


def campaign(
    trials: list[dict[str, Any]], *, scenario: str = "demo", family: str = "kill@every-boundary"
) -> dict[str, Any]:
    failing = [t for t in trials if t["status"] == "failed"]
    return {
        "scenario": scenario,
        "family": family,
        "name": f"{scenario}-{family}",
        "file": "/repo/scenarios/demo.scenario.yaml",
        "line": 7,
        "seed": 7,
        "ok": not failing,
        "ran": len(trials),
        "failed": len(failing),
        "skipped": 0,
        "checks": {"exactly_once": {"passed": len(trials) - len(failing), "failed": len(failing)}},
        "faults_by_kind": {"kill": len(trials)},
        "failures": [
            {
                "index": t["index"],
                "plan": t["plan"],
                "checks": ["exactly_once: FAIL: effect sent twice -- hint: key it"],
                "root_cause": "",
                "replay": f"crashpoint replay /rep/trials/trial-{t['index']:04d}",
            }
            for t in failing
        ],
        "trial_results": trials,
    }


# -- annotations ---------------------------------------------------------------------------------


def test_workflow_command_escaping_follows_githubs_rules() -> None:
    assert escape_data("100% done\r\nnext: a,b") == "100%25 done%0D%0Anext: a,b"
    assert escape_property("a:b,c%d\ne") == "a%3Ab%2Cc%25d%0Ae"
    line = annotation(
        "two\nlines 50%", file="scenarios/x,y.scenario.yaml", line=5, title="key: faults[0]"
    )
    assert line == (
        "::error file=scenarios/x%2Cy.scenario.yaml,line=5,title=key%3A faults[0]"
        "::two%0Alines 50%25"
    )


def test_annotations_only_under_github_actions() -> None:
    assert annotations_enabled({"GITHUB_ACTIONS": "true"})
    assert not annotations_enabled({})
    assert not annotations_enabled({"GITHUB_ACTIONS": "false"})


def test_a_scenario_error_report_gives_file_line_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "scenarios" / "bad.scenario.yaml"
    text = (
        f"crashpoint scenario error: {path}:5 (key 'faults[0].kill.bogus'): kill: unknown "
        "option(s) bogus; allowed: at, count"
    )
    report = SimpleNamespace(failed=True, nodeid="scenarios/bad.scenario.yaml", longrepr=text)
    bad = bad_scenario_from_report(report)
    assert bad is not None
    assert (bad.line, bad.key) == (5, "faults[0].kill.bogus")
    (line,) = scenario_annotations([bad, bad])  # a repeat (one per family) is dropped
    assert line.startswith(
        "::error file=scenarios/bad.scenario.yaml,line=5,"
        "title=crashpoint scenario error (key faults[0].kill.bogus)::kill: unknown option(s)"
    )
    # a failing campaign's report, a passing one, and another file type are not scenario errors
    failed = SimpleNamespace(
        failed=True,
        nodeid="scenarios/bad.scenario.yaml::kill@random",
        longrepr=f"scenario 'demo' [kill@random] ({path}:5)\ntrial 1: ...",
    )
    assert bad_scenario_from_report(failed) is None
    assert bad_scenario_from_report(SimpleNamespace(failed=False, nodeid="", longrepr=text)) is None
    py = SimpleNamespace(failed=True, nodeid="tests/test_x.py::t", longrepr=text)
    assert bad_scenario_from_report(py) is None


def test_a_failing_campaign_is_annotated_at_its_fault_entry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    s = campaign([trial(0, "passed"), trial(1, "failed")])
    s["file"] = str(tmp_path / "scenarios" / "demo.scenario.yaml")
    ok = campaign([trial(0, "passed")])
    (line,) = campaign_annotations([s, ok])
    assert line.startswith(
        "::error file=scenarios/demo.scenario.yaml,line=7,"
        "title=crashpoint FAIL (1)%3A demo [kill@every-boundary]::"
    )
    assert "trial 1: exactly_once: FAIL: effect sent twice" in line
    assert line.endswith("%0Areplay: crashpoint replay /rep/trials/trial-0001")
    del s["line"]  # a fixture's campaign: no fault entry, line 1
    assert ",line=1," in campaign_annotations([s])[0]


# -- the Markdown summary ----------------------------------------------------------------------


def test_markdown_names_the_failing_check_and_the_replay_command() -> None:
    md = harness.render_markdown([campaign([trial(0, "passed"), trial(1, "failed")])])
    assert md.startswith("## crashpoint gate: FAIL\n")
    assert "| scenario [family] | trials | exercised |" in md
    assert "| demo [kill@every-boundary] | 2 |" in md
    assert "FAIL (1) |" in md
    assert "**demo [kill@every-boundary] trial 1** (exactly_once): effect sent twice" in md
    assert "  - replay: `crashpoint replay /rep/trials/trial-0001`" in md
    assert "What changed" not in md
    passing = harness.render_markdown([campaign([trial(0, "passed")])])
    assert passing.startswith("## crashpoint gate: PASS\n")
    assert "Failing trials" not in passing


def test_markdown_of_an_interrupted_gate_says_so() -> None:
    md = harness.render_markdown([campaign([trial(0, "passed")])], interrupted_by="SIGTERM")
    assert md.startswith("## crashpoint gate: INTERRUPTED by SIGTERM (incomplete)\n")


def test_markdown_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    s = campaign([trial(k, "failed") for k in range(100)])
    md = harness.render_markdown([s], max_failures=5)
    assert md.count("  - replay: ") == 5
    assert "- ... 95 more in report.html" in md
    cut = harness.render_markdown([s], max_bytes=2000)
    assert len(cut.encode()) <= 2000
    assert cut.endswith("the rest is in report.html\n")


def test_markdown_redacts_secret_environment_values(monkeypatch: pytest.MonkeyPatch) -> None:
    token = "ghp_" + "x" * 36
    monkeypatch.setenv("GITHUB_TOKEN", token)
    monkeypatch.setenv("PWD", os.getcwd())  # a path on disk is not a secret
    s = campaign([trial(1, "failed")])
    s["failures"][0]["root_cause"] = f"leaked {token} in {os.getcwd()}/state"
    md = harness.render_markdown([s])
    assert token not in md
    assert "<redacted:GITHUB_TOKEN>" in md
    assert f"{os.getcwd()}/state" in md


def test_step_summary_appends_and_never_raises(tmp_path: Path) -> None:
    out = tmp_path / "summary.md"
    out.write_text("earlier step\n")
    s = [campaign([trial(1, "failed")])]
    assert write_step_summary(str(out), s) == ""
    assert write_step_summary(str(out), s) == ""
    text = out.read_text()
    assert text.startswith("earlier step\n")
    assert text.count("## crashpoint gate: FAIL") == 2
    missing = tmp_path / "no" / "such" / "folder" / "summary.md"
    warning = write_step_summary(str(missing), s)
    assert warning.startswith(f"crashpoint: could not write the step summary to {missing}:")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no reader: a blocking open would hang the gate
    assert write_step_summary(str(fifo), s).startswith(
        f"crashpoint: could not write the step summary to {fifo}"
    )
    assert write_step_summary(os.devnull, s).endswith("not a regular file")


# -- gate.json read back -------------------------------------------------------------------------


def test_load_gate_takes_a_file_or_its_folder(tmp_path: Path) -> None:
    gate = {"ok": False, "status": "finished", "campaigns": [campaign([trial(1, "failed")])]}
    (tmp_path / "gate.json").write_text(json.dumps(gate))
    path, data = harness.load_gate(str(tmp_path))
    assert path == str(tmp_path / "gate.json")
    assert data == gate
    assert harness.load_gate(str(tmp_path / "gate.json"))[1] == gate


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "no such file or folder"),
        ("{not json", "is not JSON (line 1)"),
        (b'{"a": "\xff"}', "is not JSON (not UTF-8 text)"),
        ('{"a": 1}', "is not a gate.json"),
        ('{"ok": true, "campaigns": [1]}', "an entry of 'campaigns' is not an object"),
        ('{"ok": false, "incomplete": true, "status": "running"}', "holds no results"),
    ],
)
def test_load_gate_refuses_what_is_not_a_finished_gate(
    tmp_path: Path, content: str | bytes | None, why: str
) -> None:
    path = tmp_path / "gate.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(GateFileError) as info:
        harness.load_gate(str(path))
    assert str(info.value).startswith(f"{path}: ")
    assert why in str(info.value)
    assert "\n" not in str(info.value)


def test_load_gate_refuses_a_folder_without_one(tmp_path: Path) -> None:
    with pytest.raises(GateFileError, match=r"the folder holds no gate\.json"):
        harness.load_gate(str(tmp_path))


# -- what changed --------------------------------------------------------------------------------


def test_compare_new_fixed_still_failing_and_campaigns() -> None:
    before = {
        "ok": False,
        "campaigns": [
            campaign([trial(0, "passed"), trial(1, "failed"), trial(2, "failed")]),
            campaign([trial(0, "passed")], family="kill@fileop"),
        ],
    }
    now = [
        campaign([trial(0, "failed"), trial(1, "passed"), trial(2, "failed"), trial(3, "failed")]),
        campaign([trial(0, "failed")], family="power_loss@posix"),
    ]
    ch = harness.compare_gates(before, now, baseline="/prev/gate.json")
    key = "demo [kill@every-boundary]"
    assert [(e["campaign"], e["index"]) for e in ch["new_failures"]] == [
        (key, 0),  # passed before
        (key, 3),  # a new trial
        ("demo [power_loss@posix]", 0),  # a new campaign
    ]
    assert [(e["index"], e["before"], e["now"]) for e in ch["fixed"]] == [(1, "failed", "passed")]
    assert [e["index"] for e in ch["still_failing"]] == [2]
    assert ch["campaigns_new"] == ["demo [power_loss@posix]"]
    assert ch["campaigns_removed"] == ["demo [kill@fileop]"]
    assert ch["counts"]["new_failures"] == 3
    assert ch["counts"]["fixed"] == 1
    new0 = ch["new_failures"][0]
    assert new0["replay"] == "crashpoint replay /rep/trials/trial-0000"
    assert new0["cause"].startswith("exactly_once: FAIL")
    assert ch["fixed"][0]["replay"] == "crashpoint replay /rep/trials/trial-0001"  # the old one
    assert (ch["baseline"], ch["baseline_incomplete"]) == ("/prev/gate.json", False)
    lines = harness.changes_lines(ch)
    assert lines[0].startswith(
        "crashpoint changes since /prev/gate.json: 3 new failure(s); 1 fixed"
    )
    assert f"  NEW FAILURE {key} trial 0 (same seed and plan as before): exactly_once" in "\n".join(
        lines
    )
    assert "    replay: crashpoint replay /rep/trials/trial-0000" in lines
    assert f"  FIXED {key} trial 1 (same seed and plan as before)" in lines
    assert "  NEW CAMPAIGN demo [power_loss@posix]" in lines
    assert "  REMOVED CAMPAIGN demo [kill@fileop]" in lines
    page = harness.changes_html(ch)
    assert page.startswith('<section id="changes"><h2>What changed</h2>')
    assert "New failures: 3" in page
    assert "Fixed: 1" in page
    md = harness.render_markdown(now, changes=ch)
    assert "### What changed" in md
    assert "**3 new failure(s)**" in md


def test_flaky_needs_the_same_seed_and_plan() -> None:
    before = {
        "ok": False,
        "campaigns": [
            campaign(
                [
                    trial(0, "passed"),
                    trial(1, "failed"),
                    trial(2, "passed", plan="kill at A"),
                    trial(3, "passed", seed=1),
                    trial(4, "skipped"),
                    trial(5, "not exercised"),
                ]
            )
        ],
    }
    now = [
        campaign(
            [
                trial(0, "failed"),  # same seed and plan: flaky (or the agent changed)
                trial(1, "passed"),  # same: flaky the other way
                trial(2, "failed", plan="kill at B"),  # another plan: changed, not flaky
                trial(3, "failed", seed=2),  # another seed: not flaky
                trial(4, "failed"),  # skipped before: a new failure, neither flaky nor a plan
                trial(5, "passed"),  # proved nothing before: no change
            ]
        )
    ]
    ch = harness.compare_gates(before, now)
    assert [(e["index"], e["before"], e["now"]) for e in ch["flaky"]] == [
        (0, "passed", "failed"),
        (1, "failed", "passed"),
    ]
    assert [e["index"] for e in ch["changed_plan"]] == [2, 3]
    assert ch["changed_plan"][0]["plan_before"] == "kill at A"
    assert [e["index"] for e in ch["new_failures"]] == [0, 2, 3, 4]
    assert [e["index"] for e in ch["fixed"]] == [1]
    assert ch["counts"]["flaky"] == 2


def test_an_incomplete_baseline_is_compared_and_said_so() -> None:
    before = {
        "ok": False,
        "incomplete": True,
        "status": "interrupted",
        "campaigns": [campaign([trial(0, "passed")])],
    }
    ch = harness.compare_gates(before, [campaign([trial(0, "failed")])], baseline="b.json")
    assert ch["baseline_incomplete"] is True
    assert [e["index"] for e in ch["new_failures"]] == [0]
    assert "(an incomplete gate: interrupted; compared what it has)" in harness.changes_lines(ch)[0]


def test_gate_json_keeps_what_a_rerender_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from crashpoint.cli import main
    from crashpoint.pytest_plugin._summary import write_session_reports

    now = [campaign([trial(0, "failed")])]
    changes = harness.compare_gates({"ok": True, "campaigns": []}, now, baseline="prev.json")
    bad = ["scenarios/gold.scenario.yaml:2 (key 'agent'): the golden run did not complete"]
    write_session_reports(str(tmp_path / "rep"), now, changes=changes, errors=bad)
    gate = json.loads((tmp_path / "rep" / "gate.json").read_text())
    assert gate["report_dir"] == str(tmp_path / "rep")
    assert gate["changes"] == changes
    assert gate["scenario_errors"] == bad
    assert 'id="changes"' in (tmp_path / "rep" / "report.html").read_text()
    assert main(["report", str(tmp_path / "rep"), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "### Scenario errors\n\n- scenarios/gold.scenario.yaml:2 (key 'agent')" in md
    assert "### What changed" in md


def test_replay_commands_are_shown_relative_to_the_working_directory(tmp_path: Path) -> None:
    from crashpoint.harness import replay_here

    inside = tmp_path / "rep" / "scenarios" / "s-kill" / "trials" / "trial-0001"
    assert replay_here(f"crashpoint replay {inside}", str(tmp_path)) == (
        "crashpoint replay rep/scenarios/s-kill/trials/trial-0001"
    )
    outside = f"crashpoint replay {tmp_path.parent}/elsewhere/trial-0002"
    assert replay_here(outside, str(tmp_path)) == outside  # not under it: as recorded
    assert replay_here("crashpoint replay rel/trial-1", str(tmp_path)) == (
        "crashpoint replay rel/trial-1"
    )
    assert replay_here("make replay", str(tmp_path)) == "make replay"
