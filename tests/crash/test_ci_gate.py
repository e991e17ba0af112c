"""The gate on a CI, as it runs there: ``crashpoint run`` over a small scenario (the verdict
matrix's json-steps agent, correct or with a planted bug, killed at every boundary), with
``GITHUB_STEP_SUMMARY`` and ``GITHUB_ACTIONS`` set or not, compared with a baseline, and
re-rendered by ``crashpoint report`` from its gate.json alone.

The runs a CI or a user starts are processes: the plain ``pytest`` run, and the failing gate
that reads GitHub's variables from the environment it inherits (and ``ci/crash-gate.sh``). The
others call :func:`crashpoint.cli.main` in this process (a pytest start is ~0.5 s of CPU a
run; the agents are processes either way).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from _cli_main import main
from _reaped import run_reaped

AGENT = Path(__file__).resolve().parents[1] / "verdicts" / "agents" / "json_steps.py"

#: line 8 is the fault entry: a failing campaign's annotation points at it; ``warm: true``:
#: the attempts fork from a warm interpreter, as a CI's gate would have them (the verdicts,
#: summaries and baselines are what this file is about)
SCENARIO = """\
name: json-steps gate
agent:
  command: ["{{python}}", "{{scenario_dir}}/../agents/json_steps.py", "--state",
            "{{state_dir}}"{bug}]
  timeout: 60s
  warm: true
faults:
  - kill: {{at: every-boundary}}
restarts: 3
seed: 2301
"""
FAULT_LINE = 8


@dataclass
class Run:
    code: int
    out: str
    err: str


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    return {**env, **extra}


def crashpoint(cwd: Path, *args: object, **env: str) -> Run:
    p = run_reaped(
        [sys.executable, "-m", "crashpoint", *map(str, args)], cwd=cwd, env=_env(**env), timeout=180
    )
    return Run(p.returncode, p.stdout, p.stderr)


def report(capsys: pytest.CaptureFixture[str], *args: object) -> Run:
    """``crashpoint report ARGS`` in this process (``crashpoint run`` above is the process the
    CI starts; rendering a gate.json needs no process of its own)."""
    capsys.readouterr()
    try:
        code = main(["report", *map(str, args)])
    except SystemExit as exc:  # a usage error, as argparse ends it
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return Run(code, out, err)


def here(cwd: Path, *args: object) -> Run:
    """``crashpoint ARGS`` run in ``cwd`` by :func:`crashpoint.cli.main` in this process (what
    the console script exits with), its output captured (a module's fixture has no capsys)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    return Run(code, out.getvalue(), err.getvalue())


def pytest_run(cwd: Path, *args: object) -> Run:
    p = run_reaped(
        [sys.executable, "-m", "pytest", "scenarios", "-p", "no:cacheprovider", "-q",
         "-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:fakefs",
         "-p", "no:langsmith_plugin",
         *map(str, args)],
        cwd=cwd, env=_env(), timeout=180,
    )  # fmt: skip
    return Run(p.returncode, p.stdout, p.stderr)


#: a previous gate whose trial 1 failed (and a campaign since removed)
CRAFTED = {
    "ok": False,
    "status": "finished",
    "campaigns": [
        {
            "scenario": "json-steps gate",
            "family": "kill@every-boundary",
            "ok": False,
            "trial_results": [{"index": 1, "seed": 2301, "plan": "?", "status": "failed"}],
        },
        {"scenario": "json-steps gate", "family": "kill@fileop", "ok": True},
    ],
}


def write_scenario(root: Path, *, buggy: bool) -> None:
    bug = ', "--bug", "completed_before_save"' if buggy else ""
    (root / "scenarios" / "gate.scenario.yaml").write_text(SCENARIO.format(bug=bug))


@dataclass
class Gates:
    root: Path
    passing: Run  # the correct agent, no CI variables (plain pytest, a crafted baseline)
    failing: Run  # the buggy agent against the passing baseline, on "GitHub"
    fixed: Run  # the correct agent again, against the failing gate kept in its own folder
    summary: Path
    failing_gate: Path  # a copy of the failing gate's report folder (gate.json + evidence)


@pytest.fixture(scope="module")
def gates(tmp_path_factory: pytest.TempPathFactory) -> Gates:
    root = tmp_path_factory.mktemp("ci-gate")
    (root / "scenarios").mkdir()
    (root / "agents").mkdir()
    shutil.copy(AGENT, root / "agents" / "json_steps.py")
    write_scenario(root, buggy=False)
    # plain pytest, its baseline a crafted gate where trial 1 failed: pytest users have it too
    crafted = root / "crafted.json"
    crafted.write_text(json.dumps(CRAFTED))
    passing = pytest_run(root, "--crashpoint-report", "rep-a", "--crashpoint-baseline", crafted)
    write_scenario(root, buggy=True)
    summary = root / "step-summary.md"
    failing = crashpoint(
        root,
        "run",
        "scenarios",
        "--report",
        "rep-b",
        "--quiet",
        "--baseline",
        "rep-a",
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_ACTIONS="true",
    )
    shutil.copytree(root / "rep-b", root / "copy-b")
    write_scenario(root, buggy=False)
    # the baseline is the report folder this run writes to: it is kept before being replaced
    fixed = here(root, "run", "scenarios", "--report", "rep-b", "--baseline", "rep-b")
    return Gates(root, passing, failing, fixed, summary, root / "copy-b")


def test_step_summary_names_the_failing_check_and_the_replay_command(gates: Gates) -> None:
    assert gates.failing.code == 1, gates.failing.out + gates.failing.err
    text = gates.summary.read_text()
    assert text.count("## crashpoint gate: FAIL") == 1
    assert "| json-steps gate [kill@every-boundary] | 12 | 12/12 |" in text
    assert "trial 1** (resumes_from_last_completed): re-ran a completed step" in text
    # relative to the working directory (the runner's absolute path means nothing elsewhere)
    assert "  - replay: `crashpoint replay rep-b/scenarios/" in text
    assert "### What changed" in text
    assert "**4 new failure(s)**" in text


def test_no_step_summary_and_no_annotation_off_github(gates: Gates) -> None:
    for run in (gates.passing, gates.fixed):
        assert run.code == 0, run.out + run.err
        assert "crashpoint gate: 1 campaigns" in run.out
        assert "::error" not in run.out + run.err
    assert not [p for p in gates.root.iterdir() if p.suffix == ".md" and p != gates.summary]
    assert "## crashpoint gate" not in gates.passing.out


def test_a_failing_campaign_is_annotated_at_its_fault_entry(gates: Gates) -> None:
    lines = [x for x in gates.failing.out.splitlines() if x.startswith("::error")]
    assert len(lines) == 1, gates.failing.out
    assert lines[0].startswith(
        f"::error file=scenarios/gate.scenario.yaml,line={FAULT_LINE},"
        "title=crashpoint FAIL (4)%3A json-steps gate [kill@every-boundary]::4 failing trial(s)"
    )
    assert "%0Areplay: crashpoint replay " in lines[0]


def test_baseline_reports_new_failures_then_fixed_ones(gates: Gates) -> None:
    out = gates.failing.out
    assert "crashpoint changes since " + str(gates.root / "rep-a" / "gate.json") in out
    assert ": 4 new failure(s); 0 fixed; 0 still failing;" in out
    assert "  NEW FAILURE json-steps gate [kill@every-boundary] trial 1 " in out
    assert f"    replay: crashpoint replay {gates.root}/rep-b/scenarios/" in out
    gate = json.loads((gates.failing_gate / "gate.json").read_text())
    assert gate["report_dir"] == str(gates.root / "rep-b")
    assert gate["changes"]["counts"]["new_failures"] == 4
    assert [e["index"] for e in gate["changes"]["new_failures"]] == [1, 3, 7, 11]
    assert 'id="changes"' in (gates.failing_gate / "report.html").read_text()
    # the next run, its baseline its own report folder: fixed
    fixed = gates.fixed.out
    assert "crashpoint changes since " + str(gates.root / "rep-b" / "baseline-gate.json") in fixed
    assert ": 0 new failure(s); 4 fixed;" in fixed
    assert "  FIXED json-steps gate [kill@every-boundary] trial 7 " in fixed
    again = json.loads((gates.root / "rep-b" / "gate.json").read_text())
    assert (again["ok"], again["changes"]["counts"]["fixed"]) == (True, 4)


def test_a_bad_baseline_is_one_line_before_any_trial(gates: Gates, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"campaigns": "no"}')
    for baseline, why in ((bad, "is not a gate.json"), (tmp_path / "nope", "no such file")):
        run = here(
            gates.root, "run", "scenarios", "--report", tmp_path / "r", "--baseline", baseline
        )
        assert run.code == 2, run.out + run.err
        assert (
            run.err == f"crashpoint: error: --baseline {baseline}: {why}" + run.err.split(why, 1)[1]
        )
        assert len(run.err.strip().splitlines()) == 1
        assert not (tmp_path / "r" / "gate.json").exists()  # nothing ran


def test_pytest_users_have_the_baseline_option(
    gates: Gates, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = gates.passing
    assert "crashpoint changes since " + str(gates.root / "crafted.json") in run.out
    assert ": 0 new failure(s); 1 fixed; 0 still failing;" in run.out
    assert "  FIXED json-steps gate [kill@every-boundary] trial 1 (plan changed)" in run.out
    assert "  REMOVED CAMPAIGN json-steps gate [kill@fileop]" in run.out
    # a bad value is refused while pytest configures, before any collection: a session in this
    # process shows it (the plain pytest run above is the process a user starts)
    monkeypatch.chdir(gates.root)
    capsys.readouterr()
    code = pytest.main(
        ["scenarios", "-p", "no:cacheprovider", "-q", "--crashpoint-baseline", "nowhere"]
    )
    out, err = capsys.readouterr()
    assert code == 4, out + err
    assert (
        "crashpoint: bad value 'nowhere' for --crashpoint-baseline (command line): no such file"
        in err
    )
    assert "Traceback" not in err


def test_report_rerenders_html_and_markdown_from_the_json(
    gates: Gates, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "downloaded"
    folder.mkdir()
    shutil.copy(gates.failing_gate / "gate.json", folder / "gate.json")
    run = report(capsys, folder)
    assert run.code == 0, run.err
    assert run.out.strip() == str(folder / "report.html")
    page = (folder / "report.html").read_text()
    assert 'crashpoint gate: <span class="verdict-fail">FAIL</span>' in page
    assert '<section id="changes"><h2>What changed</h2>' in page
    md = report(capsys, folder / "gate.json", "--format", "markdown")
    assert md.code == 0, md.err
    assert md.out.startswith("## crashpoint gate: FAIL\n")
    assert "(resumes_from_last_completed)" in md.out
    assert "`crashpoint replay " in md.out
    out = report(capsys, folder, "--format", "markdown", "--out", tmp_path / "s.md")
    assert out.code == 0, out.err
    assert (tmp_path / "s.md").read_text() == md.out


def test_report_written_elsewhere_links_the_evidence_beside_the_gate(
    gates: Gates, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "artifact"
    shutil.copytree(gates.failing_gate, copy)  # a downloaded report folder
    run = report(capsys, copy, "--out", tmp_path / "pages" / "r.html")
    assert run.code == 0, run.err
    pages = tmp_path / "pages"
    page = (pages / "r.html").read_text()
    hrefs = [h for h in re.findall(r'href="([^"#][^"]*)"', page)]
    assert hrefs, "no evidence link"
    for h in hrefs:
        assert h.startswith("../artifact/"), h
        assert (pages / h).exists(), f"{h} does not resolve from the page's folder"
    assert "no history.jsonl next to this trial" not in page  # histories read from the copy
    assert str(gates.failing_gate) not in page


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "no such file or folder"),
        ("not json", "is not JSON"),
        ('{"tables": []}', "is not a gate.json"),
        ('{"ok": false, "incomplete": true, "status": "running"}', "holds no results"),
    ],
)
def test_report_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, why: str
) -> None:
    path = tmp_path / "gate.json"
    if content is not None:
        path.write_text(content)
    run = report(capsys, path)
    assert run.code == 2, run.out + run.err
    assert run.err.startswith(f"crashpoint: error: {path}: {why}")
    assert len(run.err.strip().splitlines()) == 1
    assert not (tmp_path / "report.html").exists()


def test_a_bad_scenario_is_annotated_with_file_line_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub's variables set in this process (the failing gate above reads them from the
    environment a process inherits)."""
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "broken.scenario.yaml").write_text(
        "name: broken\n"
        "agent:\n"
        '  command: ["{python}", "-c", "pass"]\n'
        "faults:\n"
        "  - kill: {at: every-boundary, bogus: 3}\n"
    )
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run = here(tmp_path, "run", "bad", "--quiet")
    assert (
        "::error file=bad/broken.scenario.yaml,line=5,title=crashpoint scenario error "
        "(key faults[0].kill.bogus)::kill: unknown option(s) bogus" in run.out
    ), run.out + run.err
    assert "### Scenario errors" in summary.read_text()
    assert "bad/broken.scenario.yaml:5 (key 'faults[0].kill.bogus')" in summary.read_text()
    # off GitHub, no annotation: tests/plugin/test_cli.py's
    # test_bad_scenario_file_exits_2_naming_file_line_and_key (one crashpoint run fewer here)


# -- the example workflow and the script it calls -------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_workflow_keeps_a_baseline_and_uploads_the_report() -> None:
    import yaml

    flow = yaml.safe_load((ROOT / "ci" / "github-actions.yml").read_text())
    job = flow["jobs"]["crash-gate"]
    steps = {s.get("uses", s.get("name")).split("@")[0]: s for s in job["steps"]}
    restore, save = steps["actions/cache/restore"], steps["actions/cache/save"]
    # what is restored is what the gate reads as its baseline, and what is saved
    assert job["env"]["CRASHPOINT_BASELINE"].startswith(restore["with"]["path"] + "/")
    assert save["with"]["path"] == restore["with"]["path"]
    assert save["with"]["key"] == restore["with"]["key"]
    # the newest earlier run of this branch matches the first restore key
    assert save["with"]["key"].startswith(restore["with"]["restore-keys"].split()[0])
    assert "run_id" in save["with"]["key"]  # keys are immutable: one per run
    assert save["if"].startswith("always()")
    upload = steps["actions/upload-artifact"]
    assert upload["if"] == "always()"
    assert upload["with"]["path"].rstrip("/") == job["env"]["CRASHPOINT_REPORT"]
    run = [s for s in job["steps"] if "crash-gate.sh" in str(s.get("run", ""))]
    assert len(run) == 1


def test_the_script_skips_a_missing_baseline_and_leaves_the_summary_to_the_gate(
    tmp_path: Path,
) -> None:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "broken.scenario.yaml").write_text(
        'name: broken\nagent:\n  command: ["{python}", "-c", "pass"]\nfaults:\n  - nope: {}\n'
    )
    summary = tmp_path / "summary.md"
    p = subprocess.run(
        ["bash", str(ROOT / "ci" / "crash-gate.sh"), "scenarios/"],
        cwd=tmp_path,
        env=_env(
            CRASHPOINT_INSTALL="none",
            CRASHPOINT_BASELINE="last/gate.json",
            GITHUB_STEP_SUMMARY=str(summary),
            PYTHON=sys.executable,
        ),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert p.returncode == 2, p.stdout + p.stderr  # a malformed scenario file: bad input
    assert "crash-gate: no baseline at last/gate.json yet (a first run?): not comparing" in p.stderr
    text = summary.read_text()
    assert text.count("## crashpoint gate: FAIL (scenario errors)") == 1
    assert "scenarios/broken.scenario.yaml:5" in text
