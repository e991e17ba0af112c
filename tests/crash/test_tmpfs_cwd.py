"""A tmpfs disk fault keeps the agent's working folder and environment.

Entering a mount namespace moves a process to the namespace's ``/``: before the fix, an agent
started as ``{python} agent.py`` (relative to its ``cwd``) exited 2 under a tmpfs disk_full
fault, the restart ran without the fault, and the trial passed having tested nothing; relative
writes landed in ``/``. Real tmpfs in a real private mount namespace; skipped (with the reason)
where the machine cannot mount one.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from crashpoint._proc import REAP_VAR, AgentProcess
from crashpoint.faults import _disk
from crashpoint.faults._disk import TmpfsNamespace, capabilities
from crashpoint.harness import Campaign, load_scenario

CAPACITY = 16 * 1024

#: Fills its state folder (64 KiB, more than the tmpfs holds), then writes what it saw to a
#: file named by attempt, RELATIVE to its working folder. Exit 1 when the disk was full.
AGENT = """\
import errno
import json
import os
import sys

from crashpoint import probe

probe.step_started("write")  # one boundary: a campaign needs one
state = sys.argv[1]
attempt = os.environ["CRASHPOINT_ATTEMPT"]
trial = os.environ["CRASHPOINT_TRIAL"].replace(":", "-")
result = "ok"
try:
    with open(os.path.join(state, "blob"), "wb") as f:
        for _ in range(64):
            f.write(b"x" * 1024)
            f.flush()
            os.fsync(f.fileno())
except OSError as exc:
    result = errno.errorcode.get(exc.errno, str(exc.errno))
with open(f"seen-{trial}-{attempt}.json", "w") as f:
    json.dump({"cwd": os.getcwd(), "result": result,
               "env": dict(os.environ)}, f)
if result != "ok":
    sys.exit(1)
print("done")
"""

#: Writes 1 KiB chunks RELATIVE to its working folder until the disk refuses.
FILL_HERE = """\
import errno
import os
import sys

if os.getcwd() == "/":  # the bug under test: write nothing there
    print("/ wrong-folder 0")
    sys.exit(0)
total = 0
code = "none"
try:
    with open("fill", "wb") as f:
        while total < 1 << 20:
            f.write(b"y" * 1024)
            f.flush()
            os.fsync(f.fileno())
            total += 1024
except OSError as exc:
    code = errno.errorcode.get(exc.errno, str(exc.errno))
print(os.getcwd(), code, os.path.getsize("fill"))
"""


@pytest.fixture(params=["wdns", "sh"])
def entering(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of setting the folder after nsenter: its --wdns, and the shell fallback for
    util-linux before 2.38."""
    caps = capabilities()
    if not caps.tmpfs:
        pytest.skip(caps.tmpfs_reason)
    if request.param == "wdns":
        if not _disk._nsenter_wdns():
            pytest.skip("this nsenter has no --wdns (util-linux < 2.38)")
    else:
        monkeypatch.setattr(_disk, "_nsenter_wdns", lambda: False)
    return str(request.param)


def seen(folder: Path, trial: str, attempt: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / f"seen-{trial}-{attempt}.json").read_text())
    return data


def test_a_relative_path_agent_under_a_tmpfs_disk_full_trial_runs_in_its_own_folder(
    tmp_path: Path, entering: str
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "agent.py").write_text(textwrap.dedent(AGENT))
    (gate / "tmpfs.scenario.yaml").write_text(
        "name: relative agent on a full tmpfs\n"
        "agent:\n"
        '  command: ["{python}", "agent.py", "{state_dir}"]\n'
        "  cwd: .\n"
        "  timeout: 20s\n"
        "faults:\n"
        f"  - disk_full: {{mechanism: tmpfs, capacity: {CAPACITY}, count: 1}}\n"
        "restarts: 2\n"
        "seed: 5\n"
    )
    sc = load_scenario(gate / "tmpfs.scenario.yaml")
    assert sc.agent.cwd == str(gate)
    result = Campaign(
        sc.agent,
        [f.family for f in sc.families],
        str(tmp_path / "report"),
        seed=sc.seed,
        restarts=sc.restarts,
        keep_passing=True,
    ).run()
    (trial,) = result.trials
    assert not trial.skipped
    first, second = trial.attempts[0], trial.attempts[1]
    assert first.returncode == 1, first.stderr  # 2 was "can't open file 'agent.py'"
    key = f"{trial.plan.seed}-{trial.plan.index}"
    under_tmpfs, after = seen(gate, key, 1), seen(gate, key, 2)
    # the attempt under the fault started in its own folder, wrote its relative file there,
    # and met the full disk; the next attempt (no fault) finished
    assert under_tmpfs["cwd"] == str(gate)
    assert under_tmpfs["result"] == "ENOSPC"
    assert (after["cwd"], after["result"]) == (str(gate), "ok")
    # the same environment as the attempt without the fault (the shell fallback may add its
    # own PWD and the like)
    per_attempt = {"CRASHPOINT_ATTEMPT", REAP_VAR, "TMPDIR", "TMP", "TEMP"}  # TMPDIR: private
    # the attempt under the fault is traced, so it runs without the bytecode cache
    per_attempt |= {"PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"}
    for e in (under_tmpfs["env"], after["env"]):  # per attempt
        assert e["TMPDIR"].endswith(f"/tmp/attempt-{e['CRASHPOINT_ATTEMPT']}")
    if entering == "sh":
        per_attempt |= {"PWD", "OLDPWD", "SHLVL", "_"}
    env1 = {k: v for k, v in under_tmpfs["env"].items() if k not in per_attempt}
    env2 = {k: v for k, v in after["env"].items() if k not in per_attempt}
    assert env1 == env2
    assert "CRASHPOINT_LEDGER" in env1
    assert second.returncode == 0, second.stderr
    assert trial.ok, [str(c) for c in trial.failed]
    assert not list(Path("/").glob(f"seen-{key}-*.json"))  # nothing landed in the root


def test_a_working_folder_inside_the_tmpfs_folder_is_the_tmpfs(
    tmp_path: Path, entering: str
) -> None:
    """``cwd`` is resolved inside the namespace: relative writes in the state folder hit the
    small tmpfs (ENOSPC), not the real folder underneath it."""
    state = tmp_path / "state"
    state.mkdir()
    script = tmp_path / "fill_here.py"
    script.write_text(textwrap.dedent(FILL_HERE))
    ns = TmpfsNamespace(str(state), CAPACITY)
    try:
        argv = ns.wrap([sys.executable, str(script)], cwd=state)
        ex = (
            AgentProcess(
                argv, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=str(state), timeout=20
            )
            .start()
            .wait()
        )
        assert ex.returncode == 0, ex.stderr
        cwd, code, size = ex.stdout.decode().split()
        assert (cwd, code) == (str(state), "ENOSPC")
        assert 0 < int(size) <= CAPACITY
        assert not (state / "fill").exists()  # it went to the tmpfs, not the real folder
    finally:
        ns.close()
    assert (state / "fill").stat().st_size == int(size)  # copied back from the tmpfs


def test_without_cwd_the_folder_the_command_starts_in_is_kept(tmp_path: Path) -> None:
    caps = capabilities()
    if not caps.tmpfs:
        pytest.skip(caps.tmpfs_reason)
    state, work = tmp_path / "state", tmp_path / "work"
    state.mkdir()
    work.mkdir()
    script = tmp_path / "where.py"
    script.write_text(
        "import os\nif os.getcwd() != '/':\n    open('here', 'w').write('x')\nprint(os.getcwd())\n"
    )
    ns = TmpfsNamespace(str(state), CAPACITY)
    try:
        argv = ns.wrap([sys.executable, str(script)])
        ex = (
            AgentProcess(
                argv, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=str(work), timeout=20
            )
            .start()
            .wait()
        )
    finally:
        ns.close()
    assert ex.returncode == 0, ex.stderr
    assert ex.stdout.decode().strip() == str(work)
    assert (work / "here").read_text() == "x"
