"""Durations and byte sizes as people write them: ``30s``, ``2h``, ``1h30m``, ``64KiB``, ``10MB``.

Shared by the CLI and the scenario format, so ``--older-than 30m`` on the command line and
``timeout: 30s`` in a scenario file mean the same thing and fail with the same message.

>>> parse_duration("1h30m"), parse_size("64KiB"), parse_size("10MB")
(5400.0, 65536, 10000000)
>>> format_duration(5400), format_size(65536)
('1h30m', '64 KiB')
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from crashpoint.errors import UnitError

__all__ = [
    "DURATION_FORMS",
    "SIZE_FORMS",
    "UnitError",
    "format_duration",
    "format_size",
    "parse_duration",
    "parse_size",
]

#: Seconds per duration unit.
_DURATION_UNITS: dict[str, Decimal] = {
    "ms": Decimal("0.001"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
    "d": Decimal(86400),
    "w": Decimal(604800),
}
#: Bytes per size unit, keyed in lower case (units are matched case-insensitively).
_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}

DURATION_FORMS = (
    "a number and a unit (ms, s, m, h, d, w), e.g. 90s, 30m, 2h, 7d, 1.5h, "
    "or several joined, e.g. 1h30m"
)
SIZE_FORMS = (
    "a whole number of bytes (4096), or a number and a unit: B, KB/MB/GB/TB (powers of 1000) "
    "or KiB/MiB/GiB/TiB (powers of 1024), e.g. 64KiB, 10MB, 1.5GiB"
)

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_DURATION_PART = re.compile(_NUMBER + r"\s*([a-z]+)")
_DURATION_WHOLE = re.compile(r"^(?:" + _NUMBER + r"\s*[a-z]+\s*)+$")
_SIZE = re.compile(r"^" + _NUMBER + r"\s*([a-z]*)$")
_NUMBER_ONLY = re.compile(r"^" + _NUMBER + r"$")


def _p(what: str) -> str:
    return f"{what}: " if what else ""


def parse_duration(text: str | float, *, what: str = "duration") -> float:
    """Seconds in ``text``: ``"90s"``, ``"30m"``, ``"2h"``, ``"7d"``, ``"1h30m"``, ``"250ms"``.

    A number that is not a string (``30``, ``1.5``, as YAML gives for ``timeout: 30``) is seconds.
    A string needs a unit: ``"30"`` is refused, because 30 what is exactly the mistake to catch.
    Negative, NaN and infinite values are refused. ``what`` names the value in the message
    (``"--older-than"``, ``"timeout"``); an empty ``what`` leaves the prefix out.
    """
    if isinstance(text, bool):
        raise UnitError(f"{_p(what)}expected a duration, got {text!r}; use {DURATION_FORMS}")
    if isinstance(text, (int, float)):
        if not math.isfinite(text) or text < 0:
            raise UnitError(f"{_p(what)}{text!r} is not a duration of zero or more seconds")
        return float(text)
    if not isinstance(text, str):
        raise UnitError(
            f"{_p(what)}expected a duration, got {type(text).__name__}; use {DURATION_FORMS}"
        )
    s = text.strip().lower()
    if not s:
        raise UnitError(f"{_p(what)}the duration is empty; use {DURATION_FORMS}")
    if s.startswith("-"):
        raise UnitError(f"{_p(what)}{text!r} is negative; a duration is zero or more")
    if _NUMBER_ONLY.match(s):
        raise UnitError(
            f"{_p(what)}{text!r} has no unit (seconds? minutes?); write e.g. "
            f"{s}s or {s}m. Accepted: {DURATION_FORMS}"
        )
    if not _DURATION_WHOLE.match(s):
        raise UnitError(f"{_p(what)}{text!r} is not a duration; use {DURATION_FORMS}")
    total = Decimal(0)
    seen: set[str] = set()
    for number, unit in _DURATION_PART.findall(s):
        if unit not in _DURATION_UNITS:
            raise UnitError(f"{_p(what)}unknown unit {unit!r} in {text!r}; use {DURATION_FORMS}")
        if unit in seen:
            raise UnitError(f"{_p(what)}the unit {unit!r} appears twice in {text!r}")
        seen.add(unit)
        total += Decimal(number) * _DURATION_UNITS[unit]
    return float(total)


def parse_size(text: str | int, *, what: str = "size") -> int:
    """Bytes in ``text``: ``"4096"``, ``"512B"``, ``"64KiB"``, ``"10MB"``, ``"1.5GiB"``.

    Units are case-insensitive; ``KB``/``MB``/... are powers of 1000 and ``KiB``/``MiB``/... powers
    of 1024. An int is bytes. A fraction of a unit is rounded down to whole bytes (``"1.1KiB"``
    is 1126); a fraction of a byte (``"1.5B"``) is refused.
    """
    if isinstance(text, bool):
        raise UnitError(f"{_p(what)}expected a size, got {text!r}; use {SIZE_FORMS}")
    if isinstance(text, int):
        if text < 0:
            raise UnitError(f"{_p(what)}{text} is negative; a size is zero or more bytes")
        return text
    if not isinstance(text, str):
        raise UnitError(f"{_p(what)}expected a size, got {type(text).__name__}; use {SIZE_FORMS}")
    s = text.strip()
    if not s:
        raise UnitError(f"{_p(what)}the size is empty; use {SIZE_FORMS}")
    if s.startswith("-"):
        raise UnitError(f"{_p(what)}{text!r} is negative; a size is zero or more bytes")
    m = _SIZE.match(s.lower())
    if m is None:
        raise UnitError(f"{_p(what)}{text!r} is not a size; use {SIZE_FORMS}")
    number, unit = m.groups()
    if unit not in _SIZE_UNITS:
        hint = ""
        if unit in {"k", "m", "g", "t"}:
            hint = f" ({unit.upper()}B means powers of 1000, {unit.upper()}iB powers of 1024)"
        raise UnitError(f"{_p(what)}unknown unit {unit!r} in {text!r}{hint}; use {SIZE_FORMS}")
    try:
        value = Decimal(number) * _SIZE_UNITS[unit]
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise UnitError(f"{_p(what)}{text!r} is not a size; use {SIZE_FORMS}") from exc
    if _SIZE_UNITS[unit] == 1 and value != value.to_integral_value():
        raise UnitError(f"{_p(what)}{text!r} is not a whole number of bytes")
    return int(value)  # "1.1KiB" is 1126.4 bytes: whole bytes, rounded down


def format_size(n: int) -> str:
    """``n`` bytes for people, in powers of 1024: ``"512 B"``, ``"1.5 KiB"``, ``"64 MiB"``.

    One decimal at most (dropped when it is 0); ``parse_size`` reads the result back.
    """
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            text = f"{value:.1f}"
            if text.endswith(".0"):
                text = text[:-2]
            if text == "1024":  # 1023.96 KiB rounds up: say 1 MiB instead
                continue
            return f"{text} {unit}"
    return f"{value:.1f} TiB"  # pragma: no cover - the loop always returns


def format_duration(seconds: float) -> str:
    """``seconds`` for people, at most two units: ``"45s"``, ``"12m"``, ``"2h5m"``, ``"3d4h"``.

    Under a second: ``"250ms"``. ``parse_duration`` reads the result back (rounded).
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise UnitError(f"cannot format {seconds!r} as a duration")
    if seconds < 1:
        ms = round(seconds * 1000)
        return f"{ms}ms" if ms < 1000 else "1s"
    total = round(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size or (unit == "s" and not parts):
            q, total = divmod(total, size)
            parts.append(f"{q}{unit}")
        elif parts:
            parts.append("")  # a skipped unit still counts towards the two shown
        if len(parts) == 2:
            break
    return "".join(parts)
