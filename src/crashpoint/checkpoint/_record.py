"""Framed, checksummed records: the only format the store writes.

A record is a 16-byte header and a JSON payload::

    offset  size  field
    0       2     magic b"CP"
    2       1     format version (1)
    3       1     kind (0 journal record, 1 snapshot)
    4       4     payload length, little-endian
    8       4     CRC-32 of the payload
    12      4     CRC-32 of bytes 0..11 (so a flipped length is caught before it is trusted)

Payloads are UTF-8 JSON objects: loading a checkpoint runs no code (no pickle, ever).

:func:`decode_json` is the only way the store turns stored bytes into values. It is total and
bounded: strict UTF-8, nesting at most :data:`MAX_DEPTH` levels (checked on the bytes before
decoding), no ``NaN``/``Infinity``, no float that overflows, no integer over 4,300 digits, no
lone surrogate; anything else raises :class:`PayloadError` (a ``ValueError``), never
``RecursionError`` or ``OverflowError``. A record whose data nests deeper than
:data:`MAX_WRITE_DEPTH` is refused when written, so everything the store writes reads back.

:func:`scan` walks a buffer of records and says where and why it stopped. A stop is a *torn
tail* (the artefact of a crash during an append: an incomplete header, a record that runs past
the end of the file, or a zero-filled remainder) or *damage* (a checksum mismatch with other data
after it). Only the caller knows whether a torn tail is legitimate (it is only in the last
journal segment); damage is never legitimate.
"""

from __future__ import annotations

import json
import json.encoder
import re
import struct
import sys
import zlib
from collections.abc import Sequence
from itertools import accumulate

from crashpoint.checkpoint._value import Value
from crashpoint.errors import InvalidArgument, PayloadError, WrongArgumentType

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "HEADER",
    "KIND_RECORD",
    "KIND_SNAPSHOT",
    "MAGIC",
    "MAX_DEPTH",
    "MAX_PAYLOAD",
    "MAX_WRITE_DEPTH",
    "TOO_DEEP",
    "VERSION",
    "PayloadError",
    "ScanResult",
    "decode_json",
    "decode_many",
    "decode_payload",
    "encode",
    "encode_json",
    "nesting_depth",
    "scan",
]

MAGIC = b"CP"
VERSION = 1
KIND_RECORD = 0
KIND_SNAPSHOT = 1
HEADER = struct.Struct("<2sBBIII")
_HEAD12 = struct.Struct("<2sBBII")
MAX_PAYLOAD = 1 << 30
#: Deepest nesting of arrays and objects a stored payload may have (deeper is damage).
MAX_DEPTH = 256
#: Deepest nesting a journal record's payload may have when written: a snapshot wraps record
#: data in a few more levels and must still read back under :data:`MAX_DEPTH`.
MAX_WRITE_DEPTH = 192
_MAX_DIGITS = 4300  # Python's default int_max_str_digits, enforced even where it is disabled


_ENCODER = json.JSONEncoder(
    separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False
)
# the C encoder without JSONEncoder.encode's per-call overhead (a third of the cost); same
# output (a test compares them); None on Pythons without it
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE: Any = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )
)


def encode_json(obj: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8, no NaN.

    Data JSON cannot hold raises the library's own errors, never a bare ValueError,
    TypeError or RecursionError: :class:`InvalidArgument` for data nested too deep (or holding
    itself), NaN or infinity, a lone surrogate; :class:`WrongArgumentType` for a value that is
    not a list, an object with string keys, a string, a number, a boolean or null."""
    try:
        if _C_ENCODE is not None:
            return "".join(_C_ENCODE(obj, 0)).encode("utf-8")
        return _ENCODER.encode(obj).encode("utf-8")
    except RecursionError:
        raise InvalidArgument(TOO_DEEP) from None
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"a string holds {exc.object[exc.start : exc.end]!r}, a lone surrogate UTF-8 cannot "
            "hold (text decoded with errors='surrogateescape'?); store bytes as base64 text"
        ) from None
    except ValueError as exc:  # NaN or infinity (allow_nan=False), a list that holds itself
        raise InvalidArgument(
            f"the data cannot be stored as JSON: {exc} (NaN and infinity are not JSON numbers)"
        ) from None
    except TypeError as exc:
        raise WrongArgumentType(
            f"the data cannot be stored as JSON: {exc}; store lists, objects with string keys, "
            "strings, numbers, booleans and null"
        ) from None


#: why data nested too deep is refused (when written, and when redacted before that)
TOO_DEEP = (
    f"record data nests deeper than {MAX_WRITE_DEPTH - 1} levels of lists and objects (or a "
    "list or object holds itself); flatten it (deeper data could not be read back safely)"
)


def encode(payload: bytes, kind: int = KIND_RECORD) -> bytes:
    """Frame ``payload`` bytes as one record."""
    if len(payload) > MAX_PAYLOAD:
        raise InvalidArgument(f"record payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    if kind == KIND_RECORD and _deeper_than(payload, MAX_WRITE_DEPTH):
        raise InvalidArgument(TOO_DEEP)
    head = _HEAD12.pack(MAGIC, VERSION, kind, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


# -- bounded decoding ---------------------------------------------------------------------

_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as signed bytes
# numbers, in a copy where every digit is "0", e/E is "e" and signs are gone: a float that may
# overflow to inf has a three-digit exponent or over 300 digits (strings may match too: then
# floats are checked one by one, slower, never wrong)
_NUMBERS = bytes.maketrans(b"0123456789E", b"0000000000e")
_SURROGATE = rb"\\u[dD][89a-fA-F]"  # an escaped surrogate (maybe a lone one); compiled on use


def _may_overflow(payload: bytes) -> bool:
    t = payload.translate(_NUMBERS, b"+-")
    return b"e000" in t or b"0" * 300 in t


def nesting_depth(payload: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON ``payload``, counted on the bytes
    (brackets inside strings skipped); never less than what a decoder would reach, even on
    invalid JSON, and linear in the size."""
    t = payload.replace(b"\\\\", b"").replace(b'\\"', b"")  # escaped backslashes, quotes
    outside = b"".join(t.split(b'"')[::2])  # quotes now alternate: open, close
    # imported here, not above, for the cost: only data with many brackets gets here
    from array import array

    signs = array("b")
    signs.frombytes(outside.translate(_SIGNS, _NOT_BRACKET))
    return max(accumulate(signs), default=0)


def _deeper_than(payload: bytes, limit: int) -> bool:
    if payload.count(b"[") + payload.count(b"{") <= limit:  # the common case, at C speed
        return False
    return nesting_depth(payload) > limit


def _reject_constant(name: str) -> Any:
    raise PayloadError(f"{name} is not a JSON number the store writes")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise PayloadError(f"the number {text[:20]}... overflows a float")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > _MAX_DIGITS:
        raise PayloadError(f"an integer of {len(text)} digits (the limit is {_MAX_DIGITS})")
    return int(text)


_get_digits: Any = getattr(sys, "get_int_max_str_digits", None)


def _decoder(big_floats: bool) -> json.JSONDecoder:
    limited = _get_digits is not None and 0 < _get_digits() <= _MAX_DIGITS
    return json.JSONDecoder(
        parse_constant=_reject_constant,
        parse_float=_finite_float if big_floats else None,
        parse_int=None if limited else _bounded_int,
    )


def _check_text(raw: bytes, obj: Any) -> None:
    """Escaped surrogates decode to lone ones the encoder cannot write back: refuse those."""
    if (b"\\ud" in raw or b"\\uD" in raw) and re.search(_SURROGATE, raw) is not None:
        try:
            encode_json(obj)
        except InvalidArgument:  # what encode_json makes of the UnicodeEncodeError
            raise PayloadError("a string holds a lone surrogate (\\ud800-\\udfff)") from None


def decode_json(payload: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Decode stored JSON, bounded (see the module's docstring); raise :class:`PayloadError`."""
    if _deeper_than(payload, max_depth):
        raise PayloadError(f"it nests deeper than {max_depth} levels")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError(f"it is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        obj = _decoder(_may_overflow(payload)).decode(text)
    except PayloadError:
        raise
    except ValueError as exc:  # JSONDecodeError, an int over sys's digit limit
        raise PayloadError(f"it is not JSON: {exc}") from None
    _check_text(payload, obj)
    return obj


def decode_many(payloads: Sequence[bytes]) -> list[Any] | None:
    """``[decode_json(p) for p in payloads]``, faster; ``None`` if any payload would not decode
    that way (decode those one by one to learn which and why), never a different answer.

    Each payload is scanned on its own, from its first byte, and must end exactly at its last:
    payloads are never joined into one document, where two fragments invalid alone (a record
    cut after a comma, the next holding the rest) would read as valid records."""
    if not payloads:
        return []
    for p in payloads:
        if _deeper_than(p, MAX_DEPTH):
            return None
    everything = b",".join(payloads)  # the batch-wide checks: each one's verdict, or stricter
    # the decoder's scanner (set by JSONDecoder.__init__; typeshed does not declare it)
    scan: Any = _decoder(_may_overflow(everything)).scan_once  # type: ignore[attr-defined]
    out: list[Any] = []
    append = out.append
    try:
        for p in payloads:
            text = p.decode("utf-8")
            obj, end = scan(text, 0)
            if end != len(text):
                return None  # more than one value, or whitespace after it: decode_json says
            append(obj)
        _check_text(everything, out)
    except (ValueError, StopIteration):  # PayloadError, JSONDecodeError, UnicodeDecodeError
        return None
    return out


def decode_payload(payload: bytes) -> Any:
    """A record's payload, decoded with :func:`decode_json`."""
    return decode_json(payload)


class ScanResult(Value):
    """What :func:`scan` found: the good records and, if it stopped early, where and why."""

    __slots__ = ("end", "reason", "records", "stop")

    def __init__(
        self, records: list[tuple[int, int, bytes]], end: int, stop: str, reason: str = ""
    ) -> None:
        self.records = records  # (offset, kind, payload) of each intact record
        self.end = end  # offset just past the last intact record
        self.stop = stop  # "end" (clean), "torn" or "damage"
        self.reason = reason


def _all_zero(buf: bytes | memoryview, start: int) -> bool:
    return not any(buf[start:])


def scan(buf: bytes, *, limit: int | None = None) -> ScanResult:
    """Walk records in ``buf`` from offset 0; stop at the end or at the first bad record."""
    records: list[tuple[int, int, bytes]] = []
    append, unpack, crc32 = records.append, HEADER.unpack_from, zlib.crc32  # the hot loop
    view = memoryview(buf)
    off = 0
    size = len(buf)
    hsize = HEADER.size
    left = size + 1 if limit is None else limit
    while off < size:
        if left <= 0:
            break
        left -= 1
        if size - off < hsize:
            return ScanResult(records, off, "torn", f"incomplete header ({size - off} bytes)")
        magic, version, kind, length, pcrc, hcrc = unpack(buf, off)
        if crc32(view[off : off + 12]) != hcrc:
            if _all_zero(buf, off):
                return ScanResult(records, off, "torn", "zero-filled tail")
            return ScanResult(records, off, "damage", "header checksum mismatch")
        if magic != MAGIC:
            return ScanResult(records, off, "damage", f"bad magic {magic!r}")
        if version != VERSION:
            return ScanResult(
                records,
                off,
                "damage",
                f"format version {version} is not supported (this is {VERSION})",
            )
        start = off + hsize
        if start + length > size:
            return ScanResult(
                records, off, "torn", f"record of {length} bytes runs past the end of the file"
            )
        payload = bytes(buf[start : start + length])
        if crc32(payload) != pcrc:
            if _all_zero(buf, start):
                return ScanResult(records, off, "torn", "zero-filled tail")
            return ScanResult(records, off, "damage", "payload checksum mismatch")
        append((off, kind, payload))
        off = start + length
    return ScanResult(records, off, "end")
