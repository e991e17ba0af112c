"""No read opens a FIFO, a device or a link planted in a store.

One real store holds a clean run and runs where a FIFO, a link to ``/dev/zero`` or a character
device stands where ``lock``, ``meta.json``, a journal segment or a snapshot belongs. The
operator commands run as real processes (each with a timeout: a FIFO opened for reading would
block them forever, ``/dev/zero`` read to the end would exhaust memory), and the API runs
in-process under an alarm.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from crashpoint.checkpoint import SnapshotPolicy, Store, open_run, plan, run_reducer
from crashpoint.checkpoint._lock import is_locked
from crashpoint.errors import CheckpointCorrupt

TIMEOUT = 60.0  # seconds a command may take on a busy machine; a blocked open never returns


class Hung(Exception):
    pass


@contextlib.contextmanager
def no_hang(seconds: int = 30) -> Iterator[None]:
    """Fail instead of blocking forever (SIGALRM interrupts a blocking open of a FIFO)."""

    def ring(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _make_run(store: Store, run_id: str) -> Path:
    with open_run(store, run_id) as run:
        for name in ("a", "b", "c"):
            run.step(name, lambda name=name: {"name": name, "pad": "z" * 200})
    with open_run(store, run_id) as run:  # a second generation, and a snapshot
        for name in ("a", "b", "c"):
            run.step(name, lambda: None)
        run.journal.snapshot()
        run.step("d", lambda: 1)
    return Path(store.path(run_id))


def _last(folder: Path, prefix: str) -> Path:
    return sorted(folder.glob(f"{prefix}*"))[-1]


def _plant(path: Path, how: str) -> None:
    path.unlink()
    if how == "fifo":
        os.mkfifo(path, 0o600)
    elif how == "zero":
        path.symlink_to("/dev/zero")
    elif how == "chardev":
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers


PLANTS = {  # run id -> (file it replaces, what stands there)
    "fifo-lock": ("lock", "fifo"),
    "fifo-meta": ("meta.json", "fifo"),
    "fifo-seg": ("seg-", "fifo"),
    "fifo-snap": ("snap-", "fifo"),
    "zero-lock": ("lock", "zero"),
    "zero-meta": ("meta.json", "zero"),
    "zero-seg": ("seg-", "zero"),
    "dev-lock": ("lock", "chardev"),
    "dev-seg": ("seg-", "chardev"),
}
BROKEN_JOURNAL = {"fifo-seg", "fifo-snap", "zero-seg", "dev-seg"}


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    store = Store(root, durability="none", snapshots=SnapshotPolicy(enabled=False))
    _make_run(store, "clean")
    for rid, (name, how) in PLANTS.items():
        folder = _make_run(store, rid)
        target = _last(folder, name) if name.endswith("-") else folder / name
        try:
            _plant(target, how)
        except PermissionError:
            pytest.skip("mknod is not allowed here (no CAP_MKNOD)")
    return root


def _cli(root: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "crashpoint.cli", "checkpoints", "--store", str(root), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen[str], deadline: float) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{proc.args[5:]} hung on a planted special file")
    return proc.returncode, out, err


def test_operator_commands_neither_hang_nor_exhaust_memory(planted: Path) -> None:
    commands: list[tuple[str, ...]] = [
        ("list",),
        ("list", "--json"),
        ("stale", "--older-than", "0s"),
        ("verify",),
        ("prune", "--keep", "0", "--dry-run"),
    ]
    for rid in ("clean", *PLANTS):
        commands += [("show", rid), ("plan", rid)]
    procs = [(cmd, _cli(planted, *cmd)) for cmd in commands]  # all at once: one timeout
    deadline = time.monotonic() + TIMEOUT
    results = {cmd: _finish(p, deadline) for cmd, p in procs}
    for cmd, (code, _out, err) in results.items():
        assert code in (0, 1, 2), (cmd, code, err)
        assert "Traceback" not in err, (cmd, err)
        assert "MemoryError" not in err, (cmd, err)
    code, out, _ = results[("list",)]
    assert code == 0
    for rid in ("clean", *PLANTS):
        assert rid in out
    code, out, _ = results[("verify",)]
    assert code == 1
    for rid in BROKEN_JOURNAL:
        assert f"/{rid}/" in out, out
    assert "not a regular file" in out
    assert results[("show", "clean")][0] == 0
    assert results[("plan", "clean")][0] == 0
    for rid in BROKEN_JOURNAL:
        code, _out, err = results[("plan", rid)]
        assert code == 2
        assert "corrupt checkpoint" in err, err
        assert results[("show", rid)][0] == 1
    for rid in ("fifo-lock", "fifo-meta", "zero-lock", "zero-meta", "dev-lock"):
        assert results[("show", rid)][0] == 0, results[("show", rid)]
        assert results[("plan", rid)][0] == 0, results[("plan", rid)]


def test_the_api_reads_around_special_files(planted: Path) -> None:
    store = Store(planted)
    with no_hang():
        infos = {r.run_id: r for r in store.runs()}
        assert set(infos) == {"clean", *PLANTS}
        assert infos["clean"].generation == 2
        for rid in ("fifo-lock", "zero-lock", "dev-lock"):
            assert infos[rid].generation == 0  # the lock's content is not read from it
            assert not infos[rid].locked
            assert not is_locked(str(planted / rid / "lock"))
        assert infos["fifo-meta"].status == "unknown"
        assert store.meta("zero-meta") == {}
        found = store.verify()
        for rid in ("clean", *PLANTS):
            damage, _ = found[rid]
            assert bool(damage) == (rid in BROKEN_JOURNAL), (rid, damage)
        for rid in BROKEN_JOURNAL:
            with pytest.raises(CheckpointCorrupt, match=r"not a regular file|symbolic link"):
                store.read(rid)
            with pytest.raises(CheckpointCorrupt):
                plan(store, rid)
        for rid in set(PLANTS) - BROKEN_JOURNAL:
            assert store.read(rid, reducer=run_reducer).state["order"] == ["a", "b", "c", "d"]
            assert plan(store, rid)


def test_opening_refuses_a_planted_lock(planted: Path) -> None:
    store = Store(planted)
    with no_hang():
        for rid in ("fifo-lock", "zero-lock", "dev-lock"):
            with pytest.raises(CheckpointCorrupt, match="lock file"):
                open_run(store, rid)


@pytest.mark.parametrize("rid", sorted(BROKEN_JOURNAL))
def test_a_rollback_moves_a_special_file_aside_and_reopens_clean(planted: Path, rid: str) -> None:
    with no_hang():
        with open_run(Store(planted, on_corrupt="rollback"), rid) as run:
            assert run.journal.recovery.damage
            moved = run.journal.recovery.moved_aside
            assert moved
            assert all(".corrupt-" in p for p in moved)
            for name in run.completed_steps:
                run.step(name, lambda: None)  # replayed
            run.step("later", lambda: 1)
        damage, _ = Store(planted).verify(rid, reducer=run_reducer)[rid]
        assert not damage
        with open_run(Store(planted), rid) as run:  # on_corrupt="raise": nothing left to trip
            assert not run.journal.recovery
            assert run.completed_steps[-1] == "later"


def test_a_fifo_would_block_a_plain_open(tmp_path: Path) -> None:
    """The control: the FIFOs above are real, a blocking open of one does hang."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(Hung), no_hang(1):
        os.open(fifo, os.O_RDONLY)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # what the store does instead
    os.close(fd)
    with pytest.raises(FileNotFoundError) as exc:
        os.open(tmp_path / "missing", os.O_RDONLY | os.O_NONBLOCK)
    assert exc.value.errno == errno.ENOENT
