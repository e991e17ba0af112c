"""examples/downstream: a repository that uses only the fixtures and the marker catches its
broken agent and passes the demo agent, run exactly as it is."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("no_unrelated_plugins")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "downstream"


# slow: fast cover: test_fixtures.py's
# test_crash_harness_fails_a_broken_agent_with_replay_commands
@pytest.mark.slow
def test_example_passes_the_demo_agent_and_catches_the_broken_one(
    inner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # leave the example folder as it is
    monkeypatch.chdir(EXAMPLE)  # as its user runs it (reports go to --basetemp, not here)
    basetemp = inner.path / "basetemp"
    args = [
        sys.executable,
        "-m",
        "pytest",
        f"--rootdir={EXAMPLE}",
        f"--basetemp={basetemp}",
        "-p",
        "no:cacheprovider",
        *inner.load_plugins("crashpoint"),
    ]
    result = inner.pytester.run(*args, timeout=300)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    assert result.parseoutcomes() == {"passed": 1, "failed": 1}
    result.stdout.fnmatch_lines(
        [
            "crashpoint: seed=7 *",  # from the example's pytest.ini
            f"rootdir: {EXAMPLE}",
            "configfile: pytest.ini",
            "test_crash_recovery.py .F*",
            "*_ test_our_agent_recovers _*",
            "E   *AssertionError: crashpoint: 4 of 8 trials failed, 8 exercised "
            "(seed 7, 0 skipped)",
            "FAILED test_crash_recovery.py::test_our_agent_recovers - *",
        ]
    )
    out = result.stdout.str()
    failure = out[out.index("_ test_our_agent_recovers _") : out.index("short test summary")]
    # the failing checks, by name, with what went wrong
    assert "resumes_from_last_completed: FAIL: re-ran a completed step" in failure
    assert "exactly_once: FAIL: DUPLICATED email" in failure
    # and a replay command per failing trial, pointing at its evidence
    replays = re.findall(r"replay: crashpoint replay (\S+)", failure)
    assert replays
    for folder in replays:
        assert folder.startswith(str(basetemp))
        assert (Path(folder) / "plan.json").is_file()


def test_example_test_is_about_ten_lines_using_only_fixtures_and_marker() -> None:
    source = (EXAMPLE / "test_crash_recovery.py").read_text()
    tree = ast.parse(source)
    imports = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imports |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imports == {"pytest"}
    body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) else tree.body  # docstring
    code = [
        ln
        for node in body
        for ln in ast.get_source_segment(source, node, padded=True).splitlines()  # type: ignore[union-attr]
        if ln.strip()
    ]
    assert len(code) <= 12, code
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            assert "crash_harness" in [a.arg for a in node.args.args]
            assert any(
                isinstance(d, ast.Call) and ast.unparse(d.func) == "pytest.mark.crashpoint"
                for d in node.decorator_list
            )
