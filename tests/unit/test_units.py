"""Durations and sizes as the CLI and the scenario format read and print them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crashpoint.harness import UnitError, format_duration, format_size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("7d", 604800),
        ("1w", 604800),
        ("250ms", 0.25),
        ("1.5h", 5400),
        (".5m", 30),
        ("1h30m", 5400),
        ("1d2h3m4s", 93784),
        ("1h 30m", 5400),
        (" 2H ", 7200),
        ("0s", 0),
        (30, 30),
        (1.5, 1.5),
        (0, 0),
    ],
)
def test_parse_duration_accepts_the_documented_forms(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("30", "has no unit"),
        ("1.5", "has no unit"),
        ("5x", "unknown unit 'x'"),
        ("5 mins", "unknown unit 'mins'"),
        ("-5m", "is negative"),
        ("", "is empty"),
        ("   ", "is empty"),
        ("1h1h", "appears twice"),
        ("h", "is not a duration"),
        ("1h-2m", "is not a duration"),
        (-1, "not a duration of zero or more"),
        (math.nan, "not a duration of zero or more"),
        (math.inf, "not a duration of zero or more"),
        (True, "expected a duration"),
    ],
)
def test_parse_duration_says_what_was_wrong_and_the_accepted_forms(
    text: str | float, fragment: str
) -> None:
    with pytest.raises(UnitError, match=r"^timeout: ") as info:
        parse_duration(text, what="timeout")
    assert fragment in str(info.value)
    if isinstance(text, str) and fragment not in {"is negative", "appears twice"}:
        assert "30m" in str(info.value)  # the accepted forms, by example


def test_unit_errors_are_value_errors_and_the_prefix_is_optional() -> None:
    with pytest.raises(ValueError, match=r"^'30' has no unit"):
        parse_duration("30", what="")


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("4096", 4096),
        ("0", 0),
        ("512B", 512),
        ("512 B", 512),
        ("64KiB", 65536),
        ("64kib", 65536),
        ("10MB", 10_000_000),
        ("1GiB", 1 << 30),
        ("1.5KiB", 1536),
        ("0.1KB", 100),
        ("2TiB", 2 << 40),
        ("3kB", 3000),
        (123, 123),
    ],
)
def test_parse_size_accepts_the_documented_forms(text: str | int, n: int) -> None:
    assert parse_size(text) == n


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("10k", "KB means powers of 1000, KiB powers of 1024"),
        ("1.5B", "not a whole number of bytes"),
        ("-1", "is negative"),
        (-1, "is negative"),
        ("ten", "is not a size"),
        ("1 MiB extra", "is not a size"),
        ("", "is empty"),
        ("5 parsecs", "unknown unit 'parsecs'"),
    ],
)
def test_parse_size_says_what_was_wrong(text: str | int, fragment: str) -> None:
    with pytest.raises(UnitError, match=r"^max_state_bytes: ") as info:
        parse_size(text, what="max_state_bytes")
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (65536, "64 KiB"),
        ((1 << 20) - 1, "1 MiB"),
        (10_000_000, "9.5 MiB"),
        (1 << 30, "1 GiB"),
        (5 << 40, "5 TiB"),
        (5 << 50, "5120 TiB"),
    ],
)
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0ms"),
        (0.25, "250ms"),
        (0.9996, "1s"),
        (1, "1s"),
        (45, "45s"),
        (59.6, "1m"),
        (90, "1m30s"),
        (3600, "1h"),
        (3601, "1h"),
        (3660, "1h1m"),
        (5400, "1h30m"),
        (86400, "1d"),
        (90061, "1d1h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
    ],
)
def test_format_duration_shows_at_most_two_units(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_format_duration_refuses_negative() -> None:
    with pytest.raises(UnitError):
        format_duration(-1)


@given(st.integers(min_value=0, max_value=1 << 60))
def test_format_size_reads_back_within_rounding(n: int) -> None:
    back = parse_size(format_size(n).replace(" ", ""))
    assert abs(back - n) <= max(0.05 * n, 0)
    assert n >= 1024 or back == n


@given(st.integers(min_value=0, max_value=10**8))
def test_format_duration_reads_back_within_its_two_units(seconds: int) -> None:
    back = parse_duration(format_duration(seconds))
    assert back <= seconds
    # two units drop at most the next-smaller unit's worth: a day and 23h59m59s shows as "1d23h"
    assert seconds - back < max(60, seconds * 0.05)
