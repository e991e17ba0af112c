"""One writer per run: an exclusive ``flock`` plus a fencing generation.

The lock file is opened without following symlinks (a symlink planted at its path is refused)
and must be a regular file. ``flock`` locks die with their process, so a lock held by a process
that was SIGKILLed is free at once; no stale lock file can block a run. The file's content is
``{"generation": N, "pid": P}``; each acquisition writes ``N + 1`` (fsynced) before returning.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time

from crashpoint._fsio import FsOps, is_regular_file
from crashpoint.checkpoint._journal import parse_lock
from crashpoint.errors import CheckpointCorrupt, RunLocked

__all__ = ["RunLock", "acquire", "write_holder"]

#: The lock file's content is padded to this size and rewritten in place: one pwrite, never a
#: truncate that a crash (or a reader) could see as an empty file.
_SLOT = 64


class RunLock:
    """A run's lock, held: its file, descriptor and the fencing generation it got."""

    __slots__ = ("fd", "fs", "generation", "path")

    def __init__(self, path: str, fd: int, generation: int, fs: FsOps) -> None:
        self.path = path
        self.fd = fd
        self.generation = generation
        self.fs = fs

    def __repr__(self) -> str:
        return f"RunLock({self.path!r}, fd={self.fd}, generation={self.generation})"

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = -1


def _read_holder(fd: int) -> tuple[int, str]:
    try:
        return parse_lock(os.pread(fd, 4096, 0))  # any bytes: a number or (0, "")
    except OSError:
        return 0, ""  # a torn lock file: the journal's generations still fence


def write_holder(fs: FsOps, fd: int, generation: int, *, sync: bool = True) -> None:
    """Write ``generation`` (and this pid) into the lock file in place, and fsync it (unless
    ``sync`` is False: the caller fsyncs ``fd`` before it writes anything under it)."""
    data = json.dumps({"generation": generation, "pid": os.getpid()}).encode().ljust(_SLOT)
    fs.pwrite(fd, data, 0)
    if os.fstat(fd).st_size > len(data):
        fs.truncate(fd, len(data))
    if sync:
        fs.fsync(fd)


def flock_within(fd: int, timeout: float, poll: float) -> bool:
    """Take an exclusive ``flock`` on ``fd``, trying every ``poll`` seconds for up to
    ``timeout``; False if it is still held by another when the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)


def acquire(
    path: str,
    run_id: str,
    *,
    fs: FsOps,
    timeout: float = 0.0,
    min_generation: int = 0,
    poll: float = 0.02,
    bump: bool = True,
    sync: bool = True,
) -> RunLock:
    """Take the run's lock, waiting up to ``timeout`` seconds; return it with a new generation.

    ``min_generation`` is the highest generation found in the run's records: the new generation
    is above both it and the one in the lock file. It is allocated under the lock and written
    and fsynced to the lock file before this returns, so no two openers of the run ever hold
    the same generation, even across a power cut. ``bump=False`` takes the lock only (to
    remove the run): the generation is left as it is. ``sync=False`` leaves the new generation
    unsynced: the caller fsyncs the lock file before its first write under that generation (a
    holder that writes nothing costs no fsync; a power cut may hand its generation out again,
    which fences nothing since nothing carries it).
    """
    created = not os.path.lexists(path)
    try:
        fd = fs.open_rw(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CheckpointCorrupt(
                path,
                0,
                "the lock file is a symbolic link: someone planted a link where the "
                "run's lock belongs; remove it and check who can write the store",
            ) from exc
        raise
    try:
        if not is_regular_file(fd):
            raise CheckpointCorrupt(path, 0, "the lock file is not a regular file")
        if created:
            fs.fsync_dir(os.path.dirname(path))
        start = time.monotonic()
        if not flock_within(fd, timeout, poll):
            _, holder = _read_holder(fd)
            raise RunLocked(
                run_id, path, f"pid {holder}" if holder else "", time.monotonic() - start
            )
        old, _ = _read_holder(fd)
        if not bump:
            return RunLock(path, fd, old, fs)
        generation = max(old, min_generation) + 1
        # durable before use: a writer that never reaches the journal (it only reads, or dies
        # before its first record) still used its generation, and a power cut must not hand
        # it out again; the next opener also takes max(lock file, journal) + 1
        write_holder(fs, fd, generation, sync=sync)
        return RunLock(path, fd, generation, fs)
    except BaseException:
        os.close(fd)
        raise


def is_locked(path: str) -> bool:
    """True if a live process holds the lock at ``path`` (does not take it)."""
    try:  # never blocks on a FIFO, never follows a link
        fd = os.open(
            path,
            os.O_RDONLY
            | getattr(os, "O_NOFOLLOW", 0)
            | getattr(os, "O_NONBLOCK", 0)
            | getattr(os, "O_CLOEXEC", 0),
        )
    except OSError:
        return False
    try:
        if not is_regular_file(fd):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
