"""The fixtures' bodies: the entry module declares each fixture (its name, its arguments, its
docstring for ``pytest --fixtures``) and calls its body here when a test requests it.

Imports pytest, the standard library, the plugin's options and campaigns and the harness's lazy
face; the faults, the checkpoint library and pyfakefs only in the fixture that uses them.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from crashpoint import harness
from crashpoint.pytest_plugin._campaigns import (
    folder_for,
    make_harness,
    record_campaign,
    record_interrupted,
)
from crashpoint.pytest_plugin._options import marker_options

if TYPE_CHECKING:
    from crashpoint.checkpoint import Store
    from crashpoint.faults import Corruption, TmpfsNamespace
    from crashpoint.harness import AgentProcess, CrashHarness, Ledger

__all__ = [
    "agent_process",
    "checkpoint_store",
    "corrupt_file",
    "crash_harness",
    "disk_fault",
    "effect_ledger",
    "full_fake_disk",
]


def crash_harness(request: pytest.FixtureRequest, tmp_path: Path) -> CrashHarness:
    """The ``crash_harness`` fixture (declared in :mod:`crashpoint.pytest_plugin`)."""
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


def effect_ledger() -> Iterator[Ledger]:
    """The ``effect_ledger`` fixture (declared in :mod:`crashpoint.pytest_plugin`)."""
    ledger = harness.Ledger(http=True).start()
    try:
        yield ledger
    finally:
        ledger.close()


def agent_process() -> Iterator[Callable[..., AgentProcess]]:
    """The ``agent_process`` fixture (declared in :mod:`crashpoint.pytest_plugin`)."""
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


def disk_fault() -> Iterator[Callable[..., TmpfsNamespace]]:
    """The ``disk_fault`` fixture (declared in :mod:`crashpoint.pytest_plugin`)."""
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


def full_fake_disk() -> Iterator[Any]:
    """The ``full_fake_disk`` fixture (declared in :mod:`crashpoint.pytest_plugin`)."""
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


def corrupt_file() -> Callable[..., Corruption | None]:
    """The ``corrupt_file`` fixture (declared in :mod:`crashpoint.pytest_plugin`)."""
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


def checkpoint_store(tmp_path: Path) -> Store:
    """The ``checkpoint_store`` fixture (declared in :mod:`crashpoint.pytest_plugin`)."""
    # the library's face imports the whole library: imported when used, for the start-up
    from crashpoint.checkpoint import Store

    return Store(tmp_path / "checkpoints")
