"""The gate's verdict (exit codes a CI reads) from campaign summaries, and the "running"
markers that replace a report folder's previous outputs while a gate runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from crashpoint.harness import clear_report_running, gate_verdict, mark_report_running


def camp(name: str = "a", **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "scenario": name,
        "family": "kill@random",
        "ok": True,
        "ran": 2,
        "failed": 0,
        "skipped": 0,
        "stopped": "",
        "unexercised": [],
        "interrupted_by": None,
    }
    return {**base, **kw}


PASSING = camp("pass")
FAILING = camp("fail", ok=False, failed=1)
UNEXERCISED = camp("idle", ok=False, unexercised=["family kill@random: none of its 2 ..."])
ALL_SKIPPED = camp("skip", ran=0, skipped=3, skip_reasons=["no strace"])
BUDGET = camp("slow", ok=False, ran=0, stopped="the campaign's time budget of 6s ran out")
NOTHING = {"passed": 0, "failed": 0, "skipped": 2, "why_skipped": "no effect: nothing to judge"}
JUDGED = {"passed": 2, "failed": 0, "skipped": 0}
ASKED_IDLE = camp("asked", required_checks=["exactly_once"], checks={"exactly_once": NOTHING})
ASKED_OTHER_FAMILY = camp("asked", family="power", checks={"exactly_once": JUDGED})


@pytest.mark.parametrize(
    ("campaigns", "extra", "code", "verdict"),
    [
        ([PASSING], {}, 0, "pass"),
        ([PASSING, FAILING], {}, 1, "fail"),
        ([BUDGET], {}, 1, "fail"),
        ([PASSING], {"failed": ["g.scenario.yaml:4 (key 'agent'): golden run failed"]}, 1, "fail"),
        ([PASSING, UNEXERCISED], {}, 3, "not judged"),
        ([PASSING, ALL_SKIPPED], {}, 3, "not judged"),
        ([camp(ran=0, skipped=0)], {}, 3, "not judged"),  # no trial planned at all
        ([], {}, 3, "not judged"),  # no campaign ran
        ([PASSING], {"not_judged": ["no boundary"]}, 3, "not judged"),
        ([FAILING, UNEXERCISED], {}, 1, "fail"),  # a failure beats "could not judge"
        ([FAILING], {"bad_input": ["b.scenario.yaml:5 (key 'x'): bad"]}, 2, "bad input"),
        ([], {"bad_input": ["b.scenario.yaml:5 (key 'x'): bad"]}, 2, "bad input"),
        ([FAILING], {"bad_input": ["b"], "interrupted_by": "SIGTERM"}, 143, "interrupted"),
        ([camp(ok=False, interrupted_by="SIGINT")], {}, 130, "interrupted"),
        # a check asked for by name that no trial of the scenario could judge
        ([ASKED_IDLE], {}, 3, "not judged"),
        ([ASKED_IDLE, ASKED_OTHER_FAMILY], {}, 0, "pass"),  # another family judged it
        ([camp(required_checks=["crash_loop"], checks={})], {}, 3, "not judged"),  # never ran
        ([{**ASKED_IDLE, "ok": False, "failed": 1}], {}, 1, "fail"),
        ([camp(checks={"exactly_once": NOTHING})], {}, 0, "pass"),  # not asked for by name
    ],
)
def test_exit_code_and_precedence(
    campaigns: list[dict[str, Any]], extra: dict[str, Any], code: int, verdict: str
) -> None:
    v = gate_verdict(campaigns, **extra)
    assert (v.code, v.verdict) == (code, verdict), v
    assert v.ok == (code == 0)
    assert v.to_json() == {"verdict": verdict, "exit_code": code, "reasons": list(v.reasons)}
    if code:
        assert v.reasons, "a verdict other than pass says why"


def test_a_check_with_nothing_to_judge_is_named_with_why() -> None:
    v = gate_verdict([ASKED_IDLE])
    assert v.reasons == (
        "asked: expect.exactly_once asks for exactly_once, and none of its 2 trial(s) gave it "
        "anything to judge (no effect: nothing to judge)",
    )


def test_reasons_name_the_campaign_and_why_the_winning_kind_first() -> None:
    v = gate_verdict([UNEXERCISED, FAILING, ALL_SKIPPED])
    assert v.reasons == (
        "fail [kill@random]: 1 failing trial(s)",
        "idle [kill@random]: family kill@random: none of its 2 ...",
        "skip [kill@random]: every trial was skipped: no strace",
    )


# -- the "running" markers ----------------------------------------------------------------------


def test_markers_replace_the_previous_outputs_and_are_removed_if_nothing_replaced_them(
    tmp_path: Path,
) -> None:
    rep = tmp_path / "rep"
    rep.mkdir(mode=0o700)
    (rep / "gate.json").write_text('{"ok": true, "campaigns": []}')
    (rep / "junit.xml").write_text('<testsuite errors="0" failures="0" tests="4"/>')
    (rep / "baseline-gate.json").write_text("{}")  # not an output the markers stand for
    written = mark_report_running(str(rep))
    assert sorted(os.path.basename(p) for p in written) == ["gate.json", "junit.xml", "report.html"]
    assert json.loads((rep / "gate.json").read_text()) == {
        "ok": False,
        "incomplete": True,
        "status": "running",
    }
    assert 'errors="1"' in (rep / "junit.xml").read_text()
    assert "no results" in (rep / "report.html").read_text()
    (rep / "report.html").write_text("<html>the new report</html>")  # the gate wrote this one
    removed = clear_report_running(str(rep))
    assert sorted(os.path.basename(p) for p in removed) == ["gate.json", "junit.xml"]
    assert sorted(os.listdir(rep)) == ["baseline-gate.json", "report.html"]


def test_markers_never_follow_or_remove_a_link(tmp_path: Path) -> None:
    rep = tmp_path / "rep"
    rep.mkdir(mode=0o700)
    target = tmp_path / "precious.xml"
    target.write_text("keep me")
    (rep / "junit.xml").symlink_to(target)
    written = mark_report_running(str(rep))
    assert "junit.xml" not in [os.path.basename(p) for p in written]
    assert (rep / "junit.xml").is_symlink()
    assert target.read_text() == "keep me"
    clear_report_running(str(rep))
    assert (rep / "junit.xml").is_symlink()
    assert target.read_text() == "keep me"


# -- where the codes are documented ---------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_run_help_readme_and_cli_reference_list_the_same_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from crashpoint.cli import main

    assert main(["run", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    for part in ("Exit codes: 0 every trial passed", "; 1 a trial failed", "; 2 bad usage",
                 "; 3 the gate could not judge", "130 / 143 interrupted",
                 "the first in this order wins: 130/143, 2, 1, 3"):  # fmt: skip
        assert part in help_text, part
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    assert [r.split("|")[1].strip() for r in table.splitlines() if r.startswith("| ")][1:] == [
        "0", "1", "2", "3", "130 / 143",
    ]  # fmt: skip
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text()
    section = reference.split("### Exit codes of `crashpoint run`", 1)[1].split("\n**", 1)[0]
    rows = [r.split("|")[1:3] for r in section.splitlines() if r.startswith("| ")][1:]
    assert [(c.strip(), v.strip(" `")) for c, v in rows] == [
        ("0", "pass"), ("1", "fail"), ("2", "bad input"), ("3", "not judged"),
        ("130 / 143", "interrupted"),
    ]  # fmt: skip
