"""File faults applied between attempts: seeded, recorded, reproducible.

Each corruption picks a target file under a glob with a seeded RNG, changes it, and returns a
:class:`Corruption` record saying exactly what was done (file, offset, bytes), so a failing trial
can be replayed byte for byte.
"""

from __future__ import annotations

import glob
import os
import random
import shutil
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CORRUPTIONS", "Corruption", "corrupt", "pick_target"]

CORRUPTIONS = ("truncate", "bitflip", "zero", "delete", "stale-copy", "append-garbage",
               "unreadable", "symlink")


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


def _files(pattern: str) -> list[str]:
    found = glob.glob(pattern, recursive=True)
    return sorted(p for p in found if os.path.isfile(p) and not os.path.islink(p))


def pick_target(pattern: str, rng: random.Random, *, nonempty: bool = False) -> str | None:
    files = _files(pattern)
    if nonempty:
        files = [f for f in files if os.path.getsize(f) > 0]
    return rng.choice(files) if files else None


def corrupt(how: str, pattern: str, rng: random.Random, *,
            older: str | None = None, root: str | None = None) -> Corruption | None:
    """Apply corruption ``how`` to one file matching ``pattern``; None if nothing to corrupt.

    ``stale-copy`` needs ``older``: a copy of the same folder taken earlier (its files replace
    the current ones: a rolled-back disk); ``root`` is the folder ``older`` is a copy of.
    """
    if how not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {how!r}; use one of {', '.join(CORRUPTIONS)}")
    if how == "stale-copy":
        return _stale_copy(pattern, rng, older, root)
    path = pick_target(pattern, rng, nonempty=how in ("truncate", "bitflip", "zero"))
    if path is None:
        return None
    size = os.path.getsize(path)
    if how == "truncate":
        off = rng.randrange(0, size)
        os.truncate(path, off)
        return Corruption(how, path, off, size - off, "torn write")
    if how == "bitflip":
        off = rng.randrange(0, size)
        bit = rng.randrange(8)
        with open(path, "r+b") as f:
            f.seek(off)
            b = f.read(1)[0]
            f.seek(off)
            f.write(bytes([b ^ (1 << bit)]))
        return Corruption(how, path, off, 1, f"bit {bit}")
    if how == "zero":
        off = rng.randrange(0, size)
        n = min(size - off, rng.choice((1, 16, 512, 4096)))
        with open(path, "r+b") as f:
            f.seek(off)
            f.write(b"\0" * n)
        return Corruption(how, path, off, n)
    if how == "delete":
        os.unlink(path)
        return Corruption(how, path, 0, size)
    if how == "append-garbage":
        garbage = bytes(rng.randrange(256) for _ in range(rng.choice((1, 7, 64, 300))))
        with open(path, "ab") as f:
            f.write(garbage)
        return Corruption(how, path, size, len(garbage))
    if how == "unreadable":
        os.chmod(path, 0)
        return Corruption(how, path, 0, 0, "mode 000 (root still reads it: the agent must "
                                            "run as another user for this to bite)")
    # symlink: replace the file with a link to a decoy holding its old bytes
    decoy = path + ".decoy"
    shutil.move(path, decoy)
    os.symlink(os.path.basename(decoy), path)
    return Corruption(how, path, 0, size, f"now a symlink to {os.path.basename(decoy)}")


def _stale_copy(pattern: str, rng: random.Random, older: str | None,
                root: str | None) -> Corruption | None:
    if older is None or root is None:
        return None
    candidates = []
    for path in _files(pattern):
        rel = os.path.relpath(path, root)
        old = os.path.join(older, rel)
        if os.path.isfile(old):
            with open(path, "rb") as a, open(old, "rb") as b:
                if a.read() != b.read():
                    candidates.append((path, old))
    if not candidates:
        return None
    path, old = rng.choice(candidates)
    shutil.copy2(old, path)
    return Corruption("stale-copy", path, 0, os.path.getsize(path),
                      "replaced with the copy taken at an earlier crash")
