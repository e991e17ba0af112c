"""The README's and the how-tos' examples, run as written from a scratch folder outside the
repository, with the crashpoint under test (its ``src`` first on ``PYTHONPATH``, and
``crashpoint``, ``pytest`` and ``python`` on ``PATH`` meaning this interpreter).

Each test takes its block from the page by the name in the block's ``<!-- example: NAME -->``
mark (see ``_doc_examples.py``), writes the files the page says to write, runs the command the
page gives, and checks what the page says happens: the exit code and a telling line. Where the
page leaves a file to the reader (``myagent``, "your agent"), the test supplies the smallest
one: an agent on the reference library, :data:`MYAGENT`. Examples that need an optional extra
skip with the reason when it is not installed; the long ones are ``slow`` (the README's fixture
example and its scenario file stay in the default run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from _doc_examples import ROOT, Block, blocks, example

import crashpoint
from _cli_main import main
from _reaped import run_reaped
from crashpoint.harness import ScenarioError, load_scenario

SRC = Path(crashpoint.__file__).resolve().parents[1]

#: The reader's agent where a page says "your agent": the README's five lines, storing in the
#: folder given with --state.
MYAGENT = textwrap.dedent("""\
    import argparse

    from crashpoint.checkpoint import Store, open_run

    state = argparse.ArgumentParser()
    state.add_argument("--state", required=True)
    folder = state.parse_args().state

    with open_run(Store(folder), "report-42", steps=["search", "notify"]) as run:
        hits = run.step("search", lambda: ["a", "b"], kind="tool")
        run.step("notify", lambda: run.effect("send_email", {"to": "ops@example.com"}))
        run.finish({"hits": hits})
""")


#: Plugins of this environment (test and dev extras) that crashpoint does not use.
UNRELATED_PLUGINS = ("hypothesispytest", "benchmark", "fakefs", "langsmith_plugin")


# -- running commands as a reader would ----------------------------------------------------------


def _env(tmp_path: Path, pythonpath: list[Path] | None = None) -> dict[str, str]:
    """A reader's shell: nothing of this session's crashpoint or pytest settings (but the
    unrelated plugins left out), the crashpoint under test importable, and shims so
    ``crashpoint``, ``pytest`` and ``python`` run this interpreter."""
    shims = tmp_path / ".shims"
    if not shims.is_dir():
        shims.mkdir()
        for name, run in (
            ("crashpoint", "-m crashpoint"),
            ("pytest", "-m pytest"),
            ("python", ""),
            ("python3", ""),
        ):
            (shims / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" {run} "$@"\n')
            (shims / name).chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CRASHPOINT_", "PYTEST_", "COV_", "GITHUB_"))
        and k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    }
    env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    # the pytest sessions (``pytest``, ``crashpoint run``) leave out this environment's plugins
    # that a reader's project would not have: each costs 0.5-2 s of CPU to load (langsmith's
    # imports langsmith, Hypothesis's imports hypothesis at every session's end)
    env["PYTEST_ADDOPTS"] = " ".join(f"-p no:{name}" for name in UNRELATED_PLUGINS)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [*(pythonpath or []), SRC])
    return env


def _sh(
    script: str, cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash in ``cwd``, in a session of its own (killed whole on a timeout,
    and whatever it left is killed too)."""
    try:
        return run_reaped(["bash", "-c", script], cwd=cwd, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out, err = str(exc.output or ""), str(exc.stderr or "")
        pytest.fail(f"timed out after {timeout}s: {script}\n{out[-3000:]}\n{err[-3000:]}")


def _commands(block: Block) -> list[str]:
    """The commands of a ``console`` block (its ``$ `` lines) or a ``sh`` block (its lines,
    a trailing backslash joining the next)."""
    if block.lang == "console":
        return [line[2:] for line in block.body.splitlines() if line.startswith("$ ")]
    return [c for c in block.body.replace("\\\n", "").splitlines() if c.strip()]


def _ok(r: subprocess.CompletedProcess[str], rc: int = 0) -> str:
    out = r.stdout + r.stderr
    assert r.returncode == rc, f"exit {r.returncode}, expected {rc}\n{out[-6000:]}"
    return out


def _copy_example(name: str, tmp_path: Path) -> None:
    shutil.copytree(
        ROOT / "examples" / name,
        tmp_path / "examples" / name,
        ignore=shutil.ignore_patterns("__pycache__", "crashpoint-report"),
        dirs_exist_ok=True,
    )


# -- README ---------------------------------------------------------------------------------


def test_readme_resumable_agent_runs_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = example("readme-resumable-agent").body
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # the second run replays the finished run
        exec(compile(code, "README.md (five lines)", "exec"), {"__name__": "__docs__"})  # noqa: S102
    assert (tmp_path / "state").is_dir()


def _fixture_project(tmp_path: Path, layout: str) -> Path:
    """The README's fixture example pasted into a brand-new project: ``pytest.ini`` with
    ``filterwarnings = error``, the test file as the README has it, ``myagent`` beside it
    (``module``) or a package at the rootdir with the test in ``tests/`` (``package``)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n")
    test_dir = project if layout == "module" else project / "tests"
    test_dir.mkdir(exist_ok=True)
    (test_dir / "test_agent.py").write_text(example("readme-fixture").body)
    if layout == "module":
        (project / "myagent.py").write_text(MYAGENT)
    elif layout == "package":
        (project / "myagent").mkdir()
        (project / "myagent" / "__init__.py").write_text("")
        (project / "myagent" / "__main__.py").write_text(MYAGENT)
    return project


# the package layout only moves the agent: slow (the module layout is the fast cover)
@pytest.mark.parametrize("layout", ["module", pytest.param("package", marks=pytest.mark.slow)])
def test_readme_fixture_example_passes_pasted_into_a_new_project(
    tmp_path: Path, layout: str
) -> None:
    """``pytest -q`` exits 0 in a new project with ``myagent`` beside the test (or a package
    at the rootdir). Only the corruption family's trial count is lowered (an option, not an
    edit): the files are as the README has them."""
    project = _fixture_project(tmp_path, layout)
    env = _env(tmp_path) | {"CRASHPOINT_TRIALS": "2"}
    out = _ok(_sh("pytest -q", project, env))
    assert "1 passed" in out
    assert re.search(r"test_agent_recovers \[campaign-1\].*PASS", out), out


@pytest.mark.slow
def test_readme_fixture_example_passes_with_its_own_trial_count(tmp_path: Path) -> None:
    """The same with no option at all: the marker's families, 20 corruption trials."""
    project = _fixture_project(tmp_path, "module")
    out = _ok(_sh("pytest -q", project, _env(tmp_path), timeout=600))
    assert "1 passed" in out


def test_readme_fixture_example_without_the_module_fails_in_one_line(tmp_path: Path) -> None:
    """No ``myagent``: the test fails with the scenario file's one line (what, the command as
    written, the exit code and stderr's last line, how to fix), not the harness's traceback."""
    project = _fixture_project(tmp_path, "none")
    out = _ok(_sh("pytest -q", project, _env(tmp_path)), rc=1)
    line = next(x for x in out.splitlines() if x.startswith("crash_harness: "))
    assert line.startswith("crash_harness: the golden run (no faults) did not complete: exit 1 (")
    assert "No module named myagent)" in line
    assert "Command: {python} -m myagent --state {state_dir};" in line
    assert f"PYTHONPATH={project}" in line  # where it looked: how to fix
    assert "Traceback" not in out
    assert "_trial.py" not in out
    assert "strace" not in out
    assert "site-packages" not in out


def test_readme_scenario_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's scenario file saved as it says, ``myagent`` importable: its first family
    passes (the fast run; all of them: the slow test below). Saved as ``.yml``, the gate says
    which name to give it (no agent runs then: the gate's ``main`` in this process)."""
    (tmp_path / "my-agent.scenario.yaml").write_text(example("readme-scenario").body)
    (tmp_path / "myagent.py").write_text(MYAGENT)
    env = _env(tmp_path, [tmp_path])
    out = _ok(_sh("crashpoint run my-agent.scenario.yaml -k every-boundary", tmp_path, env))
    assert re.search(r"\[kill@every-boundary\].*PASS", out), out

    shutil.move(tmp_path / "my-agent.scenario.yaml", tmp_path / "my-agent.yml")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["run", "my-agent.yml"]) == 2
    assert "Did you mean `my-agent.scenario.yaml`?" in "".join(capsys.readouterr())
    assert main(["run", "."]) == 3  # nothing judged
    out = "".join(capsys.readouterr())
    assert "crashpoint: note: my-agent.yml looks like a crashpoint scenario" in out, out


@pytest.mark.slow
def test_readme_scenario_passes_every_family(tmp_path: Path) -> None:
    (tmp_path / "my-agent.scenario.yaml").write_text(example("readme-scenario").body)
    (tmp_path / "myagent.py").write_text(MYAGENT)
    cmd = "crashpoint run my-agent.scenario.yaml --quiet"
    out = _ok(_sh(cmd, tmp_path, _env(tmp_path, [tmp_path]), timeout=600))
    assert "4 passed" in out, out


def test_readme_checkpoints_cli_sends_once(tmp_path: Path) -> None:
    """The README's command-line agent, ``send-the-email`` standing for the reader's send."""
    script = "set -e\nsend-the-email() { echo SENT; }\n" + "\n".join(
        _commands(example("readme-checkpoints-cli"))
    )
    out = _ok(_sh(script, tmp_path, _env(tmp_path)))
    assert out.count("SENT") == 1
    status = _sh("crashpoint checkpoints status report-42 --store state", tmp_path, _env(tmp_path))
    assert "completed" in _ok(status)


def test_readme_openai_webhook_scenario_loads(tmp_path: Path) -> None:
    """The README's zero-instrumentation fragment beside the example's agent is a valid
    scenario (its whole run needs the OpenAI SDK: the slow how-to test runs it)."""
    shutil.copy(ROOT / "examples" / "openai-webhook" / "agent.py", tmp_path / "agent.py")
    path = tmp_path / "triage.scenario.yaml"
    fragment = yaml.safe_load(example("readme-openai-webhook").body)
    path.write_text(yaml.safe_dump({"name": "triage"} | fragment))
    sc = load_scenario(path)
    kinds = [f.family.chain[0][0] for f in sc.families]
    assert kinds == ["kill", "kill", "power_loss", "network"]


# -- fragments of scenario files --------------------------------------------------------------

BASE = {
    "name": "fragment",
    "agent": {"command": ["{python}", "-m", "crashpoint.agents.demo", "--state", "{state_dir}"]},
    "faults": [{"kill": {"at": "every-boundary"}}],
}


@pytest.mark.parametrize(
    "name",
    [
        "howto-fileop-faults-fragment",
        "howto-services-fragment",
        "howto-network-fragment",
        "howto-stream-fragment",
        "howto-mcp-fragment",
        "howto-langgraph-faults-fragment",
    ],
)
def test_scenario_fragments_load(name: str, tmp_path: Path) -> None:
    """A how-to's ``faults:`` or ``services:`` fragment, in a scenario of the demo agent."""
    fragment = yaml.safe_load(example(name).body)
    path = tmp_path / "fragment.scenario.yaml"
    path.write_text(yaml.safe_dump(BASE | fragment))
    try:
        load_scenario(path)
    except ScenarioError as exc:
        pytest.fail(f"{name}: {exc}")


@pytest.mark.parametrize("name", ["howto-test-your-agent-scenario", "howto-ci-gate-scenario"])
def test_how_to_scenarios_load(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_agent.py").write_text(MYAGENT)
    monkeypatch.syspath_prepend(str(tmp_path))  # "installed"
    path = tmp_path / "my-agent.scenario.yaml"
    path.write_text(example(name).body)
    assert load_scenario(path).families


@pytest.mark.slow
@pytest.mark.parametrize("name", ["howto-test-your-agent-scenario", "howto-ci-gate-scenario"])
def test_how_to_scenarios_pass(name: str, tmp_path: Path) -> None:
    (tmp_path / "my_agent.py").write_text(MYAGENT)
    (tmp_path / "my-agent.scenario.yaml").write_text(example(name).body)
    cmd = "crashpoint run my-agent.scenario.yaml --quiet"
    out = _ok(_sh(cmd, tmp_path, _env(tmp_path, [tmp_path]), timeout=900))
    assert re.search(r"\d+ passed", out), out
    assert "failed" not in out, out


def test_shell_agent_scenario_loads(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "shell-lifecycle" / "agent.sh", tmp_path / "agent.sh")
    path = tmp_path / "shell.scenario.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "shell"} | yaml.safe_load(example("howto-shell-agent-scenario").body)
        )
    )
    assert len(load_scenario(path).families) == 4


# -- excerpts of shipped files ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("howto-downstream-test-excerpt", "examples/downstream/test_crash_recovery.py"),
        ("howto-downstream-conftest-excerpt", "examples/downstream/conftest.py"),
        ("howto-langgraph-scenario", "examples/langgraph/broken.scenario.yaml"),
    ],
)
def test_excerpts_are_the_shipped_files(name: str, source: str) -> None:
    """A block that shows a shipped file (run by its own tests) shows it as it is."""
    shipped = {line.strip() for line in (ROOT / source).read_text().splitlines()}
    for line in example(name).body.splitlines():
        assert not line.strip() or line.strip() in shipped, f"{name}: not in {source}: {line}"


# -- how-to commands ------------------------------------------------------------------------


def _small_scenario(folder: Path, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(
        "name: my agent survives kills\n"
        'agent: {command: ["{python}", "-m", "my_agent", "--state", "{state_dir}"]}\n'
        "faults: [{kill: {at: every-boundary}}]\n"
    )


@pytest.mark.slow
def test_running_a_scenarios_folder(tmp_path: Path) -> None:
    """test-your-agent's two commands and ci-gate's local run, over a scenarios/ folder."""
    (tmp_path / "my_agent.py").write_text(MYAGENT)
    _small_scenario(tmp_path / "scenarios", "my-agent.scenario.yaml")
    env = _env(tmp_path, [tmp_path])
    for name in ("howto-run-scenarios-folder", "howto-ci-gate-run-locally"):
        for cmd in _commands(example(name)):
            out = _ok(_sh(cmd, tmp_path, env))
            assert re.search(r"my agent survives kills \[kill@every-boundary\].*PASS", out), out
    assert (tmp_path / "out" / "gate.json").is_file()
    assert (tmp_path / "crashpoint-report" / "report.html").is_file()


# slow: fast cover: tests/crash/test_ci_gate.py (baseline, report, step summary)
@pytest.mark.slow
def test_ci_gate_report_and_baseline(tmp_path: Path) -> None:
    """ci-gate's local summary from a downloaded report folder, and a run against the last
    report as its baseline."""
    (tmp_path / "my_agent.py").write_text(MYAGENT)
    _small_scenario(tmp_path / "scenarios", "my-agent.scenario.yaml")
    env = _env(tmp_path, [tmp_path])
    _ok(_sh("crashpoint run scenarios/ --quiet --report crashpoint-report-1", tmp_path, env))
    markdown, html = _commands(example("howto-ci-gate-report"))
    assert "## crashpoint gate: PASS" in _ok(_sh(markdown, tmp_path, env))
    (tmp_path / "crashpoint-report-1" / "report.html").unlink()
    _ok(_sh(html, tmp_path, env))
    assert (tmp_path / "crashpoint-report-1" / "report.html").is_file()
    shutil.copytree(tmp_path / "crashpoint-report-1", tmp_path / "last-report")
    (baseline,) = _commands(example("howto-ci-gate-baseline"))
    out = _ok(_sh(baseline, tmp_path, env))
    assert "0 new failure(s); 0 fixed; 0 still failing" in out, out


@pytest.mark.slow
def test_ci_gate_script(tmp_path: Path) -> None:
    """ci-gate's script commands, with the script copied as the page says."""
    (tmp_path / "ci").mkdir()
    shutil.copy(ROOT / "ci" / "crash-gate.sh", tmp_path / "ci" / "crash-gate.sh")
    (tmp_path / "my_agent.py").write_text(MYAGENT)
    _small_scenario(tmp_path / "scenarios", "my-agent-kills.scenario.yaml")
    _small_scenario(tmp_path / "scenarios", "kill-every-boundary.scenario.yaml")
    env = _env(tmp_path, [tmp_path]) | {"PYTHON": "python3"}
    for name in ("howto-ci-gate-script", "howto-ci-gate-shard"):
        for cmd in _commands(example(name)):
            out = _ok(_sh(cmd, tmp_path, env))
            assert "PASS" in out, (cmd, out)
    assert (tmp_path / "crashpoint-report" / "gate.json").is_file()


def test_shell_agent_runs_and_resumes_without_emailing_twice(tmp_path: Path) -> None:
    (tmp_path / "agent.sh").write_text(example("howto-shell-agent").body)
    env = _env(tmp_path)
    first = _sh("sh agent.sh", tmp_path, env)
    assert _ok(first)
    assert json.loads(first.stdout) == {"sent": "ops@example.com"}
    assert first.stderr.count("emailing ops@example.com") == 1
    again = _sh("sh agent.sh", tmp_path, env)
    assert _ok(again)
    assert again.stdout == first.stdout
    assert "emailing" not in again.stderr


def test_demo_agent_approval(tmp_path: Path) -> None:
    """resumable-agent's console session, ``/tmp/demo`` being a fresh folder; the shown output
    lines are in the output, and ``echo $?`` shows the exit code the page shows."""
    block = example("howto-demo-agent-approval")
    body = block.body.replace("/tmp/demo", str(tmp_path / "demo"))
    script = "\n".join(line[2:] for line in body.splitlines() if line.startswith("$ "))
    out = _ok(_sh(script, tmp_path, _env(tmp_path)))
    for line in body.splitlines():
        if line and not line.startswith("$ "):
            assert line.split("...")[0].strip() in out, (line, out)


def test_rollback_cli_prints_what_the_page_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command-line rollback, on the run as the page's first block left it before its
    own rollback call."""
    page = "docs/how-to/rollback-history-notifications.md"
    first = next(b for b in blocks(page) if b.lang == "python")
    monkeypatch.chdir(tmp_path)
    setup = first.body.split("done = rollback(")[0]
    exec(compile(setup, f"{page} (first block)", "exec"), {"__name__": "__docs__"})  # noqa: S102
    lines = example("howto-rollback-cli").body.strip().splitlines()
    assert lines[0].startswith("$ crashpoint ")
    out = _ok(_sh(lines[0][2:], tmp_path, _env(tmp_path)))
    assert out.strip().splitlines() == lines[1:]


# -- the optional extras (slow: whole sweeps of real frameworks) --------------------------------


def _run_example_commands(name: str, tmp_path: Path, folder: str, want: list[int]) -> str:
    _copy_example(folder, tmp_path)
    env = _env(tmp_path)
    outs = []
    commands = [c.split("#")[0].strip() for c in _commands(example(name))]
    commands = [c for c in commands if not c.startswith("pip ")]  # installed, or skipped
    assert len(commands) == len(want), commands
    for cmd, rc in zip(commands, want, strict=True):
        outs.append(_ok(_sh(cmd + " --quiet", tmp_path, env, timeout=900), rc=rc))
    return "\n".join(outs)


@pytest.mark.slow
def test_openai_example_broken_and_fixed(tmp_path: Path) -> None:
    pytest.importorskip(
        "openai", reason="the example agent uses the OpenAI SDK (pip install openai)"
    )
    pytest.importorskip("httpx", reason="the example agent posts with httpx")
    out = _run_example_commands("howto-openai-broken", tmp_path, "openai-webhook", [1])
    assert "DUPLICATED POST /hook" in out
    _run_example_commands("howto-openai-fixed", tmp_path, "openai-webhook", [0])


@pytest.mark.slow
def test_langgraph_example_broken_and_fixed(tmp_path: Path) -> None:
    pytest.importorskip("langgraph", reason="needs the extra: pip install 'crashpoint[langgraph]'")
    pytest.importorskip(
        "langgraph.checkpoint.sqlite", reason="needs pip install langgraph-checkpoint-sqlite"
    )
    out = _run_example_commands("howto-langgraph-broken", tmp_path, "langgraph", [1])
    assert "DUPLICATED POST /email" in out
    _run_example_commands("howto-langgraph-fixed", tmp_path, "langgraph", [0, 0])
