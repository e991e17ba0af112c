"""The live registry's mirror file (``<tmp>/crashpoint-<uid>/live/<pid>.json``): rewritten in
place at each change, padded with blanks so that it never shrinks (no rename, no truncation:
both cost milliseconds on ext4 at every attempt), and always the registry's current state for
the reaper."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from crashpoint._proc import _cleanup


def test_the_mirror_is_rewritten_in_place_and_reads_as_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    reg = _cleanup.Registry()
    a, b = "a" * 32, "b" * 32
    try:
        reg.add_token(a)
        reg.add_token(b)
        reg.add_folder(str(tmp_path / "cp-side-abcdefgh"))
        path = Path(_cleanup.live_dir(str(tmp_path)) or "") / f"{os.getpid()}.json"
        data = json.loads(path.read_bytes())
        assert data["tokens"] == [a, b]
        assert data["folders"] == [str(tmp_path / "cp-side-abcdefgh")]
        ino, size = path.stat().st_ino, path.stat().st_size
        reg.drop_token(a)
        reg.drop_folder(str(tmp_path / "cp-side-abcdefgh"))
        raw = path.read_bytes()
        assert json.loads(raw)["tokens"] == [b]  # the shorter state, padded: still JSON
        assert json.loads(raw)["folders"] == []
        assert (path.stat().st_ino, len(raw)) == (ino, size)  # the same file, never shrunk
        assert raw.endswith(b" ")
        reg.drop_token(b)
        assert not path.exists()  # nothing registered: no file
        reg.add_token(a)  # a new file, of its own length
        assert json.loads(path.read_bytes())["tokens"] == [a]
        assert not path.read_bytes().endswith(b" ")
        assert _cleanup._read_entry(str(path)) == json.loads(path.read_bytes())
    finally:
        reg.tokens.clear()
        reg.folders.clear()
        reg._save()
