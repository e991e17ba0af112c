"""``crashpoint run``, ``replay`` and ``report``: the crash-recovery gate, one trial replayed,
and a gate's report re-rendered.

``run`` drives pytest with the crashpoint plugin over scenario files (one engine, two doors) and
writes the reports (``--baseline``: what changed since a previous gate); ``replay`` re-runs one
failing trial from its folder; ``report`` renders report.html or the Markdown summary again
from a gate.json alone. Registered with the
frame (:mod:`crashpoint.cli._framework`) when :mod:`crashpoint.cli._main` imports this module.

Imports: the frame, the public faces :mod:`crashpoint.errors` and :mod:`crashpoint.harness`,
and pytest. The harness face is lazy and only its attributes are used, inside the commands;
pytest is imported inside ``run``: importing this room (as every command does) loads neither.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import stat
from collections.abc import Iterator
from typing import Any

from crashpoint import harness
from crashpoint.cli._framework import (
    EXIT_FOUND,
    EXIT_NOT_JUDGED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    Context,
    arg,
    command,
    count,
)
from crashpoint.errors import ReplayError, ScenarioError, UnsafeReportFolder, UsageError

__all__: list[str] = []

#: ``crashpoint run --help``'s epilog (README.md and docs/reference/cli.md have the same table)
_RUN_EXIT_CODES = (
    "Exit codes: 0 every trial passed (and every fault family had trials whose faults "
    "fired); 1 a trial failed a check, a golden (fault-free) run failed, or a campaign ran "
    "out of its time budget; 2 bad usage or a bad scenario file (the message names the file, "
    "the line and the key) or option; 3 the gate could not judge: no scenario found under "
    "PATH, a fault family none of whose trials was exercised, every trial of a campaign "
    "skipped, an agent that reports no boundary, a check the scenario asks for by name "
    "that no trial gave anything to judge; 130 / 143 interrupted by SIGINT / SIGTERM "
    "(the report marked incomplete, junit.xml with an error per unfinished item). When "
    "several apply, the first in this order wins: 130/143, 2, 1, 3. gate.json says the same "
    "in its verdict, exit_code and reasons fields."
)


@command(
    "run",
    help="the crash-recovery gate: run scenario files, print a table, write reports",
    description="Runs every *.scenario.yaml under PATH (default: scenarios/) through pytest "
    "with the crashpoint plugin (one engine, two doors), shows progress, ends "
    "with a table per scenario, writes JSON, JUnit and HTML reports to --report "
    "(the previous run's gate.json, junit.xml and report.html are replaced by "
    "'running' markers first, so a gate killed before it writes never leaves "
    "them looking current), and exits with a code a CI can read (below). SIGINT "
    "(Ctrl-C) or SIGTERM stops it cleanly (agents killed, temporary folders "
    "removed, the report marked incomplete). Its pytest session loads only "
    "crashpoint's plugin (and pytest-xdist's with -n) and the conftest.py files, not "
    "every pytest plugin installed (importing those cost ~1 s a run and a worker): "
    "name any other with -p (or in $PYTEST_PLUGINS).",
    epilog=_RUN_EXIT_CODES,
    args=[
        arg("paths", nargs="*", metavar="PATH", help="scenario files or folders"),
        arg("--seed", type=count, help="campaign seed (default: each scenario's own)"),
        arg("--trials", type=count, help="random trials per scenario (overrides files)"),
        arg("--mode", choices=("systematic", "random"), help="override every scenario's mode"),
        arg(
            "--report",
            metavar="DIR",
            default="crashpoint-report",
            help="where reports and failing trials go (default: ./crashpoint-report)",
        ),
        arg("--shard", metavar="I/N", help="run shard I of N of every campaign"),
        arg(
            "-n",
            dest="workers",
            metavar="N",
            help="parallel workers (pytest-xdist: a number or auto; default: one per CPU "
            "when there are several scenario files, up to one per file; 0: one process)",
        ),
        arg("-k", dest="keyword", metavar="EXPR", help="only scenarios matching EXPR"),
        arg("-x", dest="exitfirst", action="store_true", help="stop at the first failure"),
        arg(
            "--budget",
            metavar="DURATION",
            help="time budget per campaign, e.g. 10m or none (default: each scenario's "
            "budget, else 10m); past it the campaign stops and fails",
        ),
        arg(
            "--baseline",
            metavar="PREVIOUS",
            help="a previous gate.json or report folder: say what changed since (new "
            "failures, fixed, flaky) in the terminal, gate.json, report.html and the step "
            "summary (default: $CRASHPOINT_BASELINE)",
        ),
        arg("--quiet", action="store_true", help="no progress lines"),
        arg(
            "-p",
            dest="plugins",
            action="append",
            default=[],
            metavar="NAME",
            help="also load this pytest plugin: its entry-point name or module, as pytest's "
            "-p (repeatable; the session loads only crashpoint's plugin, pytest-xdist's "
            "with -n, and conftest.py files, not every plugin installed)",
        ),
    ],
)
def _run(ctx: Context) -> int:
    a = ctx.args
    paths = a.paths or ["scenarios"]
    for p in paths:
        if not os.path.exists(p):
            raise UsageError(
                f"no such file or folder: {p} (give scenario files or folders; "
                "the default is ./scenarios)"
            )
    if a.workers is not None and importlib.util.find_spec("xdist") is None:
        raise UsageError(
            "-n needs pytest-xdist, a dependency of crashpoint that is not "
            "installed in this environment: `python3 -m pip install "
            "pytest-xdist`, or run without -n"
        )
    if a.workers is None:
        a.workers = _default_workers(paths)
    report = os.path.abspath(a.report)
    # $CRASHPOINT_BASELINE (the plugin's variable) too: read here, before this run replaces a
    # gate.json it may name
    wanted = a.baseline if a.baseline is not None else os.environ.get("CRASHPOINT_BASELINE")
    baseline = _load_baseline(wanted) if wanted else None
    # --assert=plain: scenario items assert nothing, and rewriting would warn that crashpoint
    # (imported by this command) is "already imported", which filterwarnings=error, common in
    # a project's own configuration, turns into a crash of the gate. The plugins: see
    # _PLUGIN_AUTOLOAD (the project's ini options for the plugins not loaded are no error,
    # nor its required_plugins: the gate's session needs none of them)
    argv = [
        *paths,
        "-o",
        "addopts=",
        "-o",
        "required_plugins=",
        "-W",
        "ignore::pytest.PytestConfigWarning",
        "-p",
        "no:cacheprovider",
        "-p",
        "crashpoint",  # the entry point's name: autoload is off
        "--assert=plain",
        "-q",
        "-rfEs",  # failures, errors, and why an item was skipped (no PostgreSQL here)
        "--crashpoint-report",
        report,
        f"--junitxml={os.path.join(report, 'junit.xml')}",
    ]
    if a.workers is not None:
        argv += ["-p", "xdist"]
    for name in a.plugins:
        argv += ["-p", name]
    for flag, value in (
        ("--crashpoint-seed", a.seed),
        ("--crashpoint-trials", a.trials),
        ("--crashpoint-mode", a.mode),
        ("--crashpoint-shard", a.shard),
        ("--crashpoint-budget", a.budget),
        ("-n", a.workers),
        ("-k", a.keyword),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if a.workers is not None:  # a file's items on one worker: one golden run per file
        argv += ["--dist", "loadfile"]
    if a.exitfirst:
        argv.append("-x")
    if not a.quiet:
        argv.append("--crashpoint-progress")
    # SIGTERM as well as SIGINT stops the gate cleanly: the plugin session kills the agents,
    # removes mounts and temporary folders, writes the report marked incomplete
    restore = harness.install_signal_handlers()
    verdicts = _Verdicts()
    started = False
    try:
        _safe_report_folder(report)
        # first of all: the previous run's outputs are never left looking current
        harness.mark_report_running(report)
        started = True
        reaped = harness.reap_stale()
        if reaped.harnesses:
            ctx.note(
                f"{PROG}: reaped what {reaped.harnesses} killed harness(es) left: "
                f"{reaped.describe()}"
            )
        if baseline is not None:
            argv += ["--crashpoint-baseline", _keep_baseline(baseline, report)]
        import pytest  # here, not at the top: only the gate pays for pytest's start-up

        with _plugin_autoload_off():
            code = int(pytest.main(argv, plugins=[verdicts]))
    finally:
        if harness.received() is not None:
            harness.cleanup_all()
        restore()
        if started:  # what the session did not replace (pytest stopped early): no marker left
            with contextlib.suppress(OSError):
                harness.clear_report_running(report)
    sig = harness.received()
    if sig is not None:
        ctx.note(
            f"{PROG}: interrupted by {harness.signal_name(sig)}: agents stopped, temporary "
            f"folders removed; the report in {report} is marked incomplete"
        )
        return 128 + sig
    return _exit_code(ctx, code, verdicts.verdict, paths, a.keyword)


#: Set for the gate's pytest session (and so inherited by its pytest-xdist workers): pytest then
#: imports no plugin by its entry point but those named with ``-p`` (importing every plugin
#: installed, langsmith's, pytest-cov's, Hypothesis's, pyfakefs's..., was ~1.1 s of the ~2 s of
#: CPU a gate spent before judging anything, paid again by each worker)
_PLUGIN_AUTOLOAD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"


@contextlib.contextmanager
def _plugin_autoload_off() -> Iterator[None]:
    """Entry-point plugins off for the session, the variable as it was afterwards (``run`` may
    be called in-process)."""
    before = os.environ.get(_PLUGIN_AUTOLOAD)
    os.environ[_PLUGIN_AUTOLOAD] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_PLUGIN_AUTOLOAD, None)
        else:
            os.environ[_PLUGIN_AUTOLOAD] = before


class _Verdicts:
    """A plugin object given to ``pytest.main``: keeps the gate's verdict the crashpoint
    plugin announces at the end of the session (``pytest_crashpoint_gate_finished``)."""

    def __init__(self) -> None:
        self.verdict: Any = None

    def pytest_crashpoint_gate_finished(self, config: Any, verdict: Any) -> None:
        self.verdict = verdict


#: pytest's exit statuses (pytest.ExitCode), named here so that the mapping reads plainly
_PYTEST_OK, _PYTEST_FAILED, _PYTEST_INTERRUPTED = 0, 1, 2
_PYTEST_INTERNAL, _PYTEST_USAGE, _PYTEST_NO_TESTS = 3, 4, 5


def _exit_code(ctx: Context, code: int, verdict: Any, paths: list[str], keyword: str | None) -> int:
    """The gate's exit code from pytest's status and the crashpoint plugin's verdict (see
    :data:`_RUN_EXIT_CODES`), with a line on stderr saying why when it is not 0."""
    if code == _PYTEST_USAGE:
        return EXIT_USAGE  # a bad option value: the message is above
    if code == _PYTEST_NO_TESTS:
        where = " ".join(paths)
        also = f" (or none of them matched -k {keyword})" if keyword else ""
        ctx.note(f"{PROG}: no *.scenario.yaml found under {where}{also}: nothing was judged")
        return EXIT_NOT_JUDGED
    if verdict is None or (verdict.code == EXIT_OK and code != _PYTEST_OK):
        # no verdict (the plugin did not end its session), or pytest saw a problem it did not
        if code == _PYTEST_OK:
            return EXIT_OK
        if code == _PYTEST_FAILED:
            return EXIT_FOUND
        ctx.note(f"{PROG}: the gate did not run cleanly (pytest exit {code}); see above")
        return EXIT_NOT_JUDGED
    if verdict.code != EXIT_OK:
        why = verdict.reasons[0] if verdict.reasons else ""
        more = len(verdict.reasons) - 1
        ctx.note(
            f"{PROG}: gate verdict: {verdict.verdict} (exit {verdict.code})"
            + (f": {harness.one_line(why, 300)}" if why else "")
            + (f" (and {more} more: see gate.json)" if more > 0 else "")
        )
    return int(verdict.code)


def _default_workers(paths: list[str]) -> str | None:
    """``-n`` when not given: one worker per CPU this process may use, up to one per scenario
    file (a file's campaigns share one golden run, so they stay on one worker), when there is
    more than one of each and pytest-xdist is installed; else None (one process). Inside an
    xdist worker (a gate started by a test of a parallel run) the cores are taken: None."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if cpus < 2 or os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    if importlib.util.find_spec("xdist") is None:
        return None
    files = 0
    for p in paths:
        if os.path.isdir(p):
            for _dir, dirs, names in os.walk(p):
                dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
                files += sum(n.endswith(".scenario.yaml") for n in names)
        else:
            files += 1
        if files >= cpus:
            break
    return str(min(cpus, files)) if files > 1 else None


def _load_baseline(path: str) -> tuple[str, dict[str, Any]]:
    """``--baseline``: the previous gate.json, read before any trial runs (a missing,
    unreadable or malformed one is a usage error, one line)."""
    try:
        return harness.load_gate(path)
    except harness.GateFileError as exc:
        raise UsageError(f"--baseline {exc}") from None


def _keep_baseline(baseline: tuple[str, dict[str, Any]], report: str) -> str:
    """The baseline's path for the session: the gate.json this run is about to replace (the
    report folder's own) is kept first as ``baseline-gate.json`` beside it."""
    path, data = baseline
    if os.path.abspath(path) != os.path.join(report, "gate.json"):
        return path
    kept = os.path.join(report, "baseline-gate.json")
    harness.write_file(kept, json.dumps(data, indent=2, sort_keys=True))
    return kept


def _safe_report_folder(report: str) -> None:
    """The report folder, created 0700 without following a link, and refused (exit 2) if
    another user owns it or can write in it; pytest's own ``--junitxml`` would write through a
    link planted at ``junit.xml``, so anything there but a regular file is refused too."""
    try:
        harness.secure_dir(report)
    except UnsafeReportFolder as exc:
        raise UsageError(str(exc)) from None
    junit = os.path.join(report, "junit.xml")
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(junit).st_mode):
            raise UsageError(
                f"{junit} exists and is not a regular file (a link?): the gate "
                "will not write through it; remove it or choose another --report "
                "folder"
            )


@command(
    "replay",
    help="re-run exactly one failing trial from its folder and print its checks",
    description="FOLDER is a failing trial's folder (it holds plan.json, golden.json, "
    "runner.json and REPLAY). The same plan runs again against the same golden "
    "run; exit 1 if a check fails again (reproduced), 0 if every check passes, 3 if every "
    "check passes but a planned fault did not take effect this time (nothing was judged), "
    "2 if FOLDER is not a trial folder or its plan cannot be replayed.",
    args=[arg("folder", metavar="FOLDER", help="a trial folder from a report")],
)
def _replay(ctx: Context) -> int:
    folder = ctx.args.folder
    if not os.path.isdir(folder):
        raise UsageError(f"no such folder: {folder}")
    try:
        result = harness.replay(folder)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # a plan.json edited by hand: a file operation or write point
        if isinstance(exc, (ReplayError, ScenarioError)):  # their own message says what to do
            raise
        raise UsageError(
            f"{folder}: its plan.json cannot be replayed: {exc} (run the trial's "
            "campaign again to get a fresh plan)"
        ) from None
    ctx.print(f"trial {result.plan.index} [{result.plan.family}]: {result.plan.describe()}")
    ctx.print(f"  landed: {result.landed()}")
    for att in result.attempts:
        ctx.print(f"  {att.describe()}")
    for c in result.checks:
        ctx.print(f"  {c}")
    ctx.print(f"evidence: {result.folder}")
    if result.ok:
        if not result.exercised:  # as in the gate: a fault that did not fire proves nothing
            ctx.print(
                "not judged: every check passed, but a planned fault did not take effect this time"
            )
            return EXIT_NOT_JUDGED
        ctx.print("did not reproduce: every check passed this time")
        return EXIT_OK
    ctx.print(f"reproduced: {', '.join(c.name for c in result.failed)} failed")
    return EXIT_FOUND


@command(
    "report",
    help="re-render report.html or the Markdown summary from a gate.json alone",
    description="GATE is a gate.json (or the report folder holding it) that `crashpoint run` "
    "wrote. --format html (the default) writes report.html next to it (or to --out); "
    "--format markdown prints the summary the gate appends to $GITHUB_STEP_SUMMARY "
    "(or writes it to --out). Evidence folders are used where they are, relative to "
    "the gate.json's folder. Exit 0 once written, 2 if GATE is not a finished gate's "
    "report.",
    args=[
        arg("gate", metavar="GATE", help="a gate.json, or the report folder holding it"),
        arg(
            "--format",
            choices=("html", "markdown"),
            default="html",
            help="html (default): report.html; markdown: the CI summary",
        ),
        arg(
            "--out",
            metavar="PATH",
            help="where to write (html: default report.html next to the gate.json; "
            "markdown: default stdout); a folder gets report.html or summary.md",
        ),
    ],
)
def _report(ctx: Context) -> int:
    a = ctx.args
    try:
        path, gate = harness.load_gate(a.gate)
    except harness.GateFileError as exc:
        raise UsageError(str(exc)) from None
    campaigns: list[dict[str, Any]] = gate["campaigns"]
    changes = gate.get("changes") if isinstance(gate.get("changes"), dict) else None
    by = str(gate.get("interrupted_by") or "")
    if a.format == "markdown":
        errors = [str(e) for e in gate.get("scenario_errors") or []]
        text = harness.render_markdown(campaigns, changes=changes, errors=errors, interrupted_by=by)
        if a.out is None:
            ctx.out.write(text)
            return EXIT_OK
        out = _out_path(a.out, "summary.md")
        harness.write_file(out, text)
        ctx.note(f"{PROG}: wrote {out}")
        return EXIT_OK
    out = _out_path(a.out or os.path.dirname(path), "report.html")
    sections = [harness.changes_html(changes)] if changes else []
    page = harness.render_html(
        campaigns,
        report_dir=os.path.dirname(out),
        origin_dir=str(gate.get("report_dir") or os.path.dirname(path)),
        sections=sections,
        evidence_dir=os.path.dirname(path),  # beside the gate.json (a copy, wherever it is)
    )
    harness.write_file(out, page)
    ctx.print(out)
    return EXIT_OK


def _out_path(out: str, name: str) -> str:
    """``out`` as a file path (a folder, existing or ending in /, gets ``name``), in a safe
    folder (created 0700; one another user owns or can write in is refused)."""
    target = os.path.abspath(out)
    if os.path.isdir(target) or out.endswith(os.sep):
        target = os.path.join(target, name)
    try:
        harness.secure_dir(os.path.dirname(target))
    except UnsafeReportFolder as exc:
        raise UsageError(str(exc)) from None
    if os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode):
        raise UsageError(f"{target} exists and is not a regular file (a link?): not writing it")
    return target
