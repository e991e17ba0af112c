"""Torn tails and damage, property-based.

For any list of records, any file of the run, and any truncation, flipped byte or zeroed range
in it, opening the run:

- with ``on_corrupt="raise"`` returns exactly a prefix of the acknowledged records, or raises
  ``CheckpointCorrupt`` (always, for a flipped byte in a journal segment or snapshot);
- with ``on_corrupt="rollback"`` returns a prefix, reports what it repaired or rolled back when
  records are missing, and a second open finds a clean run holding the same prefix.

Never a record whose bytes changed, never records out of order.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from crashpoint.checkpoint import SnapshotPolicy, Store
from crashpoint.checkpoint._record import encode_json
from crashpoint.errors import CheckpointCorrupt

RUN = "run"

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=30)  # no lone surrogates
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=("Cs",)), max_size=8), children, max_size=4
        )
    ),
    max_leaves=12,
)


@dataclass(frozen=True)
class Layout:
    """How the run is written: snapshot and segment sizes (small ones give many files)."""

    snapshot_bytes: int
    segment_bytes: int
    close_every: int  # close and reopen after this many appends (new generations)
    with_meta: bool


layouts = st.builds(
    Layout,
    snapshot_bytes=st.sampled_from([0, 200, 600, 10**9]),  # 0: a snapshot after every record
    segment_bytes=st.sampled_from([150, 500, 10**9]),
    close_every=st.integers(min_value=1, max_value=40),
    with_meta=st.booleans(),
)


@dataclass(frozen=True)
class Mutation:
    how: str  # "truncate", "flip" or "zero"
    target: str  # "seg-", "snap-" or "" (any file, lock and meta.json included)
    file_pick: int  # index into the matching non-empty files, modulo their count
    where: float  # position in the file, as a fraction of its size
    length: int  # zero: bytes zeroed; flip: the XOR mask (1..255)


mutations = st.builds(
    Mutation,
    how=st.sampled_from(["truncate", "flip", "zero"]),
    target=st.sampled_from(["seg-", "seg-", "snap-", ""]),
    file_pick=st.integers(min_value=0, max_value=50),
    where=st.floats(min_value=0.0, max_value=1.0),
    length=st.integers(min_value=1, max_value=255),
)


def write_run(root: Path, records: list[Any], layout: Layout) -> None:
    store = Store(
        root,
        durability="none",
        reserve_bytes=0,
        snapshots=SnapshotPolicy(min_bytes=layout.snapshot_bytes),
        segment_bytes=layout.segment_bytes,
    )
    j = store.open(RUN)
    if layout.with_meta:
        j.set_meta(status="running")
    for i, data in enumerate(records):
        if i and i % layout.close_every == 0:
            j.close()
            j = store.open(RUN)
        j.append(data, redact=False)  # arbitrary keys ("token", ...) must come back as written
    j.close()


@dataclass(frozen=True)
class Applied:
    path: str
    kind: str  # "segment", "snapshot", "other"
    changed: bool
    single_byte: bool  # exactly one byte differs, same length
    tail_only: bool  # the file keeps a prefix of its bytes, plus possibly zeros to the end
    last_segment: bool


def mutate(folder: Path, m: Mutation) -> Applied:
    files = sorted(p for p in folder.iterdir() if p.is_file())
    candidates = [p for p in files if p.name.startswith(m.target) and p.stat().st_size] or files
    path = candidates[m.file_pick % len(candidates)]
    old = path.read_bytes()
    size = len(old)
    pos = min(int(m.where * size), max(size - 1, 0))
    if m.how == "truncate":
        new = old[: int(m.where * size)]
    elif size == 0:
        new = old
    elif m.how == "flip":
        new = old[:pos] + bytes([old[pos] ^ m.length]) + old[pos + 1 :]
    else:
        end = min(size, pos + m.length)
        new = old[:pos] + bytes(end - pos) + old[end:]
    path.write_bytes(new)
    diff = [i for i in range(min(len(old), len(new))) if old[i] != new[i]]
    first = diff[0] if diff else min(len(old), len(new))
    segs = sorted(p.name for p in files if p.name.startswith("seg-"))
    kind = (
        "segment"
        if path.name.startswith("seg-")
        else "snapshot"
        if path.name.startswith("snap-")
        else "other"
    )
    return Applied(
        path=str(path),
        kind=kind,
        changed=new != old,
        single_byte=len(new) == len(old) and len(diff) == 1,
        tail_only=new[first:] == bytes(len(new) - first),
        last_segment=bool(segs) and path.name == segs[-1],
    )


def canon(records: list[Any]) -> list[bytes]:
    return [encode_json(r) for r in records]


def assert_prefix(got: list[Any], acked: list[Any]) -> None:
    """``got`` is ``acked[:len(got)]``, compared as the exact bytes the store encodes."""
    assert len(got) <= len(acked)
    assert canon(got) == canon(acked[: len(got)])


def open_records(root: Path, on_corrupt: str) -> tuple[list[Any], Any]:
    store = Store(root, durability="none", reserve_bytes=0, on_corrupt=on_corrupt)  # type: ignore[arg-type]
    with store.open(RUN) as j:
        return list(j.state.get("records", [])), j.recovery


def check_one(base: Path, records: list[Any], layout: Layout, m: Mutation) -> None:
    pristine = base / "pristine"
    write_run(pristine, records, layout)
    assert open_records(pristine, "raise")[0] == records  # sanity: the run reads back whole

    strict = base / "strict"
    shutil.copytree(pristine, strict)
    applied = mutate(strict / RUN, m)
    rollback = base / "rollback"
    shutil.copytree(strict, rollback)
    event(f"{m.how} {applied.kind}{' (last segment)' if applied.last_segment else ''}")

    # on_corrupt="raise": a prefix, or CheckpointCorrupt
    err: CheckpointCorrupt | None = None
    try:
        got, recovery = open_records(strict, "raise")
    except CheckpointCorrupt as exc:
        err = exc
    event("raise: CheckpointCorrupt" if err is not None else "raise: a prefix")
    if err is not None:
        assert applied.changed, "raised on an untouched run"
        assert applied.kind != "other", f"meta/lock damage is not journal damage: {err}"
        assert err.path.startswith(str(strict / RUN))
        assert err.offset >= 0
    else:
        assert_prefix(got, records)
        assert not (applied.single_byte and applied.kind != "other"), (
            f"a flipped byte in {applied.path} went unnoticed"
        )
        if not applied.changed or applied.kind == "other":
            assert canon(got) == canon(records)
        if len(got) < len(records):
            assert applied.last_segment, "records lost without damage to the last segment"
            assert applied.tail_only

    # on_corrupt="rollback": always a prefix, reported when records are missing
    got, recovery = open_records(rollback, "rollback")
    assert_prefix(got, records)
    pure_tail_cut = applied.last_segment and applied.tail_only
    if len(got) < len(records) and not pure_tail_cut:
        assert recovery, "records were lost and the recovery says nothing"
    if applied.changed and applied.kind != "other" and not pure_tail_cut:
        assert recovery.damage, f"damage to {applied.path} was not reported"
        assert recovery.moved_aside
        for p in recovery.moved_aside:
            assert ".corrupt-" in p
            assert os.path.exists(p)
    # the rollback left a clean run: reopening finds the same records and nothing to repair
    again, recovery2 = open_records(rollback, "raise")
    assert canon(again) == canon(got)
    assert not recovery2


def run_property(records: list[Any], layout: Layout, m: Mutation) -> None:
    with tempfile.TemporaryDirectory(prefix="cp-prop-") as tmp:
        check_one(Path(tmp), records, layout, m)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(json_values, max_size=25), layout=layouts, m=mutations)
def test_open_returns_a_prefix_or_reports_damage(
    records: list[Any], layout: Layout, m: Mutation
) -> None:
    run_property(records, layout, m)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(json_values, max_size=60), layout=layouts, m=mutations)
def test_open_returns_a_prefix_or_reports_damage_exhaustive(
    records: list[Any], layout: Layout, m: Mutation
) -> None:
    run_property(records, layout, m)


def test_every_single_byte_flip_of_a_small_run_is_caught(tmp_path: Path) -> None:
    """Exhaustive over one small run: every byte of every segment and snapshot, flipped."""
    pristine = tmp_path / "pristine"
    with Store(pristine, durability="none", reserve_bytes=0).open(RUN) as j:
        for i in range(6):
            if i == 3:
                j.snapshot()
            j.append({"n": i, "s": "ü" * i})
    names = sorted(
        p.name for p in (pristine / RUN).iterdir() if p.name.startswith(("seg-", "snap-"))
    )
    assert names == ["seg-000000000004.log", "snap-000000000003.cps"]
    checked = 0
    for name in names:
        size = (pristine / RUN / name).stat().st_size
        for pos in range(size):
            work = tmp_path / f"w-{checked}"
            shutil.copytree(pristine, work)
            target = work / RUN / name
            data = bytearray(target.read_bytes())
            data[pos] ^= 0x01
            target.write_bytes(bytes(data))
            with pytest.raises(CheckpointCorrupt) as info:
                open_records(work, "raise")
            assert info.value.path == str(target)
            shutil.rmtree(work)
            checked += 1
    assert checked > 200
