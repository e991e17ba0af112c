"""pytest plugin (entry point ``pytest11: crashpoint``): a thin adapter over the harness.

The hooks and fixtures live here; the rest of the plugin is in rooms of its own:

- :mod:`._options`: the options (flag, environment variable, ini key), their resolved
  :class:`Settings`, the stash keys the plugin's modules share, the ``crashpoint`` marker;
- :mod:`._campaigns`: a harness built from the settings, and the record of each campaign;
- :mod:`._collect`: the ``*.scenario.yaml`` collector; :mod:`._summary`: the end table and
  gate.json; :mod:`._board`: the progress line; :mod:`.hooks`: the ``pytest_crashpoint_*``
  hook specifications.

A door: it imports pytest, the standard library, its own modules and the public faces of
crashpoint, never another package's private module. Loading pytest imports nothing heavy: the
harness's face is lazy (a name is imported on first use), and the heavy modules (the collector,
the reports, the progress board, the faults, the checkpoint library, pyfakefs) are imported in
the hook or fixture that uses them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from crashpoint import harness
from crashpoint.pytest_plugin import hooks
from crashpoint.pytest_plugin._campaigns import (
    folder_for,
    make_harness,
    record_campaign,
    record_interrupted,
)
from crashpoint.pytest_plugin._options import (
    BOARD,
    GATE_NOTES,
    ITEMS,
    MARKER,
    OPTIONS,
    SETTINGS,
    SUMMARIES,
    WORKER_FILE,
    marker_options,
    resolve_settings,
)

if TYPE_CHECKING:
    from crashpoint.checkpoint import Store
    from crashpoint.faults import Corruption, TmpfsNamespace
    from crashpoint.harness import AgentProcess, CrashHarness, Ledger

#: The plugin exports no name: pytest finds its hooks and fixtures by their names, and the docs
#: (docs/reference/pytest-plugin.md) list them; its helpers are private to the package.
__all__: list[str] = []

#: puts back the signal handlers that were there before the session (pytest_unconfigure)
_RESTORE_SIGNALS = pytest.StashKey[Callable[[], None]]()
#: the session's gate.json paths once written (pytest_sessionfinish), for the summary line
_REPORT_PATHS = pytest.StashKey[list[str]]()


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
            # a string, parsed by _parse: pytest's type="bool" turns a bad value into an
            # INTERNALERROR instead of a usage error naming the ini file
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
    config.stash[SETTINGS] = resolve_settings(config)
    config.stash[SUMMARIES] = []
    notes: dict[str, list[str]] = {"bad_input": [], "failed": [], "not_judged": []}
    config.stash[GATE_NOTES] = notes
    items: dict[str, list[str]] = {"collected": [], "finished": []}
    config.stash[ITEMS] = items
    config.pluginmanager.register(_SummaryCollector(config), "crashpoint-summary")
    # scenario errors, for the step summary and GitHub annotations (imported when used)
    from crashpoint.pytest_plugin._annotations import ScenarioErrors

    config.pluginmanager.register(ScenarioErrors(config), "crashpoint-scenario-errors")
    _start_progress(config)
    if _explicit(config) or _xdist_controller(config):
        _install_signal_handlers(config)
    # else: installed once a crashpoint item is collected (pytest_collection_finish): a session
    # that never uses crashpoint keeps pytest's own handlers and imports nothing more


def _xdist_controller(config: pytest.Config) -> bool:
    """A pytest-xdist controller (``-n N``) collects nothing: it cannot learn in time that its
    workers use crashpoint, and a SIGTERM it gets must reach them (the handlers are cheap to
    install: standard library only)."""
    return bool(getattr(config.option, "numprocesses", None)) and not _is_worker(config)


def _explicit(config: pytest.Config) -> bool:
    """Was crashpoint asked for before collection? A crashpoint option (command line,
    environment or ini file; ``crashpoint run`` always gives one) or a scenario file named on
    the command line. Such a session gets the header line and its signal handlers at once."""
    if any(w != "default" for w in config.stash[SETTINGS].where.values()):
        return True
    return any(a.split("::")[0].endswith(".scenario.yaml") for a in config.args)


def _install_signal_handlers(config: pytest.Config) -> None:
    """SIGTERM (and SIGINT) raise KeyboardInterrupt: agents are killed, temporary folders and
    mounts removed, the report written marked incomplete; exit 143 / 130 (pytest_sessionfinish).
    Once per session."""
    if config.stash.get(_RESTORE_SIGNALS, None) is None:
        config.stash[_RESTORE_SIGNALS] = harness.install_signal_handlers()


def _received(config: pytest.Config) -> int | None:
    """The SIGINT/SIGTERM our handlers caught (None where they were never installed: the
    process-control module is not even imported then)."""
    if config.stash.get(_RESTORE_SIGNALS, None) is None:
        return None
    return harness.received()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")  # a pytest-xdist worker


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Reap what a killed earlier run left; replace a previous gate.json by "running"."""
    config = session.config
    if _is_worker(config):
        return
    if _explicit(config):
        _reap_stale(config)  # else: when a crashpoint item is collected
    report = config.stash[SETTINGS].report
    if report:
        # imported when used: keeps loading the plugin cheap
        from crashpoint.pytest_plugin._summary import write_gate_running

        write_gate_running(report)


_REAPED = pytest.StashKey[bool]()


def _reap_stale(config: pytest.Config) -> None:
    """Once per session, on the controller: reap what killed earlier runs left."""
    if config.stash.get(_REAPED, False) or _is_worker(config):
        return
    config.stash[_REAPED] = True
    reaped = harness.reap_stale()
    if reaped.harnesses:
        _say(
            config,
            f"crashpoint: reaped what {reaped.harnesses} killed harness(es) left: "
            f"{reaped.describe()}",
        )


def _say(config: pytest.Config, line: str) -> None:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(line)
    else:
        print(line, file=sys.stderr)


def _interrupted_by(config: pytest.Config) -> str:
    """ "SIGTERM" / "SIGINT" if a signal stopped the session (or one of its campaigns)."""
    sig = _received(config)
    if sig is not None:
        return harness.signal_name(sig)
    return next(
        (str(s["interrupted_by"]) for s in config.stash[SUMMARIES] if s.get("interrupted_by")), ""
    )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write gate.json (marked incomplete if interrupted, with the gate's verdict); call
    ``pytest_crashpoint_gate_finished``; exit 128 + the signal if one came."""
    config = session.config
    sig = _received(config)
    if sig is not None and config.pluginmanager.hasplugin("dsession"):
        _forward_to_workers(sig)  # xdist: `kill PID` reaches only the controller
    by = _interrupted_by(config)
    report = config.stash[SETTINGS].report
    summaries = config.stash[SUMMARIES]
    used = bool(summaries) or config.stash.get(_USED, False)
    verdict = None
    if not _is_worker(config) and (used or by or _explicit(config) or _has_news(config, by)):
        # imported when used: keeps loading the plugin cheap
        from crashpoint.pytest_plugin._summary import session_verdict

        verdict = session_verdict(config, interrupted_by=by)
    if report and not _is_worker(config):
        # imported when used: keeps loading the plugin cheap
        from crashpoint.pytest_plugin._annotations import session_errors
        from crashpoint.pytest_plugin._summary import (
            has_notes,
            remove_gate_running,
            session_changes,
            write_session_reports,
        )

        changes = session_changes(config)  # --crashpoint-baseline: what changed since

        if summaries or by or has_notes(config):
            config.stash[_REPORT_PATHS] = write_session_reports(
                report,
                summaries,
                interrupted_by=by,
                changes=changes,
                errors=session_errors(config),
                verdict=verdict,
            )
        else:
            remove_gate_running(report)  # no campaign ran: no gate (and no stale one)
    if verdict is not None:
        config.hook.pytest_crashpoint_gate_finished(config=config, verdict=verdict)
    if not _is_worker(config) and _has_news(config, by):
        # imported when used: keeps loading the plugin cheap
        from crashpoint.pytest_plugin._summary import write_ci_summary

        write_ci_summary(config, interrupted_by=by)  # $GITHUB_STEP_SUMMARY, when set
    # 143 SIGTERM (pytest would die of it: the shell says 143 too); 130 SIGINT where crashpoint
    # ran or collected something (elsewhere pytest's own 2 stands: we change no one else's exit)
    used = bool(config.stash[SUMMARIES]) or config.stash.get(_USED, False)
    if sig is not None and (sig == signal.SIGTERM or used):
        session.exitstatus = 128 + sig


def _has_news(config: pytest.Config, interrupted_by: str) -> bool:
    """Has crashpoint anything to say at the end (a campaign, a bad scenario file, a signal)?
    A session that never used crashpoint gets no line and no import."""
    if config.stash[SUMMARIES] or interrupted_by:
        return True
    # the scenario errors (pytest_plugin._annotations.BAD_SCENARIOS), imported only if loaded
    annotations = sys.modules.get("crashpoint.pytest_plugin._annotations")
    return bool(annotations and config.stash.get(annotations.BAD_SCENARIOS, []))


def _finish_junit(config: pytest.Config) -> None:
    """After pytest wrote junit.xml (its sessionfinish runs after ours): an interrupted
    session's unfinished items become errors in it; a "running" marker the session put in its
    report folder and nobody replaced (no --junitxml there) is removed."""
    by = _interrupted_by(config)
    xmlpath = getattr(config.option, "xmlpath", None)
    report = config.stash[SETTINGS].report
    if not (by and xmlpath) and not report:
        return
    # imported when used: keeps loading the plugin cheap
    from crashpoint.pytest_plugin._summary import mark_junit_unfinished, remove_gate_running

    if by and xmlpath:
        items = config.stash[ITEMS]
        with contextlib.suppress(OSError):
            mark_junit_unfinished(
                os.path.abspath(xmlpath),
                items["collected"],
                items["finished"],
                interrupted_by=by,
            )
    if report:
        remove_gate_running(report, ("junit.xml",))


def _forward_to_workers(sig: int) -> None:
    """Send ``sig`` to this process's children (the xdist workers: they clean up too)."""
    harness.signal_children(sig)


def pytest_unconfigure(config: pytest.Config) -> None:
    watcher = config.stash.get(WATCHER, None)
    if watcher is not None:
        watcher.close()
    if not _is_worker(config) and SETTINGS in config.stash:
        _finish_junit(config)

    if _received(config) is not None:
        harness.cleanup_all()  # whatever the interrupted session's finally blocks did not reach
    used = bool(config.stash.get(SUMMARIES, [])) or config.stash.get(_USED, False)
    if used and not _is_worker(config) and config.pluginmanager.hasplugin("dsession"):
        reaped = harness.reap_stale()  # xdist workers killed after the grace period: not next time
        if reaped.harnesses:
            print(
                f"crashpoint: reaped what {reaped.harnesses} stopped worker(s) left: "
                f"{reaped.describe()}",
                file=sys.stderr,
            )
    restore = config.stash.get(_RESTORE_SIGNALS, None)
    if restore is not None:
        restore()


def pytest_report_header(config: pytest.Config) -> str | None:
    """The settings, for a session that asked for crashpoint (:func:`_explicit`); a session
    that does not gets no line (its tests that use crashpoint show their seed where they
    fail)."""
    if not _explicit(config):
        return None
    s = config.stash[SETTINGS]
    shard = f"{s.shard[0]}/{s.shard[1]}" if s.shard else "all"
    return (
        f"crashpoint: seed={s.seed if s.seed is not None else 'per test (default 0)'} "
        f"trials={s.trials if s.trials is not None else 'per test'} "
        f"mode={s.mode or 'as declared'} shard={shard} "
        f"report={s.report or 'tmp_path (fixtures), ./crashpoint-report (scenarios)'}"
    )


# -- marker -----------------------------------------------------------------------------------


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("crashpoint") is None:
        return
    try:
        marker_options(item)
    except pytest.UsageError as exc:
        message = str(exc)
    else:
        return
    pytest.fail(message, pytrace=False)  # outside the except: the message is shown once


# -- fixtures ---------------------------------------------------------------------------------


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
    opts = marker_options(request.node)
    folder = folder_for(request.config, request.node.nodeid, tmp_path / "crashpoint")
    crash = make_harness(
        request.config,
        folder,
        seed=opts["seed"],
        trials=opts["trials"],
        faults=opts["faults"],
        restarts=opts["restarts"],
        item=request.node.nodeid,
    )
    run, campaign = crash.run, crash.campaign
    item = request.node
    pythonpath = _agent_pythonpath(request)

    def campaign_on_path(agent: Any, **kw: Any) -> Any:
        return campaign(_on_pythonpath(agent, pythonpath), **kw)

    def run_and_record(agent: Any, **kw: Any) -> Any:
        failed = ""
        try:
            result = run(agent, **kw)
        except (harness.GoldenRunFailed, harness.NoBoundaries) as exc:
            failed = _golden_failed(agent, exc, pythonpath)
        except harness.CampaignInterrupted as exc:  # what ran: into the (incomplete) gate report
            record_interrupted(
                item,
                exc.result,
                scenario=item.nodeid,
                file=str(item.path),
                family=exc.result.name,
                reports=exc.result.report_dir,
            )
            raise
        if failed:  # outside the except: one line, no harness traceback
            pytest.fail(failed, pytrace=False)
        record_campaign(
            item,
            result.campaign,
            scenario=item.nodeid,
            file=str(item.path),
            family=result.campaign.name,
            reports=result.campaign.report_dir,
        )
        return result

    crash.run = run_and_record  # type: ignore[method-assign]
    crash.campaign = campaign_on_path  # type: ignore[method-assign]
    return crash


def _agent_pythonpath(request: pytest.FixtureRequest) -> list[str]:
    """What the fixture puts first on the agent's PYTHONPATH, as pytest's own imports see it:
    the test file's folder, the ini file's ``pythonpath`` folders, the rootdir."""
    config = request.config
    try:
        extra = [str(p) for p in config.getini("pythonpath")]
    except ValueError:  # no such ini key (pytest's own plugin disabled)
        extra = []
    out: list[str] = []
    for p in (str(request.node.path.parent), *extra, str(config.rootpath)):
        p = os.path.abspath(p)
        if p not in out and os.path.isdir(p):
            out.append(p)
    return out


def _on_pythonpath(agent: Any, first: list[str]) -> Any:
    """``agent`` as an AgentSpec whose PYTHONPATH starts with ``first``, then its own
    ``agent.env`` PYTHONPATH or the session's (absolute; folders that exist), so that
    ``{python} -m myagent`` finds a module beside the test though it starts in an empty folder."""
    spec = harness.as_agent(agent)
    env = dict(spec.env)
    given = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    parts = list(first)
    for p in given.split(os.pathsep):
        p = os.path.abspath(p) if p else ""
        if p and p not in parts and os.path.exists(p):
            parts.append(p)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return dataclasses.replace(spec, env=tuple(env.items()))


def _golden_failed(agent: Any, exc: Exception, pythonpath: list[str]) -> str:
    """One line for a golden run that failed under the fixture, as a scenario file gets it:
    what failed, the command as written (placeholders unfilled), the exit code and the last
    line of stderr (both in ``exc``'s first line), and how to fix it."""
    what = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    spec = harness.as_agent(agent)
    if "Command: " not in what:
        what += f". Command: {spec.describe()}"
    fix = (
        "fix: make that command exit 0 when run by hand from an empty folder: under "
        "crash_harness the agent starts in the trial's empty {workdir}, with "
        f"PYTHONPATH={os.pathsep.join(pythonpath)} first (the test's folder, the ini's "
        "pythonpath, the rootdir), so `{python} -m NAME` finds a module beside the test; "
        "give other files by absolute path"
    )
    if isinstance(exc, harness.NoBoundaries):
        fix = (
            "fix: the agent must report steps (crashpoint.probe or the checkpoint library), "
            "call a stand-in service, or write files in {state_dir}"
        )
    return f"crash_harness: {what}; {fix}"


@pytest.fixture
def effect_ledger() -> Iterator[Ledger]:
    """A started ledger (the outside world + kill switch); ``.env()`` points a probe at it."""
    ledger = harness.Ledger(http=True).start()
    try:
        yield ledger
    finally:
        ledger.close()


@pytest.fixture
def agent_process() -> Iterator[Callable[..., AgentProcess]]:
    """Start agent processes in their own session; every tree is killed and reaped after the
    test (a survivor fails the test)."""
    started: list[AgentProcess] = []

    def start(
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float = 30.0,
        cwd: str | None = None,
    ) -> AgentProcess:
        p = harness.AgentProcess(
            argv, dict(os.environ if env is None else env), cwd=cwd, timeout=timeout
        ).start()
        started.append(p)
        return p

    yield start
    survivors: list[int] = []
    for p in started:
        if p.proc is None:
            continue
        survivors += harness.kill_tree(
            p.pid,
            sid=p.pid,  # the agent, what is left of its session,
            token=p.reap_token,
        )  # what it detached
        # reap it and join its output readers before closing the pipes (closing a pipe under a
        # reader thread makes that thread raise)
        p.wait()
        for stream in (p.proc.stdout, p.proc.stderr):
            if stream is not None:
                stream.close()
    assert not survivors, f"processes survived the test: {survivors}"


@pytest.fixture
def disk_fault() -> Iterator[Callable[..., TmpfsNamespace]]:
    """``disk_fault(folder, capacity="16KiB")``: ``folder`` becomes a tmpfs of that size in a
    private mount namespace; run commands in it with ``ns.wrap(argv)``. Skips with the reason
    where the machine cannot mount one."""
    # the faults' face imports every fault room: imported when used, for the plugin's start-up
    from crashpoint.faults import TmpfsNamespace, disk_capabilities

    caps = disk_capabilities()
    if not caps.tmpfs:
        pytest.skip(f"disk_fault: {caps.tmpfs_reason}")
    opened: list[TmpfsNamespace] = []

    def make(folder: str | os.PathLike[str], capacity: int | str = "16KiB") -> TmpfsNamespace:
        ns = TmpfsNamespace(os.fspath(folder), harness.parse_size(capacity))
        opened.append(ns)
        return ns

    yield make
    for ns in opened:
        ns.close()


@pytest.fixture
def full_fake_disk() -> Iterator[Any]:
    """A pyfakefs file system whose disk holds 64 KiB (``fs.set_disk_usage(n)`` to change it):
    writes past it raise a real ``OSError(ENOSPC)``. For in-process code only."""
    # Importing pyfakefs's pytest plugin module tells the Patcher to leave pytest's own modules
    # (capture, pathlib) on the real disk; without it (-p no:fakefs, plugin autoload off) the
    # patched test fails with EBADF on pytest's capture files. (Imported here, when used:
    # pyfakefs is optional, and not cheap.)
    import pyfakefs.pytest_plugin  # noqa: F401
    from pyfakefs.fake_filesystem_unittest import Patcher

    with Patcher() as patcher:
        assert patcher.fs is not None
        patcher.fs.set_disk_usage(64 * 1024)
        yield patcher.fs


@pytest.fixture
def corrupt_file() -> Callable[..., Corruption | None]:
    """``corrupt_file(pattern, how="bitflip", seed=0)``: damage one file matching ``pattern``
    (seeded, reproducible); returns what was done, or None if nothing matched. Only files
    inside ``roots`` are touched (default: ``root``, else the folder before the pattern's first
    wildcard), never through a symbolic link."""
    # the faults' face imports every fault room: imported when used, for the plugin's start-up
    from crashpoint.faults import corrupt

    def do(
        pattern: str | os.PathLike[str],
        how: str = "bitflip",
        seed: int = 0,
        older: str | None = None,
        root: str | None = None,
        roots: list[str] | None = None,
    ) -> Corruption | None:
        return corrupt(
            how, os.fspath(pattern), random.Random(seed), older=older, root=root, roots=roots
        )

    return do


@pytest.fixture
def checkpoint_store(tmp_path: Path) -> Store:
    """A :class:`crashpoint.checkpoint.Store` in a fresh folder of this test."""
    # the library's face imports the whole library: imported when used, for the start-up
    from crashpoint.checkpoint import Store

    return Store(tmp_path / "checkpoints")


# -- scenario files -----------------------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name.endswith(".scenario.yaml"):
        # the collector imports the harness's rooms: imported when a scenario file is found
        from crashpoint.pytest_plugin._collect import ScenarioFile

        return ScenarioFile.from_parent(parent, path=file_path)
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


#: YAML files found while walking a folder that look like scenarios but are not named so
_LOOKALIKES = pytest.StashKey[list[tuple[str, str]]]()


def _refuse_lookalike_args(config: pytest.Config) -> None:
    """A scenario lookalike given on the command line (``pytest foo.yml``, ``crashpoint run
    foo.yml``): a usage error with the name it should have, not pytest's "not found"."""
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0])
        if path.suffix.lower() not in (".yml", ".yaml") or not path.is_file():
            continue
        # imported when a YAML file is given: loading the plugin stays cheap
        from crashpoint.pytest_plugin._lookalike import hint, lookalike

        better = lookalike(path)
        if better is not None:
            raise pytest.UsageError(f"crashpoint: {hint(arg.split('::')[0], better)}")


def _note_lookalikes(session: pytest.Session) -> None:
    found = session.config.stash.get(_LOOKALIKES, [])
    if not found:
        return
    # imported when there is something to say: loading the plugin stays cheap
    from crashpoint.pytest_plugin._lookalike import hint

    for path, better in found:
        rel = os.path.relpath(path, session.config.invocation_params.dir)
        shown = path if rel.startswith("..") else rel
        _say(session.config, f"crashpoint: note: {hint(shown, better)}")


# -- progress and summary --------------------------------------------------------------------


_USED = pytest.StashKey[bool]()  # the session collected crashpoint items
WATCHER = pytest.StashKey[Any]()  # the xdist controller's _board.Watcher
PROGRESS_DIR = "crashpoint_progress_dir"  # key in an xdist worker's workerinput


def _is_crashpoint_item(item: pytest.Item) -> bool:
    if "crash_harness" in getattr(item, "fixturenames", ()):
        return True
    # the collector (it imports the harness's rooms) is loaded only once a scenario file is
    # found: where it is not loaded, no item is a scenario item
    collect = sys.modules.get("crashpoint.pytest_plugin._collect")
    return collect is not None and isinstance(item, collect.ScenarioItem)


def pytest_collection_finish(session: pytest.Session) -> None:
    _note_lookalikes(session)
    if session.items:  # an xdist controller collects none: its workers' ids come by a hook
        session.config.stash[ITEMS]["collected"] = [i.nodeid for i in session.items]
    count = sum(1 for i in session.items if _is_crashpoint_item(i))
    session.config.stash[_USED] = count > 0
    if count or any(i.get_closest_marker("crashpoint") for i in session.items):
        # crashpoint is used: its signal handlers, and the leftovers of killed runs
        _install_signal_handlers(session.config)
        _reap_stale(session.config)
    board = session.config.stash.get(BOARD, None)
    if board is not None:
        board.items_total = count


class _ProgressItems:
    """Counts finished crashpoint items on the board (and, on a worker, tells the file)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        yield
        board = self.config.stash.get(BOARD, None)
        if board is None or not _is_crashpoint_item(item):
            return
        board.finish_item()
        worker_file = self.config.stash.get(WORKER_FILE, None)
        if worker_file is not None:
            worker_file.write(board)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist controller: start the watcher once and hand its folder to each worker."""
        watcher = self.config.stash.get(WATCHER, None)
        if watcher is None:
            # imported when used (--crashpoint-progress): keeps loading the plugin cheap
            from crashpoint.pytest_plugin._board import Watcher

            tr = self.config.pluginmanager.get_plugin("terminalreporter")
            if tr is None:
                return
            watcher = Watcher(tr.write_line)
            self.config.stash[WATCHER] = watcher
        node.workerinput[PROGRESS_DIR] = watcher.folder


def _start_progress(config: pytest.Config) -> None:
    if not config.stash[SETTINGS].progress:
        return
    # imported when used (--crashpoint-progress): keeps loading the plugin cheap
    from crashpoint.pytest_plugin._board import Board, WorkerFile

    config.stash[BOARD] = Board()
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get(PROGRESS_DIR):
        config.stash[WORKER_FILE] = WorkerFile(
            workerinput[PROGRESS_DIR], str(workerinput.get("workerid", "gw"))
        )
    config.pluginmanager.register(_ProgressItems(config), "crashpoint-progress")


class _SummaryCollector:
    """Gathers campaign summaries from test reports (works under xdist: reports carry them)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.config.stash[ITEMS]["finished"].append(report.nodeid)
        if report.failed and report.nodeid.split("::", 1)[0].endswith(".scenario.yaml"):
            # imported when a scenario item failed: loading the plugin stays cheap
            from crashpoint.pytest_plugin._summary import note_item_report

            note_item_report(self.config, report)
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == "crashpoint":
                self.config.stash[SUMMARIES].append(json.loads(str(value)))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # a malformed scenario file (or any collection error of a crashpoint session): bad input
        if report.failed and (
            report.nodeid.split("::", 1)[0].endswith(".scenario.yaml") or _explicit(self.config)
        ):
            # imported when collection failed: loading the plugin stays cheap
            from crashpoint.pytest_plugin._summary import note_collect_report

            note_collect_report(self.config, report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """xdist controller: the items its workers collected (it collects none itself)."""
        collected = self.config.stash[ITEMS]["collected"]
        seen = set(collected)  # every worker collects the same items: kept once each
        collected.extend(i for i in ids if i not in seen)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    summaries = config.stash[SUMMARIES]
    by = _interrupted_by(config)
    if not _has_news(config, by) and not config.stash.get(_REPORT_PATHS, None):
        return  # crashpoint was not used: no line, no import
    # imported when used: keeps loading the plugin cheap
    from crashpoint.pytest_plugin._summary import ci_end_lines, summary_table

    if summaries or (by and config.stash[SETTINGS].report):
        for line in summary_table(summaries, interrupted_by=by):
            terminalreporter.write_line(line)
    for line in ci_end_lines(config):  # what changed since the baseline; GitHub annotations
        terminalreporter.write_line(line)
    paths = config.stash.get(_REPORT_PATHS, None)
    if paths:
        terminalreporter.write_line("crashpoint reports: " + ", ".join(paths))
