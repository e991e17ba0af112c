"""A repair leaves nothing behind that a later open trips over.

The double fault: a run whose snapshot is damaged AND whose old segment ends in a torn tail
(the snapshot was written, starting the next segment failed, the writer went on appending to
the old one and was killed mid-append; later the snapshot rotted). A rollback must not leave
that torn tail in a segment that is no longer the last: acknowledged appends after the repair
survive the next open, which finds a clean run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashpoint.checkpoint import SnapshotPolicy, Store
from crashpoint.checkpoint._record import HEADER, KIND_SNAPSHOT, encode, encode_json
from crashpoint.errors import CheckpointCorrupt

RUN = "run"


def _records(n: int, start: int = 0) -> list[dict[str, int | str]]:
    return [{"i": i, "text": f"record {i}"} for i in range(start, start + n)]


def _double_fault(root: Path) -> Path:
    """seg-1 holds records 1..7 then a torn tail; snap-5 (their state at 5) is damaged."""
    store = Store(root, snapshots=SnapshotPolicy(enabled=False))
    with store.open(RUN) as j:
        for r in _records(7):
            j.append(r)
    folder = root / RUN
    snap = folder / "snap-000000000005.cps"
    frame = bytearray(
        encode(encode_json({"seq": 5, "gen": 1, "state": {"records": _records(5)}}), KIND_SNAPSHOT)
    )
    frame[HEADER.size + 20] ^= 0x10  # bit rot in the payload
    snap.write_bytes(bytes(frame))
    with open(folder / "seg-000000000001.log", "ab") as f:  # killed mid-append of record 8
        f.write(HEADER.pack(b"CP", 1, 0, 300, 0, 0)[:9])
    return folder


def test_the_double_fault_is_refused_before_any_repair(tmp_path: Path) -> None:
    _double_fault(tmp_path)
    with pytest.raises(CheckpointCorrupt, match=r"snapshot payload|checksum"):
        Store(tmp_path).read(RUN)


def test_acknowledged_appends_after_a_rollback_survive_the_next_open(tmp_path: Path) -> None:
    folder = _double_fault(tmp_path)
    with Store(tmp_path, on_corrupt="rollback").open(RUN) as j:
        rec = j.recovery
        assert rec.torn_tail is not None
        assert [d.path for d in rec.damage] == [str(folder / "snap-000000000005.cps")]
        assert j.state["records"] == _records(7)  # the journal held every record
        assert j.append({"i": 7, "text": "after"}) == 8  # durability "always": fdatasync'ed
        assert j.append({"i": 8, "text": "after"}) == 9
    with Store(tmp_path).open(RUN) as j:  # on_corrupt="raise": nothing left to refuse
        assert not j.recovery, j.recovery.describe()
        assert j.state["records"] == [
            *_records(7),
            {"i": 7, "text": "after"},
            {"i": 8, "text": "after"},
        ]
    damage, torn = Store(tmp_path).verify(RUN)[RUN]
    assert damage == []
    assert torn == []
    names = sorted(p.name for p in folder.iterdir())
    assert "seg-000000000001.log" not in names  # covered by the repair's snapshot: gone


def test_damage_in_a_covered_segment_loses_nothing_after_it(tmp_path: Path) -> None:
    """seg-1 (records 1..5) survived a snapshot at 5 (killed before deleting it) and rotted:
    records 6..8 in the next segment still load."""
    store = Store(tmp_path, snapshots=SnapshotPolicy(enabled=False), segment_bytes=1 << 20)
    with store.open(RUN) as j:
        for r in _records(5):
            j.append(r)
        j.snapshot()
        for r in _records(3, start=5):
            j.append(r)
    folder = tmp_path / RUN
    seg1 = folder / "seg-000000000001.log"
    seg6 = folder / "seg-000000000006.log"
    assert not seg1.exists()
    # put the covered segment back, as a kill between the snapshot and the delete leaves it
    with Store(tmp_path, snapshots=SnapshotPolicy(enabled=False)).open("twin") as j:
        for r in _records(5):
            j.append(r)
    data = bytearray((tmp_path / "twin" / "seg-000000000001.log").read_bytes())
    data[HEADER.size + 3] ^= 0x01
    seg1.write_bytes(bytes(data))
    assert seg6.exists()
    with pytest.raises(CheckpointCorrupt, match="seg-000000000001"):
        Store(tmp_path).read(RUN)
    loaded = Store(tmp_path, on_corrupt="rollback").read(RUN)
    assert loaded.state["records"] == _records(8)
    assert loaded.lost_from_seq is None
    with Store(tmp_path, on_corrupt="rollback").open(RUN) as j:
        assert j.state["records"] == _records(8)
        j.append({"i": 8, "text": "after"})
    with Store(tmp_path).open(RUN) as j:
        assert not j.recovery
        assert len(j.state["records"]) == 9
