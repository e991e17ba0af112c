"""A full disk stops a run cleanly: CheckpointWriteError with the errno, nothing acknowledged lost.

Real mechanisms where the machine allows them (a few-KiB tmpfs in a private mount namespace,
RLIMIT_FSIZE in a child), pyfakefs in-process, failpoints at an exact write, and the store's own
byte budget (refused before anything is written, pruning only finished runs).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _disk_fill import MORE_AFTER_REOPEN
from _writer import record_data

from crashpoint import _failpoints
from crashpoint._fsio import FsOps
from crashpoint.checkpoint import RunJournal, Store
from crashpoint.checkpoint._record import encode_json
from crashpoint.errors import CheckpointError, CheckpointWriteError, DiskBudgetExceeded

DISK_FILL = Path(__file__).with_name("_disk_fill.py")
SEED = int(os.environ.get("CRASHPOINT_TEST_SEED", "20240917"))
TMPFS_BYTES = 16 * 1024
FILLER_BYTES = 8 * 1024
MOUNT_THEN_EXEC = 'mount -t tmpfs -o size={size},mode=0700 tmpfs "$1" && shift && exec "$@"'


def append_until_error(
    j: RunJournal, make: Callable[[int], Any], limit: int = 10_000
) -> tuple[int, int, Exception]:
    """Append ``make(seq)`` until an append raises; return (last acked seq, the segment's size
    before the failed append, the exception). Fails the test if nothing ever raises."""
    for _ in range(limit):
        size = os.path.getsize(j._path)
        try:
            j.append(make(j.seq + 1))
        except Exception as exc:  # the caller checks what it was
            return j.seq, size, exc
    pytest.fail(f"{limit} appends and no error")


def check_fill_report(report: dict[str, Any], err: int) -> None:
    """What every 'fill → error → free → reopen' child must have seen."""
    assert "crashed" not in report, report.get("traceback", report)
    assert not report.get("never_failed"), f"the disk never filled: {report}"
    acked = report["acked"]
    assert acked >= 1, report
    assert report["errno"] == err, report["error"]
    assert report["is_oserror"]
    assert errno.errorcode[err] in report["error"]
    # At most a torn tail: the segment was cut back to the last acknowledged record.
    assert report["size_after"] == report["size_before"], report
    assert report["scan_after"] == {
        "records": acked,
        "stop": "end",
        "end": report["size_before"],
    }, report
    # A journal that failed refuses further writes until reopened, and writes nothing.
    assert report["again"] == err
    assert report["size_after_again"] == report["size_before"]
    reopened = report["reopen"]
    assert reopened["gen"] == report["gen"] + 1, reopened
    assert reopened["seq"] == acked, reopened
    assert reopened["mismatch"] == "", reopened
    assert reopened["damage"] == 0, reopened
    assert report["final"] == {"seq": acked + MORE_AFTER_REOPEN, "mismatch": ""}, report


# -- (a) a real tmpfs of 16 KiB in a private mount namespace ------------------------------------


def namespace_prefix(probe_dir: Path) -> list[str]:
    """The `unshare` command line that can mount a tmpfs here, or skip saying why not."""
    if shutil.which("unshare") is None:
        pytest.skip("`unshare` (util-linux) is not installed: no private mount namespace")
    why = []
    for flags in (["-m"], ["-r", "-m"]):  # as root; else in a user namespace mapped to root
        prefix = ["unshare", *flags, "--propagation", "private", "sh", "-c"]
        cmd = [*prefix, MOUNT_THEN_EXEC.format(size=TMPFS_BYTES), "sh", str(probe_dir), "true"]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            why.append(f"{' '.join(flags)}: {exc}")
            continue
        if done.returncode == 0:
            return prefix
        why.append(f"{' '.join(flags)}: {done.stderr.decode(errors='replace').strip()}")
    pytest.skip(
        "cannot mount a tmpfs in a private mount namespace here "
        f"(needs root or user namespaces): {'; '.join(why)}"
    )


@pytest.mark.needs_root
def test_real_tmpfs_fills_mid_run_then_reopens_with_everything(
    tmp_path: Path, children: Any
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    prefix = namespace_prefix(mnt)
    child = children.spawn(
        [
            *prefix,
            MOUNT_THEN_EXEC.format(size=TMPFS_BYTES),
            "sh",
            mnt,
            sys.executable,
            DISK_FILL,
            "--root",
            mnt / "store",
            "--run",
            "full",
            "--seed",
            str(SEED),
            "--filler",
            mnt / "filler",
            "--filler-bytes",
            str(FILLER_BYTES),
        ],
        cwd=DISK_FILL.parent,
    )
    report = child.read_json(timeout=60)
    assert child.wait() == 0, child.stderr_text()
    # It really ran on the small tmpfs, and the tmpfs left with the namespace.
    assert report["fs"]["type"] == "tmpfs", report["fs"]
    assert report["fs"]["bytes"] == TMPFS_BYTES, report["fs"]
    assert report["fs_freed"]["free"] > report["fs"]["free"] - TMPFS_BYTES // 2
    assert list(mnt.iterdir()) == [], "the tmpfs leaked out of the private mount namespace"
    check_fill_report(report, errno.ENOSPC)


# -- (c) EFBIG from RLIMIT_FSIZE in a child ---------------------------------------------------


def test_file_size_limit_gives_efbig_then_reopens_with_everything(
    tmp_path: Path, children: Any
) -> None:
    child = children.python(
        DISK_FILL,
        "--root",
        tmp_path / "store",
        "--run",
        "big",
        "--seed",
        str(SEED + 1),
        "--fsize",
        "4096",
    )
    report = child.read_json(timeout=60)
    assert child.wait() == 0, child.stderr_text()
    assert report["short_writes"] >= 1, "the limit never cut a write short (no torn bytes made)"
    check_fill_report(report, errno.EFBIG)


# -- (b) pyfakefs: set_disk_usage in-process ----------------------------------------------------


class PwriteByWrite(FsOps):
    """pyfakefs fakes os.write/lseek but not os.pwrite: the lock file is written via those.

    (pyfakefs also makes fcntl.flock a no-op, so this test does not exercise the lock; the
    real-process lock tests are in test_lock.py.)
    """

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        os.lseek(fd, offset, os.SEEK_SET)
        self.write(fd, data)


def test_pyfakefs_disk_usage_gives_enospc_and_loses_nothing(fs: Any) -> None:
    fs.set_disk_usage(6000)
    store = Store("/store", reserve_bytes=0, fs=PwriteByWrite())
    j = store.open("run")
    first_gen = j.generation
    acked, size, exc = append_until_error(j, lambda s: record_data(SEED, s))
    assert isinstance(exc, CheckpointWriteError), exc
    assert exc.errno == errno.ENOSPC
    assert acked >= 1
    assert os.path.getsize(j._path) == size, "the failed record's bytes were left behind"
    j.close()

    fs.set_disk_usage(10_000_000)
    with Store("/store", reserve_bytes=0, fs=PwriteByWrite()).open("run") as j2:
        assert j2.generation == first_gen + 1
        assert j2.seq == acked
        assert not j2.recovery
        assert [encode_json(d) for d in j2.state["records"]] == [
            encode_json(record_data(SEED, s)) for s in range(1, acked + 1)
        ]
        j2.append(record_data(SEED, acked + 1))


# -- (d) failpoint-injected errors at the n-th write ---------------------------------------------


@pytest.fixture
def arm() -> Iterator[Callable[[str], None]]:
    """Arm failpoints in this process; always disarmed afterwards."""
    try:
        yield _failpoints.reload
    finally:
        _failpoints.reload("")


def store_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).digest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".store-lock"
    }


@pytest.mark.parametrize(
    ("point", "action", "nth"),
    [
        ("journal.write", "enospc", 5),
        ("journal.write", "eio", 1),
        ("journal.write", "efbig", 3),
        ("journal.after_write", "enospc", 4),  # the bytes went out: they must be cut back
        ("journal.after_write", "eio", 2),
        ("journal.after_sync", "eio", 6),  # even durable bytes are not acknowledged: cut back
    ],
)
def test_failpoint_error_at_nth_write(
    point: str, action: str, nth: int, tmp_path: Path, arm: Callable[[str], None]
) -> None:
    err = {"enospc": errno.ENOSPC, "eio": errno.EIO, "efbig": errno.EFBIG}[action]
    store = Store(tmp_path, reserve_bytes=0)
    j = store.open("run")
    gen = j.generation
    arm(f"{point}={action}@{nth}")
    acked, size, exc = append_until_error(j, lambda s: record_data(SEED, s), limit=nth)
    assert isinstance(exc, CheckpointWriteError), exc
    assert exc.errno == err
    assert acked == nth - 1, "a record was acknowledged although its write failed"
    assert os.path.getsize(j._path) == size, "the failed record was not cut back"
    arm("")
    before = store_files(tmp_path)
    with pytest.raises(CheckpointWriteError):  # stopped until reopened, and writes nothing
        j.append(record_data(SEED, nth))
    assert store_files(tmp_path) == before
    j.close()

    with store.open("run") as j2:
        assert not j2.recovery, j2.recovery.describe()
        assert j2.generation == gen + 1
        assert j2.seq == nth - 1
        assert [encode_json(d) for d in j2.state.get("records", [])] == [
            encode_json(record_data(SEED, s)) for s in range(1, nth)
        ]
        assert j2.append(record_data(SEED, nth)) == nth


class TornWrites(FsOps):
    """Once armed, a write puts out half the record then fails, and the cut-back fails too."""

    def __init__(self, err: int) -> None:
        self.err = err
        self.armed = False

    def write(self, fd: int, data: bytes) -> None:
        if self.armed:
            os.write(fd, data[: len(data) // 2])
            raise OSError(self.err, os.strerror(self.err))
        super().write(fd, data)

    def truncate(self, fd: int, size: int) -> None:
        if self.armed:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().truncate(fd, size)


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
def test_failed_write_leaves_at_most_a_torn_tail(err: int, tmp_path: Path) -> None:
    fs = TornWrites(err)
    store = Store(tmp_path, reserve_bytes=0, fs=fs)
    j = store.open("run")
    for s in range(1, 4):
        j.append(record_data(SEED, s))
    good = os.path.getsize(j._path)
    fs.armed = True
    with pytest.raises(CheckpointWriteError) as info:
        j.append(record_data(SEED, 4))
    assert info.value.errno == err
    assert os.path.getsize(j._path) > good, "the test meant to leave half a record"
    fs.armed = False
    j.close()
    with store.open("run") as j2:
        assert j2.recovery.torn_tail is not None
        assert not j2.recovery.damage
        assert j2.recovery.torn_tail.offset == good
        assert j2.seq == 3
        assert os.path.getsize(j2._path) == good
        assert [encode_json(d) for d in j2.state["records"]] == [
            encode_json(record_data(SEED, s)) for s in range(1, 4)
        ]


class FailingDirSync(FsOps):
    """Once armed, fsyncing a folder fails (the new segment's entry cannot be made durable)."""

    def __init__(self, err: int) -> None:
        self.err = err
        self.armed = False

    def fsync_dir(self, path: str) -> None:
        if self.armed:
            raise OSError(self.err, os.strerror(self.err), path)
        super().fsync_dir(path)


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC])
def test_error_starting_a_new_segment_stops_the_run(err: int, tmp_path: Path) -> None:
    """A segment roll that fails must not let later records be acknowledged in a segment whose
    folder entry was never synced (they would vanish with a power cut)."""
    fs = FailingDirSync(err)
    store = Store(tmp_path, reserve_bytes=0, fs=fs, segment_bytes=600)
    j = store.open("run")
    fs.armed = True
    acked, _, exc = append_until_error(j, lambda s: {"n": s, "pad": "x" * 200}, limit=50)
    assert isinstance(exc, CheckpointWriteError), f"{type(exc).__name__}: {exc}"
    assert exc.errno == err
    fs.armed = False
    with pytest.raises(CheckpointWriteError):  # stopped: no ack without a durable segment
        j.append({"n": acked + 2, "pad": ""})
    j.close()
    with store.open("run") as j2:
        # The record whose append failed is durable but unacknowledged: at most one extra.
        assert j2.seq in (acked, acked + 1)
        assert [d["n"] for d in j2.state["records"]] == list(range(1, j2.seq + 1))


def test_failed_segment_roll_leaks_no_descriptor(tmp_path: Path) -> None:
    fs = FailingDirSync(errno.EIO)
    store = Store(tmp_path, reserve_bytes=0, fs=fs, segment_bytes=300)
    fds_before = set(os.listdir("/proc/self/fd"))
    j = store.open("run")
    j.append({"pad": "x" * 100})
    fs.armed = True
    _, _, exc = append_until_error(j, lambda s: {"pad": "x" * 100}, limit=10)
    assert isinstance(exc, OSError)  # which one is the other test's business; here: the fds
    fs.armed = False
    j.close()
    assert set(os.listdir("/proc/self/fd")) - fds_before == set()


# -- (e) the store's byte budget, and pruning --------------------------------------------------


def test_budget_refuses_before_writing_anything(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root, reserve_bytes=0)
    with store.open("run") as j:
        j.append(record_data(SEED, 1))
    budget = store.usage(refresh=True) + 200
    tight = Store(root, reserve_bytes=0, budget_bytes=budget)
    j = tight.open("run")
    before = store_files(root)
    with pytest.raises(DiskBudgetExceeded) as info:
        j.append({"pad": "x" * 400})
    assert isinstance(info.value, OSError)
    assert info.value.errno == errno.ENOSPC
    assert store_files(root) == before, "bytes were written before the budget was checked"
    assert j.seq == 1
    with pytest.raises(DiskBudgetExceeded):  # a new run's folder is refused the same way
        tight.open("another")
    assert not (root / "another").exists()
    # Nothing broke: with room again the same journal goes on, without a gap.
    tight.budget_bytes = budget + 10_000
    assert j.append({"pad": "x" * 400}) == 2
    j.close()
    assert tight.read("run").seq == 2


def make_run(store: Store, run_id: str, status: str, age: float, records: int = 8) -> None:
    with store.open(run_id) as j:
        for s in range(1, records + 1):
            j.append(record_data(SEED, s))
        if status in ("completed", "denied", "dead"):  # finished: the journal says so
            j.append({"t": "finish", "status": status})
        j.set_meta(status=status)
    stamp = time.time() - age
    for p in (Path(store.root) / run_id).iterdir():
        os.utime(p, (stamp, stamp))


def test_budget_prunes_oldest_completed_runs_never_unfinished_ones(tmp_path: Path) -> None:
    root = tmp_path / "store"
    setup = Store(root, reserve_bytes=0)
    # The unfinished runs are the oldest: age alone must not make them prunable.
    make_run(setup, "running", "running", age=9000)
    make_run(setup, "paused", "paused", age=8000)
    make_run(setup, "old-done", "completed", age=3000)
    make_run(setup, "new-done", "completed", age=1000)
    make_run(setup, "current", "running", age=0, records=0)
    keep = {r: store_files(root / r) for r in ("running", "paused")}
    budget = setup.usage(refresh=True) + 300
    store = Store(root, reserve_bytes=0, budget_bytes=budget)
    j = store.open("current")
    record = {"pad": "y" * 500}

    j.append(record)  # over budget: the oldest completed run goes, only it
    assert not (root / "old-done").exists()
    assert (root / "new-done").exists()

    appended, _, exc = append_until_error(j, lambda s: record, limit=100)
    assert isinstance(exc, DiskBudgetExceeded), exc
    assert not (root / "new-done").exists(), "the completed run was kept while over budget"
    assert appended > 1
    assert sorted(n for n in os.listdir(root) if n != ".store-lock") == [
        "current",
        "paused",
        "running",
    ]
    for r, files in keep.items():
        assert store_files(root / r) == files, f"pruning touched the unfinished run {r}"
        assert store.read(r).seq == 8
    assert store.read("current").seq == j.seq == appended
    j.close()


def test_prune_skips_a_completed_run_that_is_open(tmp_path: Path) -> None:
    root = tmp_path / "store"
    setup = Store(root, reserve_bytes=0)
    make_run(setup, "done-but-open", "completed", age=5000)
    make_run(setup, "done", "completed", age=10)
    holder = setup.open("done-but-open")  # a live writer holds it: never pruned
    try:
        removed = Store(root, reserve_bytes=0).prune(need=10**9)
        assert [r.run_id for r in removed] == ["done"]
        assert (root / "done-but-open").exists()
    finally:
        holder.close()
    held = setup.open("done-but-open")
    try:
        with pytest.raises(CheckpointError):  # and remove() refuses a locked run outright
            setup.remove("done-but-open")
    finally:
        held.close()
    assert (root / "done-but-open").exists()
