"""Corruption that aims (issue 11, item 7): with the writes of a recorded trace, the damage lands
in the agent's newest writes (its last record, a WAL's last frames) instead of on inert bytes."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from crashpoint.errors import FaultSpecError
from crashpoint.faults import _powercut, _strace, corrupt
from crashpoint.harness import family_from_spec


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _changed(before: dict[str, bytes], after: dict[str, bytes]) -> dict[str, list[int]]:
    """Per changed file, the offsets that differ (a cut file: the offsets it lost)."""
    out: dict[str, list[int]] = {}
    for name, old in before.items():
        new = after.get(name, b"")
        diff = [
            i
            for i in range(max(len(old), len(new)))
            if (old[i : i + 1] or None) != (new[i : i + 1] or None)
        ]
        if diff:
            out[name] = diff
    return out


@pytest.mark.parametrize("how", ["bitflip", "zero", "truncate"])
def test_aimed_damage_lands_inside_one_of_the_newest_writes(tmp_path: Path, how: str) -> None:
    root = tmp_path / "state"
    root.mkdir()
    (root / "a.log").write_bytes(bytes(range(256)) * 16)  # 4096 bytes
    (root / "b.json").write_bytes(b"x" * 300)
    writes = [
        (str(root / "b.json"), 0, 300),
        (str(root / "a.log"), 0, 2048),
        (str(root / "a.log"), 2048, 1024),
        (str(root / "a.log"), 3072, 1024),
    ]
    newest = writes[-3:]  # the three newest a corruption draws among
    for seed in range(40):
        (root / "a.log").write_bytes(bytes(range(256)) * 16)
        (root / "b.json").write_bytes(b"x" * 300)
        before = _files(root)
        c = corrupt(how, f"{root}/**", random.Random(seed), roots=[str(root)], aim=writes)
        assert c is not None
        assert "aimed at" in c.detail
        changed = _changed(before, _files(root))
        assert list(changed) == ["a.log"]  # b.json is the oldest write: never drawn
        first = min(changed["a.log"])
        assert any(o <= first < o + n for _p, o, n in newest), (seed, c)
        if how != "truncate":  # a cut loses the rest of the file, by design
            assert all(any(o <= i < o + n for _p, o, n in newest) for i in changed["a.log"])


def test_a_write_no_longer_on_disk_is_skipped_and_without_any_the_record_says_so(
    tmp_path: Path,
) -> None:
    root = tmp_path / "state"
    root.mkdir()
    (root / "a").write_bytes(b"y" * 100)
    gone = [(str(root / "a"), 500, 100), (str(root / "missing"), 0, 10)]
    c = corrupt("bitflip", f"{root}/**", random.Random(1), roots=[str(root)], aim=gone)
    assert c is not None
    assert "not aimed" in c.detail  # random, and it says why
    c = corrupt(
        "bitflip",
        f"{root}/**",
        random.Random(1),
        roots=[str(root)],
        aim=[*gone, (str(root / "a"), 90, 50)],
    )
    assert c is not None
    assert 90 <= c.offset < 100  # cut to what is still on disk
    assert "aimed at the last write: bytes 90-100" in c.detail


def test_an_aim_outside_the_roots_is_never_touched(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir()
    (root / "inside").write_bytes(b"i" * 64)
    outside = tmp_path / "outside"
    outside.write_bytes(b"o" * 64)
    (root / "link").symlink_to(outside)
    for seed in range(20):
        corrupt(
            "zero",
            f"{root}/**",
            random.Random(seed),
            roots=[str(root)],
            aim=[(str(outside), 0, 64), (str(root / "link"), 0, 64)],
        )
    assert outside.read_bytes() == b"o" * 64


def test_the_aim_option_is_validated() -> None:
    assert family_from_spec({"corrupt": {"how": "bitflip", "aim": "written"}}).needs == frozenset(
        {"plog"}
    )
    with pytest.raises(FaultSpecError) as exc:
        family_from_spec({"corrupt": {"aim": "everywhere"}})
    assert exc.value.option == "aim"


WRITER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("CREATE TABLE IF NOT EXISTS steps (n INTEGER PRIMARY KEY, body TEXT)")
for n in range(6):
    db.execute("BEGIN")
    db.execute("INSERT INTO steps VALUES (?, ?)", (n, f"step {n} " + "r" * 300))
    db.execute("COMMIT")
import os
os._exit(0)  # like a crash: no checkpoint at close, the WAL keeps the frames
"""


def _reads(folder: Path) -> list[tuple[int, str]] | str:
    try:
        db = sqlite3.connect(folder / "agent.db")
        try:
            return list(db.execute("SELECT n, body FROM steps ORDER BY n"))
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        return f"error: {exc}"


@pytest.mark.skipif(not _strace.available()[0], reason=f"needs strace: {_strace.available()[1]}")
@pytest.mark.parametrize("how", ["bitflip", "zero", "truncate"])
def test_on_a_sqlite_wal_aimed_damage_is_noticed_far_more_often_than_random(
    tmp_path: Path, how: str
) -> None:
    """SQLite in WAL mode, its WAL not checkpointed: random bit flips over its files mostly
    land on inert bytes (free space, the idle main file); flips aimed at its newest writes hit
    the last committed frames, and SQLite reads back something else (the last commit lost)."""
    src = tmp_path / "src"
    src.mkdir()
    trace = tmp_path / "t.strace"
    argv = _strace.wrap(
        [sys.executable, "-c", WRITER, str(src / "agent.db")],
        str(trace),
        syscalls=_powercut.SYSCALLS,
        strsize=_powercut.STRSIZE,
        timestamps=True,
    )
    subprocess.run(argv, check=True, timeout=120, start_new_session=True)
    log = _powercut.oplog(_strace.read(str(trace)), {"state_dir": str(src)})
    writes = _powercut.recent_writes(log, len(log.ops))
    assert any(p.endswith("agent.db-wal") for p, _o, _n in writes)
    ref = tmp_path / "ref"  # read a copy: closing the last connection checkpoints the WAL
    ref.mkdir()
    for f in src.iterdir():
        (ref / f.name).write_bytes(f.read_bytes())
    want = _reads(ref)
    assert isinstance(want, list)
    assert len(want) == 6
    noticed = {"random": 0, "aimed": 0}
    rounds = 30
    for mode in noticed:
        for seed in range(rounds):
            work = tmp_path / f"{mode}-{seed}"
            work.mkdir()
            for f in src.iterdir():
                (work / f.name).write_bytes(f.read_bytes())
            aim = [(p.replace("{state_dir}", str(work)), o, n) for p, o, n in writes]
            c = corrupt(
                how,
                f"{work}/**",
                random.Random(seed),
                roots=[str(work)],
                aim=aim if mode == "aimed" else None,
            )
            assert c is not None
            if _reads(work) != want:
                noticed[mode] += 1
    assert noticed["aimed"] >= rounds * 9 // 10, noticed
    assert noticed["aimed"] > noticed["random"], noticed
