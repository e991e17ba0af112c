"""``crashpoint run`` loads only the pytest plugins it needs: crashpoint's (and pytest-xdist's
with ``-n``) and the project's conftest.py files, not every plugin installed in the environment
(importing those was ~1.1 s of the ~2 s of CPU a gate spent before judging anything, again in
each xdist worker); ``-p NAME`` loads another.

The environment here gets one more installed plugin: a distribution in a folder on
``PYTHONPATH`` whose ``pytest11`` entry point names a module that leaves a marker file when it
is imported, as any installed plugin would load in a plain pytest session.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("no_unrelated_plugins")

PLUGIN = "cp_marker_plugin"
#: a conftest hook of the crashpoint plugin: it must still be called under the gate
CONFTEST = """
import json

def pytest_crashpoint_campaign_finished(config, name, result):
    with open("finished.jsonl", "a") as f:
        f.write(json.dumps({"name": name, "ok": result.ok}) + "\\n")
"""


def _installed_plugin(site: Path, marker: Path) -> None:
    """A distribution in ``site`` registering the pytest plugin ``PLUGIN`` by entry point."""
    dist = site / f"{PLUGIN}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[pytest11]\nmarker = {PLUGIN}\n")
    (site / f"{PLUGIN}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
    )


@pytest.fixture
def marker(inner: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The marker file the installed plugin writes when imported (not there yet)."""
    site = inner.path / "site"
    marker = inner.path / "plugin-imported"
    _installed_plugin(site, marker)
    # the environment really has it: what pytest's autoload would find and import
    eps = [
        ep
        for d in importlib.metadata.distributions(path=[str(site)])
        for ep in d.entry_points
        if ep.group == "pytest11"
    ]
    assert [(ep.name, ep.value) for ep in eps] == [("marker", PLUGIN)]
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    )
    return marker


def crashpoint(inner: Any, *args: Any) -> pytest.RunResult:
    result: pytest.RunResult = inner.pytester.run(
        sys.executable, "-m", "crashpoint", *map(str, args), timeout=180
    )
    return result


def test_the_gate_imports_no_installed_plugin_but_runs_conftest_hooks(
    inner: Any, marker: Path
) -> None:
    inner.pytester.makeconftest(CONFTEST)
    inner.scenario("tiny", "kill: {at: random, count: 1}", command=inner.command(inner.tiny_agent))
    result = crashpoint(inner, "run", ".", "--report", inner.path / "out", "--quiet")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert not marker.exists(), "crashpoint run imported an installed pytest plugin"
    finished = [json.loads(ln) for ln in (inner.path / "finished.jsonl").read_text().splitlines()]
    assert finished == [{"name": "tiny-kill_random", "ok": True}]


def test_dash_p_loads_a_plugin_by_its_entry_point(inner: Any, marker: Path) -> None:
    (inner.path / "empty").mkdir()
    result = crashpoint(inner, "run", "empty", "-p", "marker", "--report", inner.path / "out")
    assert result.ret == 3, result.stdout.str() + result.stderr.str()  # nothing to judge
    assert marker.read_text() == "imported"


def test_run_help_says_how_to_load_another_plugin(inner: Any) -> None:
    result = crashpoint(inner, "run", "--help")
    assert result.ret == 0
    out = " ".join(result.stdout.str().split())
    assert "-p NAME also load this pytest plugin" in out
    assert "not every pytest plugin installed" in out


def test_the_variable_is_set_for_the_session_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run`` may be called in-process (``crashpoint.cli.main``): the variable is as it was
    afterwards, unset or set to the user's own value."""
    from crashpoint.cli import _gate

    var = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
    monkeypatch.delenv(var, raising=False)
    with _gate._plugin_autoload_off():
        assert os.environ[var] == "1"
    assert var not in os.environ
    monkeypatch.setenv(var, "yes")
    with _gate._plugin_autoload_off():
        assert os.environ[var] == "1"
    assert os.environ[var] == "yes"
