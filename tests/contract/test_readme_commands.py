"""The README's two set-up commands are what CI runs, and they work on a fresh machine.

The fast tests pin the contract between ``README.md`` and ``.ci/run``: exactly two commands,
each making its own virtual environment, and ``.ci/run`` running both verbatim, with the linters
(``ruff check``, ``ruff format --check``, ``mypy``, ``lint-imports``) in the test command's
virtual environment, each one failing the script when it fails (run against stand-in tools, in
a copy of the script: milliseconds, no index). The slow test
runs both commands for real, in a copy of the checkout outside this repository, in a brand-new
virtual environment with the newest packages the registry offers (it needs the package index).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    """The ``sh`` blocks of the README's "The two commands" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", section, re.S)]


#: The two commands' marks in README.md (tests/docs/test_examples_marked.py): these tests run
#: them, the slow one for real.
EXAMPLES = ("readme-setup-gate", "readme-setup-tests")


def test_readme_marks_both_commands_as_run_here() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, cmd in zip(EXAMPLES, readme_commands(), strict=True):
        assert f"<!-- example: {name} -->\n```sh\n{cmd}\n```" in text


def test_readme_has_exactly_two_commands_each_in_a_fresh_venv() -> None:
    commands = readme_commands()
    assert len(commands) == 2, commands
    gate, tests = commands
    for cmd in commands:
        assert "\n" not in cmd
        assert cmd.startswith("python3 -m venv .venv && . .venv/bin/activate && "), cmd
    assert gate.endswith("crashpoint run scenarios/")
    assert tests.endswith("python3 -m pytest")
    assert '".[dev]"' in tests


def test_ci_runs_both_readme_commands_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    gate, tests = readme_commands()
    assert tests in ci
    assert gate in ci
    assert ci.index(tests) < ci.index(gate)  # the tests first: their failure is the news
    assert "set -euo pipefail" in ci


#: What ``.ci/run`` runs after the test command, in its venv, each line as it stands.
LINT_STEPS = ("ruff check .", "ruff format --check .", "mypy", "lint-imports")


def test_ci_runs_the_linters_in_the_test_venv_each_on_its_own_line() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    gate, tests = readme_commands()
    at = [ci.index(step) for step in LINT_STEPS]  # a whole line: no `|| true`, no `&&` list
    assert at == sorted(at)
    assert ci.index("set -euo pipefail") < ci.index(tests) < min(at)
    deactivate = next(i for i, line in enumerate(ci) if line.startswith("deactivate"))
    assert max(at) < deactivate < ci.index(gate)  # still inside the test command's venv


#: Stands in for python3, ruff, mypy, lint-imports and crashpoint: logs the step it is (and
#: whether the fake venv is active), and fails if it is the step named in $FAKECI_FAIL.
FAKE_TOOL = r"""#!/usr/bin/env bash
tool=$(basename "$0")
case "$tool${*:+ $*}" in
  "python3 -m venv .venv")
    mkdir -p .venv/bin
    printf '%s\n' 'export FAKECI_VENV=1' \
      'deactivate() { unset FAKECI_VENV; unset -f deactivate; }' > .venv/bin/activate
    step=venv ;;
  *'-m pip install -e .[dev]') step=install-dev ;;
  *'-m pip install -e .') step=install ;;
  "python3 -m pytest") step=pytest ;;
  "ruff check .") step=ruff-check ;;
  "ruff format --check .") step=ruff-format ;;
  "mypy") step=mypy ;;
  "lint-imports") step=lint-imports ;;
  "crashpoint run scenarios/") step=gate ;;
  *) echo "unexpected: $tool $*" >&2; exit 99 ;;
esac
echo "$step venv=${FAKECI_VENV:-0}" >> "$FAKECI_LOG"
[ "$step" != "${FAKECI_FAIL:-}" ]
"""
CI_STEPS = [
    "venv venv=0",
    "install-dev venv=1",
    "pytest venv=1",
    "ruff-check venv=1",
    "ruff-format venv=1",
    "mypy venv=1",
    "lint-imports venv=1",
    "venv venv=0",
    "install venv=1",
    "gate venv=1",
]


def run_ci_with_fake_tools(tmp_path: Path, fail: str, children: Any) -> tuple[int, list[str]]:
    """``.ci/run`` copied into an empty tree, run with the stand-in tools first on PATH (in a
    session of its own: the ``children`` fixture reaps the script and every tool it started)."""
    work, tools = tmp_path / "repo", tmp_path / "bin"
    (work / ".ci").mkdir(parents=True)
    shutil.copy2(ROOT / ".ci" / "run", work / ".ci" / "run")
    tools.mkdir()
    for name in ("python3", "ruff", "mypy", "lint-imports", "crashpoint"):
        (tools / name).write_text(FAKE_TOOL, encoding="utf-8")
        (tools / name).chmod(stat.S_IRWXU)
    log = tmp_path / "steps.log"
    env = {
        "PATH": f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "FAKECI_LOG": str(log),
        "FAKECI_FAIL": fail,
        "HOME": str(tmp_path),
    }
    child = children.spawn(["bash", str(work / ".ci" / "run")], env=env, cwd=tmp_path)
    rc = child.wait(60)
    assert "unexpected" not in child.stderr_text(), child.stderr_text()
    steps = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return rc, steps


def test_ci_runs_every_step_in_order_when_all_pass(tmp_path: Path, children: Any) -> None:
    rc, steps = run_ci_with_fake_tools(tmp_path, "", children)
    assert (rc, steps) == (0, CI_STEPS)


@pytest.mark.parametrize(
    "fail",
    ["install-dev", "pytest", "ruff-check", "ruff-format", "mypy", "lint-imports", "gate"],
)
def test_each_failing_step_fails_ci_and_stops_it(tmp_path: Path, fail: str, children: Any) -> None:
    rc, steps = run_ci_with_fake_tools(tmp_path, fail, children)
    assert rc != 0
    assert steps[-1].split()[0] == fail  # the failing step is the last one that ran
    assert steps == CI_STEPS[: len(steps)]


@pytest.mark.slow
def test_both_readme_commands_pass_in_a_fresh_copy_outside_the_repository(tmp_path: Path) -> None:
    """A copy of the tracked files (as a clone would have them), the two commands run by bash
    exactly as the README gives them. Needs the package index; minutes, so ``-m slow``."""
    files = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    work = tmp_path / "crashpoint"
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, work / name)
    if (ROOT.parent / "shared").is_dir():  # CI has it beside the clone
        shutil.copytree(ROOT.parent / "shared", tmp_path / "shared")
    gate, tests = readme_commands()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CRASHPOINT_", "PYTEST_", "VIRTUAL_ENV"))
    }
    # the inner suite without its own slow sweeps (this test is one of them)
    tests_fast = tests + " -q -x -p no:cacheprovider"
    for cmd in (gate, tests_fast):
        r = subprocess.run(
            ["bash", "-c", cmd],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            start_new_session=True,
            check=False,
        )
        assert r.returncode == 0, f"{cmd}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    assert (work / "crashpoint-report" / "gate.json").is_file()
