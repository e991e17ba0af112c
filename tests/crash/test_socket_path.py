"""The ledger's Unix socket under a long TMPDIR (pytest's basetemp under xdist once made a
108-byte socket path, over the kernel's 107): its folder falls back to a short system folder,
is removed at close and reaped after a SIGKILLed harness; where no short folder can be had, a
one-line error says what, the path and its length, and how to fix it.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from crashpoint._proc import REAP_VAR, _cleanup
from crashpoint.errors import StandInError
from crashpoint.harness import Ledger

if TYPE_CHECKING:
    from conftest import Children

#: What the ledger's folder and socket add to TMPDIR: ``/cp-ledger-XXXXXXXX/ledger.sock``.
TAIL = len("/cp-ledger-12345678/ledger.sock")


def long_tmp(base: Path, socket_bytes: int = 108) -> Path:
    """A TMPDIR under ``base`` that makes the ledger's socket path ``socket_bytes`` long (or
    longer, where ``base`` already is)."""
    want = socket_bytes - TAIL
    path = base
    while len(os.fsencode(path)) < want:
        room = want - len(os.fsencode(path)) - 1
        path = path / ("d" * max(1, min(room, 60)))
    path.mkdir(parents=True, exist_ok=True)  # (base itself, where it is already that long)
    assert len(os.fsencode(path)) + TAIL > _cleanup.SOCKET_PATH_MAX
    return path


def hello(address: str) -> dict[str, object]:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(address)
        s.sendall(json.dumps({"op": "hello", "pid": os.getpid(), "attempt": "1"}).encode() + b"\n")
        reply: dict[str, object] = json.loads(s.makefile("rb").readline())
        return reply


def test_a_ledger_under_a_long_tmpdir_binds_in_a_short_private_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = long_tmp(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    with Ledger() as led:
        folder = os.path.dirname(led.address)
        parent, name = os.path.split(folder)
        assert parent in _cleanup.SHORT_TEMP_ROOTS
        assert _cleanup._FOLDER_NAME.fullmatch(name)  # a name the reaper knows
        st = os.lstat(folder)
        assert stat.S_ISDIR(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o700
        assert os.path.abspath(folder) in _cleanup.LIVE.folders
        assert hello(led.address) == {"ok": True}
    assert not os.path.lexists(folder)
    assert os.path.abspath(folder) not in _cleanup.LIVE.folders


def test_a_ledger_under_a_tmpdir_that_fits_stays_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = tmp_path / "t"
    tmp.mkdir()
    if len(os.fsencode(tmp)) + TAIL > _cleanup.SOCKET_PATH_MAX:
        pytest.skip(f"the test's own folder is too long: {tmp}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    with Ledger() as led:
        assert os.path.dirname(os.path.dirname(led.address)) == str(tmp)
        assert hello(led.address) == {"ok": True}
    assert [n for n in os.listdir(tmp) if n.startswith("cp-")] == []


def test_no_short_folder_either_is_a_one_line_error_that_says_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = long_tmp(tmp_path, 120)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    # short whatever the test's own folder (under xdist's basetemp it alone can be too long)
    missing = Path("/nonexistent-crashpoint-test") / uuid.uuid4().hex[:8]
    assert not missing.exists()
    monkeypatch.setattr(_cleanup, "SHORT_TEMP_ROOTS", (str(tmp), str(missing)))
    with pytest.raises(StandInError) as info:
        Ledger()
    msg = str(info.value)
    assert "\n" not in msg
    length = len(os.fsencode(tmp)) + TAIL
    assert msg.startswith("the ledger cannot start: the Unix socket path ")
    assert f"{tmp}/cp-ledger-" in msg
    assert f"is {length} bytes, over the 107" in msg
    assert f"{tmp}: too long" in msg
    assert f"{missing}: No such file or directory" in msg
    assert msg.endswith("set TMPDIR to a shorter folder (e.g. TMPDIR=/tmp)")
    assert [n for n in os.listdir(tmp) if n.startswith("cp-")] == []


#: A harness that starts a ledger, says where, and waits to be killed.
HARNESS = textwrap.dedent("""\
    import time
    from crashpoint.harness import Ledger
    led = Ledger().start()
    print(led.address, flush=True)
    time.sleep(1000)
""")


def test_the_short_folder_of_a_sigkilled_harness_is_reaped(
    children: Children, tmp_path: Path
) -> None:
    tmp = long_tmp(tmp_path)
    harness = children.spawn(
        [sys.executable, "-c", HARNESS], env={"TMPDIR": str(tmp), REAP_VAR: None}
    )
    address = harness.read_line(30)
    assert address is not None, harness.stderr_text()
    folder = os.path.dirname(address)
    assert os.path.dirname(folder) in _cleanup.SHORT_TEMP_ROOTS
    assert os.path.exists(address)
    live = tmp / f"crashpoint-{os.getuid()}" / "live"
    assert json.loads((live / f"{harness.pid}.json").read_text())["folders"] == [folder]

    # beside it, in the same short folder: a planted symlink with a name of ours, listed too
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep").write_text("x")
    planted = tempfile.mkdtemp(prefix="cp-ledger-", dir=os.path.dirname(folder))
    os.rmdir(planted)
    os.symlink(outside, planted)
    try:
        os.kill(harness.pid, signal.SIGKILL)  # no clean-up runs
        assert harness.wait(10) == -signal.SIGKILL
        assert os.path.isdir(folder)
        entry = live / f"{harness.pid}.json"
        data = json.loads(entry.read_text())
        entry.write_text(json.dumps({**data, "folders": [folder, planted, str(outside)]}))

        reaped = _cleanup.reap_stale(str(tmp))
        assert (reaped.harnesses, reaped.folders) == (1, 1)
        assert not os.path.lexists(folder)
        assert os.path.islink(planted)
        assert (outside / "keep").read_text() == "x"
        assert os.listdir(live) == []
    finally:
        os.unlink(planted)


def test_a_gate_run_under_a_long_tmpdir_works(children: Children, tmp_path: Path) -> None:
    """The CI failure end to end: ``crashpoint run`` with a TMPDIR that made the socket path
    108 bytes (the agent reports one step started, so every trial passes)."""
    tmp = long_tmp(tmp_path)
    sc = tmp_path / "sc"
    sc.mkdir()
    (sc / "one.scenario.yaml").write_text(
        textwrap.dedent("""\
        name: one
        agent:
          command: ["{python}", "-c", "from crashpoint import probe; probe.step_started('a')"]
          timeout: 30s
        faults:
          - kill: {at: every-boundary}
        restarts: 1
        """)
    )
    env: dict[str, str | None] = {"TMPDIR": str(tmp), REAP_VAR: None}
    env.update({k: None for k in os.environ if k.startswith(("CRASHPOINT_", "PYTEST_"))})
    # without the installed pytest plugins the gate never uses (~1.5 s of start-up)
    env["PYTEST_ADDOPTS"] = " ".join(
        f"-p no:{p}"
        for p in ("langsmith_plugin", "hypothesispytest", "fakefs", "anyio", "benchmark")
    )
    run = children.spawn(
        [sys.executable, "-m", "crashpoint", "run", str(sc), "--report", str(tmp_path / "r")],
        env=env,
        cwd=tmp_path,
    )
    assert run.wait(120) == 0, run.stderr_text()[-3000:]
    gate = json.loads((tmp_path / "r" / "gate.json").read_text())
    assert gate["ok"] is True
    assert [n for n in os.listdir(tmp) if n.startswith("cp-")] == []


def test_the_postgresql_stand_in_under_a_long_tmpdir_starts_in_a_short_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same limit for the server's socket (``<folder>/sock/.s.PGSQL.<port>``): PostgreSQL
    refused to start ("could not create any Unix-domain sockets")."""
    from crashpoint.harness._standins._postgres import PostgresServer, unavailable

    if (why := unavailable()) is not None:
        pytest.skip(why)
    tmp = long_tmp(tmp_path)  # the server's socket path: 120 bytes (12 more than the ledger's)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    with PostgresServer.start(fsync=False) as pg:
        assert os.path.dirname(pg.folder) in _cleanup.SHORT_TEMP_ROOTS
        assert os.path.exists(os.path.join(pg.socket_dir, f".s.PGSQL.{pg.port}"))
    assert not os.path.exists(pg.folder)
