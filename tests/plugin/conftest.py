"""Shared set-up for the plugin's tests, which drive pytest from outside with ``pytester``.

Each test module declares ``pytest_plugins = ["pytester"]`` itself: pytest refuses
``pytest_plugins`` in a conftest below the rootdir (``pytest`` run from the repository root
stops with "Defining 'pytest_plugins' in a non-top-level conftest is no longer supported").

Inner sessions run in-process (``inner.inprocess``), campaigns included: the harness spawns
the agents either way, and a pytest subprocess costs 1.3-2 s of CPU more. A subprocess
(``inner.subprocess``) is for what only a fresh process shows: what the plugin imports, a plugin
left out (``-p no:fakefs``), threads and processes left at the session's end, signals, fork
mode. The ``inner`` fixture wraps both.
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

# Imported here, once: pytester restores sys.modules after each in-process run, so a module
# first imported inside a run is imported again by the next one (seconds per run; Hypothesis's
# plugin imports hypothesis at the end of every session).
for _module in (
    "hypothesis.internal.observability",
    "crashpoint.harness",
    "crashpoint.pytest_plugin._collect",
):
    try:
        importlib.import_module(_module)
    except ModuleNotFoundError:  # an older Hypothesis (the declared floor) has no observability
        if not _module.startswith("hypothesis."):
            raise

#: Every environment variable the plugin reads, cleared for each test so the outer
#: environment (a developer's shell, CI) cannot leak into the runs under test.
OPTION_ENV = (
    "CRASHPOINT_SEED",
    "CRASHPOINT_TRIALS",
    "CRASHPOINT_MODE",
    "CRASHPOINT_REPORT",
    "CRASHPOINT_SHARD",
    "CRASHPOINT_PROGRESS",
    "CRASHPOINT_BUDGET",
    "CRASHPOINT_BASELINE",
)

#: The demo agent, as a scenario file spells it.
DEMO_COMMAND = '["{python}", "-m", "crashpoint.agents.demo", "--state", "{state_dir}"]'

#: A deliberately broken agent that only talks to the probe, so it starts fast: it reports
#: steps complete without saving anything (a restart begins at step one again) and gives its
#: effect a fresh idempotency key on every attempt (a retry duplicates it). Its golden run has
#: 5 events and 6 boundaries; a kill at any but the first (before event #0: nothing done yet)
#: fails resumes_from_last_completed, and one after the effect also fails exactly_once.
BROKEN_AGENT = '''\
"""Forgets everything on restart and sends its effect with a fresh key each time."""
import uuid

from crashpoint import probe

for step in ("fetch", "send"):
    probe.step_started(step)
    if step == "send":
        probe.effect("email", {"to": "ops"}, key=uuid.uuid4().hex)
    probe.step_completed(step)
print("done")
'''

#: A tiny correct agent (argv: its state folder): one step, made durable before it is
#: reported complete and skipped on a restart. Every trial passes, fast.
TINY_AGENT = """\
import os
import sys

from crashpoint import probe

done = os.path.join(sys.argv[1], "done")
if not os.path.exists(done):
    probe.step_started("only")
    os.makedirs(sys.argv[1], exist_ok=True)
    with open(done, "w") as f:
        f.write("done")
        f.flush()
        os.fsync(f.fileno())
    probe.step_completed("only")
print("done")
"""


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*OPTION_ENV, "PYTEST_ADDOPTS", "CRASHPOINT_LEDGER", "CRASHPOINT_FAILPOINTS"):
        monkeypatch.delenv(name, raising=False)


#: Plugins of this environment that crashpoint does not need: an inner pytest subprocess
#: starts in ~1 s instead of ~3 s without them (Hypothesis's imports hypothesis at the end of
#: every session). Blocking a plugin that is not installed is fine.
#: langsmith's plugin imports langsmith (~1 s of CPU) in every inner run that loads it
UNRELATED_PLUGINS = ("hypothesispytest", "benchmark", "fakefs", "langsmith_plugin")


def plugin_args() -> list[str]:
    """Arguments every inner run gets: no cache folder, no unrelated plugins, and the plugin
    even when entry-point autoloading is off (``-p crashpoint`` names the entry point)."""
    args = ["-p", "no:cacheprovider"]
    for name in UNRELATED_PLUGINS:
        args += ["-p", f"no:{name}"]
    return args + load_plugins("crashpoint")


def load_plugins(*names: str) -> list[str]:
    """``-p NAME`` for each entry-point plugin when ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` is set
    (else they load by themselves)."""
    if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return []
    return [arg for name in names for arg in ("-p", name)]


class InnerPytest:
    """A pytest session under test, in ``pytester.path``, with the crashpoint plugin."""

    demo_command = DEMO_COMMAND
    load_plugins = staticmethod(load_plugins)

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.path = pytester.path

    def inprocess(self, *args: Any) -> pytest.RunResult:
        return self.pytester.runpytest_inprocess(*plugin_args(), *map(str, args))

    def subprocess(self, *args: Any, timeout: float = 120) -> pytest.RunResult:
        return self.pytester.runpytest_subprocess(*plugin_args(), *map(str, args), timeout=timeout)

    def genitems(self, *args: Any) -> list[pytest.Item]:
        """The items a session with ``args`` collects (in-process)."""
        items, _ = self.pytester.inline_genitems(*plugin_args(), *map(str, args))
        return items

    def script(self, name: str, text: str) -> Path:
        path = self.path / name
        path.write_text(text)
        return path

    @property
    def broken_agent(self) -> Path:
        return self.script("broken_agent.py", BROKEN_AGENT)

    @property
    def tiny_agent(self) -> Path:
        return self.script("tiny_agent.py", TINY_AGENT)

    @staticmethod
    def command(script: Path) -> str:
        """A scenario ``command`` running ``script STATE_DIR`` with the scenario's
        interpreter."""
        return f'["{{python}}", "{script}", "{{state_dir}}"]'

    @staticmethod
    def argv(script: Path) -> list[str]:
        """An argv for ``crash_harness.run`` running ``script STATE_DIR``."""
        return [sys.executable, str(script), "{state_dir}"]

    def scenario(
        self,
        stem: str,
        faults: str,
        *,
        command: str = DEMO_COMMAND,
        extra: str = "",
        folder: str = "",
    ) -> Path:
        """Write ``[folder/]stem.scenario.yaml``; ``faults``: the YAML list's items, one a line;
        ``extra``: more top-level keys."""
        items = "\n".join(f"  - {ln}" for ln in textwrap.dedent(faults).strip().splitlines())
        text = (
            f"name: {stem.replace('_', ' ')}\n"
            f"agent:\n  command: {command}\n  timeout: 20s\n"
            f"faults:\n{items}\n"
            f"{textwrap.dedent(extra).strip()}\n"
        )
        path = self.path / folder / f"{stem}.scenario.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path


@pytest.fixture
def no_unrelated_plugins(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest sessions started as subprocesses (``crashpoint run``, ``python -m pytest``) leave
    out the unrelated plugins too. (After pytester, which clears ``PYTEST_ADDOPTS``.)"""
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(f"-p no:{n}" for n in UNRELATED_PLUGINS))


@pytest.fixture
def inner(pytester: pytest.Pytester) -> InnerPytest:
    return InnerPytest(pytester)
