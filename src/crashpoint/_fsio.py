"""Durable file primitives, behind one object so a test can watch every write, sync and rename.

The store never calls ``os.write`` / ``os.fsync`` / ``os.replace`` directly: it calls the methods
of an :class:`FsOps`. The default instance is the real thing; :mod:`crashpoint.faults.powerloss`
subclasses it to record which bytes and which folder entries were durable at each instant, so a
test can rebuild the disk as a power cut would leave it.
"""

from __future__ import annotations

import errno
import os
import re
import stat

from crashpoint._failpoints import failpoint

__all__ = ["DIR_MODE", "FILE_MODE", "REAL", "FsOps", "is_temp_of"]

FILE_MODE = 0o600
DIR_MODE = 0o700
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class FsOps:
    """The file operations the store performs. Subclass to observe; every method is real I/O."""

    def open_append(self, path: str) -> int:
        """Open (creating) a file for appending; never follows a symlink."""
        return os.open(
            path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC, FILE_MODE
        )

    def open_rw(self, path: str) -> int:
        """Open (creating) a file for reading and writing; never follows a symlink."""
        return os.open(path, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC, FILE_MODE)

    def write(self, fd: int, data: bytes) -> None:
        """Write all of ``data`` (looping over short writes)."""
        n = os.write(fd, data)
        if n == len(data):
            return
        view = memoryview(data)[n:]
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, offset)
            view = view[n:]
            offset += n

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)

    def fsync_dir(self, path: str) -> None:
        """Make the folder's entries (new files, renames, removals) durable."""
        fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        os.mkdir(path, DIR_MODE)

    # -- composite operations -------------------------------------------------------------

    def makedirs_durable(self, path: str) -> None:
        """Create ``path`` and missing parents (0700), fsyncing each parent that gained an entry."""
        path = os.path.abspath(path)
        missing: list[str] = []
        p = path
        while not os.path.isdir(p):
            missing.append(p)
            parent = os.path.dirname(p)
            if parent == p:
                break
            p = parent
        for d in reversed(missing):
            try:
                self.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise
                continue
            self.fsync_dir(os.path.dirname(d))

    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, whole.

        Temp file in the same folder, fsync it, ``os.replace``, fsync the folder. The temp name
        is unique to this call (``.NAME.<pid>.<random>.tmp``, created with ``O_EXCL``, 0600,
        as :func:`tempfile.mkstemp` does, without importing it: the lifecycle commands start
        fast), so threads and processes replacing one path never share a temp file; a crash
        leaves at most a ``.NAME.*.tmp`` that :func:`is_temp_of` names.
        """
        folder = os.path.dirname(path) or "."
        fd, tmp = _temp_file(folder, f".{os.path.basename(path)}.{os.getpid()}.")
        try:
            self._note_open(tmp, fd)
            self.write(fd, data)
            self.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        self.close(fd)
        try:
            failpoint("atomic.after_temp", tmp)
            self.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        failpoint("atomic.after_rename", path)
        self.fsync_dir(folder)

    def write_replace(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` as :meth:`write_atomic` does but with no fsync: for a
        file a crash may lose or leave empty (an index rebuilt from the journal, a cache), so
        readers must check it; a reader sees the old file or the new one, whole."""
        folder = os.path.dirname(path) or "."
        fd, tmp = _temp_file(folder, f".{os.path.basename(path)}.{os.getpid()}.")
        try:
            self._note_open(tmp, fd)
            self.write(fd, data)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        self.close(fd)
        try:
            self.replace(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def _note_open(self, path: str, fd: int) -> None:
        """Hook for recorders: ``fd`` now refers to ``path``."""


#: compiled on first use (by re's cache): most folders hold no temp file to ask about
_TEMP = r"^\.(?P<name>.+)\.\d+\.[A-Za-z0-9_]+\.tmp$|^\.(?P<old>.+)\.\d+\.tmp$"


def is_temp_of(name: str, targets: tuple[str, ...] = ()) -> bool:
    """True if ``name`` is a temp file :meth:`FsOps.write_atomic` leaves when killed
    (``.NAME.<pid>.<random>.tmp``, or the older ``.NAME.<pid>.tmp``), for a NAME that starts
    with one of ``targets`` (any NAME if none given)."""
    if not name.startswith("."):
        return False
    m = re.match(_TEMP, name)
    if m is None:
        return False
    base = m.group("name") or m.group("old") or ""
    return not targets or base.startswith(targets)


_O_TEMP = os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC


def _temp_file(folder: str, prefix: str) -> tuple[int, str]:
    """A new file ``folder/<prefix><random>.tmp``, 0600, created with ``O_EXCL``: (fd, path)."""
    for _ in range(100):
        tmp = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, _O_TEMP, FILE_MODE), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", folder)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def is_regular_file(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


REAL = FsOps()
