"""Writes outside the trial's folders are the trial's own: real agents, real trials, real /tmp.

An agent that writes ``/tmp/<name>`` by name is reported: by its syscall trace where its attempt
was traced, by the writer's process where fanotify names it (as root), by owner and change time
where neither can; a file that another process writes to /tmp during the trial (this test
process, a process of the same user while the agent runs, a process of another user) is not
reported, only counted. The names in /tmp are fixed (rewritten by every run, never removed);
the harness never removes anything there either.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crashpoint._proc import _writers
from crashpoint.faults import strace_available
from crashpoint.harness import (
    AgentSpec,
    CampaignResult,
    CheckResult,
    Fault,
    Golden,
    Plan,
    TrialResult,
    TrialRunner,
)
from crashpoint.pytest_plugin._summary import summary_table

#: Rewritten by each run of these tests; never removed (nothing in /tmp is).
PREFIX = "/tmp/outside-writes-test"

AGENT = textwrap.dedent("""
    import os, sys, time
    state, target, sync = sys.argv[1:4]
    os.makedirs(state, exist_ok=True)
    if sync != "-":  # say it runs, and wait (at most 10 s) until the test says go
        open(os.path.join(sync, "ready"), "w").close()
        deadline = time.monotonic() + 10
        while not os.path.exists(os.path.join(sync, "go")) and time.monotonic() < deadline:
            time.sleep(0.01)
    if target != "-":
        with open(target, "w") as f:
            f.write("x" * 1000)
""")

#: one attempt, no fault: not traced
UNTRACED = Plan((), "none", 0, 0)
#: one attempt with a file-size limit, run under strace (a full disk's trace)
TRACED = Plan((Fault.make("disk_full", mechanism="rlimit", capacity=1 << 20),), "disk", 0, 0)


@pytest.fixture
def agent_script(tmp_path: Path) -> str:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return str(path)


def run_trial(
    tmp_path: Path,
    script: str,
    target: str,
    plan: Plan = UNTRACED,
    sync: str = "-",
    checks: dict[str, Callable[..., CheckResult]] | None = None,
) -> TrialResult:
    spec = AgentSpec((sys.executable, script, "{state_dir}", target, sync), timeout=30)
    with TrialRunner(spec, str(tmp_path / "report"), restarts=0, extra_checks=checks or {}) as r:
        return r.run(plan, Golden([], [], Counter(), b"", 0.1))


def paths(result: TrialResult) -> dict[str, str]:
    """Reported path -> the rest of its entry."""
    return {o.rpartition(" (")[0]: o.rpartition(" (")[2] for o in result.outside_writes}


@pytest.fixture
def while_it_runs(tmp_path: Path) -> Iterator[Callable[[Callable[[], None]], str]]:
    """``start(write)`` -> the agent's sync folder: ``write()`` runs in a thread of this test
    process once the agent says it runs, and the agent goes on only after it."""
    sync = tmp_path / "sync"
    sync.mkdir()
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []

    def start(write: Callable[[], None]) -> str:
        def body() -> None:
            try:
                deadline = time.monotonic() + 10
                while not (sync / "ready").exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert (sync / "ready").exists(), "the agent never started"
                write()
            except BaseException as exc:
                errors.append(exc)
            finally:
                (sync / "go").touch()

        threads.append(threading.Thread(target=body, daemon=True))
        threads[-1].start()
        return str(sync)

    yield start
    for t in threads:
        t.join(timeout=15)
    if errors:
        raise errors[0]


def _watch_or_skip() -> None:
    if _writers.writer_watch(["/tmp"]) is None:
        pytest.skip(f"no fanotify watch here: {_writers.writer_watch_unavailable()}")


@pytest.fixture(params=["writer", "owner"])
def how(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with the fanotify watch (as root; skipped where there is none) and
    without it (owner and time), as on a machine without fanotify."""
    if request.param == "writer":
        _watch_or_skip()
        return "writer's process"
    monkeypatch.setattr(_writers, "_WATCH", None)
    monkeypatch.setattr(_writers, "_WHY", "switched off by the test")
    return "owner and time"


def test_an_agent_writing_to_tmp_by_name_is_reported(
    tmp_path: Path, agent_script: str, how: str
) -> None:
    target = f"{PREFIX}.agent"
    result = run_trial(tmp_path, agent_script, target)
    found = paths(result)
    assert target in found, result.outside_writes
    assert found[target].endswith(f"; by {how})"), found[target]
    summary = {**_summary(result), "scenario": "outside", "family": "none"}
    assert summary["outside_writes"]["system_tmp_by"][target] == how
    line = next(x for x in summary_table([summary]) if target in x)
    assert f"{target} (by {how})" in line
    assert "by its own processes" in line
    props = {p.get("name"): p.get("value") for p in _campaign(result).junit().iter("property")}
    assert props["outside_writes[system_tmp_paths]"] == str(len(result.outside_writes))
    assert Path(target).read_text() == "x" * 1000  # left where it was


def test_a_file_the_test_process_writes_during_the_trial_is_only_counted(
    tmp_path: Path, agent_script: str
) -> None:
    """Written to /tmp by this process while the trial is under way (after its attempt, before
    the trial ends): another process's change, not listed; one quiet line counts it."""
    other = Path(f"{PREFIX}.bystander")

    def bystander(_facts: object) -> CheckResult:
        time.sleep(0.2)  # well after the attempt ended
        other.write_text(f"written at {time.time()}")
        return CheckResult("bystander", True)

    result = run_trial(tmp_path, agent_script, "-", checks={"bystander": bystander})
    assert str(other) not in paths(result), result.outside_writes
    assert result.outside_writes == []
    assert result.outside_unattributed >= 1
    summary = {**_summary(result), "scenario": "outside", "family": "none"}
    assert summary["outside_writes"]["unattributed"] == result.outside_unattributed
    lines = [x for x in summary_table([summary]) if x.startswith("outside its folders")]
    assert len(lines) == 1, lines
    assert "by other processes were not attributed to the trials" in lines[0]
    assert str(other) not in lines[0]
    props = {p.get("name"): p.get("value") for p in _campaign(result).junit().iter("property")}
    assert props["outside_writes[unattributed]"] == str(result.outside_unattributed)
    assert props["outside_writes[system_tmp_paths]"] == "0"


def test_a_traced_attempt_is_judged_by_its_trace(
    tmp_path: Path, agent_script: str, while_it_runs: Callable[[Callable[[], None]], str]
) -> None:
    """Under strace: the agent's own file is reported by the trace; a file this process writes
    to /tmp while the agent runs (same user, inside its window) is not the agent's."""
    if not strace_available()[0]:
        pytest.skip(f"strace unavailable: {strace_available()[1]}")
    target, other = f"{PREFIX}.traced-agent", Path(f"{PREFIX}.traced-bystander")
    sync = while_it_runs(lambda: other.write_text(f"written at {time.time()}"))
    result = run_trial(tmp_path, agent_script, target, TRACED, sync)
    assert "strace" in " ".join(result.attempts[0].argv)
    found = paths(result)
    assert found.get(target, "").endswith("; by syscall trace)"), result.outside_writes
    assert str(other) not in found, result.outside_writes
    assert result.outside_unattributed >= 1


def test_a_same_user_process_writing_while_the_agent_runs_is_not_reported_where_fanotify_names_it(
    tmp_path: Path, agent_script: str, while_it_runs: Callable[[Callable[[], None]], str]
) -> None:
    """Untraced, same user, inside the attempt's window: owner and time would take it for the
    agent's (another CI job of the same user); the writer's pid says it is not."""
    _watch_or_skip()
    other = f"{PREFIX}.same-user"
    sync = while_it_runs(
        lambda: subprocess.run(["/bin/sh", "-c", f"date > {other}"], check=True, timeout=10)
    )
    target = f"{PREFIX}.agent-with-same-user"
    result = run_trial(tmp_path, agent_script, target, sync=sync)
    found = paths(result)
    assert found.get(target, "").endswith("; by writer's process)"), result.outside_writes
    assert other not in found, result.outside_writes
    assert result.outside_unattributed >= 1


def test_what_the_agents_children_write_is_the_agents(tmp_path: Path) -> None:
    """A shell agent whose short-lived children write /tmp (a redirection in a subshell, a
    ``cp``, a folder made and filled): each is the trial's, by the writer's process."""
    _watch_or_skip()
    script = tmp_path / "agent.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"(date > {PREFIX}.child-file)\n"
        f"cp /etc/hostname {PREFIX}.child-copy\n"
        f"mkdir -p {PREFIX}.child-dir && date > {PREFIX}.child-dir/inside.$$\n"
    )
    spec = AgentSpec(("/bin/sh", str(script)), timeout=30)
    with TrialRunner(spec, str(tmp_path / "report"), restarts=0) as r:
        result = r.run(UNTRACED, Golden([], [], Counter(), b"", 0.1))
    found = paths(result)
    for name in ("child-file", "child-copy", "child-dir"):
        assert found.get(f"{PREFIX}.{name}", "").endswith("; by writer's process)"), (
            name,
            result.outside_writes,
        )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to write as another user (nobody)")
def test_another_users_file_written_while_the_agent_runs_is_not_reported(
    tmp_path: Path, agent_script: str, while_it_runs: Callable[[Callable[[], None]], str]
) -> None:
    """Untraced: inside the attempt's window, but owned by another user: not the agent's."""
    other = f"{PREFIX}.nobody"

    def as_nobody() -> None:
        subprocess.run(
            ["/bin/sh", "-c", f"date > {other}"], user=65534, group=65534, check=True, timeout=10
        )

    sync = while_it_runs(as_nobody)
    target = f"{PREFIX}.agent-with-nobody"
    result = run_trial(tmp_path, agent_script, target, sync=sync)
    assert os.stat(other).st_uid == 65534
    found = paths(result)
    assert target in found, result.outside_writes
    assert other not in found, result.outside_writes
    assert result.outside_unattributed >= 1


def _campaign(result: TrialResult) -> CampaignResult:
    return CampaignResult("outside", Golden([], [], Counter(), b"", 0.1), [result], 1.0, 0, "")


def _summary(result: TrialResult) -> dict[str, Any]:
    """The campaign summary (what gate.json keeps) of this one trial."""
    return _campaign(result).summary()
