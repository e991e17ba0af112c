"""Reading a run's journal record by record, without replaying it.

A history index (:func:`~crashpoint.checkpoint.register_history_index`) keeps a run's segments
after a snapshot and points into them by record number (and byte offset, a hint);
:class:`JournalReader` fetches the record a pointer names, or walks the records newest first,
reading only what it is asked for.

Every read is total and checked as :func:`~crashpoint.checkpoint._journal.load` checks: the
header's and the payload's checksums, the format, the record's kind, the envelope, and that the
record found is the one asked for (its sequence number). A record that is missing, damaged or
not the one named raises :class:`CheckpointCorrupt` (file, offset, reason), never a wrong
record. Files are opened without following links and without blocking, and must be regular
files. No memory map: a file truncated under a reader gives a short read, never a SIGBUS.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import stat
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from crashpoint.checkpoint._journal import (
    _O_READ,
    SEG_RE,
    _envelope,
    _envelope_of,
)
from crashpoint.checkpoint._record import (
    HEADER,
    KIND_RECORD,
    MAGIC,
    MAX_DEPTH,
    VERSION,
    _check_text,
    _decoder,
    _deeper_than,
)
from crashpoint.errors import CheckpointCorrupt, PayloadError

__all__ = ["JournalReader", "RecordCheck"]

#: ``check(seq, data)`` raises :class:`PayloadError` for data the run never writes.
RecordCheck = Callable[[int, Any], object]

_HSIZE = HEADER.size
_CHUNK = 256 * 1024  # read this much of a segment at a time while finding its records
_MISS = object()
_GUESS = 8192  # bytes read at once where a record should start


#: Payloads at least this large skip decode_json's float pre-screen (a pass over the bytes
#: that decides whether to check each float): every float is checked instead.
_LARGE = 16 * 1024


def _unwrap(payload: bytes) -> tuple[int, int, Any]:
    """A record's (seq, generation, data): :func:`decode_json`'s checks (depth, UTF-8, no NaN,
    no float that overflows, no huge integer, no lone surrogate), with fewer passes over a large
    payload (mostly base64 text: no floats, rarely a backslash)."""
    if len(payload) < _LARGE:
        return _envelope(payload)
    if _deeper_than(payload, MAX_DEPTH):
        raise PayloadError(f"it nests deeper than {MAX_DEPTH} levels")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError(f"it is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        obj = _decoder(True).decode(text)
    except PayloadError:
        raise
    except ValueError as exc:
        raise PayloadError(f"it is not JSON: {exc}") from None
    if b"\\" in payload:
        _check_text(payload, obj)
    return _envelope_of(obj)


class _Segment:
    """One segment: where each record starts, as far as walked, and its file while open."""

    __slots__ = ("end", "fd", "first", "offsets", "path")

    def __init__(self, path: str, first: int) -> None:
        self.path = path
        self.first = first
        self.fd = -1
        self.offsets: list[int] = []
        self.end = 0  # the offset the walk goes on from


class JournalReader:
    """Random and newest-first access to the records of a run's folder (``folder``).

    :meth:`get` returns one record's data by its sequence number; :meth:`newest_first` yields
    ``(seq, data)`` from a record back to the first. ``check`` is applied to every record read
    (a shape check: :class:`PayloadError` becomes :class:`CheckpointCorrupt` naming the file
    and offset). At most ``keep_open`` segment files stay open (and the record offsets of at
    most ``keep_known`` segments are remembered); :meth:`close` closes them. Never writes,
    never locks: records a writer appends later are found as they are asked for.
    """

    def __init__(
        self,
        folder: str,
        *,
        check: RecordCheck | None = None,
        keep_open: int = 8,
        keep_known: int = 32,
    ) -> None:
        self.folder = folder
        self.check = check
        self.keep_open = max(1, keep_open)
        self.keep_known = max(self.keep_open, keep_known)
        self.records_read = 0  # records decoded so far (a counter for tests and benchmarks)
        self._firsts: list[int] = []
        self._paths: list[str] = []
        self._known: OrderedDict[str, _Segment] = OrderedDict()
        self._fds: OrderedDict[str, _Segment] = OrderedDict()
        self._listed = False

    # -- segments ---------------------------------------------------------------------------

    def refresh(self) -> None:
        """List the folder's segments again (a writer rolled to a new one)."""
        segs = []
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            names = []
        for name in names:
            if m := SEG_RE.match(name):
                segs.append((int(m.group(1)), os.path.join(self.folder, name)))
        segs.sort()
        self._firsts = [s for s, _ in segs]
        self._paths = [p for _, p in segs]
        self._listed = True

    def _locate(self, seq: int) -> tuple[_Segment, int]:
        """The segment holding record ``seq`` and the record's index in it, walked that far
        (the index may be past the segment's readable records: the caller says so)."""
        if not self._listed:
            self.refresh()
        seg = self._segment_of(seq)
        k = seq - seg.first
        if k >= len(seg.offsets):
            self._walk(seg, k)
        if k >= len(seg.offsets) and seg.path == self._paths[-1]:
            self.refresh()  # a writer may have started a newer segment since the listing
            seg = self._segment_of(seq)
            k = seq - seg.first
            if k >= len(seg.offsets):
                self._walk(seg, k)
        return seg, k

    def _segment_of(self, seq: int) -> _Segment:
        i = bisect.bisect_right(self._firsts, seq) - 1
        if i < 0:
            raise CheckpointCorrupt(
                self.folder, 0, f"record {seq} is in no journal segment (the first is missing)"
            )
        path, first = self._paths[i], self._firsts[i]
        seg = self._known.get(path)
        if seg is None or seg.first != first:
            seg = self._known[path] = _Segment(path, first)
            while len(self._known) > self.keep_known:
                _, old = self._known.popitem(last=False)
                self._shut(old)
        else:
            self._known.move_to_end(path)
        return seg

    def _fd(self, seg: _Segment) -> int:
        if seg.fd >= 0:
            self._fds.move_to_end(seg.path)
            return seg.fd
        try:
            fd = os.open(seg.path, _O_READ)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CheckpointCorrupt(
                    seg.path, 0, "a symbolic link where a segment belongs"
                ) from None
            raise CheckpointCorrupt(seg.path, 0, f"cannot be opened ({exc.strerror})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise CheckpointCorrupt(seg.path, 0, "not a regular file (a FIFO, device or folder)")
        seg.fd = fd
        self._fds[seg.path] = seg
        while len(self._fds) > self.keep_open:
            _, old = self._fds.popitem(last=False)
            self._shut(old)
        return fd

    def _shut(self, seg: _Segment) -> None:
        if seg.fd >= 0:
            os.close(seg.fd)
            seg.fd = -1
            self._fds.pop(seg.path, None)

    def _walk(self, seg: _Segment, upto: int | None) -> None:
        """Find where records start, from where the last walk stopped, until record index
        ``upto`` of the segment (None: to its end) or a header that does not check out. Reads
        the file in chunks (headers of small records come in one read; large records are
        skipped over)."""
        fd = self._fd(seg)
        size = os.fstat(fd).st_size
        off = seg.end
        unpack, crc32 = HEADER.unpack_from, zlib.crc32
        offsets = seg.offsets
        buf, buf_at = b"", off
        while (upto is None or len(offsets) <= upto) and off + _HSIZE <= size:
            rel = off - buf_at
            if rel < 0 or rel + _HSIZE > len(buf):
                buf, buf_at, rel = os.pread(fd, _CHUNK, off), off, 0
                if len(buf) < _HSIZE:
                    break
            magic, version, _kind, length, _pcrc, hcrc = unpack(buf, rel)
            if crc32(buf[rel : rel + 12]) != hcrc or magic != MAGIC or version != VERSION:
                break  # damage or a torn tail: the records after it are not reachable
            if off + _HSIZE + length > size:
                break
            offsets.append(off)
            off += _HSIZE + length
        seg.end = off

    def _at(self, seg: _Segment, off: int, seq: int) -> Any:
        """Record ``seq`` read at ``off`` of its segment, or _MISS if what is there is not a
        whole record numbered ``seq`` (then it is looked for the slow way, which names any
        damage)."""
        fd = self._fd(seg)
        head = os.pread(fd, _GUESS, off)  # most records fit: one read
        if len(head) < _HSIZE:
            return _MISS
        magic, version, kind, length, pcrc, hcrc = HEADER.unpack_from(head, 0)
        if zlib.crc32(head[:12]) != hcrc or magic != MAGIC or version != VERSION:
            return _MISS
        if _HSIZE + length <= len(head):
            payload = head[_HSIZE : _HSIZE + length]
        else:  # a large record: read it whole once (no copy joining two reads)
            payload = os.pread(fd, length, off + _HSIZE)
        if len(payload) != length or zlib.crc32(payload) != pcrc or kind != KIND_RECORD:
            return _MISS
        try:
            s, _g, data = _unwrap(payload)
        except PayloadError:
            return _MISS
        if s != seq:
            return _MISS
        if self.check is not None:
            try:
                self.check(seq, data)
            except PayloadError as exc:
                raise CheckpointCorrupt(seg.path, off, f"record does not decode: {exc}") from None
        self.records_read += 1
        return data

    def _decode(self, seg: _Segment, k: int, seq: int) -> Any:
        """The data of the segment's record number ``k`` (walked), checked to be ``seq``."""
        off = seg.offsets[k]
        end = seg.offsets[k + 1] if k + 1 < len(seg.offsets) else seg.end
        raw = os.pread(self._fd(seg), end - off, off)
        if len(raw) < _HSIZE:
            raise CheckpointCorrupt(seg.path, off, "the file ends inside a record's header")
        magic, version, kind, length, pcrc, hcrc = HEADER.unpack_from(raw, 0)
        if zlib.crc32(raw[:12]) != hcrc or magic != MAGIC or version != VERSION:
            raise CheckpointCorrupt(seg.path, off, "header checksum mismatch")
        if len(raw) != _HSIZE + length:
            raise CheckpointCorrupt(seg.path, off, "the record runs past the end of the file")
        payload = raw[_HSIZE:]
        if zlib.crc32(payload) != pcrc:
            raise CheckpointCorrupt(seg.path, off, "payload checksum mismatch")
        if kind != KIND_RECORD:
            raise CheckpointCorrupt(seg.path, off, f"record kind {kind} in a journal segment")
        try:
            s, _g, data = _unwrap(payload)
            if s != seq:
                raise PayloadError(f"it is record {s}, where record {seq} belongs")
            if self.check is not None:
                self.check(seq, data)
        except PayloadError as exc:
            raise CheckpointCorrupt(seg.path, off, f"record does not decode: {exc}") from None
        self.records_read += 1
        return data

    # -- reading ----------------------------------------------------------------------------

    def get(self, seq: int, offset: int = -1) -> Any:
        """The data of record ``seq``; :class:`CheckpointCorrupt` if it is not there whole.
        ``offset``: where it should start in its segment (a hint: if the record there is not
        ``seq``, the segment's records are walked to find it)."""
        if offset >= 0:
            for again in (False, True):
                if not self._listed or again:
                    self.refresh()  # the record may be in a segment started since the listing
                if bisect.bisect_right(self._firsts, seq) > 0:
                    got = self._at(self._segment_of(seq), offset, seq)
                    if got is not _MISS:
                        return got
                if not self._firsts or seq < self._firsts[-1]:
                    break
        seg, k = self._locate(seq)
        if k >= len(seg.offsets):
            raise CheckpointCorrupt(
                seg.path,
                seg.end,
                f"record {seq} is missing: the segment's readable records end at "
                f"{seg.first + len(seg.offsets) - 1}",
            )
        return self._decode(seg, k, seq)

    def newest_first(self, last: int, first: int = 1) -> Iterator[tuple[int, Any]]:
        """``(seq, data)`` of records ``last`` down to ``first``, reading one segment's headers
        at a time (never the whole journal at once)."""
        seq = last
        while seq >= first:
            seg, k = self._locate(seq)
            if k >= len(seg.offsets):
                self.get(seq)  # raises, naming what is missing
            base = seg.first
            for i in range(k, max(first, base) - base - 1, -1):
                yield base + i, self._decode(seg, i, base + i)
            seg.offsets, seg.end = [], 0  # done with it: a long walk holds one segment's
            self._shut(seg)
            seq = base - 1

    def close(self) -> None:
        """Close every open segment file."""
        while self._fds:
            _, seg = self._fds.popitem()
            if seg.fd >= 0:
                os.close(seg.fd)
                seg.fd = -1

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown, os may be gone
            self.close()
