"""kill -9 at seeded random points: every acknowledged record survives, byte for byte.

A fork server (``_writer.py serve``) forks one worker per attempt; the worker reopens the same
run, appends deterministic records (durability ``always``) and prints each sequence number only
after ``append`` returned. The worker dies by SIGKILL: from this process after a seeded number
of acknowledgements plus a seeded delay, or from a failpoint armed at a seeded hit
(``journal.write`` / ``journal.after_write`` / ``journal.after_sync`` / ``atomic.*``). After
every kill the disk must hold every acknowledged record, in order, byte for byte, at most one
more (the one in flight), and the next worker must resume there with generation + 1.

Replay a failure with the seed it prints:
``CRASHPOINT_TEST_SEED=N python3 -m pytest tests/crash/test_kill9.py -p no:randomly``.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from _writer import WRITER, expected_payload, record_data, segment_records

from crashpoint.checkpoint import Store
from crashpoint.checkpoint._journal import list_files, snapshot_name
from crashpoint.checkpoint._record import encode_json, scan

SEED = int(os.environ.get("CRASHPOINT_TEST_SEED", "20240917"))
KILLS_PER_RUN = 60
#: The default run's share: the first kills of the same seeded sequence (the 60: `-m slow`).
QUICK_KILLS = 20
#: Store layouts the kills run against: each stresses different code (rolls, snapshots).
LAYOUTS: dict[str, dict[str, int]] = {
    "journal-only": {"snapshot_bytes": 0, "segment_bytes": 8 << 20},
    "small-segments": {"snapshot_bytes": 0, "segment_bytes": 2000},
    "snapshots+segments": {"snapshot_bytes": 6000, "segment_bytes": 2500},
    "snapshots": {"snapshot_bytes": 3000, "segment_bytes": 8 << 20},
}
JOURNAL_POINTS = ("journal.write", "journal.after_write", "journal.after_sync")
SNAPSHOT_POINTS = ("atomic.after_temp", "atomic.after_rename")


@dataclass
class Plan:
    """How one worker dies."""

    failpoint: str = ""  # "" → killed by the test after `acks` acknowledgements and `delay`
    nth: int = 1
    acks: int = 0
    delay: float = 0.0

    @property
    def spec(self) -> str:
        return f"{self.failpoint}=kill@{self.nth}" if self.failpoint else ""

    def __str__(self) -> str:
        return self.spec or f"SIGKILL after {self.acks} acks + {self.delay * 1000:.2f} ms"


def draw_plan(rng: random.Random, snapshots: bool) -> Plan:
    points = JOURNAL_POINTS + (SNAPSHOT_POINTS if snapshots else ())
    roll = rng.random()
    if roll < 0.4:
        return Plan(acks=rng.randint(0, 6), delay=rng.choice((0.0, rng.uniform(0, 0.002))))
    point = rng.choice(points)
    nth = 1 if point in SNAPSHOT_POINTS else rng.randint(1, 6)
    return Plan(failpoint=point, nth=nth)


@dataclass
class RunModel:
    """What the test knows the run must hold."""

    seed: int
    folder: Path
    generation: int = 0
    seq: int = 0  # records on disk after the last kill
    torn: bool = False  # the last kill left a partial record after them
    gen_of: dict[int, int] = field(default_factory=dict)
    encoded: dict[int, bytes] = field(default_factory=dict)

    def expected(self, seq: int) -> bytes:
        if seq not in self.encoded:
            self.encoded[seq] = encode_json(record_data(self.seed, seq))
        return self.encoded[seq]


def check_disk(store: Store, run_id: str, model: RunModel, where: str) -> int:
    """Assert the run's records are exactly the expected prefix; return how many there are."""
    loaded = store.read(run_id)
    records: list[Any] = loaded.state.get("records", [])
    assert not loaded.damage, f"{where}: damage {loaded.damage}"
    assert len(records) == loaded.seq, f"{where}: {len(records)} records, seq {loaded.seq}"
    for i, data in enumerate(records, start=1):
        assert encode_json(data) == model.expected(i), f"{where}: record {i} differs: {data!r}"
    # The raw journal: every record in a segment has the exact expected bytes and generation.
    raw = segment_records(model.folder)
    seqs = [s for s, _, _ in raw]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True, (
        f"{where}: segment records out of order: {seqs}"
    )
    for s, g, payload in raw:
        assert s <= loaded.seq, f"{where}: segment holds record {s} past seq {loaded.seq}"
        assert g == model.gen_of.get(s), (
            f"{where}: record {s} has generation {g}, written by generation {model.gen_of.get(s)}"
        )
        assert payload == expected_payload(model.seed, s, g), f"{where}: record {s} bytes differ"
    return loaded.seq


def last_segment_torn(folder: Path) -> bool:
    _snaps, segs = list_files(str(folder))
    if not segs:
        return False
    return scan(Path(segs[-1][1]).read_bytes()).stop == "torn"


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "kills",
    # slow: the full run's fast cover: the [QUICK_KILLS] variant (the same seeded kills, fewer)
    [QUICK_KILLS, pytest.param(KILLS_PER_RUN, marks=pytest.mark.slow)],
    ids=lambda n: f"{n}-kills",
)
def test_kill9_loses_no_acknowledged_record(
    layout: str, kills: int, tmp_path: Path, children: Any
) -> None:
    seed = SEED + list(LAYOUTS).index(layout)
    rng = random.Random(seed)
    opts = LAYOUTS[layout]
    run_id = f"kill9-{layout}"
    root = tmp_path / "store"
    model = RunModel(seed, root / run_id)
    store = Store(root)  # the parent only reads (no lock) until the end
    server = children.python(
        WRITER,
        "serve",
        "--root",
        root,
        "--run",
        run_id,
        "--seed",
        str(seed),
        "--snapshot-bytes",
        str(opts["snapshot_bytes"]),
        "--segment-bytes",
        str(opts["segment_bytes"]),
    )
    done = torn_seen = extra_seen = 0
    for i in range(kills):
        plan = draw_plan(rng, bool(opts["snapshot_bytes"]))
        where = f"[{layout} seed={seed} kill #{i}: {plan}]"
        server.send({"failpoints": plan.spec, "count": None})
        opened = server.read_json()
        assert opened.get("event") == "open", f"{where}: {opened}\n{server.stderr_text()}"
        # Only a worker the test kills is looked up: one a failpoint kills may be reaped already.
        worker = None if plan.failpoint else psutil.Process(opened["pid"])
        # Resume: generation + 1, exactly where the disk was, a torn tail repaired and reported.
        assert opened["gen"] == model.generation + 1, f"{where}: {opened}"
        assert opened["seq"] == model.seq, f"{where}: resumed at {opened['seq']}, not {model.seq}"
        assert opened["torn"] == model.torn, f"{where}: torn tail report {opened['recovery']}"
        assert opened["damage"] == 0, f"{where}: {opened['recovery']}"
        model.generation, base = opened["gen"], opened["seq"]

        acks: list[int] = []
        event: dict[str, Any] = {}
        if not plan.failpoint:
            while len(acks) < plan.acks:
                event = server.read_json()
                assert "ack" in event, f"{where}: {event}\n{server.stderr_text()}"
                acks.append(event["ack"])
            if plan.delay:
                time.sleep(plan.delay)
            assert worker is not None
            worker.send_signal(signal.SIGKILL)
        while True:
            event = server.read_json()
            if "ack" not in event:
                break
            acks.append(event["ack"])
        assert event.get("event") == "exit", f"{where}: {event}"
        assert event["pid"] == opened["pid"], f"{where}: {event}"
        assert event["signal"] == signal.SIGKILL, (
            f"{where}: the worker was not killed: {event}\n{server.stderr_text()}"
        )
        done += 1
        assert acks == list(range(base + 1, base + 1 + len(acks))), f"{where}: acks {acks}"
        acked = base + len(acks)

        for s in range(base + 1, acked + 2):
            model.gen_of[s] = model.generation
        on_disk = check_disk(store, run_id, model, where)
        assert acked <= on_disk <= acked + 1, (
            f"{where}: {acked} records acknowledged, {on_disk} on disk"
        )
        if plan.failpoint:
            in_flight = 0 if plan.failpoint == "journal.write" else 1
            assert on_disk == acked + in_flight, f"{where}: {acked} acked, {on_disk} on disk"
            if plan.failpoint in JOURNAL_POINTS:
                assert len(acks) == plan.nth - 1, f"{where}: {len(acks)} acks before the kill"
            names = os.listdir(model.folder)
            if plan.failpoint == "atomic.after_temp":
                assert any(n.endswith(".tmp") for n in names), f"{where}: no temp file {names}"
            if plan.failpoint == "atomic.after_rename":
                assert snapshot_name(on_disk) in names, f"{where}: no snapshot {names}"
        for s in range(on_disk + 1, acked + 2):
            model.gen_of.pop(s, None)
        extra_seen += on_disk - acked
        model.seq = on_disk
        model.torn = last_segment_torn(model.folder)
        torn_seen += model.torn

    server.close_stdin()
    assert server.wait() == 0, server.stderr_text()
    assert done == kills

    # A last open in this process: generation + 1, every record, a clean verify afterwards.
    with Store(root).open(run_id) as j:
        assert j.generation == model.generation + 1
        assert j.seq == model.seq
        assert (j.recovery.torn_tail is not None) == model.torn
        assert [encode_json(d) for d in j.state["records"]] == [
            model.expected(s) for s in range(1, model.seq + 1)
        ]
        assert not [n for n in os.listdir(model.folder) if n.endswith(".tmp")]
    damage, torn = store.verify(run_id)[run_id]
    assert damage == []
    assert torn == []
    # The seeded plan must actually have exercised the in-flight window.
    assert extra_seen > 0, f"seed={seed}: no kill ever left an unacknowledged record"
