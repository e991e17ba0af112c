"""An agent that cannot be started is one clear line (what, where, how to fix), not a traceback:
a program not on PATH or not where the command says, one not executable, a script whose ``#!``
interpreter is missing, a working folder that does not exist. The golden run surfaces it as
GoldenRunFailed with that line, and ``crashpoint run`` prints it without a traceback. Nothing
is left behind (no descriptor, no cgroup).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crashpoint._proc import _cgroup
from crashpoint.errors import AgentNotExecutable, AgentNotFound, AgentStartError
from crashpoint.harness import AgentProcess, AgentSpec, GoldenRunFailed, TrialRunner

ENV = {"PATH": "/usr/bin:/bin"}


def _start(argv: list[str], cwd: Path | str) -> AgentStartError:
    with pytest.raises(AgentStartError) as info:
        AgentProcess(argv, ENV, cwd=str(cwd), timeout=10).start()
    err = info.value
    assert "\n" not in str(err)
    assert str(err).startswith("cannot start the agent")
    again = pickle.loads(pickle.dumps(err))  # noqa: S301 - our own bytes (xdist pickles it)
    assert (type(again), str(again), again.argv0, again.cwd) == (
        type(err),
        str(err),
        err.argv0,
        err.cwd,
    )
    return err


def test_a_program_not_on_path(tmp_path: Path) -> None:
    err = _start(["cp-no-such-agent", "--x"], tmp_path)
    assert isinstance(err, AgentNotFound)
    assert isinstance(err, FileNotFoundError)
    assert str(err) == (
        f"cannot start the agent in {tmp_path}: 'cp-no-such-agent' (looked up "
        "on the agent's PATH=/usr/bin:/bin) was not found; give an absolute "
        "path, a path relative to the working folder, or a program on the "
        "agent's PATH (agent.env)"
    )
    assert (err.argv0, err.cwd) == ("cp-no-such-agent", str(tmp_path))


def test_a_relative_path_that_is_not_there(tmp_path: Path) -> None:
    err = _start(["./agent.sh"], tmp_path)
    assert isinstance(err, AgentNotFound)
    assert f"in {tmp_path}: './agent.sh' (relative to that folder) was not found" in str(err)


def test_a_program_that_is_not_executable(tmp_path: Path) -> None:
    (tmp_path / "agent.sh").write_text("#!/bin/sh\necho hi\n")
    err = _start([str(tmp_path / "agent.sh")], tmp_path)
    assert isinstance(err, AgentNotExecutable)
    assert isinstance(err, PermissionError)
    assert "is not executable; make it executable (chmod +x)" in str(err)


def test_a_script_whose_interpreter_is_missing(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    err = _start(["./agent.sh"], tmp_path)
    assert isinstance(err, AgentNotFound)
    assert "exists but its interpreter (its #! line) was not found" in str(err)


def test_a_working_folder_that_does_not_exist(tmp_path: Path) -> None:
    err = _start(["true"], tmp_path / "missing")
    assert isinstance(err, AgentNotFound)
    assert str(err) == (
        f"cannot start the agent 'true': its working folder "
        f"{tmp_path / 'missing'} does not exist or is not a folder; create it, "
        "or fix agent.cwd"
    )


def test_a_failed_start_leaves_no_descriptor_and_no_cgroup(tmp_path: Path) -> None:
    AgentProcess(["true"], ENV).start().wait()  # the watcher and its pipe exist from here on
    fds = sorted(os.listdir("/proc/self/fd"))
    owner = _cgroup._owner
    cgroups = sorted(os.listdir(owner.folder)) if owner is not None else []
    for _ in range(5):
        _start(["cp-no-such-agent"], tmp_path)
    assert sorted(os.listdir("/proc/self/fd")) == fds
    if owner is not None:
        assert sorted(os.listdir(owner.folder)) == cgroups


def test_the_golden_run_says_it_in_one_line(tmp_path: Path) -> None:
    agent = AgentSpec(command=("cp-no-such-agent", "--state", "{state_dir}"), timeout=10)
    with (
        TrialRunner(agent, str(tmp_path / "report")) as runner,
        pytest.raises(GoldenRunFailed) as info,
    ):
        runner.golden()
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(
        "the golden run (no faults) could not start: cannot start the agent in "
    )
    assert "'cp-no-such-agent' (looked up on the agent's PATH=" in str(info.value)


def test_crashpoint_run_prints_it_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "missing.scenario.yaml").write_text(
        textwrap.dedent("""
        name: a missing agent binary
        agent:
          command: ["cp-no-such-agent", "--state", "{state_dir}"]
          timeout: 10s
        faults:
          - kill: {at: every-boundary}
        trials: 2
        seed: 1
    """)
    )
    r = subprocess.run(
        [sys.executable, "-m", "crashpoint", "run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = r.stdout + r.stderr
    assert r.returncode != 0
    # caught when the file is collected (the scenario loader's first-contact check), one line
    # naming the file, the line and the key; the spawn-time error is the golden run's test
    assert (
        "missing.scenario.yaml:4 (key 'agent.command'): 'cp-no-such-agent' not found on PATH" in out
    )
    assert "Traceback" not in out
