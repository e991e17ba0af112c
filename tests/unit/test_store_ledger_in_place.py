"""The store-wide ledger (``.store-lock``) is rewritten in place, never truncated to zero first
(issue 25 item 4): on ext4 a truncation to zero is a journal transaction, milliseconds that
every lifecycle command paid, since each one drops the dead command's free-space window and
records its own. A shorter ledger is padded with spaces (JSON's whitespace) and reads back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crashpoint.checkpoint import Store
from crashpoint.checkpoint._store import STORE_LOCK

MiB = 1 << 20


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_shorter_ledger_is_written_over_the_old_one_and_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    dead = _dead_pid()
    old = {"grants": {f"{dead}.{i}": MiB for i in range(20)}, "usage": None}
    old_bytes = json.dumps(old, sort_keys=True).encode()
    (root / STORE_LOCK).write_bytes(old_bytes)
    truncated: list[int] = []
    real = os.ftruncate

    def ftruncate(fd: int, length: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(STORE_LOCK):
            truncated.append(length)
        real(fd, length)

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    store = Store(root)  # no budget: the free-space reserve's windows are in the ledger
    with store.open("r") as journal:
        journal.append({"n": 1})
    assert truncated == []
    raw = (root / STORE_LOCK).read_bytes()
    assert len(raw) == len(old_bytes)  # written over, padded
    got = json.loads(raw)
    assert not [k for k in got["grants"] if k.startswith(f"{dead}.")]  # the dead one's windows
    assert got["grants"] == {store._key: MiB}  # and this writer's, read back
    # the next writer reads it as written and drops this one's window once it is gone
    again = Store(root)
    with again.open("r") as journal:
        journal.append({"n": 2})
    assert store._key in json.loads((root / STORE_LOCK).read_bytes())["grants"]  # still alive
