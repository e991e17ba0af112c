"""History indexes and JournalReader, at the store's level: a reducer whose state is an index
into its journal keeps its segments, opens from its snapshot's tail, passes a damaged snapshot
over, and a reader finds records by number (and offset), checked, never the wrong one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from crashpoint.checkpoint import JournalReader, PayloadError, Store, register_history_index
from crashpoint.checkpoint._journal import load
from crashpoint.errors import CheckpointCorrupt


def index_reducer(state: dict[str, Any], data: Any) -> None:
    """The number of the last record, and where the newest "big" one is (an index)."""
    if not isinstance(data, dict) or not isinstance(data.get("i"), int):
        raise PayloadError("not a test record")
    state["n"] = state.get("n", 0) + 1
    if data.get("big"):
        state["big"] = state["n"]


register_history_index(index_reducer)


def _fill(root: Path, n: int, every: int = 20) -> list[int]:
    """n records (every tenth "big"), a snapshot every ``every``; their offsets."""
    offsets = []
    with Store(root, durability="none").open("r", reducer=index_reducer) as j:
        for i in range(n):
            offsets.append(j.position[1])
            j.append({"i": i, "big": i % 10 == 0, "pad": "p" * 200})
            if i % every == every - 1:
                j.snapshot()
    return offsets


def test_snapshots_keep_their_segments_and_opening_reads_only_the_tail(tmp_path: Path) -> None:
    _fill(tmp_path, 200)
    folder = tmp_path / "r"
    names = sorted(os.listdir(folder))
    assert [n for n in names if n.startswith("seg-")] == ["seg-000000000001.log"]
    assert [n for n in names if n.startswith("snap-")] == ["snap-000000000200.cps"]
    loaded = load(str(folder), index_reducer, stop_on_damage=True)
    assert loaded.state == {"n": 200, "big": 191}
    assert loaded.bytes_since_snapshot == 0  # nothing replayed: the tail is at the end
    with Store(tmp_path).open("r", reducer=index_reducer) as j:
        j.append({"i": 200, "pad": ""})
    loaded = load(str(folder), index_reducer, stop_on_damage=True)
    assert loaded.state["n"] == 201
    assert 0 < loaded.bytes_since_snapshot < 100  # one record replayed


def test_a_damaged_snapshot_or_tail_is_passed_over(tmp_path: Path) -> None:
    _fill(tmp_path, 100)
    folder = tmp_path / "r"
    (snap,) = folder.glob("snap-*.cps")
    data = bytearray(snap.read_bytes())
    data[-3] ^= 0xFF
    snap.write_bytes(bytes(data))
    loaded = load(str(folder), index_reducer, stop_on_damage=True)
    assert loaded.state == {"n": 100, "big": 91}  # every record replayed
    assert str(snap) in loaded.covered  # removed on the next open
    with Store(tmp_path).open("r", reducer=index_reducer) as j:
        assert j.state["n"] == 100
    assert not snap.exists()


def test_a_journal_shorter_than_its_snapshot_is_replayed_as_it_stands(tmp_path: Path) -> None:
    offsets = _fill(tmp_path, 100)
    seg = tmp_path / "r" / "seg-000000000001.log"
    with open(seg, "r+b") as f:  # an older copy: records 61.. gone, the snapshot at 100 stays
        f.truncate(offsets[60])
    loaded = load(str(tmp_path / "r"), index_reducer, stop_on_damage=True)
    assert loaded.state == {"n": 60, "big": 51}
    assert loaded.seq == 60


def test_a_reader_finds_records_by_number_and_offset_checked(tmp_path: Path) -> None:
    offsets = _fill(tmp_path, 120)
    folder = str(tmp_path / "r")
    with JournalReader(folder) as r:
        assert r.get(5)["i"] == 4
        assert r.get(5, offsets[4])["i"] == 4  # the hint is right
        assert r.get(5, offsets[9])["i"] == 4  # a wrong hint: found the slow way
        assert r.get(5, 3)["i"] == 4  # a hint inside a record
        assert [s for s, _ in r.newest_first(120, 115)] == [120, 119, 118, 117, 116, 115]
        with pytest.raises(CheckpointCorrupt, match="record 121 is missing"):
            r.get(121)
    seg = tmp_path / "r" / "seg-000000000001.log"
    data = bytearray(seg.read_bytes())
    data[offsets[50] + 40] ^= 0x01  # a payload byte of record 51
    seg.write_bytes(bytes(data))
    with JournalReader(folder) as r:
        assert r.get(50)["i"] == 49
        with pytest.raises(CheckpointCorrupt, match="payload checksum") as err:
            r.get(51, offsets[50])
        assert err.value.path == str(seg)
        assert err.value.offset == offsets[50]

    def refuse_60(seq: int, data: Any) -> None:
        if seq == 60:
            raise PayloadError("not a record this run writes")

    with JournalReader(folder, check=refuse_60) as r:
        assert r.get(59)["i"] == 58
        with pytest.raises(CheckpointCorrupt, match="not a record this run writes"):
            r.get(60)


def test_a_reader_never_follows_a_link_or_opens_a_fifo(tmp_path: Path) -> None:
    _fill(tmp_path, 5)
    folder = tmp_path / "r"
    seg = folder / "seg-000000000001.log"
    seg.rename(folder / "elsewhere")
    seg.symlink_to(folder / "elsewhere")
    with JournalReader(str(folder)) as r, pytest.raises(CheckpointCorrupt, match="symbolic link"):
        r.get(1)
    seg.unlink()
    os.mkfifo(seg)
    with JournalReader(str(folder)) as r, pytest.raises(CheckpointCorrupt, match="regular"):
        r.get(1)
