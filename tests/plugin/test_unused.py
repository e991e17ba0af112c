"""A plugin that costs nothing when unused (issue 24, item 4).

pytest loads crashpoint's plugin in every session of an environment that has crashpoint
installed. A session whose tests use no crashpoint fixture or marker and collect no scenario
file must not pay for it: no import of the harness, the faults, the checkpoint library, the
process control or psutil, no line in its output, and pytest's own signal handlers. These tests
run pytest in a subprocess (a fresh interpreter: what is imported is what this session
imported) and read the modules it loaded from a conftest that lists them at the end.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest_plugins = ["pytester"]

#: a conftest that writes the crashpoint and psutil modules loaded, and the SIGTERM handler,
#: at the very end of the session
_SPY = """
import json, signal, sys

def pytest_unconfigure(config):
    mods = sorted(m for m in sys.modules if m.split(".")[0] in ("crashpoint", "psutil"))
    handler = signal.getsignal(signal.SIGTERM)
    with open("spy.json", "w") as f:
        json.dump({"modules": mods, "sigterm": getattr(handler, "__module__", str(handler))}, f)
"""

#: what loading the plugin itself costs, all of it: its entry module (hooks that return at once,
#: the fixtures' declarations), the option table, the hook specifications, crashpoint's lazy
#: root. Not the harness's face, not the options' dataclass, not the campaigns: a module added
#: here is paid by every pytest session of every environment that has crashpoint installed
_ENTRY = {
    "crashpoint",
    "crashpoint._lazy",
    "crashpoint.pytest_plugin",
    "crashpoint.pytest_plugin._table",
    "crashpoint.pytest_plugin.hooks",
}
#: a YAML file under the session's arguments is read (64 KiB at most) for a scenario's
#: top-level keys, to say "did you mean NAME.scenario.yaml" (standard library only)
_LIGHT = _ENTRY | {"crashpoint.pytest_plugin._lookalike"}


def _spy(
    inner: Any, monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run pytest in a subprocess with crashpoint as its only auto-loaded plugin (others, such
    as langsmith's, import psutil themselves)."""
    inner.pytester.makeconftest(_SPY)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = inner.subprocess("-p", "crashpoint", *args)
    return result, json.loads((inner.path / "spy.json").read_text())


def test_an_unrelated_session_imports_nothing_heavy_and_prints_nothing(
    inner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner.pytester.makepyfile(test_plain="def test_one():\n    assert 1 + 1 == 2\n")
    inner.pytester.makefile(".yaml", config="key: value\n")  # a YAML file that is no scenario
    result, spy = _spy(inner, monkeypatch)
    result.assert_outcomes(passed=1)
    heavy = sorted(set(spy["modules"]) - _LIGHT)
    assert heavy == [], f"an unrelated session imported {heavy}"
    assert set(spy["modules"]) == _LIGHT
    out = result.stdout.str() + result.stderr.str()
    lines = [ln for ln in out.splitlines() if "crashpoint" in ln and not ln.startswith("plugins:")]
    assert lines == [], lines
    assert spy["sigterm"] != "crashpoint._proc._cleanup", "crashpoint took over SIGTERM"


def test_a_one_test_session_loads_only_the_entry(
    inner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The short list, exactly: a heavier import on the entry path (the options' dataclass, the
    harness's face, a room of the plugin) fails here; so does a hook that works for a session
    that never used crashpoint (it would import the rest of the plugin to do it)."""
    inner.pytester.makepyfile(test_plain="def test_one():\n    assert 1 + 1 == 2\n")
    result, spy = _spy(inner, monkeypatch, "-rA", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    assert sorted(spy["modules"]) == sorted(_ENTRY)
    assert "crashpoint" not in result.stdout.str().replace("plugins: crashpoint", "")
    written = sorted(
        p.name for p in inner.path.rglob("*") if "crashpoint" in p.name or p.suffix == ".json"
    )
    assert written == ["spy.json"], written  # no report folder, no gate.json, no marker file


def test_a_session_that_uses_the_fixture_gets_the_whole_plugin(
    inner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = inner.tiny_agent
    inner.pytester.makepyfile(
        test_uses=f"""
import sys
def test_agent(crash_harness):
    crash_harness.run([sys.executable, {str(agent)!r}, "{{state_dir}}"], trials=1).assert_ok()
"""
    )
    result, spy = _spy(inner, monkeypatch)
    result.assert_outcomes(passed=1)
    assert "crashpoint.harness._engine" in spy["modules"]
    assert "crashpoint._proc._cleanup" in spy["modules"]  # its signal handlers were installed


def test_a_marked_test_installs_the_handlers(inner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    inner.pytester.makepyfile(
        test_marked="import pytest\n\n@pytest.mark.crashpoint(trials=1)\n"
        "def test_one():\n    pass\n"
    )
    result, spy = _spy(inner, monkeypatch)
    result.assert_outcomes(passed=1)
    assert "crashpoint._proc._cleanup" in spy["modules"]


def test_a_harness_asked_for_by_name_still_reaches_the_end_table(
    inner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``request.getfixturevalue("crash_harness")``: collection saw no crashpoint test, so the
    fixture itself loads the rest of the plugin; its campaign is in the end table all the same."""
    agent = inner.tiny_agent
    inner.pytester.makepyfile(
        test_by_name=f"""
import sys
def test_agent(request):
    crash = request.getfixturevalue("crash_harness")
    crash.run([sys.executable, {str(agent)!r}, "{{state_dir}}"], trials=1).assert_ok()
"""
    )
    result, spy = _spy(inner, monkeypatch)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["crashpoint gate: 1 campaigns, seed *"])
    assert "crashpoint.pytest_plugin._session" in spy["modules"]
