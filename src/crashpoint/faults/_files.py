"""File faults applied between attempts: seeded, recorded, reproducible, and confined.

Each corruption picks a target file under a glob with a seeded RNG, changes it, and returns a
:class:`Corruption` record saying exactly what was done (file, offset, bytes), so a failing trial
can be replayed byte for byte.

**Confinement.** A corruption touches only regular files inside its ``roots`` (the trial's state
and work folders). The glob is expanded by walking the roots without following a symbolic link
(a linked folder is not entered, a linked file is not a candidate), a file with more than one
hard link is never changed in place, and every change goes through file descriptors opened
component by component from the root with ``O_NOFOLLOW``: a link the agent planted, even one
swapped in after the walk, is never written through.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob
import os
import random
import stat
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from crashpoint.errors import ConfinementError, InvalidArgument

__all__ = ["CORRUPTIONS", "ConfinementError", "Corruption", "corrupt", "pick_target"]

CORRUPTIONS = (
    "truncate",
    "bitflip",
    "zero",
    "delete",
    "stale-copy",
    "append-garbage",
    "unreadable",
    "symlink",
)

#: Corruptions that change a file's bytes or mode in place (not just its directory entry).
_IN_PLACE = ("truncate", "bitflip", "zero", "append-garbage", "unreadable", "stale-copy")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


@dataclass(frozen=True, slots=True)
class Corruption:
    """What a file fault did."""

    how: str
    path: str
    offset: int = 0
    length: int = 0
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        where = f" at byte {self.offset}" if self.how in ("truncate", "bitflip", "zero") else ""
        extra = f" ({self.detail})" if self.detail else ""
        return f"{self.how} {self.path}{where}{extra}"


class _Target(NamedTuple):
    path: str  # as the pattern spells it (what the record shows)
    base: str  # the real root folder the file was found under
    rel: tuple[str, ...]  # its components below ``base``
    size: int
    nlink: int


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _split(pattern: str) -> tuple[str, list[str]]:
    """``pattern`` -> (the folder before its first wildcard, the components after it)."""
    parts = pattern.split("/")
    first = next((k for k, p in enumerate(parts) if glob.has_magic(p)), len(parts) - 1)
    top = "/".join(parts[:first]) or ("/" if pattern.startswith("/") else ".")
    return top, parts[first:]


def _match(names: Sequence[str], pats: Sequence[str]) -> bool:
    """glob's rules (``recursive=True``) for one relative path: ``**`` spans zero or more
    folders, a wildcard never matches a leading dot unless the pattern starts with one."""
    memo: dict[tuple[int, int], bool] = {}

    def m(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[(i, j)]
        if j == len(pats):
            r = i == len(names)
        elif pats[j] == "**":
            r = m(i, j + 1) or (i < len(names) and not names[i].startswith(".") and m(i + 1, j))
        elif i == len(names):
            r = False
        else:
            p, n = pats[j], names[i]
            if glob.has_magic(p):
                ok = fnmatch.fnmatchcase(n, p) and (p.startswith(".") or not n.startswith("."))
            else:
                ok = n == p
            r = ok and m(i + 1, j + 1)
        memo[(i, j)] = r
        return r

    return m(0, 0)


def _real_roots(pattern: str, root: str | None, roots: Sequence[str] | None) -> list[str]:
    """The real folders a corruption may touch. Given folders that are themselves symbolic
    links (planted in place of the state folder) are dropped; without any, the folder the
    pattern is rooted in. Never ``/``."""
    if roots is not None or root:
        given = list(roots) if roots is not None else [str(root)]
        out = [os.path.realpath(r) for r in given if os.path.isdir(r) and not os.path.islink(r)]
    else:
        out = [os.path.realpath(_split(pattern)[0])]
    for r in out:
        if r == os.path.dirname(r):
            raise ConfinementError(
                f"refusing to corrupt files under {r}: give the folder(s) it may touch (roots)"
            )
    # drop roots inside other roots: each file is found once
    return sorted({r for r in out if not any(o != r and _within(r, o) for o in out)})


def _walk(pattern: str, roots: list[str]) -> list[_Target]:
    """Regular files matching ``pattern`` inside ``roots``, found without following links."""
    top, rest = _split(pattern)
    top_real = os.path.realpath(top)
    if any(_within(top_real, r) for r in roots):
        bases = [top_real]
    else:  # the pattern starts above the roots: search only the roots below it
        bases = [r for r in roots if _within(r, top_real)]
    found: list[_Target] = []
    for base in bases:
        for dirpath, _dirs, files in os.walk(base, followlinks=False):
            for name in files:
                full = os.path.join(dirpath, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                rel_top = os.path.relpath(full, top_real).split(os.sep)
                if not _match(rel_top, rest):
                    continue
                shown = os.path.join(*rel_top) if top == "." else os.path.join(top, *rel_top)
                rel = tuple(os.path.relpath(full, base).split(os.sep))
                found.append(_Target(shown, base, rel, st.st_size, st.st_nlink))
    return sorted(found)


@contextlib.contextmanager
def _parent(base: str, rel: Sequence[str]) -> Iterator[int]:
    """A descriptor of the folder holding ``base/rel...``, each folder opened with
    ``O_NOFOLLOW`` relative to the one before: no link is followed on the way down."""
    fd = os.open(base, os.O_RDONLY | _DIR | _NOFOLLOW | _CLOEXEC)
    try:
        for name in rel[:-1]:
            nfd = os.open(name, os.O_RDONLY | _DIR | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nfd
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _open(t: _Target, flags: int, *, in_place: bool = True) -> Iterator[int]:
    """Open target ``t`` without following a link; refuse anything but a regular file (and,
    for in-place changes, a file with other hard links: its bytes live outside too)."""
    with _parent(t.base, t.rel) as dfd:
        fd = os.open(t.rel[-1], flags | _NOFOLLOW | _CLOEXEC | _NONBLOCK, dir_fd=dfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (in_place and st.st_nlink != 1):
                raise OSError(errno.EPERM, "not a regular file with one link", t.path)
            yield fd
        finally:
            os.close(fd)


def _candidates(pattern: str, roots: list[str], how: str, nonempty: bool) -> list[_Target]:
    files = _walk(pattern, roots)
    if how in _IN_PLACE:
        files = [f for f in files if f.nlink == 1]
    if nonempty:
        files = [f for f in files if f.size > 0]
    return files


def pick_target(
    pattern: str, rng: random.Random, *, nonempty: bool = False, roots: Sequence[str] | None = None
) -> str | None:
    """The file a corruption of ``pattern`` would pick (see :func:`corrupt` for ``roots``)."""
    files = _candidates(pattern, _real_roots(pattern, None, roots), "", nonempty)
    return rng.choice(files).path if files else None


#: Aimed corruptions choose among this many of the newest writes still on disk.
AIM_AMONG = 3


def _aimed(
    files: list[_Target], aim: Sequence[tuple[str, int, int]], rng: random.Random
) -> tuple[_Target, int, int, int] | None:
    """(target, offset, length, rank) of a write to damage: drawn among the
    :data:`AIM_AMONG` newest writes of ``aim`` (absolute path, offset, length; newest last)
    whose file is a candidate and still holds those bytes. ``rank`` 0 is the newest."""
    by_path = {os.path.realpath(os.path.join(t.base, *t.rel)): t for t in files}
    valid: list[tuple[_Target, int, int, int]] = []
    for rank, (path, off, n) in enumerate(reversed(list(aim))):
        t = by_path.get(os.path.realpath(path))
        if t is None or off >= t.size or n <= 0:
            continue
        valid.append((t, off, min(n, t.size - off), rank))
        if len(valid) >= AIM_AMONG:
            break
    return rng.choice(valid) if valid else None


def corrupt(
    how: str,
    pattern: str,
    rng: random.Random,
    *,
    older: str | None = None,
    root: str | None = None,
    roots: Sequence[str] | None = None,
    aim: Sequence[tuple[str, int, int]] | None = None,
) -> Corruption | None:
    """Apply corruption ``how`` to one file matching ``pattern``; None if nothing to corrupt.

    ``roots``: the only folders whose files may be touched (the trial's state and work
    folders); default ``[root]`` if given, else the folder ``pattern`` is rooted in (the part
    before its first wildcard). A matching file outside them is never a candidate.
    ``stale-copy`` needs ``older``: a copy of the same folder taken earlier (its files replace
    the current ones: a rolled-back disk); ``root`` is the folder ``older`` is a copy of.

    ``aim`` (``truncate``, ``bitflip``, ``zero``): the writes the agent made, as (absolute path,
    offset, length), newest last (from its recorded trace). The damage then lands inside one of
    the newest writes still on disk (its last record, a WAL's last frames) instead of at a
    random offset, where it mostly hits inert bytes; without any such write the corruption is
    random, and its record says so.
    """
    if how not in CORRUPTIONS:
        raise InvalidArgument(f"unknown corruption {how!r}; use one of {', '.join(CORRUPTIONS)}")
    real_roots = _real_roots(pattern, root, roots)
    if how == "stale-copy":
        return _stale_copy(pattern, rng, older, root, real_roots)
    files = _candidates(pattern, real_roots, how, how in ("truncate", "bitflip", "zero"))
    if not files:
        return None
    aimed = (
        _aimed(files, aim, rng)
        if aim is not None and how in ("truncate", "bitflip", "zero")
        else None
    )
    if aimed is not None:
        return _damage(how, *aimed, rng)
    t = rng.choice(files)
    if how == "delete":
        with _parent(t.base, t.rel) as dfd:
            size = os.stat(t.rel[-1], dir_fd=dfd, follow_symlinks=False).st_size
            os.unlink(t.rel[-1], dir_fd=dfd)
        return Corruption(how, t.path, 0, size)
    if how == "symlink":  # replace the file with a link to a decoy holding its old bytes
        decoy = t.rel[-1] + ".decoy"
        with _parent(t.base, t.rel) as dfd:
            size = os.stat(t.rel[-1], dir_fd=dfd, follow_symlinks=False).st_size
            os.rename(t.rel[-1], decoy, src_dir_fd=dfd, dst_dir_fd=dfd)
            os.symlink(decoy, t.rel[-1], dir_fd=dfd)
        return Corruption(how, t.path, 0, size, f"now a symlink to {decoy}")
    if how == "unreadable":
        with _open(t, os.O_RDONLY) as fd:
            os.fchmod(fd, 0)
        return Corruption(
            how,
            t.path,
            0,
            0,
            "mode 000 (root still reads it: the agent must run as another user for this to bite)",
        )
    if how == "append-garbage":
        with _open(t, os.O_WRONLY | os.O_APPEND) as fd:
            size = os.fstat(fd).st_size
            garbage = bytes(rng.randrange(256) for _ in range(rng.choice((1, 7, 64, 300))))
            write_all(fd, garbage)
        return Corruption(how, t.path, size, len(garbage))
    with _open(t, os.O_RDWR) as fd:
        size = os.fstat(fd).st_size
        if size == 0:  # emptied since the walk
            return None
        off = rng.randrange(0, size)
        tag = (
            "; not aimed: no write of the recorded trace is still on disk"
            if aim is not None
            else ""
        )
        if how == "truncate":
            os.ftruncate(fd, off)
            return Corruption(how, t.path, off, size - off, "torn write" + tag)
        if how == "bitflip":
            bit = rng.randrange(8)
            b = os.pread(fd, 1, off)[0]
            os.pwrite(fd, bytes([b ^ (1 << bit)]), off)
            return Corruption(how, t.path, off, 1, f"bit {bit}{tag}")
        # zero
        n = min(size - off, rng.choice((1, 16, 512, 4096)))
        os.pwrite(fd, b"\0" * n, off)
        return Corruption(how, t.path, off, n, tag.lstrip("; "))


def _damage(
    how: str, t: _Target, start: int, length: int, rank: int, rng: random.Random
) -> Corruption | None:
    """``how`` inside bytes [start, start + length) of ``t``: one of its newest writes."""
    which = "the last write" if rank == 0 else f"the write {rank} before the last"
    with _open(t, os.O_RDWR) as fd:
        size = os.fstat(fd).st_size
        if start >= size:  # shrunk since the walk
            return None
        length = min(length, size - start)
        where = f"aimed at {which}: bytes {start}-{start + length} of {os.path.basename(t.path)}"
        off = start + rng.randrange(length)
        if how == "truncate":  # a torn last record: cut inside the write
            os.ftruncate(fd, off)
            return Corruption(how, t.path, off, size - off, f"torn write, {where}")
        if how == "bitflip":
            bit = rng.randrange(8)
            b = os.pread(fd, 1, off)[0]
            os.pwrite(fd, bytes([b ^ (1 << bit)]), off)
            return Corruption(how, t.path, off, 1, f"bit {bit}, {where}")
        # zero: from a byte that is not zero already (a page is mostly zeros: zeroing those
        # changes nothing)
        data = os.pread(fd, min(length, 1 << 20), start)
        live = [i for i, byte in enumerate(data) if byte]
        if live:
            off = start + rng.choice(live)
        n = min(start + length - off, rng.choice((1, 16, 512, 4096)))
        os.pwrite(fd, b"\0" * n, off)
        return Corruption(how, t.path, off, n, where)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read(base: str, rel: Sequence[str]) -> tuple[bytes, os.stat_result] | None:
    """The bytes and status of regular file ``base/rel`` (no link followed), or None."""
    t = _Target("", base, tuple(rel), 0, 1)
    try:
        with _open(t, os.O_RDONLY, in_place=False) as fd:
            st = os.fstat(fd)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks), st
    except OSError:
        return None


def _stale_copy(
    pattern: str, rng: random.Random, older: str | None, root: str | None, roots: list[str]
) -> Corruption | None:
    if older is None or root is None:
        return None
    root_real, older_real = os.path.realpath(root), os.path.realpath(older)
    candidates: list[tuple[_Target, bytes, os.stat_result]] = []
    for t in _candidates(pattern, roots, "stale-copy", False):
        rel = os.path.relpath(os.path.join(t.base, *t.rel), root_real)
        if rel.startswith(os.pardir):
            continue
        old = _read(older_real, rel.split(os.sep))
        cur = _read(t.base, t.rel)
        if old is not None and cur is not None and old[0] != cur[0]:
            candidates.append((t, *old))
    if not candidates:
        return None
    t, data, st = rng.choice(candidates)
    with _open(t, os.O_WRONLY | os.O_TRUNC) as fd:
        write_all(fd, data)
        os.fchmod(fd, stat.S_IMODE(st.st_mode))
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    return Corruption(
        "stale-copy", t.path, 0, len(data), "replaced with the copy taken at an earlier crash"
    )
