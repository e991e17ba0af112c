"""The README's two set-up commands are what CI runs, and they work on a fresh machine.

The fast tests pin the contract between ``README.md`` and ``.ci/run``: exactly two commands,
each making its own virtual environment, and ``.ci/run`` running both verbatim. The slow test
runs both commands for real, in a copy of the checkout outside this repository, in a brand-new
virtual environment with the newest packages the registry offers (it needs the package index).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    """The ``sh`` blocks of the README's "The two commands" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", section, re.S)]


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
