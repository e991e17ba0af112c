"""pytest plugin (entry point ``pytest11: crashpoint``): a thin adapter over the harness.

Imports only pytest and the standard library at module level: loading pytest does not import
the harness. Options, marker, fixtures, hooks, and the ``*.scenario.yaml`` collector.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from crashpoint.checkpoint import Store
    from crashpoint.faults import Corruption, TmpfsNamespace
    from crashpoint.harness import AgentProcess, CrashHarness, Ledger

SEED_DESC = "seed of every crashpoint campaign (trial plans are a pure function of it)"
TRIALS_DESC = "number of random trials per campaign (systematic ones cover every boundary)"
MODE_DESC = (
    "systematic: kill at every boundary, every power-loss state; random: draw boundaries at random"
)
REPORT_DESC = "folder for crashpoint reports (JSON, JUnit, HTML, failing trial folders)"
SHARD_DESC = "run only shard I of N of every campaign's trials (I/N, 1-based), for CI matrices"
PROGRESS_DESC = "show trials done / total and failures so far while campaigns run"
BUDGET_DESC = (
    "time budget of each campaign, e.g. 10m (none: no limit); past it the running "
    "trial is stopped, the rest is not run, and the campaign fails (default 10m)"
)

#: name -> (CLI flag, environment variable, ini key, help, default)
OPTIONS: dict[str, tuple[str, str, str, str, str | None]] = {
    "seed": ("--crashpoint-seed", "CRASHPOINT_SEED", "crashpoint_seed", SEED_DESC, None),
    "trials": ("--crashpoint-trials", "CRASHPOINT_TRIALS", "crashpoint_trials", TRIALS_DESC, None),
    "mode": ("--crashpoint-mode", "CRASHPOINT_MODE", "crashpoint_mode", MODE_DESC, None),
    "report": ("--crashpoint-report", "CRASHPOINT_REPORT", "crashpoint_report", REPORT_DESC, None),
    "shard": ("--crashpoint-shard", "CRASHPOINT_SHARD", "crashpoint_shard", SHARD_DESC, None),
    "progress": (
        "--crashpoint-progress",
        "CRASHPOINT_PROGRESS",
        "crashpoint_progress",
        PROGRESS_DESC,
        None,
    ),
    "budget": ("--crashpoint-budget", "CRASHPOINT_BUDGET", "crashpoint_budget", BUDGET_DESC, None),
}
MARKER = (
    "crashpoint(trials=None, faults=None, seed=None, restarts=None): campaign settings "
    "for the crash_harness fixture of this test"
)
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Settings:
    """The resolved crashpoint options, each with where it came from."""

    seed: int | None
    trials: int | None
    mode: str | None
    report: str | None
    shard: tuple[int, int] | None
    progress: bool
    where: dict[str, str]
    budget: float | None = None  # seconds (inf: no limit); None: the scenario's, else 10m


SETTINGS = pytest.StashKey[Settings]()
SUMMARIES = pytest.StashKey[list[dict[str, Any]]]()
#: puts back the signal handlers that were there before the session (pytest_unconfigure)
_RESTORE_SIGNALS = pytest.StashKey[Callable[[], None]]()
#: the session's gate.json paths once written (pytest_sessionfinish), for the summary line
_REPORT_PATHS = pytest.StashKey[list[str]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from crashpoint.pytest_plugin import hooks

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


def _parse(name: str, raw: Any, where: str) -> Any:
    def bad(why: str) -> pytest.UsageError:
        return pytest.UsageError(f"crashpoint: bad value {raw!r} for {where}: {why}")

    if name in ("seed", "trials"):
        try:
            v = int(str(raw).strip())
        except ValueError:
            raise bad("expected a whole number") from None
        if v < 0:
            raise bad("expected a number >= 0")
        return v
    if name == "mode":
        v2 = str(raw).strip().lower()
        if v2 not in ("systematic", "random"):
            raise bad("expected one of: systematic, random")
        return v2
    if name == "shard":
        m = _SHARD.match(str(raw))
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            raise bad("expected I/N with 1 <= I <= N, e.g. 1/4")
        return (int(m.group(1)), int(m.group(2)))
    if name == "budget":
        from crashpoint.harness import UnitError, parse_budget

        try:
            return parse_budget(str(raw), what="")
        except UnitError as exc:
            raise bad(f"{exc}; or none for no limit") from None
    if name == "progress":
        if isinstance(raw, bool):
            return raw
        v3 = str(raw).strip().lower()
        if v3 in ("1", "true", "yes", "on"):
            return True
        if v3 in ("0", "false", "no", "off", ""):
            return False
        raise bad("expected true or false")
    if not str(raw).strip():
        raise bad("expected a folder path")
    if os.path.exists(raw) and not os.path.isdir(raw):
        raise bad("it is an existing file; expected a folder path")
    from crashpoint.harness import UnsafeReportFolder, check_report_folder

    try:  # another user's folder, or one others can write in: refused before anything runs
        check_report_folder(str(raw))
    except UnsafeReportFolder as exc:
        raise bad(str(exc)) from None
    return os.path.abspath(str(raw))  # agents run in their own folder: relative would move


def resolve_settings(config: pytest.Config) -> Settings:
    """Each option from the command line, else the environment, else the ini file."""
    values: dict[str, Any] = {}
    where: dict[str, str] = {}
    for name, (flag, env, ini, _help, default) in OPTIONS.items():
        cli = config.getoption(f"crashpoint_{name}")
        if cli is not None:
            values[name], where[name] = _parse(name, cli, f"{flag} (command line)"), "cli"
        elif os.environ.get(env, "") != "":
            values[name] = _parse(name, os.environ[env], f"{env} (environment)")
            where[name] = "env"
        else:
            ini_v = config.getini(ini)
            if str(ini_v).strip():
                values[name] = _parse(name, ini_v, f"{ini} (ini file {config.inipath})")
                where[name] = "ini"
            else:
                values[name] = default if name != "progress" else False
                where[name] = "default"
    return Settings(
        values["seed"],
        values["trials"],
        values["mode"],
        values["report"],
        values["shard"],
        bool(values["progress"]),
        where,
        values["budget"],
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    config.stash[SETTINGS] = resolve_settings(config)
    config.stash[SUMMARIES] = []
    config.pluginmanager.register(_SummaryCollector(config), "crashpoint-summary")
    _start_progress(config)
    from crashpoint.harness import install_signal_handlers

    # SIGTERM (and SIGINT) raise KeyboardInterrupt: agents are killed, temporary folders and
    # mounts removed, the report written marked incomplete; exit 143 / 130 (pytest_sessionfinish)
    config.stash[_RESTORE_SIGNALS] = install_signal_handlers()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")  # a pytest-xdist worker


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Reap what a killed earlier run left; replace a previous gate.json by "running"."""
    config = session.config
    if _is_worker(config):
        return
    from crashpoint.harness import reap_stale

    reaped = reap_stale()
    if reaped.harnesses:
        _say(
            config,
            f"crashpoint: reaped what {reaped.harnesses} killed harness(es) left: "
            f"{reaped.describe()}",
        )
    report = config.stash[SETTINGS].report
    if report:
        from crashpoint.pytest_plugin._summary import write_gate_running

        write_gate_running(report)


def _say(config: pytest.Config, line: str) -> None:
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(line)
    else:
        import sys

        print(line, file=sys.stderr)


def _interrupted_by(config: pytest.Config) -> str:
    """ "SIGTERM" / "SIGINT" if a signal stopped the session (or one of its campaigns)."""
    from crashpoint.harness import received, signal_name

    sig = received()
    if sig is not None:
        return signal_name(sig)
    return next(
        (str(s["interrupted_by"]) for s in config.stash[SUMMARIES] if s.get("interrupted_by")), ""
    )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write gate.json (marked incomplete if interrupted); exit 128 + the signal if one came."""
    config = session.config
    from crashpoint.harness import received

    sig = received()
    if sig is not None and config.pluginmanager.hasplugin("dsession"):
        _forward_to_workers(sig)  # xdist: `kill PID` reaches only the controller
    by = _interrupted_by(config)
    report = config.stash[SETTINGS].report
    if report and not _is_worker(config):
        from crashpoint.pytest_plugin._summary import remove_gate_running, write_session_reports

        summaries = config.stash[SUMMARIES]
        if summaries or by:
            config.stash[_REPORT_PATHS] = write_session_reports(
                report, summaries, interrupted_by=by
            )
        else:
            remove_gate_running(report)  # no campaign ran: no gate (and no stale one)
    # 143 SIGTERM (pytest would die of it: the shell says 143 too); 130 SIGINT where crashpoint
    # ran or collected something (elsewhere pytest's own 2 stands: we change no one else's exit)
    used = bool(config.stash[SUMMARIES]) or config.stash.get(_USED, False)
    if sig is not None and (sig == signal.SIGTERM or used):
        session.exitstatus = 128 + sig


def _forward_to_workers(sig: int) -> None:
    """Send ``sig`` to this process's children (the xdist workers: they clean up too)."""
    from crashpoint.harness import signal_children

    signal_children(sig)


def pytest_unconfigure(config: pytest.Config) -> None:
    from crashpoint.harness import cleanup_all, reap_stale, received

    watcher = config.stash.get(WATCHER, None)
    if watcher is not None:
        watcher.close()

    if received() is not None:
        cleanup_all()  # whatever the interrupted session's finally blocks did not reach
    if not _is_worker(config) and config.pluginmanager.hasplugin("dsession"):
        reaped = reap_stale()  # xdist workers killed after the grace period: not next time
        if reaped.harnesses:
            import sys

            print(
                f"crashpoint: reaped what {reaped.harnesses} stopped worker(s) left: "
                f"{reaped.describe()}",
                file=sys.stderr,
            )
    restore = config.stash.get(_RESTORE_SIGNALS, None)
    if restore is not None:
        restore()


def pytest_report_header(config: pytest.Config) -> str:
    s = config.stash[SETTINGS]
    shard = f"{s.shard[0]}/{s.shard[1]}" if s.shard else "all"
    return (
        f"crashpoint: seed={s.seed if s.seed is not None else 'per test (default 0)'} "
        f"trials={s.trials if s.trials is not None else 'per test'} "
        f"mode={s.mode or 'as declared'} shard={shard} "
        f"report={s.report or 'tmp_path (fixtures), ./crashpoint-report (scenarios)'}"
    )


# -- marker -----------------------------------------------------------------------------------


def _marker_signature(
    *,
    trials: int | None = None,
    faults: Any = None,
    seed: int | None = None,
    restarts: int | None = None,
) -> dict[str, Any]:
    return {"trials": trials, "faults": faults, "seed": seed, "restarts": restarts}


def marker_options(item: pytest.Item) -> dict[str, Any]:
    """The crashpoint marker's arguments, parsed strictly (unknown ones are an error)."""
    m = item.get_closest_marker("crashpoint")
    if m is None:
        return _marker_signature()
    try:
        opts = _marker_signature(*m.args, **m.kwargs)
    except TypeError as exc:
        why = str(exc).replace("_marker_signature()", "crashpoint()")
        raise pytest.UsageError(
            f"{item.nodeid}: bad @pytest.mark.crashpoint arguments (from marker): {why}; "
            "allowed: trials=, faults=, seed=, restarts="
        ) from None
    for key in ("trials", "seed", "restarts"):
        v = opts[key]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.crashpoint({key}={v!r}) "
                "(from marker): expected a whole number >= 0"
            )
    if opts["faults"] is not None:
        from crashpoint.harness import as_families

        try:
            as_families(opts["faults"])
        except (TypeError, ValueError, AttributeError) as exc:
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.crashpoint(faults={opts['faults']!r}) (from "
                f"marker): {exc}"
            ) from None
    return opts


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


def _folder_for(config: pytest.Config, nodeid: str, fallback: Path) -> str:
    s = config.stash[SETTINGS]
    if not s.report:
        return str(fallback)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150]
    return os.path.join(s.report, safe)


def make_harness(
    config: pytest.Config,
    folder: str,
    *,
    seed: int | None = None,
    trials: int | None = None,
    faults: Any = None,
    restarts: int | None = None,
    item: str = "",
) -> CrashHarness:
    """A CrashHarness configured from the options (CLI > env > ini > marker > default)."""
    from crashpoint.harness import CrashHarness

    s = config.stash[SETTINGS]
    checks: dict[str, Any] = {}
    for part in config.hook.pytest_crashpoint_checks(config=config):
        if part:
            checks.update(part)

    def plan_hook(family: Any, golden: Any, seed_: int, index: int) -> Any:
        return config.hook.pytest_crashpoint_plan(
            config=config, family=family, golden=golden, seed=seed_, index=index
        )

    return CrashHarness(
        folder,
        seed=s.seed if s.seed is not None else (seed or 0),
        trials=s.trials,
        mode=s.mode,
        shard=s.shard,
        restarts=3 if restarts is None else restarts,
        extra_checks=checks,
        plan_hook=plan_hook,
        progress=_progress(config, item),
        default_faults=faults,
        default_trials=trials,
        budget=s.budget,
    )


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
    folder = _folder_for(request.config, request.node.nodeid, tmp_path / "crashpoint")
    harness = make_harness(
        request.config,
        folder,
        seed=opts["seed"],
        trials=opts["trials"],
        faults=opts["faults"],
        restarts=opts["restarts"],
        item=request.node.nodeid,
    )
    run = harness.run
    item = request.node
    from crashpoint.harness import CampaignInterrupted

    def run_and_record(agent: Any, **kw: Any) -> Any:
        try:
            result = run(agent, **kw)
        except CampaignInterrupted as exc:  # what ran goes into the (incomplete) gate report
            record_interrupted(
                item,
                exc.result,
                scenario=item.nodeid,
                file=str(item.path),
                family=exc.result.name,
                reports=exc.result.report_dir,
            )
            raise
        record_campaign(
            item,
            result.campaign,
            scenario=item.nodeid,
            file=str(item.path),
            family=result.campaign.name,
            reports=result.campaign.report_dir,
        )
        return result

    harness.run = run_and_record  # type: ignore[method-assign]
    return harness


def record_campaign(item: pytest.Item, result: Any, **extra: Any) -> None:
    """Report a finished campaign: call ``pytest_crashpoint_campaign_finished`` and attach its
    summary to the item's test report (the end table and gate.json are built from those
    reports, so this works under pytest-xdist too)."""
    item.config.hook.pytest_crashpoint_campaign_finished(
        config=item.config, name=result.name, result=result
    )
    summary = result.summary()
    summary.update(extra)
    summary["trial_results"] = [t.to_json() for t in result.trials]
    item.user_properties.append(("crashpoint", json.dumps(summary, default=str)))


def record_interrupted(item: pytest.Item, result: Any, **extra: Any) -> None:
    """Keep the summary of a campaign a signal stopped (it has no test report) for the end
    table and gate.json (marked incomplete)."""
    summary = result.summary()
    summary.update(extra)
    summary["trial_results"] = [t.to_json() for t in result.trials]
    item.config.stash[SUMMARIES].append(json.loads(json.dumps(summary, default=str)))


@pytest.fixture
def effect_ledger() -> Iterator[Ledger]:
    """A started ledger (the outside world + kill switch); ``.env()`` points a probe at it."""
    from crashpoint.harness import Ledger

    ledger = Ledger(http=True).start()
    try:
        yield ledger
    finally:
        ledger.close()


@pytest.fixture
def agent_process() -> Iterator[Callable[..., AgentProcess]]:
    """Start agent processes in their own session; every tree is killed and reaped after the
    test (a survivor fails the test)."""
    from crashpoint.harness import AgentProcess, kill_tree

    started: list[AgentProcess] = []

    def start(
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float = 30.0,
        cwd: str | None = None,
    ) -> AgentProcess:
        p = AgentProcess(
            argv, dict(os.environ if env is None else env), cwd=cwd, timeout=timeout
        ).start()
        started.append(p)
        return p

    yield start
    survivors: list[int] = []
    for p in started:
        if p.proc is None:
            continue
        survivors += kill_tree(
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
    from crashpoint.faults import TmpfsNamespace, disk_capabilities
    from crashpoint.harness import parse_size

    caps = disk_capabilities()
    if not caps.tmpfs:
        pytest.skip(f"disk_fault: {caps.tmpfs_reason}")
    opened: list[TmpfsNamespace] = []

    def make(folder: str | os.PathLike[str], capacity: int | str = "16KiB") -> TmpfsNamespace:
        ns = TmpfsNamespace(os.fspath(folder), parse_size(capacity))
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
    # patched test fails with EBADF on pytest's capture files.
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
    import random

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
    from crashpoint.checkpoint import Store

    return Store(tmp_path / "checkpoints")


# -- scenario files -----------------------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name.endswith(".scenario.yaml"):
        from crashpoint.pytest_plugin._collect import ScenarioFile

        return ScenarioFile.from_parent(parent, path=file_path)
    return None


# -- progress and summary --------------------------------------------------------------------


_USED = pytest.StashKey[bool]()  # the session collected crashpoint items
BOARD = pytest.StashKey[Any]()  # crashpoint.pytest_plugin._board.Board
WATCHER = pytest.StashKey[Any]()  # the xdist controller's _progress.Watcher
WORKER_FILE = pytest.StashKey[Any]()  # an xdist worker's _progress.WorkerFile
PROGRESS_DIR = "crashpoint_progress_dir"  # key in an xdist worker's workerinput


def _is_crashpoint_item(item: pytest.Item) -> bool:
    from crashpoint.pytest_plugin._collect import ScenarioItem

    return isinstance(item, ScenarioItem) or "crash_harness" in getattr(item, "fixturenames", ())


def _progress(config: pytest.Config, item: str = "") -> Callable[[int, int, int, Any], None] | None:
    """The campaign's progress callback: a line naming the item, its trials, the session's
    items done of all and an ETA (printed here, or, on an xdist worker, written for the
    controller to print)."""
    board = config.stash.get(BOARD, None)
    if not config.stash[SETTINGS].progress or board is None:
        return None
    tr = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    worker_file = config.stash.get(WORKER_FILE, None)
    board.start_item(item)
    last = [0.0]

    def show(done: int, total: int, failures: int, result: Any) -> None:
        import time

        board.trial(done, total, not result.ok)
        if worker_file is not None:
            worker_file.write(board)
            return
        every = max(10, total // 10)
        due = (
            done == total or done % every == 0 or not result.ok or time.monotonic() - last[0] > 5.0
        )
        if tr is None or not due:
            return
        last[0] = time.monotonic()
        msg = f"{item}: trials {done}/{total}, failures so far: {failures}"
        if not result.ok:
            msg += f" (trial {result.plan.index}: {', '.join(c.name for c in result.failed)})"
        ctx = (
            capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
        )
        with ctx:
            tr.write_line(board.line(msg))

    return show


def pytest_collection_finish(session: pytest.Session) -> None:
    count = sum(1 for i in session.items if _is_crashpoint_item(i))
    session.config.stash[_USED] = count > 0
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
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == "crashpoint":
                self.config.stash[SUMMARIES].append(json.loads(str(value)))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    summaries = config.stash[SUMMARIES]
    by = _interrupted_by(config)
    if not summaries and not (by and config.stash[SETTINGS].report):
        return
    from crashpoint.pytest_plugin._summary import summary_table

    for line in summary_table(summaries, interrupted_by=by):
        terminalreporter.write_line(line)
    paths = config.stash.get(_REPORT_PATHS, None)
    if paths:
        terminalreporter.write_line("crashpoint reports: " + ", ".join(paths))
