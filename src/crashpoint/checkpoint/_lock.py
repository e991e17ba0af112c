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
from dataclasses import dataclass

from crashpoint.checkpoint._fsio import FsOps, is_regular_file
from crashpoint.checkpoint._journal import parse_lock
from crashpoint.errors import CheckpointCorrupt, RunLocked

__all__ = ["RunLock", "acquire"]


@dataclass(slots=True)
class RunLock:
    path: str
    fd: int
    generation: int
    fs: FsOps

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


def acquire(path: str, run_id: str, *, fs: FsOps, timeout: float = 0.0,
            min_generation: int = 0, poll: float = 0.02) -> RunLock:
    """Take the run's lock, waiting up to ``timeout`` seconds; return it with a new generation.

    ``min_generation`` is the highest generation found in the run's records: the new generation
    is above both it and the one in the lock file.
    """
    created = not os.path.lexists(path)
    try:
        fd = fs.open_rw(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CheckpointCorrupt(
                path, 0, "the lock file is a symbolic link: someone planted a link where the "
                "run's lock belongs; remove it and check who can write the store") from exc
        raise
    try:
        if not is_regular_file(fd):
            raise CheckpointCorrupt(path, 0, "the lock file is not a regular file")
        if created:
            fs.fsync_dir(os.path.dirname(path))
        deadline = time.monotonic() + timeout
        start = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    _, holder = _read_holder(fd)
                    raise RunLocked(run_id, path, f"pid {holder}" if holder else "",
                                    time.monotonic() - start) from None
                time.sleep(poll)
        old, _ = _read_holder(fd)
        generation = max(old, min_generation) + 1
        data = json.dumps({"generation": generation, "pid": os.getpid()}).encode()
        fs.truncate(fd, 0)
        fs.pwrite(fd, data, 0)
        # not fsynced: records carry the generation that fences, and the next opener takes
        # max(lock file, journal) + 1, so a lost lock-file write cannot reuse a generation
        # that reached the journal
        return RunLock(path, fd, generation, fs)
    except BaseException:
        os.close(fd)
        raise


def is_locked(path: str) -> bool:
    """True if a live process holds the lock at ``path`` (does not take it)."""
    try:  # never blocks on a FIFO, never follows a link
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
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
