"""Captured output is capped: the head and the tail are kept, the cut is stated with the whole
stream's length and sha256, so two views are equal exactly when the streams are.

Pure logic (no process): :class:`CappedOutput` fed in arbitrary chunks, and the file it writes.
The real agents (1 GiB of output, fork and spawn) are in tests/crash/test_output_bound.py.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crashpoint._proc import CappedOutput


def _feed(
    data: bytes, cuts: list[int], head: int, tail: int, path: str | None = None
) -> tuple[bytes, CappedOutput]:
    out = CappedOutput(path, head, tail)
    at = 0
    for n in cuts:
        out.feed(data[at : at + n])
        at += n
    out.feed(data[at:])
    return out.finish(), out


def _expected(data: bytes, head: int, tail: int) -> bytes:
    if len(data) <= head + tail:
        return data
    cut = len(data) - head - tail
    sha = hashlib.sha256(data).hexdigest()
    return (
        data[:head]
        + f"\n... {cut:,} bytes cut (whole stream {len(data):,} bytes, sha256 {sha}) ...\n".encode()
        + (data[len(data) - tail :] if tail else b"")
    )


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=200),
    cuts=st.lists(st.integers(0, 40), max_size=12),
    head=st.integers(0, 24),
    tail=st.integers(0, 24),
)
def test_the_view_is_head_cut_tail_whatever_the_chunks(
    data: bytes, cuts: list[int], head: int, tail: int
) -> None:
    view, out = _feed(data, cuts, head, tail)
    assert view == _expected(data, head, tail)
    assert out.total == len(data)
    assert out.cut == max(0, len(data) - head - tail)


@settings(max_examples=300, deadline=None)
@given(
    a=st.binary(max_size=60),
    b=st.binary(max_size=60),
    head=st.integers(0, 8),
    tail=st.integers(0, 8),
)
def test_two_views_are_equal_exactly_when_the_streams_are(
    a: bytes, b: bytes, head: int, tail: int
) -> None:
    # same_output compares the final attempt's view with the golden run's
    assert (_feed(a, [], head, tail)[0] == _feed(b, [], head, tail)[0]) == (a == b)


def test_a_difference_in_the_cut_middle_still_shows(tmp_path: Path) -> None:
    a = b"x" * 10_000
    b = a[:5000] + b"y" + a[5001:]
    va, vb = _feed(a, [], 100, 100)[0], _feed(b, [], 100, 100)[0]
    assert va != vb
    assert va[:100] == vb[:100]
    assert va[-100:] == vb[-100:]
    assert b"... 9,800 bytes cut (whole stream 10,000 bytes, sha256 " in va


@pytest.mark.parametrize("size", [0, 5, 300, 100_000])
def test_the_file_holds_the_view_and_memory_stays_under_the_caps(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = tmp_path / "attempt-1.stdout"
    out = CappedOutput(str(path), 64, 128)
    for i in range(0, size, 7):
        out.feed(data[i : i + 7])
        assert len(out._head) <= 64
        assert len(out._tail) <= 2 * 128
    view = out.finish()
    assert path.read_bytes() == view == _expected(data, 64, 128)
    assert out.finish() is view  # idempotent
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_planted_symlink_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    (tmp_path / "attempt-1.stdout").symlink_to(target)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        CappedOutput(str(tmp_path / "attempt-1.stdout"))
    assert target.read_bytes() == b"keep"


def test_negative_caps_are_refused() -> None:
    with pytest.raises(ValueError, match="output caps must be >= 0 bytes"):
        CappedOutput(None, -1, 10)
