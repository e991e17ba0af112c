"""Interruption is clean: SIGINT/SIGTERM, a SIGKILLed harness, and a campaign's time budget.

Each run gets a private TMPDIR, which the harness and every process it starts inherit (agents
get TMPDIR passed on; a tmpfs namespace's holder inherits the harness's environment). So "no
process left" is exact: no live process has that ``TMPDIR=`` in its environment; "no temporary
folder left": nothing named ``cp-*`` in that folder; "no mount left": no process holds a mount
namespace, and nothing under the test's folder is in ``/proc/mounts``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from crashpoint._proc import REAP_VAR, _cgroup, _cleanup
from crashpoint.faults._disk import capabilities

if TYPE_CHECKING:
    from conftest import Child, Children

# -- helpers ------------------------------------------------------------------------------------


def ours(tmp: Path) -> list[psutil.Process]:
    """Live processes started with ``TMPDIR=tmp`` (the harness under test) or with a TMPDIR
    below the test's folder (the agents: each attempt gets a private TMPDIR in its trial)."""
    below = f"TMPDIR={tmp.parent}/".encode()
    out = []
    for p in psutil.process_iter():
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if any(e.startswith(below) for e in env) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (OSError, psutil.Error):
            continue
    return out


def kill_all(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=5)


@pytest.fixture
def private_tmp(tmp_path: Path) -> Iterator[Path]:
    """A TMPDIR of this test only; whatever still runs with it at the end is killed (and the
    test fails if the test itself did not expect that)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    yield tmp
    left = ours(tmp)
    kill_all(left)


#: TMPDIR -> the folders its harnesses registered elsewhere (a short folder, /tmp or /dev/shm,
#: when TMPDIR is too long for the ledger's socket: pytest's basetemp under xdist can be),
#: still looked at once the harness's registry entry is gone
_ELSEWHERE: dict[Path, set[str]] = {}


def temp_folders(tmp: Path) -> list[str]:
    """The names of our temporary folders (``cp-*``) in ``tmp``, and of those its harnesses
    registered in another folder that are still there."""
    elsewhere = _ELSEWHERE.setdefault(tmp, set())
    live = tmp / f"crashpoint-{os.getuid()}" / "live"
    for entry in sorted(live.glob("*.json")) if live.is_dir() else []:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            elsewhere.update(
                f for f in json.loads(entry.read_text())["folders"] if Path(f).parent != tmp
            )
    names = [n for n in os.listdir(tmp) if n.startswith("cp-")]
    return sorted(names + [os.path.basename(f) for f in elsewhere if os.path.lexists(f)])


def live_entries(tmp: Path) -> list[str]:
    live = tmp / f"crashpoint-{os.getuid()}" / "live"
    return sorted(os.listdir(live)) if live.is_dir() else []


def other_mount_ns(procs: list[psutil.Process]) -> list[psutil.Process]:
    mine = os.readlink("/proc/self/ns/mnt")
    out = []
    for p in procs:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{p.pid}/ns/mnt") != mine:
                out.append(p)
    return out


def wait_for(what: Callable[[], Any], timeout: float = 60.0, why: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.2)  # each look reads every process's environment: not 20 times a second
    pytest.fail(f"waited {timeout}s for {why or what}")


def scenario(
    folder: Path, name: str, agent: str, fault: str, *, extra: str = "", timeout: str = "120s"
) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.scenario.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: {name}
        agent:
          command: ["sh", "-c", {json.dumps(agent)}, "agent-{name}"]
          timeout: {timeout}
        faults:
          - {fault}
        restarts: 1
        {extra}
        """)
    )
    return path


#: One probe event first: a campaign needs a boundary (and instants count from it).
PROBE = "{python} -c 'from crashpoint import probe; probe.step_started(\"work\")'; "
#: Exits at once in the golden run; in a trial starts a child and a detached grandchild
#: (setsid: another session, found only by its reap token) and waits.
SLOW = (
    PROBE + 'if [ "$CRASHPOINT_TRIAL" = golden ]; then exit 0; fi; '
    "setsid sleep 1000 & sleep 1000 & wait"
)
#: Short; the hang family stops it for good (SIGSTOP, never continued) at its first event.
HANGS = PROBE + "sleep 0.5; echo done"

needs_tmpfs = pytest.mark.skipif(not capabilities().tmpfs, reason=capabilities().tmpfs_reason)


#: The installed pytest plugins the sessions these tests start never use.
UNUSED_PLUGINS = " ".join(
    f"-p no:{p}" for p in ("langsmith_plugin", "hypothesispytest", "fakefs", "anyio", "benchmark")
)


def cli(
    children: Children, tmp: Path, cwd: Path, *args: str, containment: str | None = None
) -> Child:
    env: dict[str, str | None] = {
        "TMPDIR": str(tmp),
        # nothing of this session's options; the installed plugins these sessions never use
        # left out (langsmith's ~1 s of import, hypothesis's, pyfakefs's, ...: ~0.5 s more in
        # each session and xdist worker)
        "PYTEST_ADDOPTS": UNUSED_PLUGINS,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": None,
        REAP_VAR: None,
    }
    for k in os.environ:
        if k.startswith("CRASHPOINT_"):
            env[k] = None
    if containment is not None:
        env["CRASHPOINT_CONTAINMENT"] = containment
    return children.spawn([sys.executable, "-m", *args], env=env, cwd=cwd)


def agents(tmp: Path, name: str) -> list[psutil.Process]:
    out = []
    for p in ours(tmp):
        with contextlib.suppress(psutil.Error):
            if f"agent-{name}" in p.cmdline() or p.cmdline()[:2] == ["sleep", "1000"]:
                out.append(p)
    return out


#: a previous run's junit.xml: all green
GREEN_JUNIT = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
    'failures="0" skipped="0" tests="1"><testcase classname="old" name="passed"/></testsuite>'
    "</testsuites>"
)


def junit_suite(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()  # noqa: S314 - the gate's own report
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    return suite


def assert_running_markers(report: Path) -> None:
    """The previous run's outputs are replaced by markers no CI reads as green."""
    assert json.loads((report / "gate.json").read_text())["ok"] is False
    suite = junit_suite(report / "junit.xml")
    assert suite.get("errors") == "1"
    [error] = suite.iter("error")
    assert "still running, or was killed before it wrote them" in error.get("message", "")
    assert "PASS" not in (report / "report.html").read_text()
    assert "no results" in (report / "report.html").read_text()


def check_clean(tmp: Path, tmp_path: Path) -> None:
    left = ours(tmp)
    assert not left, "processes left: " + "; ".join(
        f"{p.pid} {p.status()} {' '.join(p.cmdline())}" for p in left if p.is_running()
    )
    assert temp_folders(tmp) == []
    assert [e for e in live_entries(tmp) if e.endswith(".json")] == []
    with open("/proc/mounts") as f:
        assert str(tmp_path) not in f.read()


# -- SIGINT / SIGTERM ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sig", "kind"),
    [
        # slow: the stopped agent's fast cover: [SIGINT-detached-agent] (the same interrupted
        # gate), test_budget_stops_a_hanging_family_and_fails_it[scenario] (a hung agent cleaned
        # up), 143 on SIGTERM: test_plain_pytest_sigterm_... and test_xdist_sigterm_...
        pytest.param(signal.SIGTERM, "hang", marks=pytest.mark.slow),
        (signal.SIGINT, "slow"),
        # slow: the tmpfs side's fast cover: test_sigkilled_harness_leftovers_are_reaped_by_the_
        # next_session[session] (the holder and cp-side- folder); the signals: the two above
        pytest.param(signal.SIGTERM, "tmpfs", marks=[needs_tmpfs, pytest.mark.slow]),
        pytest.param(signal.SIGINT, "tmpfs", marks=[needs_tmpfs, pytest.mark.slow]),
    ],
    ids=["SIGTERM-stopped-agent", "SIGINT-detached-agent", "SIGTERM-tmpfs", "SIGINT-tmpfs"],
)
def test_crashpoint_run_interrupted_cleans_up_and_exits_128_plus_signal(
    children: Children, private_tmp: Path, tmp_path: Path, sig: int, kind: str
) -> None:
    sc = tmp_path / "scenarios"
    if kind == "hang":
        scenario(sc, kind, HANGS, "hang: {count: 2}")
    elif kind == "slow":
        scenario(sc, kind, SLOW, "kill: {at: time, count: 2}")
    else:
        scenario(sc, kind, SLOW, "disk_full: {mechanism: tmpfs, capacity: 64KiB, count: 2}")
    report = tmp_path / "report"
    report.mkdir()
    (report / "gate.json").write_text('{"ok": true, "campaigns": []}')  # a previous run's
    (report / "junit.xml").write_text(GREEN_JUNIT)
    (report / "report.html").write_text("<html>PASS</html>")
    child = cli(
        children, private_tmp, tmp_path, "crashpoint", "run", str(sc), "--report", str(report)
    )
    if kind == "hang":  # the trial's agent, stopped
        wait_for(
            lambda: [p for p in agents(private_tmp, kind) if p.status() == psutil.STATUS_STOPPED],
            why="a stopped agent",
        )
    elif kind == "slow":  # the trial's agent with its detached grandchild
        wait_for(
            lambda: (
                len([p for p in agents(private_tmp, kind) if p.cmdline()[:2] == ["sleep", "1000"]])
                >= 2
            ),
            why="the agent's two sleeps",
        )
    else:  # the agent runs in the tmpfs namespace; its holder too
        wait_for(
            lambda: len(other_mount_ns(ours(private_tmp))) >= 2,
            why="agent and holder in a private mount namespace",
        )
        assert any(n.startswith("cp-side-") for n in temp_folders(private_tmp))
    assert any(n.startswith("cp-ledger-") for n in temp_folders(private_tmp))
    assert live_entries(private_tmp) == [f"{child.pid}.json"]
    gate = json.loads((report / "gate.json").read_text())
    assert gate == {"ok": False, "incomplete": True, "status": "running"}  # no stale success
    assert_running_markers(report)

    os.kill(child.pid, sig)
    code = child.wait(60)
    assert code == 128 + sig, child.stderr_text()
    check_clean(private_tmp, tmp_path)
    gate = json.loads((report / "gate.json").read_text())
    name = signal.Signals(sig).name
    assert gate["ok"] is False
    assert gate["incomplete"] is True
    assert gate["interrupted_by"] == name
    assert (gate["verdict"], gate["exit_code"]) == ("interrupted", 128 + sig)
    [camp] = gate["campaigns"]
    assert (camp["incomplete"], camp["interrupted_by"], camp["not_run"]) == (True, name, 2)
    # the partial junit.xml: the interrupted item is an error, never a pass (nor absent)
    suite = junit_suite(report / "junit.xml")
    assert (suite.get("errors"), suite.get("failures")) == ("1", "0")
    [case] = [c for c in suite.iter("testcase") if c.find("error") is not None]
    assert case.get("classname", "").endswith(f"{kind}.scenario.yaml"), case.attrib
    assert case.get("name") == camp["family"]
    assert case.find("error").get("message") == "interrupted before this trial finished"
    assert all(c.get("name") for c in suite.iter("testcase"))
    # the campaign's own junit.xml: its 2 trials that never ran are errors too
    [own] = (report / "scenarios").glob("*/junit.xml")
    own_suite = junit_suite(own)
    assert (own_suite.get("errors"), own_suite.get("skipped")) == ("2", "0")
    lines = []
    while (line := child.read_line(10)) is not None:
        lines.append(line)
    text = "\n".join(lines)
    assert f"crashpoint gate: INTERRUPTED by {name}" in text
    assert "INTERRUPTED" in [w for ln in lines if f"{kind} [" in ln for w in ln.split()]
    assert f"crashpoint: interrupted by {name}" in child.stderr_text()


def test_plain_pytest_sigterm_with_crash_harness_fixture(
    children: Children, private_tmp: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_agent.py").write_text(
        textwrap.dedent(f"""\
        AGENT = ["sh", "-c", {SLOW!r}, "agent-fixture"]

        def test_agent(crash_harness):
            crash_harness.run(AGENT, faults={{"kill": {{"at": "time", "count": 3}}}}).assert_ok()
        """)
    )
    report = tmp_path / "report"
    child = cli(
        children,
        private_tmp,
        project,
        "pytest",
        "-p",
        "no:cacheprovider",
        "test_agent.py",
        "--crashpoint-report",
        str(report),
        "--junitxml",
        str(project / "junit.xml"),
    )
    wait_for(lambda: len(agents(private_tmp, "fixture")) >= 3, why="the agent and its sleeps")
    os.kill(child.pid, signal.SIGTERM)
    assert child.wait(60) == 143, child.stderr_text()  # not 2 (pytest) nor death by signal
    check_clean(private_tmp, tmp_path)
    gate = json.loads((report / "gate.json").read_text())
    assert (gate["ok"], gate["incomplete"], gate["interrupted_by"]) == (False, True, "SIGTERM")
    assert gate["campaigns"][0]["scenario"] == "test_agent.py::test_agent"
    suite = junit_suite(project / "junit.xml")  # the user's own --junitxml: the test cut short
    assert suite.get("errors") == "1"
    [case] = suite.iter("testcase")
    assert (case.get("classname"), case.get("name")) == ("test_agent", "test_agent")
    assert case.find("error").get("message") == "interrupted before this trial finished"
    assert not (report / "junit.xml").exists()  # the report folder's marker: removed


def test_xdist_sigterm_to_the_controller_cleans_up_the_workers(
    children: Children, private_tmp: Path, tmp_path: Path
) -> None:
    pytest.importorskip("xdist")
    sc = tmp_path / "scenarios"
    scenario(sc, "one", SLOW, "kill: {at: time, count: 2}")
    scenario(sc, "two", SLOW, "kill: {at: time, count: 2}")
    report = tmp_path / "report"
    child = cli(
        children,
        private_tmp,
        tmp_path,
        "crashpoint",
        "run",
        str(sc),
        "-n",
        "2",
        "--report",
        str(report),
    )
    wait_for(
        lambda: agents(private_tmp, "one") and agents(private_tmp, "two"),
        why="both workers' agents",
    )
    os.kill(child.pid, signal.SIGTERM)  # the controller only, as `kill PID` does
    assert child.wait(60) == 143, child.stderr_text()
    check_clean(private_tmp, tmp_path)
    gate = json.loads((report / "gate.json").read_text())
    assert (gate["ok"], gate["incomplete"], gate["interrupted_by"]) == (False, True, "SIGTERM")
    # the controller collects nothing itself: its workers' items, both cut short, are errors
    suite = junit_suite(report / "junit.xml")
    errors = [c for c in suite.iter("testcase") if c.find("error") is not None]
    assert sorted(c.get("classname", "").rsplit(".", 3)[-3] for c in errors) == ["one", "two"]
    assert suite.get("errors") == "2"


# -- SIGKILL, then the next run reaps -----------------------------------------------------------


@needs_tmpfs
@pytest.mark.parametrize(
    "containment",
    # slow: the cgroup watcher's fast cover: the [session] variant (the same leftovers, reaped)
    ["session", pytest.param("cgroup", marks=pytest.mark.slow)],
)
def test_sigkilled_harness_leftovers_are_reaped_by_the_next_session(
    children: Children, private_tmp: Path, tmp_path: Path, containment: str
) -> None:
    """With the session reaper (no cgroup) the agent and the tmpfs holder outlive a SIGKILLed
    harness until the next session reaps them by their token; with a cgroup per attempt the
    harness's watcher kills the agents at once, and the holder waits for the next session."""
    if containment == "cgroup" and _cgroup.containment().mechanism != "cgroup":
        pytest.skip(f"no cgroup here: {_cgroup.containment().describe()}")
    sc = tmp_path / "scenarios"
    scenario(sc, "killed", SLOW, "disk_full: {mechanism: tmpfs, capacity: 64KiB, count: 2}")
    child = cli(
        children,
        private_tmp,
        tmp_path,
        "crashpoint",
        "run",
        str(sc),
        "--report",
        str(tmp_path / "report"),
        containment=containment,
    )
    # the agent's two sleeps running (so its probe call is over: a harness killed while it
    # answers one makes the agent exit by itself) and the holder: 3 in the tmpfs's namespace
    wait_for(
        lambda: (
            len(agents(private_tmp, "killed")) >= 2 and len(other_mount_ns(ours(private_tmp))) >= 3
        ),
        why="agent and holder",
    )
    os.kill(child.pid, signal.SIGKILL)  # no clean-up can run
    assert child.wait(30) == -signal.SIGKILL
    if containment == "session":
        time.sleep(0.5)
        left = ours(private_tmp)
        assert len(other_mount_ns(left)) >= 2, (
            "the agent and the holder outlive a SIGKILLed harness"
        )
        assert len(agents(private_tmp, "killed")) >= 2
    else:
        wait_for(
            lambda: not agents(private_tmp, "killed"),
            30,
            why="the cgroup watcher to kill the agents of the dead harness",
        )
        assert other_mount_ns(ours(private_tmp)), "the tmpfs holder is no attempt's: it waits"
    folders = temp_folders(private_tmp)
    assert any(f.startswith("cp-ledger-") for f in folders)
    assert any(f.startswith("cp-side-") for f in folders)
    assert live_entries(private_tmp) == [f"{child.pid}.json"]

    empty = tmp_path / "empty"
    empty.mkdir()
    # the next session that uses crashpoint (here: asks for it with an option; a session that
    # does not use it touches nothing, tests/plugin/test_unused.py)
    nxt = cli(
        children,
        private_tmp,
        empty,
        "pytest",
        "-p",
        "no:cacheprovider",
        "--crashpoint-seed=0",
        str(empty),
    )
    assert nxt.wait(60) == pytest.ExitCode.NO_TESTS_COLLECTED
    lines = []
    while (line := nxt.read_line(10)) is not None:
        lines.append(line)
    [said] = [ln for ln in lines if ln.startswith("crashpoint: reaped")]
    assert said.startswith("crashpoint: reaped what 1 killed harness(es) left: ")
    assert f"{len(folders)} temporary folder(s) removed" in said
    check_clean(private_tmp, tmp_path)


def test_reaper_leaves_live_harnesses_and_foreign_things_alone(
    children: Children, private_tmp: Path, tmp_path: Path
) -> None:
    live = Path(_cleanup.live_dir(str(private_tmp), create=True) or "")
    assert live.is_dir()
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep").write_text("x")
    (private_tmp / "cp-ledger-abcdefgh").symlink_to(outside)  # a planted symlink
    (private_tmp / "cp-ledger-toolong12345").mkdir()  # not a name mkdtemp gives
    victim = private_tmp / "cp-side-12345678"
    victim.mkdir()
    (victim / "x").write_text("x")
    bystander = children.spawn(["sleep", "1000"])  # a process whose pid an entry names
    ct = psutil.Process(bystander.pid).create_time()
    dead = children.spawn(["true"])
    dead.wait()
    live_harness = children.spawn(["sleep", "1000"])
    entry = {
        "tokens": [],
        "tmpdir": str(private_tmp),
        "holders": [[bystander.pid, ct + 5.0]],  # reused pid: another start time
        "folders": [
            str(private_tmp / "cp-ledger-abcdefgh"),
            str(private_tmp / "cp-ledger-toolong12345"),
            str(outside),
            str(victim),
            "/etc",
        ],
    }
    (live / f"{dead.pid}.json").write_text(
        json.dumps({**entry, "pid": dead.pid, "create_time": 1.0})
    )
    (live / f"{live_harness.pid}.json").write_text(
        json.dumps(
            {
                **entry,
                "pid": live_harness.pid,
                "holders": [[bystander.pid, ct]],
                "create_time": psutil.Process(live_harness.pid).create_time(),
            }
        )
    )
    reaped = _cleanup.reap_stale(str(private_tmp))
    assert (reaped.harnesses, reaped.processes, reaped.folders) == (1, 0, 1)
    assert not victim.exists()  # ours, by name, inside the temp folder: removed
    assert (outside / "keep").read_text() == "x"
    assert (private_tmp / "cp-ledger-abcdefgh").is_symlink()
    assert (private_tmp / "cp-ledger-toolong12345").is_dir()
    assert psutil.Process(bystander.pid).status() != psutil.STATUS_ZOMBIE
    assert os.path.isdir("/etc")
    assert sorted(os.listdir(live)) == [f"{live_harness.pid}.json"]  # a live harness's entry

    os.kill(live_harness.pid, signal.SIGKILL)  # now it is dead: its holder (same start) goes
    live_harness.wait()
    reaped = _cleanup.reap_stale(str(private_tmp))
    assert (reaped.harnesses, reaped.processes) == (1, 1)
    assert bystander.wait(5) == -signal.SIGKILL
    assert os.listdir(live) == []


def test_live_folder_planted_by_someone_else_is_not_used(tmp_path: Path) -> None:
    base = tmp_path / f"crashpoint-{os.getuid()}"
    target = tmp_path / "elsewhere"
    target.mkdir()
    base.symlink_to(target)
    assert _cleanup.live_dir(str(tmp_path), create=True) is None
    assert os.listdir(target) == []
    base.unlink()
    base.mkdir()
    os.chmod(base, 0o750)  # noqa: S103 - open to the group: not private, so not used
    assert _cleanup.live_dir(str(tmp_path), create=True) is None
    os.chmod(base, 0o700)
    assert _cleanup.live_dir(str(tmp_path), create=True) == str(base / "live")


def test_a_signal_inside_a_shield_is_raised_when_it_ends(children: Children) -> None:
    code = textwrap.dedent("""\
        import os, signal
        from crashpoint._proc._cleanup import (Interrupted, install_signal_handlers,
                                                received, shielded)
        install_signal_handlers()
        steps = []
        try:
            with shielded():
                os.kill(os.getpid(), signal.SIGTERM)
                steps.append("after the signal, still inside")
            steps.append("never")
        except Interrupted as exc:
            steps.append(f"raised {exc.signum} at the end")
        try:
            with shielded():
                os.kill(os.getpid(), signal.SIGINT)
                raise ValueError("the block fails")
        except Interrupted:
            steps.append("a deferred signal replaces an ordinary error")
        print(steps, received())
        """)
    child = children.spawn([sys.executable, "-c", code])
    assert child.wait(30) == 0, child.stderr_text()
    assert child.read_line() == (
        "['after the signal, still inside', 'raised 15 at the end', "
        "'a deferred signal replaces an ordinary error'] 15"
    )


# -- the budget ---------------------------------------------------------------------------------


# slow: the --budget option's fast cover: the [scenario] variant (the same stop) and
# test_budget_of_a_crash_harness_campaign
@pytest.mark.parametrize("where", ["scenario", pytest.param("option", marks=pytest.mark.slow)])
def test_budget_stops_a_hanging_family_and_fails_it(
    children: Children, private_tmp: Path, tmp_path: Path, where: str
) -> None:
    sc = tmp_path / "scenarios"
    # the agent's own timeout (10 minutes) would hold CI; the budget stops it after 6s (time
    # enough for the golden run on a loaded machine: the trials hang, the golden run does not)
    scenario(
        sc,
        "hangs",
        HANGS,
        "hang: {count: 3}",
        timeout="10m",
        extra="budget: 6s" if where == "scenario" else "budget: 10m",
    )
    report = tmp_path / "report"
    args = ["--budget", "6s"] if where == "option" else []
    child = cli(
        children,
        private_tmp,
        tmp_path,
        "crashpoint",
        "run",
        str(sc),
        "--report",
        str(report),
        *args,
    )
    assert child.wait(120) == 1, child.stderr_text()
    lines = []
    while (line := child.read_line(10)) is not None:
        lines.append(line)
    text = "\n".join(lines)
    # trial 0 hangs and is stopped (or, on a machine too slow to start it in time, never ran)
    assert re.search(
        r"the campaign's time budget of 6s ran out: 0 of 3 trials ran"
        r"( \(trial 0 was stopped\))?, 3 not run",
        text,
    ), text
    assert "raise it with `budget:` in the scenario file, --crashpoint-budget" in text
    assert "FAIL (budget)" in text
    check_clean(private_tmp, tmp_path)
    gate = json.loads((report / "gate.json").read_text())
    assert (gate["ok"], gate["interrupted_by"]) == (False, None)
    [camp] = gate["campaigns"]
    assert (camp["ok"], camp["not_run"], camp["ran"]) == (False, 3, 0)
    # the trials the budget cut are errors in the campaign's junit.xml: never read as green
    [junit] = (report / "scenarios").glob("*/junit.xml")
    suite = junit_suite(junit)
    assert (suite.get("errors"), suite.get("skipped")) == ("3", "0")
    assert [e.get("message", "")[:38] for e in suite.iter("error")] == [
        "not run: the campaign's time budget of"
    ] * 3


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0s", "a budget must be more than 0; or none for no limit"),
        ("lots", "'lots' is not a duration"),
        ("[1, 2]", "expected a duration such as 10m, got [1, 2]; or none for no limit"),
    ],
)
def test_bad_budget_in_a_scenario_names_file_line_and_key(
    tmp_path: Path, value: str, message: str
) -> None:
    from crashpoint.harness import ScenarioError, load_scenario

    path = scenario(tmp_path, "bad", HANGS, "hang: {count: 1}", extra=f"budget: {value}")
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(f"{path}:8 (key 'budget'): ")
    assert message in str(exc.value)


def test_budget_none_means_no_limit(tmp_path: Path) -> None:
    from crashpoint.harness import load_scenario

    path = scenario(tmp_path, "ok", HANGS, "hang: {count: 1}", extra="budget: none")
    assert load_scenario(path).budget == float("inf")


def test_budget_of_a_crash_harness_campaign(tmp_path: Path) -> None:
    from crashpoint.harness import CrashHarness

    agent = ["sh", "-c", HANGS, "agent-in-process"]
    result = CrashHarness(str(tmp_path / "h")).run(agent, faults="hang", trials=2, budget=5.0)
    assert not result.ok
    assert result.campaign.incomplete.startswith(
        "the campaign's time budget of 5s ran out: 0 of 2 trials ran (trial 0 was stopped)"
    )
    assert "STOPPED: the campaign's time budget of 5s ran out" in result.report()
    # stopping the hung trial and closing fit inside the budget (a margin is kept for them)
    assert result.campaign.duration <= 5.0, result.campaign.duration
    assert not [p for p in psutil.process_iter() if _cmd(p)[-1:] == ["agent-in-process"]]
    assert not _cleanup.LIVE  # nothing registered is left


def _cmd(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def test_an_interrupted_campaign_keeps_what_ran_and_cleans_up(tmp_path: Path) -> None:
    from crashpoint.harness import CampaignInterrupted, CrashHarness

    calls = []

    def interrupt_after_the_first(done: int, total: int, failures: int, res: Any) -> None:
        calls.append(done)
        raise KeyboardInterrupt  # as Ctrl-C would, between two trials

    harness = CrashHarness(str(tmp_path / "h"), progress=interrupt_after_the_first)
    camp = harness.campaign(
        ["sh", "-c", PROBE + "exit 0"], faults={"kill": {"at": "time"}}, trials=3
    )
    with pytest.raises(CampaignInterrupted) as exc:
        camp.run(progress=interrupt_after_the_first)
    partial = exc.value.result
    assert calls == [1]
    assert (len(partial.trials), len(partial.not_run)) == (1, 2)
    assert partial.incomplete == "interrupted by SIGINT after 1 of 3 trials"
    assert not partial.ok
    summary = json.loads((Path(partial.report_dir) / "summary.json").read_text())
    assert (summary["incomplete"], summary["ran"], summary["not_run"]) == (True, 1, 2)
    live = _cleanup.LIVE  # the ledger's folder is gone, no attempt is registered
    assert not live, (live.tokens, live.holders, live.folders)


def test_a_session_that_runs_no_campaign_leaves_no_gate(
    children: Children, private_tmp: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_plain.py").write_text("def test_nothing():\n    pass\n")
    report = tmp_path / "report"
    report.mkdir()
    (report / "gate.json").write_text('{"ok": true, "campaigns": []}')  # a previous run's
    child = cli(
        children,
        private_tmp,
        project,
        "pytest",
        "-p",
        "no:cacheprovider",
        "test_plain.py",
        "--crashpoint-report",
        str(report),
    )
    assert child.wait(60) == 0, child.stderr_text()
    assert not (report / "gate.json").exists()  # replaced by "running", then removed


def test_a_gate_that_cannot_start_leaves_no_old_success(
    children: Children, private_tmp: Path, tmp_path: Path
) -> None:
    sc = tmp_path / "scenarios"
    scenario(sc, "fine", HANGS, "hang: {count: 1}")
    report = tmp_path / "report"
    report.mkdir()
    (report / "gate.json").write_text('{"ok": true, "campaigns": []}')  # a previous run's
    child = cli(
        children,
        private_tmp,
        tmp_path,
        "crashpoint",
        "run",
        str(sc),
        "--report",
        str(report),
        "--budget",
        "lots",
    )
    assert child.wait(60) == 2
    lines = []
    while (line := child.read_line(10)) is not None:
        lines.append(line)
    assert any(
        "bad value 'lots' for --crashpoint-budget (command line): 'lots' is not a duration" in ln
        and ln.endswith("; or none for no limit")
        for ln in lines + child.stderr_text().splitlines()
    ), lines
    assert not (report / "gate.json").exists()


def test_a_gate_killed_outright_leaves_markers_not_the_previous_success(
    children: Children, private_tmp: Path, tmp_path: Path
) -> None:
    """A passing gate's outputs, then a gate SIGKILLed mid-run (no clean-up can run): its
    report folder holds "running" markers, never the passing run's gate.json, junit.xml or
    report.html (written here as a passing gate writes them: a real one costs a gate run)."""
    sc = tmp_path / "scenarios"
    report = tmp_path / "report"
    report.mkdir()
    (report / "gate.json").write_text('{"ok": true, "campaigns": []}')  # a previous run's
    (report / "junit.xml").write_text(GREEN_JUNIT)
    (report / "report.html").write_text("<html>PASS</html>")
    assert junit_suite(report / "junit.xml").get("errors") == "0"

    scenario(sc, "slow", SLOW, "kill: {at: time, count: 2}")
    child = cli(
        children, private_tmp, tmp_path, "crashpoint", "run", str(sc), "--report", str(report)
    )
    wait_for(lambda: len(agents(private_tmp, "slow")) >= 2, why="the agent's sleeps")
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(30) == -signal.SIGKILL
    kill_all(ours(private_tmp))  # what the killed gate left: the next session would reap it
    assert_running_markers(report)
