"""One writer per run, between real processes: flock plus a fencing generation.

Two processes opening one run: exactly one writes, the other gets RunLocked (or, with a
lock_timeout, waits and takes over when the first closes). A holder killed with SIGKILL frees
the lock at once and the next writer gets generation + 1, which every record it writes carries.
A symlink planted where the lock file belongs is refused and its target left alone.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from _writer import EXIT_LOCKED, WRITER, expected_payload, record_data, segment_records

from crashpoint.checkpoint import Store
from crashpoint.checkpoint._record import encode_json
from crashpoint.errors import CheckpointError, RunLocked

SEED = int(os.environ.get("CRASHPOINT_TEST_SEED", "20240917"))
RUN = "shared"


def writer(children: Any, root: Path, *args: str) -> Any:
    return children.python(WRITER, "open", "--root", root, "--run", RUN, "--seed", str(SEED), *args)


def read_until(child: Any, event: str) -> tuple[dict[str, Any], list[int]]:
    """Read lines up to ``event``; return it and the acks seen on the way."""
    acks = []
    while True:
        line = child.read_json()
        if "ack" in line:
            acks.append(line["ack"])
            continue
        assert line.get("event") == event, f"expected {event!r}, got {line}\n{child.stderr_text()}"
        return line, acks


def assert_journal(root: Path, writers: list[tuple[int, int, int]]) -> None:
    """The run holds records 1..N exactly, record s written by generation g for each
    (first seq, last seq, g) in ``writers``, byte for byte."""
    gen_of = {s: g for first, last, g in writers for s in range(first, last + 1)}
    last = max(gen_of, default=0)
    loaded = Store(root).read(RUN)
    assert loaded.seq == last
    assert [encode_json(d) for d in loaded.state.get("records", [])] == [
        encode_json(record_data(SEED, s)) for s in range(1, last + 1)
    ]
    raw = segment_records(root / RUN)
    assert [s for s, _, _ in raw] == list(range(1, last + 1))
    for s, g, payload in raw:
        assert g == gen_of[s], f"record {s} carries generation {g}, expected {gen_of[s]}"
        assert payload == expected_payload(SEED, s, g)


def test_two_processes_at_once_exactly_one_writes(tmp_path: Path, children: Any) -> None:
    root = tmp_path / "store"
    Store(root).open(RUN).close()  # the run exists: both race for its lock, not for mkdir
    a = writer(children, root, "--count", "20", "--hold")
    b = writer(children, root, "--count", "20", "--hold")
    first = {c.pid: c.read_json() for c in (a, b)}
    opened = [c for c in (a, b) if first[c.pid].get("event") == "open"]
    refused = [c for c in (a, b) if first[c.pid].get("event") == "locked"]
    assert len(opened) == 1, first
    assert len(refused) == 1, first
    winner, loser = opened[0], refused[0]
    assert loser.wait() == EXIT_LOCKED
    assert loser.read_line() is None, "the refused process printed (wrote) more"
    # Who holds it is read from the lock file, which the winner may still be rewriting.
    assert first[loser.pid]["holder"] in ("", f"pid {winner.pid}", f"pid {os.getpid()}")
    holding, acks = read_until(winner, "holding")
    assert acks == list(range(1, 21))
    winner.send("close")
    read_until(winner, "closed")
    assert winner.wait() == 0
    gen = first[winner.pid]["gen"]
    assert gen == 2
    assert holding["gen"] == gen
    assert_journal(root, [(1, 20, gen)])


def test_waiter_acquires_when_the_holder_closes(tmp_path: Path, children: Any) -> None:
    root = tmp_path / "store"
    a = writer(children, root, "--count", "5", "--hold")
    a_open, _ = read_until(a, "open")
    read_until(a, "holding")
    b = writer(children, root, "--count", "5", "--lock-timeout", "30", "--announce")
    read_until(b, "opening")
    assert not b.has_output(0.5), "the second opener did not wait for the lock"
    released = time.monotonic()  # CLOCK_MONOTONIC: the same clock in every process
    a.send("close")
    read_until(a, "closed")
    assert a.wait() == 0
    b_open, acks = read_until(b, "open")
    assert b_open["t"] > released, "the second opener got the lock while the first held it"
    assert b_open["gen"] == a_open["gen"] + 1
    assert b_open["seq"] == 5
    _, acks = read_until(b, "closed")
    assert acks == list(range(6, 11))
    assert b.wait() == 0
    assert_journal(root, [(1, 5, a_open["gen"]), (6, 10, b_open["gen"])])


def test_second_opener_without_timeout_gets_runlocked_in_process(
    tmp_path: Path, children: Any
) -> None:
    root = tmp_path / "store"
    a = writer(children, root, "--count", "3", "--hold")
    read_until(a, "open")
    read_until(a, "holding")
    start = time.monotonic()
    with pytest.raises(RunLocked) as info:
        Store(root).open(RUN)
    assert time.monotonic() - start < 1.0
    assert str(a.pid) in info.value.holder
    with pytest.raises(RunLocked) as waited:
        Store(root, lock_timeout=0.3).open(RUN)
    assert waited.value.waited >= 0.3
    assert Store(root).read(RUN).seq == 3  # refused openers wrote nothing


@pytest.mark.parametrize("next_opener", ["waiting", "fresh"])
def test_sigkill_of_the_holder_frees_the_lock_at_once(
    next_opener: str, tmp_path: Path, children: Any
) -> None:
    root = tmp_path / "store"
    a = writer(children, root, "--count", "7", "--hold")
    a_open, _ = read_until(a, "open")
    read_until(a, "holding")
    if next_opener == "waiting":
        b = writer(children, root, "--count", "4", "--lock-timeout", "30", "--announce")
        read_until(b, "opening")
        assert not b.has_output(0.3), "the second opener did not wait for the lock"
    killed_at = time.monotonic()  # CLOCK_MONOTONIC: the same clock in every process
    killed = a.kill_tree()  # psutil snapshot, SIGKILL, wait_procs: nothing survives
    assert [p.pid for p in killed] == [a.pid]
    assert a.popen.returncode == -signal.SIGKILL
    if next_opener == "fresh":  # no timeout at all: a dead holder's lock is simply free
        b = writer(children, root, "--count", "4", "--lock-timeout", "0")
    b_open, _ = read_until(b, "open")
    if next_opener == "waiting":
        took = b_open["t"] - killed_at
        assert 0 < took < 2.0, f"the waiter took the lock {took:.2f}s after the kill"
    assert b_open["gen"] == a_open["gen"] + 1
    assert b_open["seq"] == 7
    assert b_open["torn"] is False
    _, acks = read_until(b, "closed")
    assert acks == [8, 9, 10, 11]
    assert b.wait() == 0
    assert_journal(root, [(1, 7, a_open["gen"]), (8, 11, b_open["gen"])])
    with Store(root).open(RUN) as j:
        assert j.generation == b_open["gen"] + 1
        assert j.append(record_data(SEED, 12)) == 12
    assert_journal(
        root, [(1, 7, a_open["gen"]), (8, 11, b_open["gen"]), (12, 12, b_open["gen"] + 1)]
    )


@pytest.mark.parametrize("target_exists", [True, False])
def test_symlinked_lock_file_is_refused(target_exists: bool, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root)
    with store.open(RUN) as j:
        j.append(record_data(SEED, 1))
    lock = root / RUN / "lock"
    target = tmp_path / "precious"
    if target_exists:
        target.write_bytes(b"do not touch")
        os.utime(target, (1_000_000, 1_000_000))
    lock.unlink()
    lock.symlink_to(target)
    with pytest.raises(CheckpointError, match="symbolic link") as info:
        store.open(RUN)
    assert not isinstance(info.value, RunLocked)
    assert lock.is_symlink()
    assert os.readlink(lock) == str(target)
    if target_exists:
        assert target.read_bytes() == b"do not touch"
        assert target.stat().st_mtime == 1_000_000
    else:
        assert not target.exists(), "opening through the planted link created its target"
    assert store.read(RUN).seq == 1
