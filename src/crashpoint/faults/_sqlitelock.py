"""A second writer on an agent's SQLite database: the harness holds its write lock for a while.

:class:`SqliteLock` opens the database with a connection of its own (the standard library's
``sqlite3``) and takes the write lock with ``BEGIN IMMEDIATE`` (``mode="exclusive"``:
``BEGIN EXCLUSIVE``, which in rollback-journal mode also keeps readers out), then lets go with
``ROLLBACK``: it never writes a page. An agent that writes meanwhile gets ``SQLITE_BUSY``
("database is locked") at once, or after its busy timeout.

Whether the agent met the lock is read from a syscall trace of its attempt
(:data:`LOCK_SYSCALLS`, strace ``-ttt``): SQLite takes its locks with ``fcntl(F_SETLK)`` on the
database (or, in WAL mode, its ``-shm`` file), in every language; each request refused
(``EAGAIN``/``EACCES``) while the lock was held is a write that met it
(:func:`lock_refusals`).

**Confinement.** :func:`find_database` picks the database among regular files matching a glob
inside the trial's folders, found without following a link, with one hard link, starting with
SQLite's header; :meth:`SqliteLock.acquire` refuses a file that changed (another inode) between
the choice and the open. Opening it as a second connection does what any SQLite client does:
a hot journal the agent's crash left is rolled back, and the last connection to close a WAL
database checkpoints it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Sequence
from urllib.parse import quote

from crashpoint.errors import InvalidArgument
from crashpoint.faults._files import _real_roots, _walk
from crashpoint.faults._strace import Syscall, parse

__all__ = [
    "LOCK_MODES",
    "LOCK_SYSCALLS",
    "SQLITE_HEADER",
    "SqliteLock",
    "find_database",
    "lock_refusals",
]

#: How the lock is taken: ``immediate`` (``BEGIN IMMEDIATE``: writers wait or fail, readers
#: read) or ``exclusive`` (``BEGIN EXCLUSIVE``: in rollback-journal mode readers too).
LOCK_MODES = ("immediate", "exclusive")
#: The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: What an agent's attempt is traced for to see its lock requests refused.
LOCK_SYSCALLS = ("fcntl", "fcntl64")
#: The files SQLite locks for a database ``DB``: itself, and in WAL mode ``DB-shm``.
_SIDE_FILES = ("", "-shm", "-wal", "-journal")
_LOCK_CMDS = ("F_SETLK", "F_SETLKW", "F_SETLK64", "F_SETLKW64", "F_OFD_SETLK", "F_OFD_SETLKW")


def _is_sqlite(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        return os.read(fd, len(SQLITE_HEADER)) == SQLITE_HEADER
    finally:
        os.close(fd)


def find_database(pattern: str, roots: Sequence[str]) -> str | None:
    """The first (sorted) SQLite database matching glob ``pattern`` inside ``roots``: a regular
    file, found without following a link, with one hard link, that starts with
    :data:`SQLITE_HEADER`; its real path, or None."""
    real = _real_roots(pattern, None, roots)
    for t in _walk(pattern, real):
        if t.nlink != 1 or t.size < len(SQLITE_HEADER) or t.path.endswith(_SIDE_FILES[1:]):
            continue
        full = os.path.join(t.base, *t.rel)
        if _is_sqlite(full):
            return full
    return None


class SqliteLock:
    """The write lock of the SQLite database at ``path``, held by the harness (see the module
    doc). :meth:`acquire`, then :meth:`release` (idempotent); :attr:`held_since` and
    :attr:`released_at` are wall-clock times (``time.time()``, the clock of strace ``-ttt``)."""

    def __init__(self, path: str, mode: str = "immediate") -> None:
        if mode not in LOCK_MODES:
            raise InvalidArgument(f"SQLite lock mode {mode!r}: use {' or '.join(LOCK_MODES)}")
        self.path, self.mode = path, mode
        self._conn: sqlite3.Connection | None = None
        self.held_since = 0.0
        self.released_at = 0.0

    @property
    def held(self) -> bool:
        return self._conn is not None

    def acquire(self, timeout: float = 1.0) -> str:
        """Take the write lock, waiting at most ``timeout`` seconds for a writer that holds it
        (the agent inside a transaction of its own). "" once held, else why not."""
        try:
            st = os.lstat(self.path)
        except OSError as exc:
            return f"{self.path} is gone ({exc.strerror})"
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return f"{self.path} is no longer a regular file with one link"
        uri = "file:" + quote(self.path) + "?mode=rw"
        try:
            conn = sqlite3.connect(
                uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            return f"could not open {self.path}: {exc}"
        try:
            now = os.lstat(self.path)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
                conn.close()
                return f"{self.path} was replaced while it was opened"
            conn.execute("BEGIN " + self.mode.upper())
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            held = "locked" in str(exc) or "busy" in str(exc).lower()
            return (
                f"the agent held a lock of {os.path.basename(self.path)} itself for "
                f"{timeout:g}s (inside a transaction of its own)"
                if held
                else f"could not lock {self.path}: {exc}"
            )
        self._conn = conn
        self.held_since = time.time()
        return ""

    def release(self) -> None:
        """Let the lock go (``ROLLBACK``: nothing was written) and close the connection."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        self.released_at = time.time()
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        with contextlib.suppress(sqlite3.Error):
            conn.close()


def _refused(c: Syscall, files: set[str]) -> bool:
    if c.name not in LOCK_SYSCALLS or c.errno not in ("EAGAIN", "EACCES", "EBUSY"):
        return False
    if len(c.args) < 3 or c.args[1] not in _LOCK_CMDS or "F_UNLCK" in c.args[2]:
        return False
    return c.path in files


def lock_refusals(trace: str, database: str, since: float, until: float) -> list[Syscall]:
    """The lock requests on ``database`` (or its ``-shm``/``-wal``/``-journal`` file) that the
    trace at path ``trace`` (strace ``-ttt -y`` of :data:`LOCK_SYSCALLS`) shows refused
    between wall-clock times ``since`` and ``until``: the agent's writes that met the lock.
    [] if the trace cannot be read."""
    files = {database + s for s in _SIDE_FILES}
    try:
        calls = parse(trace)
    except OSError:
        return []
    return [c for c in calls if _refused(c, files) and since <= c.time <= until]
