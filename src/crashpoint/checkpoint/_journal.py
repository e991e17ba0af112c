"""Reading a run's folder: snapshots, journal segments, torn tails and damage.

A run's folder holds::

    lock                      flock + fencing generation
    meta.json                 status and small facts, replaced atomically (a cache, not truth)
    snap-000000000120.cps     the state after record 120 (one framed record, kind 1)
    seg-000000000121.log      records 121, 122, ... (framed, kind 0), appended
    *.corrupt-<time>          damaged files moved aside by a rollback (never read again)

Each journal record's payload is ``{"s": seq, "g": generation, "d": data}``. Sequence numbers
are contiguous from 1, so a deleted or stale middle segment shows as a gap.

Every read here is total: whatever bytes a file holds, a read returns the valid prefix and the
damage it found, or raises :class:`CheckpointCorrupt` (file, offset, reason). Payloads are
decoded with the bounded decoder (:func:`~crashpoint.checkpoint._record.decode_json`), then
their shape is checked (the envelope here, the data by the reducer: a reducer raises
:class:`PayloadError` for a record it cannot apply, before changing the state). Files are
opened without following links and without blocking (``O_NOFOLLOW | O_NONBLOCK``), then must
be regular files: a FIFO, a device or a link where a store file belongs is damage, never read.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable

from crashpoint.checkpoint._record import (
    HEADER,
    KIND_RECORD,
    KIND_SNAPSHOT,
    MAX_PAYLOAD,
    PayloadError,
    decode_json,
    decode_many,
    scan,
)
from crashpoint.checkpoint._value import Value
from crashpoint.errors import CheckpointCorrupt

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any
else:
    Any = object  # at run time only in the type aliases below, never checked: no typing

__all__ = [
    "Damage",
    "Loaded",
    "PayloadError",
    "Reducer",
    "TornTail",
    "is_history_index",
    "list_files",
    "load",
    "parse_lock",
    "read_lock",
    "read_meta",
    "records_reducer",
    "register_history_index",
    "register_state_check",
    "segment_name",
    "snapshot_name",
    "verify_folder",
]

Reducer = Callable[[dict[str, Any], Any], None]

SEG_RE = re.compile(r"^seg-(\d{12})\.log$")
SNAP_RE = re.compile(r"^snap-(\d{12})\.cps$")
META = "meta.json"
#: Largest meta.json / lock file read (bigger ones are ignored: they are caches).
MAX_META_BYTES = 1 << 20
MAX_LOCK_BYTES = 4096
#: Largest sequence number or generation a record may carry.
MAX_SEQ = (1 << 62) - 1
StateCheck = Callable[[dict[str, Any]], None]
_STATE_CHECKS: dict[Any, StateCheck] = {}
_HISTORY_INDEXES: set[Any] = set()


def register_state_check(reducer: Reducer, check: StateCheck) -> None:
    """Have :func:`load` call ``check(state)`` on a snapshot's state before ``reducer`` builds on
    it; ``check`` raises :class:`PayloadError` for a state ``reducer`` never produces."""
    _STATE_CHECKS[reducer] = check


def register_history_index(reducer: Reducer, check: StateCheck | None = None) -> None:
    """Declare ``reducer``'s state an index into the run's journal, not a replacement for it.

    Its snapshots then keep the segments they cover (the history stays on disk, read record by
    record with :class:`~crashpoint.checkpoint.JournalReader`); opening the run reads the newest
    snapshot and the records after it only; a damaged snapshot is passed over (moved out of the
    way on the next open), the journal replayed from its first record instead: an index is
    rebuilt, never trusted over the records. ``check`` as for :func:`register_state_check`."""
    _HISTORY_INDEXES.add(reducer)
    if check is not None:
        _STATE_CHECKS[reducer] = check


def is_history_index(reducer: Reducer) -> bool:
    """True if ``reducer`` was registered with :func:`register_history_index`."""
    return reducer in _HISTORY_INDEXES


def segment_name(first_seq: int) -> str:
    return f"seg-{first_seq:012d}.log"


def snapshot_name(seq: int) -> str:
    return f"snap-{seq:012d}.cps"


def records_reducer(state: dict[str, Any], data: Any) -> None:
    """The default reducer: the state is the list of every record's data, in order."""
    state.setdefault("records", []).append(data)


def _check_records_state(state: dict[str, Any]) -> None:
    if not isinstance(state.get("records", []), list):
        raise PayloadError("the snapshot's 'records' is not a list")


register_state_check(records_reducer, _check_records_state)


class Damage(Value):
    """Bytes that failed a check: where, and what did not match."""

    __slots__ = ("offset", "path", "reason")

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path} at byte {self.offset}: {self.reason}"

    def error(self) -> CheckpointCorrupt:
        return CheckpointCorrupt(self.path, self.offset, self.reason)


class TornTail(Value):
    """The partial last record a crash left at the end of the last segment."""

    __slots__ = ("dropped", "offset", "path", "reason")

    def __init__(self, path: str, offset: int, dropped: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.dropped = dropped
        self.reason = reason

    def __str__(self) -> str:
        return (
            f"{self.path}: {self.dropped} bytes of a partial record at byte {self.offset} "
            f"({self.reason})"
        )


class Loaded(Value):
    """A run's state as read from disk, and what was found on the way."""

    __slots__ = (
        "bytes_since_snapshot",
        "covered",
        "damage",
        "generation",
        "history",
        "last_segment",
        "last_segment_end",
        "lost_from_seq",
        "seq",
        "snapshot_bytes",
        "snapshot_seq",
        "state",
        "torn",
        "unusable",
    )
    __hash__ = None  # type: ignore[assignment]  # mutable

    def __init__(
        self,
        state: dict[str, Any],
        seq: int = 0,
        generation: int = 0,
        snapshot_seq: int = 0,
        snapshot_bytes: int = 0,
        bytes_since_snapshot: int = 0,
        last_segment: str | None = None,
        last_segment_end: int = 0,
        torn: TornTail | None = None,
        damage: list[Damage] | None = None,
        lost_from_seq: int | None = None,
        unusable: list[str] | None = None,
        covered: list[str] | None = None,
        history: bool = False,
    ) -> None:
        self.state = state
        self.seq = seq
        self.generation = generation
        self.snapshot_seq = snapshot_seq
        self.snapshot_bytes = snapshot_bytes
        self.bytes_since_snapshot = bytes_since_snapshot
        self.last_segment = last_segment  # the segment a writer appends to (None: a new one)
        self.last_segment_end = last_segment_end  # just past its last valid record
        self.torn = torn
        self.damage: list[Damage] = [] if damage is None else damage
        self.lost_from_seq = lost_from_seq  # with damage: the first sequence number not read
        self.unusable: list[str] = [] if unusable is None else unusable  # moved aside on rollback
        self.covered: list[str] = [] if covered is None else covered  # a snapshot covers these
        self.history = history  # the snapshot indexes its segments (a tail): never delete them


def list_files(folder: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The files of a run folder: (snapshots newest first, journal segments oldest first),
    each as (seq, path)."""
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


_O_READ = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _read(path: str, limit: int | None = None, start: int = 0) -> bytes:
    """The file's bytes (from offset ``start``), never through a symbolic link, never from a
    FIFO or a device: a link planted where a segment or snapshot belongs (pointing at another
    run's files, or at /dev/zero) is damage, not data, and opening a FIFO does not wait for a
    writer. A file over ``limit`` bytes is refused before it is read."""
    try:
        fd = os.open(path, _O_READ)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _NotAFile("a symbolic link where a journal file belongs") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise _NotAFile(f"unreadable ({exc.strerror}): fix its owner or mode") from None
        if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EWOULDBLOCK):
            raise _NotAFile("not a regular file") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _NotAFile("not a regular file (a FIFO, device or folder)")
        if limit is not None and st.st_size > limit:
            raise _NotAFile(f"{st.st_size} bytes, more than the {limit} such a file can hold")
        if start:
            f.seek(start)
        data = f.read() if limit is None else f.read(limit + 1)
        if limit is not None and len(data) > limit:
            raise _NotAFile(f"more than the {limit} bytes such a file can hold")
        return data


def _is_count(v: Any) -> bool:
    return type(v) is int and 0 <= v <= MAX_SEQ


def _envelope(payload: bytes) -> tuple[int, int, Any]:
    """(seq, generation, data) of a journal record's payload; PayloadError if it is not one."""
    return _envelope_of(decode_json(payload))


def _envelope_of(env: Any) -> tuple[int, int, Any]:
    if type(env) is not dict or len(env) != 3 or "d" not in env:
        raise PayloadError("a journal record is an object of exactly s, g and d")
    s: Any = env.get("s")
    g: Any = env.get("g")
    if not _is_count(s) or s == 0:
        raise PayloadError(
            f"its sequence number {str(s)[:40]!r} is not an integer from 1 to {MAX_SEQ}"
        )
    if not _is_count(g):
        raise PayloadError(f"its generation {str(g)[:40]!r} is not an integer from 0 to {MAX_SEQ}")
    return s, g, env["d"]


def _load_snapshot(
    path: str, seq: int, check: StateCheck | None = None
) -> tuple[dict[str, Any], int, int, tuple[int, int] | None] | Damage:
    try:
        data = _read(path, HEADER.size + MAX_PAYLOAD)
    except _NotAFile as exc:
        return Damage(path, 0, str(exc))
    res = scan(data)
    if res.stop != "end" or len(res.records) != 1:
        return Damage(path, res.end, res.reason or "a snapshot must hold exactly one record")
    off, kind, payload = res.records[0]
    if kind != KIND_SNAPSHOT:
        return Damage(path, off, f"record kind {kind} is not a snapshot")
    try:
        obj = decode_json(payload)
        if type(obj) is not dict or set(obj) - {"tail"} != {"seq", "gen", "state"}:
            raise PayloadError("a snapshot is an object of exactly seq, gen, state (and tail)")
        state, sseq, gen = obj["state"], obj["seq"], obj["gen"]
        tail = obj.get("tail")  # a history index's: where the records after it begin
        if tail is not None and (
            type(tail) is not list or len(tail) != 2 or not all(_is_count(x) for x in tail)
        ):
            raise PayloadError("its tail is not [first record of a segment, offset]")
        if not _is_count(sseq) or not _is_count(gen) or type(state) is not dict:
            raise PayloadError(
                f"its seq and gen must be integers from 0 to {MAX_SEQ} and its state an object"
            )
        if sseq != seq:
            raise PayloadError(f"it says seq {sseq}, its name says {seq}")
        if check is not None:
            check(state)
    except PayloadError as exc:
        return Damage(path, off, f"snapshot payload does not decode: {exc}")
    return state, gen, len(data), None if tail is None else (tail[0], tail[1])


def load(folder: str, reducer: Reducer, *, stop_on_damage: bool, full: bool = False) -> Loaded:
    """Rebuild a run's state from its folder. Never writes.

    With ``stop_on_damage`` the first damage raises :class:`CheckpointCorrupt`; otherwise the
    state is the longest valid prefix and ``damage`` / ``unusable`` say what was left out.
    For a history index (:func:`register_history_index`) the records the snapshot covers are
    not read (its ``tail`` says where the next ones begin), unless ``full``: then every
    snapshot is ignored and every record replayed (what to do once a record the index points
    at turned out missing or damaged). A tail that does not lead to the next record is passed
    over: the segment is read from its start.
    """
    if reducer in _HISTORY_INDEXES and not full:
        for tail in (True, False):
            try:
                out = _load(folder, reducer, stop_on_damage=stop_on_damage, full=False, tail=tail)
            except _TailMiss:
                continue
            except CheckpointCorrupt:  # maybe the index's fault (a record does not fit it)
                break
            if not out.damage:
                return out
            break
        # the journal does not reach the snapshot (an older copy of a segment), or something
        # did not fit: every record replayed, no snapshot trusted (real damage shows again)
        full = True
    return _load(folder, reducer, stop_on_damage=stop_on_damage, full=full, tail=False)


class _TailMiss(Exception):
    """A history index's snapshot does not fit the journal: its tail does not lead to its next
    record, or the records it covers are not all there (a stale or damaged hint)."""


def _load(folder: str, reducer: Reducer, *, stop_on_damage: bool, full: bool, tail: bool) -> Loaded:
    snaps, segs = list_files(folder)
    out = Loaded(state={})
    check = _STATE_CHECKS.get(reducer)
    index = out.history = reducer in _HISTORY_INDEXES
    ignored: list[tuple[int, str]] = []
    if index and full:
        ignored, snaps = snaps, []
    resume: tuple[int, int] | None = None  # (segment, offset) the snapshot's records end at
    reached = 0  # the last record found on disk (a history index needs its snapshot's)

    def hit(d: Damage) -> None:
        if stop_on_damage:
            raise d.error()
        out.damage.append(d)

    for i, (sseq, spath) in enumerate(snaps):
        got = _load_snapshot(spath, sseq, check)
        if isinstance(got, Damage):
            if index:  # an index is rebuilt from the records: this one is removed on open
                out.covered.append(spath)
                continue
            hit(got)
            out.unusable.append(spath)
            continue
        out.state, out.generation, out.snapshot_bytes, resume = got
        out.seq = out.snapshot_seq = sseq
        # a snapshot with a tail is a history index's, whoever reads it: its segments stay
        out.history = index or resume is not None
        if not (index and tail):
            resume = None
        for _s, older in snaps[i + 1 :]:  # covered; damage in them is reported all the same
            if not index:
                old = _load_snapshot(older, _s, check)
                if isinstance(old, Damage):
                    hit(old)
            out.covered.append(older)
        break

    stopped = False
    for i, (first, path) in enumerate(segs):
        if stopped:
            out.unusable.append(path)
            continue
        if first > out.seq + 1:  # its name says records before `first` exist; they do not
            hit(
                Damage(
                    path,
                    0,
                    f"records {out.seq + 1}..{first - 1} are missing: this segment "
                    f"starts at record {first} (a segment before it was truncated, "
                    "deleted or replaced by an older copy)",
                )
            )
            out.unusable.append(path)
            out.lost_from_seq = out.seq + 1
            stopped = True
            continue
        is_last = i == len(segs) - 1
        # a segment the next one shows to end at or before the snapshot holds nothing needed:
        # damage in it is reported, but the records after it still load
        covered = not is_last and segs[i + 1][0] <= out.snapshot_seq + 1
        if resume is not None and first < resume[0] and not is_last:
            covered = True
        if covered and index:  # history the snapshot indexes: read record by record later
            reached = max(reached, segs[i + 1][0] - 1)  # its name says these records exist
            continue
        start = resume[1] if resume is not None and first == resume[0] else 0
        if start:
            try:
                if os.lstat(path).st_size < start:
                    raise _TailMiss
            except OSError:
                raise _TailMiss from None
            reached = max(reached, out.snapshot_seq)  # its records end where the tail begins
        try:
            buf = _read(path, start=start)
        except _NotAFile as exc:
            hit(Damage(path, 0, str(exc)))
            out.unusable.append(path)
            if not covered:
                out.lost_from_seq = out.seq + 1
                stopped = True
            continue
        res = scan(buf)
        if start and res.stop != "end":
            raise _TailMiss  # not a torn tail to cut at a guessed offset: read it whole
        file_max_seq = first - 1
        envelopes = decode_many([p for _, _, p in res.records])
        bad = False
        for j, (off, kind, payload) in enumerate(res.records):
            try:
                s, g, d = _envelope(payload) if envelopes is None else _envelope_of(envelopes[j])
            except PayloadError as exc:
                hit(Damage(path, start + off, f"record does not decode: {exc}"))
                bad = True
                break
            if kind != KIND_RECORD:
                hit(Damage(path, start + off, f"record kind {kind} in a journal segment"))
                bad = True
                break
            if start and j == 0 and s != out.snapshot_seq + 1:
                raise _TailMiss
            file_max_seq = s
            reached = max(reached, s)
            if s <= out.snapshot_seq:
                continue  # covered by the snapshot
            if s != out.seq + 1:
                what = (
                    (
                        f"records {out.seq + 1}..{s - 1} are missing (a segment was deleted or "
                        "replaced by an older copy)"
                    )
                    if s > out.seq + 1
                    else f"record {s} repeats (expected {out.seq + 1})"
                )
                hit(Damage(path, start + off, what))
                bad = True
                break
            if g < out.generation:
                hit(
                    Damage(
                        path,
                        start + off,
                        f"record {s} was written by generation {g} after "
                        f"generation {out.generation} (a fenced-out writer)",
                    )
                )
                bad = True
                break
            try:
                reducer(out.state, d)  # a reducer checks the data's shape before it applies it
            except PayloadError as exc:
                hit(Damage(path, start + off, f"record {s} does not fit the run: {exc}"))
                bad = True
                break
            out.seq = s
            out.generation = g
            out.bytes_since_snapshot += 16 + len(payload)
        if not bad and res.stop == "torn" and is_last:
            out.torn = TornTail(path, start + res.end, len(buf) - res.end, res.reason)
        elif not bad and res.stop != "end":
            why = (
                res.reason
                if res.stop == "damage"
                else f"{res.reason} in a segment that is not the last (not a crash artefact)"
            )
            hit(Damage(path, start + res.end, why))
            bad = True
        if bad:
            out.unusable.append(path)
            if not covered or out.seq > out.snapshot_seq:
                out.lost_from_seq = out.seq + 1
                stopped = True
            continue
        if (is_last and file_max_seq > out.snapshot_seq) or (is_last and not res.records):
            out.last_segment, out.last_segment_end = path, start + res.end  # appended here
        elif file_max_seq <= out.snapshot_seq and not out.history:
            out.covered.append(path)
    if ignored and out.damage:  # a rollback keeps the prefix: no snapshot past it may stay
        out.unusable += [p for s, p in ignored if s > out.seq]
    elif ignored:  # snapshots past the journal's end index records that are not there
        out.covered += [p for s, p in ignored if s > out.seq]
    if index and out.snapshot_seq and reached < out.snapshot_seq and not out.damage:
        raise _TailMiss  # an index of records that are not all there: replay what is
    return out


def verify_folder(
    folder: str, reducer: Reducer = records_reducer
) -> tuple[list[Damage], list[TornTail]]:
    """Check every checksum of every file in a run's folder; report all damage, not just the first.

    A torn tail in the last segment is reported separately: it is the normal artefact of a
    crash and is repaired on the next open. Whenever this reports damage, :func:`load` with the
    same ``reducer`` finds damage too (and the other way round): it checks what load checks.
    """
    damage: list[Damage] = []
    torn: list[TornTail] = []
    snaps, segs = list_files(folder)
    for sseq, spath in snaps:
        got = _load_snapshot(spath, sseq, _STATE_CHECKS.get(reducer))
        if isinstance(got, Damage):
            damage.append(got)
    for i, (_, path) in enumerate(segs):
        try:
            buf = _read(path)
        except _NotAFile as exc:
            damage.append(Damage(path, 0, str(exc)))
            continue
        res = scan(buf)
        for off, kind, payload in res.records:
            try:
                _envelope(payload)
            except PayloadError as exc:
                damage.append(Damage(path, off, f"record does not decode: {exc}"))
                continue
            if kind != KIND_RECORD:
                damage.append(Damage(path, off, f"record kind {kind} in a journal segment"))
        if res.stop == "torn" and i == len(segs) - 1:
            torn.append(TornTail(path, res.end, len(buf) - res.end, res.reason))
        elif res.stop != "end":
            why = (
                res.reason
                if res.stop == "damage"
                else f"{res.reason} in a segment that is not the last (not a crash artefact)"
            )
            damage.append(Damage(path, res.end, why))
    # gaps, fencing and the data's shape show only when the records are replayed in order
    for d in load(folder, reducer, stop_on_damage=False).damage:
        if d not in damage:
            damage.append(d)
    return damage, torn


def read_meta(folder: str) -> dict[str, Any]:
    """The run's meta.json, or ``{}`` if missing, unreadable, over 1 MiB, not a regular file
    or not a JSON object the decoder accepts (it is a cache, never truth)."""
    try:
        obj = decode_json(_read(os.path.join(folder, META), MAX_META_BYTES))
    except (OSError, PayloadError, _NotAFile):
        return {}  # a link planted as meta.json is ignored: pruning trusts this status
    return obj if isinstance(obj, dict) else {}


def parse_lock(raw: bytes) -> tuple[int, str]:
    """(generation, holder pid) from a lock file's bytes; ``(0, "")`` for anything else (a torn
    lock file: the journal's generations still fence)."""
    try:
        info = decode_json(raw or b"{}", max_depth=4)
    except PayloadError:
        return 0, ""
    if type(info) is not dict:
        return 0, ""
    gen, pid = info.get("generation", 0), info.get("pid", "")
    return (
        gen if _is_count(gen) else 0,
        str(pid) if type(pid) is int or (type(pid) is str and len(pid) < 40) else "",
    )


def read_lock(path: str) -> tuple[int, str]:
    """A run's lock file read as :func:`parse_lock` does, never through a link, a FIFO or a
    device (``(0, "")`` then)."""
    try:
        return parse_lock(_read(path, MAX_LOCK_BYTES))
    except (OSError, _NotAFile):
        return 0, ""
