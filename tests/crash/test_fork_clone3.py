"""Fork mode on a machine with a cgroup per attempt: the zygote makes each child with clone3 and
CLONE_INTO_CGROUP, so the child is born in its attempt's cgroup (no move after the fork, whose
write to ``cgroup.procs`` waits on the kernel's cgroup lock), and the child is an ordinary
forked interpreter: its own pid and thread id, signals it raises reach itself, the
interpreter's at-fork handlers ran. Where clone3 cannot serve (turned off, a library mapped that
only libc's ``fork()`` resets) the zygote forks and moves the child, as before.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from _reaped import run_reaped
from crashpoint import _forkserver
from crashpoint._proc import attempt_cgroup, containment

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or containment().mechanism != "cgroup",
    reason="no cgroup v2 per attempt here",
)


@pytest.fixture
def folder() -> Iterator[str]:
    cg, why = attempt_cgroup()
    assert cg is not None, why
    yield os.path.dirname(cg.procs)
    cg.close()


#: Run in a fresh interpreter with no other thread, as the zygote is: a raw clone3 runs none of
#: glibc's at-fork steps, so in a process with threads (this test worker: execnet's reader, a
#: writer watch, a PostgreSQL watchdog) a lock another thread held stays held in the child,
#: which then hangs on it (seen: a child stuck on a futex for minutes). Prints the child's pid,
#: its exit code (0 is good) and the parent's pid; a SIGUSR1 reaching the parent kills it.
BORN = """
import os, signal, sys
sys.path.insert(0, {src!r})
from crashpoint import _forkserver
_forkserver._clone3_usable = lambda: True
ran = []
os.register_at_fork(after_in_child=lambda: ran.append("child"))
folder = {folder!r}
pid = _forkserver._fork_into(folder)
if pid == 0:  # the child: exit with what is wrong, never return
    code = 9
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            cgroup = f.read()
        got = []
        signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
        signal.raise_signal(signal.SIGUSR1)  # glibc's raise: our own thread, not the parent
        code = (
            (0 if cgroup.rstrip().endswith("/" + os.path.basename(folder)) else 2)
            or (0 if got == [1] else 3)
            or (0 if ran == ["child"] else 4)
            or (0 if __import__("threading").get_native_id() == os.getpid() else 5)
        )
    finally:
        os._exit(code)
assert pid > 0, _forkserver._clone3_off
_, status = os.waitpid(pid, 0)
print(pid, os.waitstatus_to_exitcode(status), os.getpid())
"""


def test_a_child_is_born_in_its_cgroup_and_is_an_ordinary_forked_interpreter(folder: str) -> None:
    src = os.path.dirname(os.path.dirname(_forkserver.__file__))
    # in a session of its own, killed whole after it: a child hung on a lock dies with it
    done = run_reaped([sys.executable, "-c", BORN.format(src=src, folder=folder)], timeout=60)
    assert done.returncode == 0, done.stderr  # also: the child's raise did not reach the parent
    pid, code, parent = (int(x) for x in done.stdout.split())
    assert code == 0  # 2: not in its cgroup; 3: its raise missed it; 4: no at-fork; 5: tid
    assert pid != parent


def test_no_raw_clone3_in_a_process_with_threads(
    folder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process with another thread gets -1 (then the zygote forks with fork() and moves the
    child): no child is made that could hang on a lock that thread held."""
    monkeypatch.setattr(_forkserver, "_clone3_usable", lambda: True)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="cp-test-other-thread")
    other.start()
    try:
        pid = _forkserver._fork_into(folder)
        if pid == 0:  # a child was made after all: it leaves at once, the parent fails
            os._exit(0)
        if pid > 0:
            os.waitpid(pid, 0)
        assert pid == -1
    finally:
        stop.set()
        other.join()


def test_no_child_where_the_cgroup_cannot_be_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_forkserver, "_clone3_usable", lambda: True)
    assert _forkserver._fork_into(str(tmp_path / "gone")) == -1  # the move then says why


def test_clone3_is_not_used_when_turned_off_or_a_foreign_library_is_mapped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_forkserver, "_clone3_off", "")
    monkeypatch.setattr(_forkserver, "_libs_seen", -1)
    monkeypatch.setenv(_forkserver.CLONE3_VAR, "0")
    assert _forkserver._fork_into("/nonexistent") == -1
    assert not _forkserver._clone3_usable()
    monkeypatch.delenv(_forkserver.CLONE3_VAR)
    # libc itself counted as foreign: a library only libc's fork() would reset
    monkeypatch.setattr(_forkserver, "_PLAIN_LIBS", ("libpython",))
    assert not _forkserver._clone3_usable()
    assert _forkserver._clone3_off == ""  # not for good: checked again on the next fork


def test_only_the_standard_library_mapped_uses_clone3_and_ssl_mapped_does_not() -> None:
    src = os.path.dirname(os.path.dirname(_forkserver.__file__))
    code = (
        f"import sys; sys.path.insert(0, {src!r})\n"
        "from crashpoint import _forkserver as F\n"
        "import json, socket\n"
        "a = F._clone3_usable()\n"
        "import ssl\n"
        "F._libs_seen = -1\n"
        "print(a, F._clone3_usable())\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        env={},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.split() == ["True", "False"], out.stderr


def test_a_kernel_without_clone3_makes_the_zygote_fork_and_move_for_good(
    folder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_forkserver, "_clone3_usable", lambda: True)
    monkeypatch.setattr(_forkserver, "_clone3_off", "")
    monkeypatch.setattr(_forkserver, "_SYS_CLONE3", 100_000)  # no such call: ENOSYS
    # (no child can be made, so this threaded worker may try: as if it had no other thread)
    monkeypatch.setattr(_forkserver, "_thread_count", lambda: 1)
    assert _forkserver._fork_into(folder) == -1
    assert _forkserver._clone3_off == os.strerror(errno.ENOSYS)
    # the interpreter's fork lock was given back: importing still works, so does os.fork
    import importlib

    importlib.import_module("tabnanny")
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
