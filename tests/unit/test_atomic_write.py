"""``FsOps.write_atomic``: a unique temp name per call, so threads and processes replacing one
path never trip over each other, and a reader always sees one whole version."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from crashpoint._fsio import REAL, is_temp_of
from crashpoint.checkpoint import Store

VERSION_BYTES = 4096


def version(writer: int, i: int) -> bytes:
    tag = f"{writer:03d}:{i:05d}|".encode()
    return (tag * (VERSION_BYTES // len(tag) + 1))[:VERSION_BYTES]


def whole(data: bytes) -> bool:
    """True if ``data`` is exactly one writer's version (no mix, no truncation)."""
    return len(data) == VERSION_BYTES and data == version(int(data[:3]), int(data[4:9]))


def test_many_threads_replacing_one_path_never_fail_and_the_file_is_always_whole(
    tmp_path: Path,
) -> None:
    target = tmp_path / "state.json"
    REAL.write_atomic(str(target), version(0, 0))
    errors: list[BaseException] = []
    bad: list[bytes] = []
    stop = threading.Event()

    def writer(w: int) -> None:
        try:
            for i in range(30):
                REAL.write_atomic(str(target), version(w, i))
        except BaseException as exc:  # any failure is the finding
            errors.append(exc)

    def reader() -> None:
        while not stop.is_set():
            data = target.read_bytes()
            if not whole(data):
                bad.append(data[:40])

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(1, 11)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert errors == []
    assert bad == []
    assert whole(target.read_bytes())
    assert sorted(os.listdir(tmp_path)) == ["state.json"]  # no temp file left behind


WRITER = """
import sys
from crashpoint._fsio import REAL
path, w = sys.argv[1], int(sys.argv[2])
for i in range(40):
    tag = f"{w:03d}:{i:05d}|".encode()
    REAL.write_atomic(path, (tag * 410)[:4096])
"""


def test_processes_replacing_one_path_never_fail(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    REAL.write_atomic(str(target), version(0, 0))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(target), str(w)],
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        for w in range(1, 5)
    ]
    seen_bad = []
    while any(p.poll() is None for p in procs):
        data = target.read_bytes()
        if not whole(data):
            seen_bad.append(data[:40])
    errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errs
    assert seen_bad == []
    assert sorted(os.listdir(tmp_path)) == ["state.json"]


def test_temp_names_are_recognised_as_the_store_files_leftovers() -> None:
    assert is_temp_of(".meta.json.2781.k3x9_a0q.tmp", ("meta.json", "snap-"))
    assert is_temp_of(".snap-000000000012.cps.17.abcdefgh.tmp", ("meta.json", "snap-"))
    assert is_temp_of(".meta.json.2781.tmp", ("meta.json",))  # the old pattern
    assert not is_temp_of(".notes.txt.2781.abcdefgh.tmp", ("meta.json", "snap-"))
    assert not is_temp_of("meta.json", ())
    assert not is_temp_of(".meta.json.tmp", ())  # no pid: not ours


def test_temp_leftovers_of_a_killed_write_are_cleaned_on_open(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", reserve_bytes=0)
    with store.open("r1") as j:
        j.append({"x": 1})
        j.set_meta(status="running")
    folder = tmp_path / "s" / "r1"
    leftovers = [
        ".meta.json.4242.k3x9_a0q.tmp",
        ".snap-000000000001.cps.4242.zzzzzzzz.tmp",
        ".meta.json.4242.tmp",
    ]
    for name in leftovers:
        (folder / name).write_bytes(b"half")
    (folder / ".user-notes.4242.abcdefgh.tmp").write_bytes(b"not the store's")
    with store.open("r1") as j:
        assert j.state["records"] == [{"x": 1}]
    names = set(os.listdir(folder))
    assert not names & set(leftovers)
    assert ".user-notes.4242.abcdefgh.tmp" in names  # only the store's own temp files go
