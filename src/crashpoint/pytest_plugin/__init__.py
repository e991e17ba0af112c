"""pytest plugin (entry point ``pytest11: crashpoint``): a thin adapter over the harness.

pytest loads this module in every session of an environment that has crashpoint installed, used
or not, so it holds only what pytest needs when it starts: the hook specifications, the options
(from the plain table in :mod:`._table`), the marker line, the fixtures' declarations and hooks
that return at once while the session has not used crashpoint. A session uses crashpoint when
it asks for it (a crashpoint option on the command line, in the environment or the ini file; a
scenario file among its arguments; a pytest-xdist controller), when a ``*.scenario.yaml`` file
is collected, or when a collected test uses the ``crash_harness`` fixture or the ``crashpoint``
marker. Then the rest is imported, once (:func:`_engage`), and each hook hands on to it.

The rest is in rooms of its own:

- :mod:`._session`: the hooks' bodies (the settings, the signal handlers, gate.json, the end
  table); :mod:`._fixtures`: the fixtures' bodies;
- :mod:`._options`: the options' resolved :class:`Settings`, the stash keys the plugin's
  modules share, the marker's parsing;
- :mod:`._campaigns`: a harness built from the settings, and the record of each campaign;
- :mod:`._collect`: the ``*.scenario.yaml`` collector; :mod:`._summary`: the end table and
  gate.json; :mod:`._board`: the progress line; :mod:`._lookalike`: YAML files that look like
  scenarios; :mod:`._order`: scenario files longest first; :mod:`._schedule`: pytest-xdist's
  loadfile keeping that order; :mod:`.hooks`: the ``pytest_crashpoint_*`` hook specifications.

A door: it imports pytest, the standard library, its own modules and the public faces of
crashpoint, never another package's private module. Loading it imports two small modules of
its own (:mod:`.hooks`, :mod:`._table`) and crashpoint's lazy root; tests/plugin/test_unused.py
keeps that list short.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from crashpoint.pytest_plugin import hooks
from crashpoint.pytest_plugin._table import MARKER, OPTIONS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from crashpoint.checkpoint import Store
    from crashpoint.faults import Corruption, TmpfsNamespace
    from crashpoint.harness import AgentProcess, CrashHarness, Ledger

#: The plugin exports no name: pytest finds its hooks and fixtures by their names, and the docs
#: (docs/reference/pytest-plugin.md) list them; its helpers are private to the package.
__all__: list[str] = []

#: the session uses crashpoint: the rest of the plugin is loaded and configured (_engage)
_ENGAGED = pytest.StashKey[bool]()
#: YAML files found while walking a folder that look like scenarios but are not named so
_LOOKALIKES = pytest.StashKey[list[tuple[str, str]]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("crashpoint", "crash-recovery testing (crashpoint)")
    for name, (flag, env, ini, help_, _default) in OPTIONS.items():
        if name == "progress":
            group.addoption(
                flag,
                action="store_true",
                default=None,
                dest=f"crashpoint_{name}",
                help=f"{help_} [env {env}, ini {ini}]",
            )
            # a string, parsed by _options._parse: pytest's type="bool" turns a bad value into
            # an INTERNALERROR instead of a usage error naming the ini file
            parser.addini(ini, f"{help_} (true/false)", default="")
            continue
        group.addoption(
            flag,
            action="store",
            default=None,
            dest=f"crashpoint_{name}",
            metavar=name.upper(),
            help=f"{help_} [env {env}, ini {ini}]",
        )
        parser.addini(ini, help_, default="")


def pytest_configure(config: pytest.Config) -> None:
    _refuse_lookalike_args(config)
    config.addinivalue_line("markers", MARKER)
    if _asked(config) or _xdist_controller(config):
        _engage(config, at_start=True)
    # else: the rest is loaded once a scenario file or a crashpoint test is collected (or never:
    # a session that does not use crashpoint keeps pytest's own signal handlers and imports
    # nothing more)


def _asked(config: pytest.Config) -> bool:
    """Was crashpoint asked for before collection? A crashpoint option (command line,
    environment or ini file; ``crashpoint run`` always gives one) or a scenario file named on
    the command line: as ``_session._explicit`` says once the settings are resolved."""
    for name, (_flag, env, ini, _help, _default) in OPTIONS.items():
        if config.getoption(f"crashpoint_{name}") is not None or os.environ.get(env, ""):
            return True
        if str(config.getini(ini)).strip():
            return True
    return any(a.split("::")[0].endswith(".scenario.yaml") for a in config.args)


def _xdist_controller(config: pytest.Config) -> bool:
    """A pytest-xdist controller (``-n N``) collects nothing: it cannot learn in time that its
    workers use crashpoint, and a SIGTERM it gets must reach them (the handlers are cheap to
    install: standard library only)."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _engage(config: pytest.Config, *, at_start: bool = False) -> None:
    """The session uses crashpoint: load the rest of the plugin and configure it, once.
    ``at_start``: from pytest_configure (the signal handlers at once), else from collection or
    a fixture (the handlers come with the session's crashpoint items)."""
    if config.stash.get(_ENGAGED, False):
        return
    config.stash[_ENGAGED] = True
    # the plugin at work imports its options and the harness's face: only once it is used
    from crashpoint.pytest_plugin._session import configure

    configure(config, at_start=at_start)


def _engaged(config: pytest.Config) -> bool:
    return config.stash.get(_ENGAGED, False)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Reap what a killed earlier run left; replace a previous gate.json by "running"."""
    if not _engaged(session.config):
        return
    # loaded by _engage (what the session uses of crashpoint)
    from crashpoint.pytest_plugin._session import sessionstart

    sessionstart(session)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write gate.json (marked incomplete if interrupted, with the gate's verdict); call
    ``pytest_crashpoint_gate_finished``; exit 128 + the signal if one came."""
    if not _engaged(session.config):
        return
    # loaded by _engage (what the session uses of crashpoint)
    from crashpoint.pytest_plugin._session import sessionfinish

    sessionfinish(session, exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _engaged(config):
        return
    # loaded by _engage (what the session uses of crashpoint)
    from crashpoint.pytest_plugin._session import unconfigure

    unconfigure(config)


def pytest_report_header(config: pytest.Config) -> str | None:
    """The settings, for a session that asked for crashpoint; a session that does not gets no
    line (its tests that use crashpoint show their seed where they fail)."""
    if not _engaged(config):
        return None
    # loaded by _engage (what the session uses of crashpoint)
    from crashpoint.pytest_plugin._session import report_header

    return report_header(config)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _engaged(config):
        return  # crashpoint was not used: no line, no import
    # loaded by _engage (what the session uses of crashpoint)
    from crashpoint.pytest_plugin._session import terminal_summary

    terminal_summary(terminalreporter, exitstatus, config)


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.stash.get(_LOOKALIKES, None):
        _note_lookalikes(session)
    if not _engaged(config):
        if not any(_uses_crashpoint(i) for i in session.items):
            return
        _engage(config)
    # loaded by _engage (what the session uses of crashpoint)
    from crashpoint.pytest_plugin._session import collection_finish

    collection_finish(session)


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Scenario files longest first (their items together), so that a long one is not the
    last one a worker starts (``crashpoint run`` hands out whole files): :mod:`._order`."""
    if not _engaged(config):
        return  # no scenario file was collected: nothing to order, no import
    # loaded by _engage (what the session uses of crashpoint)
    from crashpoint.pytest_plugin._session import order_items

    items[:] = order_items(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A pytest-xdist controller with ``--dist loadfile``: scenario files are handed out in
    the order the workers collected them (longest first), not by their number of items."""
    if not _engaged(config) or config.getvalue("dist") != "loadfile":
        return None  # pytest-xdist's own
    # imports pytest-xdist's schedulers: only in its controller
    from crashpoint.pytest_plugin._schedule import ScenarioFileScheduling

    return ScenarioFileScheduling(config, log)


def _uses_crashpoint(item: pytest.Item) -> bool:
    """A test with the crash_harness fixture or the crashpoint marker (a scenario item's file
    engaged the plugin when it was collected)."""
    if "crash_harness" in getattr(item, "fixturenames", ()):
        return True
    return item.get_closest_marker("crashpoint") is not None


# -- marker -----------------------------------------------------------------------------------


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("crashpoint") is None:
        return
    # the marker's parsing (the harness's fault families): imported when a test is marked
    from crashpoint.pytest_plugin._options import marker_options

    try:
        marker_options(item)
    except pytest.UsageError as exc:
        message = str(exc)
    else:
        return
    pytest.fail(message, pytrace=False)  # outside the except: the message is shown once


# -- fixtures ---------------------------------------------------------------------------------
# Declared here (pytest reads them when it loads the plugin); each body is in _fixtures, which
# imports the harness: loaded when a test uses a fixture.


@pytest.hookimpl(trylast=True)
def pytest_crashpoint_plan(
    config: pytest.Config, family: Any, golden: Any, seed: int, index: int
) -> Any:
    return None  # the built-in plan (crashpoint.harness.plan_for) is used


@pytest.fixture
def crash_harness(request: pytest.FixtureRequest, tmp_path: Path) -> CrashHarness:
    """A campaign runner bound to this test's folder and the session's seed.

    ``crash_harness.run(agent, faults=..., trials=...)`` returns a result whose ``assert_ok()``
    fails with the failing checks and a replay command for each failing trial.
    """
    _engage(request.config)  # done at collection, unless a test asked by getfixturevalue
    # the fixtures' bodies import the harness: when a test uses one
    from crashpoint.pytest_plugin import _fixtures

    return _fixtures.crash_harness(request, tmp_path)


@pytest.fixture
def effect_ledger() -> Iterator[Ledger]:
    """A started ledger (the outside world + kill switch); ``.env()`` points a probe at it."""
    # the fixtures' bodies import the harness: when a test uses one
    from crashpoint.pytest_plugin import _fixtures

    yield from _fixtures.effect_ledger()


@pytest.fixture
def agent_process() -> Iterator[Callable[..., AgentProcess]]:
    """Start agent processes in their own session; every tree is killed and reaped after the
    test (a survivor fails the test)."""
    # the fixtures' bodies import the harness: when a test uses one
    from crashpoint.pytest_plugin import _fixtures

    yield from _fixtures.agent_process()


@pytest.fixture
def disk_fault() -> Iterator[Callable[..., TmpfsNamespace]]:
    """``disk_fault(folder, capacity="16KiB")``: ``folder`` becomes a tmpfs of that size in a
    private mount namespace; run commands in it with ``ns.wrap(argv)``. Skips with the reason
    where the machine cannot mount one."""
    # the fixtures' bodies import the harness: when a test uses one
    from crashpoint.pytest_plugin import _fixtures

    yield from _fixtures.disk_fault()


@pytest.fixture
def full_fake_disk() -> Iterator[Any]:
    """A pyfakefs file system whose disk holds 64 KiB (``fs.set_disk_usage(n)`` to change it):
    writes past it raise a real ``OSError(ENOSPC)``. For in-process code only."""
    # the fixtures' bodies import the harness: when a test uses one
    from crashpoint.pytest_plugin import _fixtures

    yield from _fixtures.full_fake_disk()


@pytest.fixture
def corrupt_file() -> Callable[..., Corruption | None]:
    """``corrupt_file(pattern, how="bitflip", seed=0)``: damage one file matching ``pattern``
    (seeded, reproducible); returns what was done, or None if nothing matched. Only files
    inside ``roots`` are touched (default: ``root``, else the folder before the pattern's first
    wildcard), never through a symbolic link."""
    # the fixtures' bodies import the harness: when a test uses one
    from crashpoint.pytest_plugin import _fixtures

    return _fixtures.corrupt_file()


@pytest.fixture
def checkpoint_store(tmp_path: Path) -> Store:
    """A :class:`crashpoint.checkpoint.Store` in a fresh folder of this test."""
    # the fixtures' bodies import the harness: when a test uses one
    from crashpoint.pytest_plugin import _fixtures

    return _fixtures.checkpoint_store(tmp_path)


# -- scenario files -----------------------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    name = file_path.name
    if name.endswith(".scenario.yaml"):
        _engage(parent.config)  # a scenario file: the session uses crashpoint
        # the collector imports the harness's rooms: imported when a scenario file is found
        from crashpoint.pytest_plugin._collect import ScenarioFile

        return ScenarioFile.from_parent(parent, path=file_path)
    if not name.lower().endswith((".yml", ".yaml")):
        return None  # an ordinary file: one string test, no import
    if file_path.suffix.lower() in (".yml", ".yaml"):
        # imported when a YAML file is found: loading the plugin stays cheap
        from crashpoint.pytest_plugin._lookalike import lookalike

        config = parent.config
        better = lookalike(file_path) if _under_args(config, file_path) else None
        if better is not None:  # said once, after collection (_note_lookalikes)
            config.stash.setdefault(_LOOKALIKES, []).append((str(file_path), better))
    return None


def _under_args(config: pytest.Config, path: Path) -> bool:
    """Is ``path`` inside what the session was asked to collect? (pytest also walks the
    folders above an argument, and offers their files to this hook.)"""
    path = path.resolve()
    for arg in config.args or ["."]:
        where = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path == where or where in path.parents:
            return True
    return False


def _refuse_lookalike_args(config: pytest.Config) -> None:
    """A scenario lookalike given on the command line (``pytest foo.yml``, ``crashpoint run
    foo.yml``): a usage error with the name it should have, not pytest's "not found"."""
    for arg in config.args:
        given = arg.split("::")[0]
        if not given.lower().endswith((".yml", ".yaml")):
            continue  # not a YAML file: one string test
        path = Path(config.invocation_params.dir, given)
        if path.suffix.lower() not in (".yml", ".yaml") or not path.is_file():
            continue
        # imported when a YAML file is given: loading the plugin stays cheap
        from crashpoint.pytest_plugin._lookalike import hint, lookalike

        better = lookalike(path)
        if better is not None:
            raise pytest.UsageError(f"crashpoint: {hint(given, better)}")


def _note_lookalikes(session: pytest.Session) -> None:
    found = session.config.stash.get(_LOOKALIKES, [])
    # imported when there is something to say: loading the plugin stays cheap
    from crashpoint.pytest_plugin._lookalike import hint
    from crashpoint.pytest_plugin._session import say

    for path, better in found:
        rel = os.path.relpath(path, session.config.invocation_params.dir)
        shown = path if rel.startswith("..") else rel
        say(session.config, f"crashpoint: note: {hint(shown, better)}")
