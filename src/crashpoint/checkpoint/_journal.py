"""Reading a run's folder: snapshots, journal segments, torn tails and damage.

A run's folder holds::

    lock                      flock + fencing generation
    meta.json                 status and small facts, replaced atomically (a cache, not truth)
    snap-000000000120.cps     the state after record 120 (one framed record, kind 1)
    seg-000000000121.log      records 121, 122, ... (framed, kind 0), appended
    *.corrupt-<time>          damaged files moved aside by a rollback (never read again)

Each journal record's payload is ``{"s": seq, "g": generation, "d": data}``. Sequence numbers
are contiguous from 1, so a deleted or stale middle segment shows as a gap.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crashpoint.checkpoint._record import KIND_RECORD, KIND_SNAPSHOT, decode_payload, scan
from crashpoint.errors import CheckpointCorrupt

__all__ = [
    "Damage",
    "Loaded",
    "Reducer",
    "TornTail",
    "list_files",
    "load",
    "read_meta",
    "records_reducer",
    "segment_name",
    "snapshot_name",
    "verify_folder",
]

Reducer = Callable[[dict[str, Any], Any], None]

SEG_RE = re.compile(r"^seg-(\d{12})\.log$")
SNAP_RE = re.compile(r"^snap-(\d{12})\.cps$")
META = "meta.json"


def segment_name(first_seq: int) -> str:
    return f"seg-{first_seq:012d}.log"


def snapshot_name(seq: int) -> str:
    return f"snap-{seq:012d}.cps"


def records_reducer(state: dict[str, Any], data: Any) -> None:
    """The default reducer: the state is the list of every record's data, in order."""
    state.setdefault("records", []).append(data)


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes that failed a check: where, and what did not match."""

    path: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path} at byte {self.offset}: {self.reason}"

    def error(self) -> CheckpointCorrupt:
        return CheckpointCorrupt(self.path, self.offset, self.reason)


@dataclass(frozen=True, slots=True)
class TornTail:
    """The partial last record a crash left at the end of the last segment."""

    path: str
    offset: int
    dropped: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.dropped} bytes of a partial record at byte {self.offset} " \
               f"({self.reason})"


@dataclass(slots=True)
class Loaded:
    """A run's state as read from disk, and what was found on the way."""

    state: dict[str, Any]
    seq: int = 0
    generation: int = 0
    snapshot_seq: int = 0
    snapshot_bytes: int = 0
    bytes_since_snapshot: int = 0
    last_segment: str | None = None  # the segment a writer appends to (None: start a new one)
    last_segment_end: int = 0  # offset just past its last valid record (a torn tail follows)
    torn: TornTail | None = None
    damage: list[Damage] = field(default_factory=list)
    lost_from_seq: int | None = None  # with damage: the first sequence number not recovered
    unusable: list[str] = field(default_factory=list)  # files a rollback moves aside
    covered: list[str] = field(default_factory=list)  # segments/snapshots a snapshot covers


def list_files(folder: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(snapshots newest first, segments oldest first), each as (seq, path)."""
    snaps: list[tuple[int, str]] = []
    segs: list[tuple[int, str]] = []
    for name in os.listdir(folder):
        if m := SNAP_RE.match(name):
            snaps.append((int(m.group(1)), os.path.join(folder, name)))
        elif m := SEG_RE.match(name):
            segs.append((int(m.group(1)), os.path.join(folder, name)))
    snaps.sort(reverse=True)
    segs.sort()
    return snaps, segs


class _NotAFile(Exception):
    """A journal file name that is a symbolic link or not a regular file."""


def _read(path: str) -> bytes:
    """The file's bytes, never through a symbolic link: a link planted where a segment or
    snapshot belongs (pointing at another run's files, say) is damage, not data."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _NotAFile("a symbolic link where a journal file belongs") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise _NotAFile(f"unreadable ({exc.strerror}): fix its owner or mode") from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise _NotAFile("not a regular file")
        return f.read()


def _load_snapshot(path: str, seq: int) -> tuple[dict[str, Any], int, int] | Damage:
    try:
        data = _read(path)
    except _NotAFile as exc:
        return Damage(path, 0, str(exc))
    res = scan(data)
    if res.stop != "end" or len(res.records) != 1:
        return Damage(path, res.end, res.reason or "a snapshot must hold exactly one record")
    off, kind, payload = res.records[0]
    if kind != KIND_SNAPSHOT:
        return Damage(path, off, f"record kind {kind} is not a snapshot")
    try:
        obj = decode_payload(payload)
        state, sseq, gen = obj["state"], int(obj["seq"]), int(obj["gen"])
    except (ValueError, KeyError, TypeError) as exc:
        return Damage(path, off, f"snapshot payload does not decode: {exc}")
    if sseq != seq or not isinstance(state, dict):
        return Damage(path, off, f"snapshot says seq {sseq}, its name says {seq}")
    return state, gen, len(data)


def load(folder: str, reducer: Reducer, *, stop_on_damage: bool) -> Loaded:
    """Rebuild a run's state from its folder. Never writes.

    With ``stop_on_damage`` the first damage raises :class:`CheckpointCorrupt`; otherwise the
    state is the longest valid prefix and ``damage`` / ``unusable`` say what was left out.
    """
    snaps, segs = list_files(folder)
    out = Loaded(state={})

    def hit(d: Damage) -> None:
        if stop_on_damage:
            raise d.error()
        out.damage.append(d)

    for sseq, spath in snaps:
        got = _load_snapshot(spath, sseq)
        if isinstance(got, Damage):
            hit(got)
            out.unusable.append(spath)
            continue
        out.state, out.generation, out.snapshot_bytes = got
        out.seq = out.snapshot_seq = sseq
        out.covered.extend(p for s, p in snaps if s < sseq)
        break

    stopped = False
    for i, (first, path) in enumerate(segs):
        if stopped:
            out.unusable.append(path)
            continue
        if first > out.seq + 1:  # its name says records before `first` exist; they do not
            hit(Damage(path, 0, f"records {out.seq + 1}..{first - 1} are missing: this segment "
                                f"starts at record {first} (a segment before it was truncated, "
                                "deleted or replaced by an older copy)"))
            out.unusable.append(path)
            out.lost_from_seq = out.seq + 1
            stopped = True
            continue
        is_last = i == len(segs) - 1
        try:
            buf = _read(path)
        except _NotAFile as exc:
            hit(Damage(path, 0, str(exc)))
            out.unusable.append(path)
            out.lost_from_seq = out.seq + 1
            stopped = True
            continue
        res = scan(buf)
        file_max_seq = first - 1
        envelopes = _decode_all(res.records)
        for (off, kind, payload), pre in zip(res.records, envelopes, strict=True):
            try:
                env = pre if pre is not None else decode_payload(payload)
                s, g, d = int(env["s"]), int(env["g"]), env["d"]
            except (ValueError, KeyError, TypeError) as exc:
                hit(Damage(path, off, f"record does not decode: {exc}"))
                stopped = True
                break
            if kind != KIND_RECORD:
                hit(Damage(path, off, f"record kind {kind} in a journal segment"))
                stopped = True
                break
            file_max_seq = s
            if s <= out.snapshot_seq:
                continue  # covered by the snapshot
            if s != out.seq + 1:
                what = (f"records {out.seq + 1}..{s - 1} are missing (a segment was deleted or "
                        "replaced by an older copy)") if s > out.seq + 1 else \
                    f"record {s} repeats (expected {out.seq + 1})"
                hit(Damage(path, off, what))
                stopped = True
                break
            if g < out.generation:
                hit(Damage(path, off, f"record {s} was written by generation {g} after "
                                      f"generation {out.generation} (a fenced-out writer)"))
                stopped = True
                break
            reducer(out.state, d)
            out.seq = s
            out.generation = g
            out.bytes_since_snapshot += 16 + len(payload)
        if stopped:
            out.unusable.append(path)
            out.lost_from_seq = out.seq + 1
            continue
        if res.stop == "torn" and is_last:
            out.torn = TornTail(path, res.end, len(buf) - res.end, res.reason)
        elif res.stop != "end":
            why = res.reason if res.stop == "damage" else \
                f"{res.reason} in a segment that is not the last (not a crash artefact)"
            hit(Damage(path, res.end, why))
            out.unusable.append(path)
            out.lost_from_seq = out.seq + 1
            stopped = True
            continue
        if (is_last and file_max_seq > out.snapshot_seq) or (is_last and not res.records):
            out.last_segment, out.last_segment_end = path, res.end  # the writer appends here
        elif file_max_seq <= out.snapshot_seq:
            out.covered.append(path)
    return out


def _decode_all(records: list[tuple[int, int, bytes]]) -> list[Any]:
    """Decode every payload with one ``json.loads`` over a JSON array (one C call instead of
    one per record); ``None`` entries (all of them, if the batch fails) are decoded one by one
    by the caller, which then names the record that does not decode."""
    if not records:
        return []
    try:
        out = json.loads(b"[" + b",".join(p for _, _, p in records) + b"]")
    except ValueError:
        return [None] * len(records)
    if not isinstance(out, list) or len(out) != len(records):
        return [None] * len(records)  # a payload that is not one JSON value
    return out


def verify_folder(folder: str) -> tuple[list[Damage], list[TornTail]]:
    """Check every checksum of every file in a run's folder; report all damage, not just the first.

    A torn tail in the last segment is reported separately: it is the normal artefact of a
    crash and is repaired on the next open.
    """
    damage: list[Damage] = []
    torn: list[TornTail] = []
    snaps, segs = list_files(folder)
    for sseq, spath in snaps:
        got = _load_snapshot(spath, sseq)
        if isinstance(got, Damage):
            damage.append(got)
    for i, (_, path) in enumerate(segs):
        try:
            buf = _read(path)
        except _NotAFile as exc:
            damage.append(Damage(path, 0, str(exc)))
            continue
        res = scan(buf)
        for off, _kind, payload in res.records:
            try:
                env = decode_payload(payload)
                int(env["s"]), int(env["g"])
            except (ValueError, KeyError, TypeError) as exc:
                damage.append(Damage(path, off, f"record does not decode: {exc}"))
        if res.stop == "torn" and i == len(segs) - 1:
            torn.append(TornTail(path, res.end, len(buf) - res.end, res.reason))
        elif res.stop != "end":
            damage.append(Damage(path, res.end, res.reason))
    if not damage:
        try:
            load(folder, lambda s, d: None, stop_on_damage=True)
        except CheckpointCorrupt as exc:  # gaps and fencing show only across files
            damage.append(Damage(exc.path, exc.offset, exc.reason))
    return damage, torn


def read_meta(folder: str) -> dict[str, Any]:
    """The run's meta.json, or ``{}`` if missing or unreadable (it is a cache, never truth)."""
    try:
        obj = json.loads(_read(os.path.join(folder, META)).decode("utf-8"))
    except (OSError, ValueError, _NotAFile):
        return {}  # a link planted as meta.json is ignored: pruning trusts this status
    return obj if isinstance(obj, dict) else {}
