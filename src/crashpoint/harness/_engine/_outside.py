"""What an agent writes outside its state and work folders: measured, reported, cleaned up.

Every attempt gets a private temporary folder (``TMPDIR``, ``TEMP`` and ``TMP`` point at
``<trial>/tmp/attempt-N``); when the attempt has ended its size is measured and it is removed
(:class:`PrivateTmp`). An agent that writes to ``/tmp`` by name instead is only seen: the
system's temporary folders are listed before and after each trial, and the new top-level
entries are reported with their size (:func:`temp_entries`, :func:`new_temp_entries`; an entry
whose size, time or inode changed counts too, so a file rewritten by every attempt is seen).
Nothing tells whose they are: what another process wrote there meanwhile (a log, pip's
unpacking) is listed too, and the report says so. They are never removed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile

from crashpoint.harness._report import DIR_MODE, human_size, secure_dir

__all__ = ["PrivateTmp", "Snapshot", "new_temp_entries", "sized", "temp_entries"]

_ATTEMPT = re.compile(r"attempt-(\d+)")
#: The harness's own temporary names (ledger sockets, tmpfs side folders, zygote logs).
OWN_PREFIXES = ("cp-", "crashpoint-", "pytest-of-")
#: At most this many files are looked at to size one new entry of a system temp folder.
SIZE_SCAN_LIMIT = 100_000
#: Files counted in a new or changed temp-folder entry (reported "at least" past it): every
#: trial pays this scan, and another job's folder changing in /tmp can be large.
NEW_SCAN_LIMIT = 5_000


def _rmtree(path: str) -> None:
    """Remove a tree an agent left, even with folders it made unwritable (never follows a
    link: shutil.rmtree works on descriptors where the platform allows)."""
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path):
        return
    for dirpath, dirs, _files in os.walk(path):  # a folder made read-only: open it up
        for d in [dirpath, *(os.path.join(dirpath, x) for x in dirs)]:
            with contextlib.suppress(OSError):
                if not os.path.islink(d):
                    os.chmod(d, DIR_MODE)
    shutil.rmtree(path, ignore_errors=True)


def sized(path: str, limit: int = SIZE_SCAN_LIMIT) -> tuple[int, bool]:
    """(bytes of regular files under ``path``, True if every file was counted): stops after
    ``limit`` files, so a folder of millions of files costs a bounded time."""
    total = 0
    seen = 0
    try:
        st = os.lstat(path)
    except OSError:
        return 0, True
    if not stat.S_ISDIR(st.st_mode):
        return (st.st_size if stat.S_ISREG(st.st_mode) else 0), True
    for dirpath, _dirs, files in os.walk(path):
        for n in files:
            seen += 1
            if seen > limit:
                return total, False
            with contextlib.suppress(OSError):
                fst = os.lstat(os.path.join(dirpath, n))
                if stat.S_ISREG(fst.st_mode):
                    total += fst.st_size
    return total, True


class PrivateTmp:
    """The private temporary folders of one trial's attempts, under ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.sizes: dict[int, int] = {}

    def for_attempt(self, attempt: int) -> str:
        """The folder of ``attempt`` (created 0700). The folders of earlier attempts are
        measured and removed first: attempts start in order, so those have ended."""
        self.sweep(before=attempt)
        return secure_dir(os.path.join(self.root, f"attempt-{attempt}"), root=self.root)

    def sweep(self, before: int | None = None) -> None:
        """Measure and remove the folders of the attempts before ``before`` (None: all)."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        for name in names:
            m = _ATTEMPT.fullmatch(name)
            if not m or (before is not None and int(m.group(1)) >= before):
                continue
            path = os.path.join(self.root, name)
            self.sizes[int(m.group(1))] = self.sizes.get(int(m.group(1)), 0) + sized(path)[0]
            _rmtree(path)

    def finish(self) -> dict[int, int]:
        """Measure and remove every attempt's folder, then the root; bytes per attempt."""
        self.sweep()
        if os.path.isdir(self.root) and not os.path.islink(self.root):
            _rmtree(self.root)
        return dict(self.sizes)


def _temp_dirs() -> list[str]:
    out: list[str] = []
    for d in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        real = os.path.realpath(d)
        if real not in out and os.path.isdir(real):
            out.append(real)
    return out


Snapshot = dict[str, dict[str, tuple[int, int, int]]]


def temp_entries() -> Snapshot:
    """Each system temporary folder's top-level entries: name -> (inode, mtime, size), from
    one ``scandir`` and one ``lstat`` per entry."""
    out: Snapshot = {}
    for d in _temp_dirs():
        entries: dict[str, tuple[int, int, int]] = {}
        with contextlib.suppress(OSError), os.scandir(d) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    st = e.stat(follow_symlinks=False)
                    entries[e.name] = (st.st_ino, st.st_mtime_ns, st.st_size)
        out[d] = entries
    return out


def new_temp_entries(before: Snapshot) -> list[str]:
    """The entries that appeared or changed since ``before`` (the harness's own excluded),
    each as ``"/tmp/name (10.0 MiB, new)"``; nothing is removed."""
    found: list[str] = []
    for d, now in temp_entries().items():
        old = before.get(d, {})
        for name in sorted(now):
            if name.startswith(OWN_PREFIXES) or now[name] == old.get(name):
                continue
            path = os.path.join(d, name)
            size, complete = sized(path, NEW_SCAN_LIMIT)
            what = "changed" if name in old else "new"
            found.append(f"{path} ({'' if complete else 'at least '}{human_size(size)}, {what})")
    return found
