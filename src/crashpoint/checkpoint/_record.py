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

:func:`scan` walks a buffer of records and says where and why it stopped. A stop is a *torn
tail* (the artefact of a crash during an append: an incomplete header, a record that runs past
the end of the file, or a zero-filled remainder) or *damage* (a checksum mismatch with other data
after it). Only the caller knows whether a torn tail is legitimate (it is only in the last
journal segment); damage is never legitimate.
"""

from __future__ import annotations

import json
import json.encoder
import struct
import zlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HEADER",
    "KIND_RECORD",
    "KIND_SNAPSHOT",
    "MAGIC",
    "MAX_PAYLOAD",
    "VERSION",
    "ScanResult",
    "decode_payload",
    "encode",
    "encode_json",
    "scan",
]

MAGIC = b"CP"
VERSION = 1
KIND_RECORD = 0
KIND_SNAPSHOT = 1
HEADER = struct.Struct("<2sBBIII")
_HEAD12 = struct.Struct("<2sBBII")
MAX_PAYLOAD = 1 << 30


_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False,
                            allow_nan=False)
# the C encoder without JSONEncoder.encode's per-call overhead (a third of the cost); same
# output (a test compares them); None on Pythons without it
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE: Any = None if _c_make_encoder is None else _c_make_encoder(
    None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", True, False, False)


def encode_json(obj: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8, no NaN."""
    if _C_ENCODE is not None:
        return "".join(_C_ENCODE(obj, 0)).encode("utf-8")
    return _ENCODER.encode(obj).encode("utf-8")


def encode(payload: bytes, kind: int = KIND_RECORD) -> bytes:
    """Frame ``payload`` bytes as one record."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"record payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    head = _HEAD12.pack(MAGIC, VERSION, kind, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


def decode_payload(payload: bytes) -> Any:
    return json.loads(payload.decode("utf-8"))


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What :func:`scan` found: the good records and, if it stopped early, where and why."""

    records: list[tuple[int, int, bytes]]  # (offset, kind, payload) of each intact record
    end: int  # offset just past the last intact record
    stop: str  # "end" (clean), "torn" or "damage"
    reason: str = ""


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
        if crc32(view[off:off + 12]) != hcrc:
            if _all_zero(buf, off):
                return ScanResult(records, off, "torn", "zero-filled tail")
            return ScanResult(records, off, "damage", "header checksum mismatch")
        if magic != MAGIC:
            return ScanResult(records, off, "damage", f"bad magic {magic!r}")
        if version != VERSION:
            return ScanResult(records, off, "damage",
                              f"format version {version} is not supported (this is {VERSION})")
        start = off + hsize
        if start + length > size:
            return ScanResult(records, off, "torn",
                              f"record of {length} bytes runs past the end of the file")
        payload = bytes(buf[start:start + length])
        if crc32(payload) != pcrc:
            if _all_zero(buf, start):
                return ScanResult(records, off, "torn", "zero-filled tail")
            return ScanResult(records, off, "damage", "payload checksum mismatch")
        append((off, kind, payload))
        off = start + length
    return ScanResult(records, off, "end")
