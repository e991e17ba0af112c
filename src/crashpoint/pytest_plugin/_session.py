"""The plugin at work: its hooks' bodies once a session uses crashpoint.

The entry module (:mod:`crashpoint.pytest_plugin`) is loaded by every pytest session of an
environment that has crashpoint installed; its hooks return at once until the session uses
crashpoint (a crashpoint option, a scenario file, a test with the ``crash_harness`` fixture or
the marker, or a pytest-xdist controller). Then it calls :func:`configure` here, once, and hands
each hook on: the settings, the signal handlers, the reaper of killed runs, gate.json, the end
table, the progress line.

Imports pytest, the standard library, the plugin's options and the harness's lazy face only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from crashpoint import harness
from crashpoint.pytest_plugin._options import (
    BOARD,
    GATE_NOTES,
    ITEMS,
    SETTINGS,
    SUMMARIES,
    WORKER_FILE,
    resolve_settings,
)

__all__ = [
    "collection_finish",
    "configure",
    "report_header",
    "say",
    "sessionfinish",
    "sessionstart",
    "terminal_summary",
    "unconfigure",
]

#: puts back the signal handlers that were there before the session (pytest_unconfigure)
_RESTORE_SIGNALS = pytest.StashKey[Callable[[], None]]()
#: the session's gate.json paths once written (pytest_sessionfinish), for the summary line
_REPORT_PATHS = pytest.StashKey[list[str]]()


def configure(config: pytest.Config, *, at_start: bool) -> None:
    """Once, when the session turns out to use crashpoint. ``at_start``: from pytest_configure
    (a session that asked for crashpoint, or a pytest-xdist controller): the signal handlers at
    once; else from collection (a scenario file, a crashpoint test) or a fixture."""
    config.stash[SETTINGS] = resolve_settings(config)
    config.stash[SUMMARIES] = []
    notes: dict[str, list[str]] = {"bad_input": [], "failed": [], "not_judged": []}
    config.stash[GATE_NOTES] = notes
    items: dict[str, list[str]] = {"collected": [], "finished": []}
    config.stash[ITEMS] = items
    config.pluginmanager.register(_SummaryCollector(config), "crashpoint-summary")
    # the previous run's time per scenario file (longest first), read before sessionstart
    # replaces its gate.json by "running"; a worker gets the controller's
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        previous = dict(workerinput.get(PREVIOUS_KEY) or {})
    else:
        # imported when used: the plugin's own ordering (standard library only)
        from crashpoint.pytest_plugin._order import previous_durations

        previous = previous_durations(config.stash[SETTINGS].report)
    config.stash[PREVIOUS] = previous
    if previous and workerinput is None:
        config.pluginmanager.register(_PreviousToWorkers(config), "crashpoint-previous")
    # scenario errors, for the step summary and GitHub annotations (imported when used)
    from crashpoint.pytest_plugin._annotations import ScenarioErrors

    config.pluginmanager.register(ScenarioErrors(config), "crashpoint-scenario-errors")
    _start_progress(config)
    if at_start:
        _install_signal_handlers(config)
    # else: installed once a crashpoint item is collected (collection_finish); a test that asked
    # for crash_harness by name (request.getfixturevalue) keeps pytest's own


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


def sessionstart(session: pytest.Session) -> None:
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
        say(
            config,
            f"crashpoint: reaped what {reaped.harnesses} killed harness(es) left: "
            f"{reaped.describe()}",
        )


def say(config: pytest.Config, line: str) -> None:
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


def sessionfinish(session: pytest.Session, exitstatus: int) -> None:
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


def unconfigure(config: pytest.Config) -> None:
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


def report_header(config: pytest.Config) -> str | None:
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


# -- progress and summary --------------------------------------------------------------------


#: seconds per scenario file (its real path) in the previous run's gate.json ({}: none)
PREVIOUS = pytest.StashKey[Mapping[str, float]]()
PREVIOUS_KEY = "crashpoint_previous"  # key in an xdist worker's workerinput


def order_items(config: pytest.Config, items: list[pytest.Item]) -> list[pytest.Item]:
    """The session's items with its scenario files longest first (:mod:`._order`)."""
    collect = sys.modules.get("crashpoint.pytest_plugin._collect")
    if collect is None:
        return items  # no scenario file was collected
    # imported when used: the plugin's own ordering (standard library only)
    from crashpoint.pytest_plugin._order import scenario_order

    scenario_item = collect.ScenarioItem
    return scenario_order(
        items, lambda i: isinstance(i, scenario_item), config.stash.get(PREVIOUS, {})
    )


class _PreviousToWorkers:
    """xdist controller: hands each worker the previous run's time per scenario file."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[PREVIOUS_KEY] = self.config.stash.get(PREVIOUS, {})


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


def collection_finish(session: pytest.Session) -> None:
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


def terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
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
