"""The fanotify watch names who writes /tmp: real processes, real writes, real kernel events.

Skipped where fanotify cannot name writers (not root, an old kernel, a container without the
capability), with the reason.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from crashpoint._proc import _writers
from crashpoint._proc._writers import WriterWatch, open_watch

PREFIX = "writer-watch-test"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of our own to watch (a stand-in for /tmp: same filesystem kind)."""
    d = tmp_path / "watched"
    d.mkdir()
    (d / "old-dir").mkdir()
    return d


def _open(folder: Path, lineage: bool = True) -> WriterWatch:
    watch, why = open_watch([str(folder)], lineage=lineage)
    if watch is None:
        pytest.skip(f"no fanotify watch here: {why}")
    return watch


@pytest.fixture
def watch(folder: Path) -> Iterator[WriterWatch]:
    w = _open(folder)
    yield w
    w.close()


_STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    """Every process a test starts is killed with its whole tree and reaped, even when the
    test fails before it waits (a leader may be waiting for a gate file)."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _run(argv: list[str]) -> subprocess.Popen[bytes]:
    _STARTED.append(subprocess.Popen(argv, start_new_session=True))
    return _STARTED[-1]


def test_a_tracked_attempt_and_its_children_are_named_and_a_stranger_is_not(
    watch: WriterWatch, folder: Path
) -> None:
    key = object()
    watch.begin(key)
    since = time.time()
    gate = folder.parent / "go"
    # the leader waits until it is named, then its short-lived children write and end
    script = (
        f"while [ ! -e {gate} ]; do sleep 0.01; done; "
        f"(date > {folder}/child-file); mkdir {folder}/new-dir; date > {folder}/new-dir/x; "
        f"date > {folder}/old-dir/y"
    )
    leader = _run(["/bin/sh", "-c", script])
    watch.track(key, leader.pid)
    stranger = subprocess.run(["/bin/sh", "-c", f"date > {folder}/stranger"], check=True)
    assert stranger.returncode == 0
    gate.touch()
    assert leader.wait(timeout=10) == 0
    got = watch.take(key, since)
    mine = {os.path.basename(p) for p in got.mine}
    assert mine == {"child-file", "new-dir", "old-dir"}, got
    assert str(folder / "stranger") in got.seen
    assert str(folder / "stranger") not in got.mine | got.unknown
    assert got.complete


def test_what_an_attempt_wrote_before_it_was_named_is_still_its_own(
    watch: WriterWatch, folder: Path
) -> None:
    """The leader is named (track) only after its short-lived children wrote and ended, and
    after the reader filed their events: a fast agent does this when the harness is slow to
    name it (seen in CI: a subshell's redirect was reported as nobody's). Its adoption claims
    what its lineage wrote meanwhile."""
    key = object()
    watch.begin(key)
    since = time.time()
    leader = _run(["/bin/sh", "-c", f"(date > {folder}/early-child); date > {folder}/early-leader"])
    assert leader.wait(timeout=10) == 0
    watch._drain()  # every event of the run read and filed before the leader is named
    watch.track(key, leader.pid)
    got = watch.take(key, since)
    mine = {os.path.basename(p) for p in got.mine}
    assert mine == {"early-child", "early-leader"}, got


def test_a_daemon_that_left_the_session_is_still_the_attempts(
    watch: WriterWatch, folder: Path
) -> None:
    """Double fork and setsid, then write after the leader is gone: the fork lineage (the
    process connector) still knows whose it is."""
    key = object()
    watch.begin(key)
    since = time.time()
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(0.3)\n"
        f"        open({str(folder / 'daemon')!r}, 'w').write('x')\n"
        "    os._exit(0)\n"
        "time.sleep(0.05)\n"
    )
    leader = _run([sys.executable, "-c", code])
    watch.track(key, leader.pid)
    assert leader.wait(timeout=10) == 0
    deadline = time.monotonic() + 10
    while not (folder / "daemon").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.05)
    got = watch.take(key, since)
    if watch._lineage is None:
        pytest.skip("the process connector is not available here")
    assert str(folder / "daemon") in got.mine, got


def test_without_the_lineage_a_writer_gone_before_it_was_read_is_unknown(folder: Path) -> None:
    """Without the process connector, a writer that ended before its event was read cannot be
    told apart: it is filed as unknown (the caller then falls back to owner and time), never
    as another process's."""
    watch = _open(folder, lineage=False)
    try:
        key = object()
        watch.begin(key)
        since = time.time()
        with watch._busy:  # hold the reader back until the writer is gone
            leader = _run(["/bin/sh", "-c", f"(date > {folder}/quick)"])
            watch.track(key, leader.pid)
            assert leader.wait(timeout=10) == 0
            time.sleep(0.05)
        got = watch.take(key, since)
        quick = str(folder / "quick")
        assert quick in got.unknown, got
        assert quick not in got.mine
        assert quick in got.seen
    finally:
        watch.close()


def test_a_fake_filesystem_in_the_same_process_does_not_reach_the_reader(
    watch: WriterWatch, folder: Path
) -> None:
    """pyfakefs replaces ``os`` and ``open`` in the whole process while a test runs, and its
    descriptors have the numbers of real ones: the reader thread reads fanotify (and /proc)
    through libc, so it neither reads a fake file nor dies (it once did, under xdist)."""
    pyfakefs = pytest.importorskip("pyfakefs.fake_filesystem_unittest")
    key = object()
    watch.begin(key)
    since = time.time()
    leader = _run(["/bin/sh", "-c", f"sleep 0.3; date > {folder}/under-fake"])
    watch.track(key, leader.pid)
    with pyfakefs.Patcher() as patcher:
        assert patcher.fs is not None
        fakes = []
        for i in range(40):  # fake descriptors over the numbers real ones use
            fakes.append(os.open(f"/fake-{i}", os.O_CREAT | os.O_WRONLY))
            os.write(fakes[-1], b'{"grants": {}, "usage": null}')
        time.sleep(0.6)  # the write happens, and the reader reads it, meanwhile
    assert leader.wait(timeout=10) == 0
    got = watch.take(key, since)
    assert watch._thread.is_alive()
    assert str(folder / "under-fake") in got.mine, got
    assert got.complete


def test_the_process_connector_delivers_only_forks_of_processes() -> None:
    """The kernel filters the fork lineage's socket: a process fork arrives, its exec and exit
    and a thread's fork do not (each once woke the reader, on a busy machine thousands a
    second)."""
    lineage = _writers._Lineage.open()
    if lineage is None:
        pytest.skip("no process connector here (not root?)")
    try:
        lineage.sock.setblocking(True)
        lineage.sock.settimeout(0.2)
        # the listen acknowledgement, if any came through (on a busy machine other processes'
        # forks never stop arriving: each read loop is bounded in time)
        drain = time.monotonic() + 0.3
        with contextlib.suppress(OSError):
            while time.monotonic() < drain and lineage.sock.recv(65536):
                pass
        child = _run(["/bin/true"])
        assert child.wait(timeout=10) == 0
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()
        time.sleep(0.2)
        kinds: list[tuple[int, int, int]] = []
        until = time.monotonic() + 1.0
        with contextlib.suppress(OSError):
            while time.monotonic() < until and (data := lineage.sock.recv(65536)):
                what = struct.unpack_from("=I", data, 36)[0]
                cpid, ctgid = struct.unpack_from("=II", data, 60) if len(data) >= 68 else (0, 1)
                kinds.append((what, cpid, ctgid))
    finally:
        lineage.sock.close()
    assert (_writers._PROC_EVENT_FORK, child.pid, child.pid) in kinds, kinds
    assert all(what == _writers._PROC_EVENT_FORK and cpid == ctgid for what, cpid, ctgid in kinds)


def _filed(watch: WriterWatch, path: Path) -> None:
    """Wait until the reader has filed a change of ``path``."""
    deadline = time.monotonic() + 10
    while str(path) not in watch._seen:
        assert time.monotonic() < deadline, f"no event for {path}"
        time.sleep(0.01)
    watch._drain()


def test_a_stranger_is_walked_once_and_its_writes_stay_not_the_trials(
    watch: WriterWatch, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy stranger's writes are not each a walk of its parents in /proc (issue 24: the
    reader's main cost on a machine running other tests): its first write is, then it is
    remembered as no trial's, with the same verdict."""
    if watch._lineage is None:
        pytest.skip("strangers are remembered only with the process connector")
    looked: list[int] = []
    real = _writers._stat

    def counting(pid: int) -> tuple[int, int, int] | None:
        looked.append(pid)
        return real(pid)

    monkeypatch.setattr(_writers, "_stat", counting)
    key = object()
    watch.begin(key)
    since = time.time()
    # it lives on until its last write is filed: a writer gone before the reader looks at it
    # cannot be walked (its /proc entry is gone), so nothing is remembered of it (seen under
    # load in the suite: five looks, each finding no process)
    done = folder.parent / "done"
    script = f"for i in 1 2 3 4 5; do echo $i > {folder}/s$i; done; "
    script += f"while [ ! -e {done} ]; do sleep 0.01; done"
    stranger = _run(["/bin/sh", "-c", script])
    try:
        _filed(watch, folder / "s5")
    finally:
        done.touch()
        assert stranger.wait(timeout=10) == 0
    got = watch.take(key, since)
    assert {str(folder / f"s{i}") for i in range(1, 6)} <= got.seen
    assert not got.mine
    assert looked.count(stranger.pid) == 1, looked


def test_a_stranger_is_forgotten_when_an_attempt_is_named(
    watch: WriterWatch, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that wrote before its leader was named was a stranger then; once the leader is
    named, what it writes is the attempt's (its session is the leader's), though no replay of
    forks can tell (RECENT_FORKS 0): naming an attempt forgets the strangers."""
    if watch._lineage is None:
        pytest.skip("strangers are remembered only with the process connector")
    monkeypatch.setattr(_writers, "RECENT_FORKS", 0.0)
    key = object()
    watch.begin(key)
    since = time.time()
    gate, done = folder.parent / "go", folder.parent / "done"
    # the subshell writes with the shell's own echo: one writer, before and after the naming;
    # it lives on until its second write is filed (a writer gone by then is nobody's)
    script = (
        f"(echo 1 > {folder}/before; while [ ! -e {gate} ]; do sleep 0.01; done; "
        f"echo 2 > {folder}/after; while [ ! -e {done} ]; do sleep 0.01; done) & wait"
    )
    leader = _run(["/bin/sh", "-c", script])
    _filed(watch, folder / "before")
    watch.track(key, leader.pid)
    gate.touch()
    _filed(watch, folder / "after")
    done.touch()
    assert leader.wait(timeout=10) == 0
    got = watch.take(key, since)
    assert str(folder / "after") in got.mine, got
