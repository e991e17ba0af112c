"""``CrashpointSaver``: a LangGraph checkpointer on crashpoint's journal.

One LangGraph thread is one crashpoint run (folder ``lg-<sha256 of the thread id>`` under the
store): an append-only, checksummed journal. Each ``put`` appends the checkpoint and only the
channel values that changed (``new_versions``), each ``put_writes`` appends the task's writes:
O(size of the step) bytes, history is never rewritten. A call returns once its record is
fdatasync'ed (durability ``always``, the default).

Resuming does not replay the history. The run's state is a small index (the newest checkpoint of
each namespace, where its record is, the writes made to it), snapshotted every 8 KiB or so of
journal with the offset the next record goes to (a history index:
:func:`~crashpoint.checkpoint.register_history_index`); opening a thread reads that snapshot and
the few records after it, and a checkpoint is read from its own record, which references
(``[record number, byte offset]``) every record holding a value it needs (``at``), its parent
(``up``) and the writes made to it. Values that grew at their end (LangGraph's list channels:
messages, ``operator.add``) are stored as byte deltas against an earlier version, chosen as
"skip deltas" so that reading any version follows a short chain (its base-4 digit sum: at most
19 records below 5,000 versions) while a step writes its growth about log4(i) times; text-like
bytes are stored as latin-1 text, other bytes as base64. ``list()`` reads the journal newest
first as it is consumed. What a reference leads to is checked when read (the record's number,
kind, namespace, id, channel and version); anything that does not match, or a damaged snapshot,
makes the whole journal replay (which raises :class:`~crashpoint.errors.CheckpointCorrupt` on
damage, or rolls back with ``on_corrupt="rollback"``): never a wrong answer. Memory: the index,
the newest bytes of each channel written (the base of its next delta) and bounded caches, never
the history.

One writer per thread: the first call that touches a thread (``get_tuple``, ``put``,
``put_writes``) takes the run's OS lock and a fencing generation (made durable with the first
write), and keeps them until :meth:`CrashpointSaver.close` (or :meth:`release`). A second
process resuming the same thread waits ``lock_timeout`` seconds, then gets
:class:`crashpoint.errors.RunLocked`.

Values go through LangGraph's own serde (``self.serde.dumps_typed``), stored in the JSON records
as text or base64; nothing is pickled by this module, and loading a journal runs no code.

    >>> from crashpoint.adapters.langgraph_saver import CrashpointSaver   # doctest: +SKIP
    >>> with CrashpointSaver("state/") as saver:                          # doctest: +SKIP
    ...     graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import json
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from crashpoint.errors import InvalidArgument, WrongArgumentType

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "crashpoint.adapters.langgraph_saver needs LangGraph: pip install 'crashpoint[langgraph]'"
    ) from _exc

from crashpoint.checkpoint import (
    JournalReader,
    PayloadError,
    RunJournal,
    Store,
    register_history_index,
)
from crashpoint.errors import CheckpointCorrupt, RunNotFound

__all__ = ["CrashpointSaver", "run_id_for", "saver_reducer"]

RUN_PREFIX = "lg-"
#: The record format this module writes (1: before the index; still read).
FORMAT = 2
#: Skip deltas: version ``i`` of a value is stored against version ``i - 4**k`` (``k``: the
#: lowest non-zero base-4 digit of ``i``), so a chain is as long as ``i``'s digit sum (at most
#: 3 per digit) and each step writes its growth about log4(i) times.
FANOUT = 4
#: A value is stored whole again once the deltas since its last whole copy exceed this many
#: times its size (keeps the bytes written O(N) whatever the values do).
RESET = 4
#: Snapshot the index once this many journal bytes follow the last one (and at least
#: ``SNAPSHOT_RATIO`` times the snapshot's size): what opening a thread replays.
SNAPSHOT_MIN = 8 * 1024
SNAPSHOT_RATIO = 4
#: Segment size of the stores this saver makes (``path=``): ``list()`` walks the newest
#: segment's headers before its first item, so smaller is quicker to start, larger fewer files.
SEGMENT_BYTES = 1 << 20
#: Checkpoints whose record this saver remembers per thread (read or written lately).
KNOWN = 1024
#: Namespaces whose channel map and delta bases this saver keeps per thread.
NAMESPACES = 64
_List = list  # the class below defines a method named list
_T = TypeVar("_T")


def run_id_for(thread_id: str) -> str:
    """The store's run id for a LangGraph thread id (any string maps to a safe folder name)."""
    return RUN_PREFIX + hashlib.sha256(str(thread_id).encode()).hexdigest()[:40]


def _vkey(version: Any) -> str:
    """A channel version as a JSON object key (1 and "1" stay distinct)."""
    return json.dumps(version)


# -- the records, checked ---------------------------------------------------------------------


def _typed(obj: Any, what: str) -> list[str]:
    if type(obj) is not list or len(obj) != 2 or type(obj[0]) is not str or type(obj[1]) is not str:
        raise PayloadError(f"{what} is not [type, base64]")
    return obj


def _ref(v: Any, n: int, what: str) -> list[int]:
    """A reference to an earlier record: ``[number, offset in its segment]`` (offset -1:
    unknown; a hint the reader checks)."""
    if (
        type(v) is not list
        or len(v) != 2
        or type(v[0]) is not int
        or type(v[1]) is not int
        or not 1 <= v[0] < n
        or v[1] < -1
    ):
        raise PayloadError(f"{what} {str(v)[:40]!r} is not [number, offset] of an earlier record")
    return v


def _refs(v: Any, n: int, what: str) -> list[list[int]]:
    if type(v) is not list:
        raise PayloadError(f"{what} is not a list of record references")
    for x in v:
        _ref(x, n, what)
    return v


def _merge(*lists: Sequence[list[int]]) -> list[list[int]]:
    """References, one per record, in record order."""
    return sorted({r[0]: r for refs in lists for r in refs}.values())


def _blob(obj: Any, ch: str, n: int) -> list[Any]:
    """A value of channel ``ch``, whole: ``[type, base64]`` or ``[type, text, "r"]`` (its
    bytes as latin-1 text, for text-like values: cheaper to read than base64); or a delta:
    ``[type, head, base_version, skip, tail]`` (format 1: the value's bytes are ``head + bytes
    of base_version[skip:] + tail``), and in format 2 also ``base_ref, index`` (the record
    holding the base; deltas since the last whole value) and ``"r"`` when head and tail are
    latin-1 text."""
    if type(obj) is not list:
        raise PayloadError(f"blob of channel {ch!r} is not a list")
    size = len(obj)
    if size in (5, 7, 8):
        if (
            type(obj[0]) is str
            and type(obj[1]) is str
            and type(obj[2]) is str
            and type(obj[3]) is int
            and obj[3] >= 0
            and type(obj[4]) is str
            and (size != 8 or obj[7] == "r")
        ):
            if size > 5:
                _ref(obj[5], n, f"the base record of channel {ch!r}")
                if type(obj[6]) is not int or obj[6] < 1:
                    raise PayloadError(f"the delta index of channel {ch!r} is not positive")
            return obj
        raise PayloadError(f"blob of channel {ch!r} is not a delta [type, head, base, skip, ...]")
    if (
        size not in (2, 3)
        or type(obj[0]) is not str
        or type(obj[1]) is not str
        or (size == 3 and obj[2] != "r")
    ):
        raise PayloadError(f"blob of channel {ch!r} is not [type, base64] or [type, text, 'r']")
    return obj


def _str(obj: Any, what: str) -> str:
    if not isinstance(obj, str):
        raise PayloadError(f"{what} is not a string")
    return obj


def _offset(data: dict[str, Any]) -> int:
    """Where the record says it starts in its segment (-1: it does not say)."""
    o = data.get("o", -1)
    if type(o) is not int or o < -1:
        raise PayloadError("o (the record's offset) is not an integer")
    return o


def check_record(n: int, data: Any) -> str:
    """Check that ``data`` is a saver record that may be record ``n`` of its thread (every
    field, and that the records it names come before it); return its kind. Raises
    :class:`PayloadError`: nothing it accepts makes a reader fail later."""
    if not isinstance(data, dict):
        raise PayloadError("a saver record is not an object")
    kind = data.get("t")
    if kind == "thread":
        _str(data.get("thread_id"), "thread_id")
        v = data.get("v", 1)
        if type(v) is not int or v < 1:
            raise PayloadError("the thread record's format is not a positive integer")
    elif kind == "cp":
        _str(data.get("ns"), "ns")
        _str(data.get("id"), "id")
        parent = data.get("parent")
        if parent is not None:
            _str(parent, "parent")
        _typed(data.get("cp"), "cp")
        _typed(data.get("md"), "md")
        blobs = data.get("blobs")
        if not isinstance(blobs, dict):
            raise PayloadError("blobs is not an object")
        for ch, item in blobs.items():
            if type(item) is not list or len(item) != 2 or type(item[0]) is not str:
                raise PayloadError(f"blob of channel {ch!r} is not [version, typed]")
            _blob(item[1], ch, n)
        at = data.get("at")
        if at is not None:
            if type(at) is not dict:
                raise PayloadError("at is not an object")
            for ch, ref in at.items():
                if ref != 0:
                    _ref(ref, n, f"at[{ch!r}]")
        if data.get("up") is not None:
            _ref(data["up"], n, "up")
        for key in ("pw", "ww"):
            if data.get(key) is not None:
                _refs(data[key], n, key)
        _offset(data)
    elif kind == "w":
        _str(data.get("ns"), "ns")
        _str(data.get("cid"), "cid")
        items = data.get("w")
        if not isinstance(items, list):
            raise PayloadError("w is not a list")
        for item in items:
            if (
                type(item) is not list
                or len(item) != 5
                or type(item[0]) is not str
                or type(item[1]) is not int
                or type(item[2]) is not str
                or type(item[4]) is not str
            ):
                raise PayloadError("a write is not [task_id, idx, channel, typed, task_path]")
            _typed(item[3], "a write")
        _offset(data)
    elif kind == "prune":
        keep = data.get("keep")
        if not isinstance(keep, dict) or not all(isinstance(v, str) for v in keep.values()):
            raise PayloadError("keep is not an object of checkpoint ids")
    else:
        raise PayloadError(f"unknown saver record type {str(kind)[:40]!r}")
    return str(kind)


def saver_reducer(state: dict[str, Any], data: Any) -> None:
    """Fold one record into the thread's index (shapes are checked before anything changes).

    The index, not the history: ``thread_id``; ``v`` (the format); ``n`` (records folded: the
    number of the last); ``heads[ns] = [checkpoint_id, ref, [write refs]]`` (the newest
    checkpoint of each namespace, by id, where its record is, and the writes made to it);
    ``late[ns][checkpoint_id] = [write refs]`` (writes to a checkpoint while it was not the
    newest); ``top`` (the largest id seen) and ``ooo`` (an id arrived out of order: ``list``
    then sorts). A ref is ``[record number, offset in its segment]``. Its size grows with the
    number of namespaces, never with the number of checkpoints.
    """
    n = state.get("n", 0) + 1
    kind = check_record(n, data)
    if kind == "thread":
        state["thread_id"] = data["thread_id"]
        state["v"] = data.get("v", 1)
        state.setdefault("heads", {})
        state.setdefault("late", {})
        state.setdefault("top", "")
        state.setdefault("ooo", False)
        state["n"] = n
        return
    if "thread_id" not in state:
        raise PayloadError("a saver record before the thread record")
    heads, late = state["heads"], state["late"]
    ref = [n, data.get("o", -1)]
    if kind == "cp":
        ns, cid = data["ns"], data["id"]
        if cid <= state["top"]:
            state["ooo"] = True
        else:
            state["top"] = cid
        h = heads.get(ns)
        early = late.get(ns, {}).pop(cid, [])
        if ns in late and not late[ns]:
            del late[ns]
        if h is None or cid > h[0]:
            heads[ns] = [cid, ref, _merge(data.get("ww") or (), early)]
        elif cid == h[0]:
            h[1] = ref
            h[2] = _merge(h[2], early)
        elif early:
            late.setdefault(ns, {})[cid] = early
    elif kind == "w":
        ns, cid = data["ns"], data["cid"]
        h = heads.get(ns)
        if h is not None and h[0] == cid:
            h[2].append(ref)
        else:
            late.setdefault(ns, {}).setdefault(cid, []).append(ref)
    elif kind == "prune":
        keep = data["keep"]
        state["heads"] = {ns: h for ns, h in heads.items() if keep.get(ns) == h[0]}
        state["late"] = {ns: {keep[ns]: m[keep[ns]]} for ns, m in late.items() if keep.get(ns) in m}
    state["n"] = n


def _check_index(state: dict[str, Any]) -> None:
    """A snapshot's index, checked before it is trusted (else the journal is replayed)."""
    if not state:
        return
    n = state.get("n")
    if (
        set(state) != {"thread_id", "v", "n", "heads", "late", "top", "ooo"}
        or not isinstance(state["thread_id"], str)
        or type(state["v"]) is not int
        or type(n) is not int
        or n < 1
        or not isinstance(state["top"], str)
        or type(state["ooo"]) is not bool
        or not isinstance(state["heads"], dict)
        or not isinstance(state["late"], dict)
    ):
        raise PayloadError("not a CrashpointSaver index of this format")
    for h in state["heads"].values():
        if not isinstance(h, list) or len(h) != 3 or not isinstance(h[0], str):
            raise PayloadError("a head is not [checkpoint id, ref, write refs]")
        _ref(h[1], n + 1, "a head's record")
        _refs(h[2], n + 1, "a head's writes")
    for m in state["late"].values():
        if not isinstance(m, dict):
            raise PayloadError("late is not an object of objects")
        for w in m.values():
            _refs(w, n + 1, "late writes")


register_history_index(saver_reducer, _check_index)


# -- values: base64, deltas ---------------------------------------------------------------------


if sys.version_info >= (3, 11):
    _a2b: Callable[[str], bytes] = functools.partial(binascii.a2b_base64, strict_mode=True)
else:  # pragma: no cover - Python 3.10: the same check, a regex first
    _a2b = functools.partial(base64.b64decode, validate=True)


def _b64(text: str) -> bytes:
    try:
        return _a2b(text)
    except (binascii.Error, ValueError) as exc:
        raise PayloadError(f"a stored value is not base64: {exc}") from exc


def _common_prefix(a: bytes, b: bytes) -> int:
    """Length of the common prefix of ``a`` and ``b`` (slices compare with memcmp)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _delta(base: bytes, new: bytes) -> tuple[int, int, int] | None:
    """How ``new`` is ``new[:k] + base[j:] + new[k + len(base) - j:]`` (a value that grew at
    its end, its length header changed: an appended list, string or map), as ``(k, j, end)``;
    None if it is not. Tries heads of a few bytes only (serialization headers)."""
    if len(new) < len(base):
        return None
    if len(base) >= 32 and new.startswith(base):  # grew at its end, no length header
        return 0, 0, len(base)
    p = _common_prefix(base, new)
    for j in range(p, min(p + 10, len(base) - 31)):  # at least 32 bytes to share
        rest = len(base) - j
        for k in range(p, min(p + 10, len(new) - rest + 1)):
            if new[k : k + rest] == base[j:]:
                return k, j, k + rest
    return None


def _rebuild(whole: bytes, deltas: Sequence[tuple[bytes, int, bytes]]) -> bytes:
    """The value after applying ``deltas`` (oldest first; each makes ``head + value[skip:] +
    tail``) to ``whole``, copying the large middle once, not once per delta."""
    prefix, base, off = b"", memoryview(whole), 0
    tails: list[bytes] = []
    for head, skip, tail in deltas:
        # the value is prefix + base[off:] + tails
        if skip <= len(prefix):
            prefix = prefix[skip:]
        elif skip - len(prefix) <= len(base) - off:
            off += skip - len(prefix)
            prefix = b""
        else:  # the cut reaches into the tails: join once, go on from there
            now = b"".join([prefix, base[off:], *tails])
            prefix, base, off, tails = b"", memoryview(now)[skip:], 0, []
        prefix = head + prefix
        tails.append(tail)
    return b"".join([prefix, base[off:], *tails])


def _b64len(text: str) -> int:
    """The length of the bytes a (checked) base64 text decodes to, without decoding it."""
    return len(text) * 3 // 4 - (2 if text.endswith("==") else 1 if text.endswith("=") else 0)


_CONTROL = bytes(range(0x20))
_WIDE = b'"\\' + bytes(range(0x80, 0x100))


def _text_of(data: bytes) -> str | None:
    """``data`` as latin-1 text if that is no larger in a JSON record than base64 would be
    (bytes of text: a few escapes), else None."""
    extra = 5 * (len(data) - len(data.translate(None, _CONTROL)))
    if extra <= len(data) // 3:
        extra += len(data) - len(data.translate(None, _WIDE))
    return data.decode("latin-1") if extra <= len(data) // 3 else None


def _raw(text: str) -> bytes:
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        raise PayloadError("a stored value is not latin-1 text") from None


def _value_bytes(blob: Sequence[Any]) -> bytes:
    """A whole value's bytes."""
    return _raw(blob[1]) if len(blob) == 3 else _b64(blob[1])


def _delta_bytes(blob: Sequence[Any]) -> tuple[bytes, int, bytes]:
    """A delta's (head, skip, tail)."""
    dec = _raw if len(blob) == 8 else _b64
    return dec(blob[1]), blob[3], dec(blob[4])


def _whole(typ: str, data: bytes) -> list[str]:
    text = _text_of(data)
    return [typ, text, "r"] if text is not None else _enc((typ, data))


def _enc(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _skip_base(index: int) -> int:
    """The version a delta numbered ``index`` is taken against (see :data:`FANOUT`)."""
    step = 1
    while index % (step * FANOUT) == 0:
        step *= FANOUT
    return index - step


@dataclass(slots=True)
class _Anchor:
    """A stored version of a value that later deltas may be taken against (``ref``: its
    record): its bytes from ``skip`` on are ``rest`` bytes of the newest version, from ``pos``."""

    index: int
    vkey: str
    ref: _List[int]
    skip: int
    rest: int
    pos: int


@dataclass(slots=True)
class _Base:
    """What the next delta of one channel is taken against: the newest version's bytes, and
    the versions of its chain (newest first), placed in them."""

    typ: str
    data: bytes
    since: int  # delta bytes written since the last whole value
    chain: _List[_Anchor]


def _next_delta(base: _Base, new: bytes) -> tuple[bytes, _Anchor, bytes, _List[_Anchor]] | None:
    """``(head, anchor, tail, chain)``: ``new`` is ``head + bytes of anchor[anchor.skip:] +
    tail``, anchor the version the skip rule names; chain: the anchors placed in ``new``."""
    want = _skip_base(base.chain[0].index + 1)
    rel = _delta(base.data, new)
    if rel is None:
        return None
    k, j, _end = rel  # new[k:_end] == base.data[j:]
    kept: _List[_Anchor] = []
    for a in base.chain:
        if a.index > want:
            continue
        pos, skip, rest = a.pos, a.skip, a.rest
        if pos < j:  # its first bytes are not in new: leave them out too
            skip, rest, pos = skip + (j - pos), rest - (j - pos), j
            if rest <= 0:
                break
        kept.append(_Anchor(a.index, a.vkey, a.ref, skip, rest, k + pos - j))
    if not kept or kept[0].index != want:
        return None
    a = kept[0]
    return new[: a.pos], a, new[a.pos + a.rest :], kept


# -- the saver ---------------------------------------------------------------------------------

_Ref = _List[int]  # [record number, offset in its segment]
_Chans = dict[str, tuple[str, _Ref | int]]  # channel -> (version, ref of its record or 0)


class _View:
    """A thread's index and a reader of its records (a locked, open thread, or a look from
    outside), with the checkpoints and channel maps recently read or written."""

    def __init__(
        self, thread_id: str, state: dict[str, Any], reader: JournalReader, *, remember: bool
    ) -> None:
        self.thread_id = thread_id
        self.state = state
        self.reader = reader
        self.remember_known = remember
        # (ns, checkpoint id) -> [ref, write refs or None: not known]
        self.known: OrderedDict[tuple[str, str], _List[Any]] = OrderedDict()
        self.maps: OrderedDict[str, tuple[str, _Chans]] = OrderedDict()
        self.bases: dict[tuple[str, str], _Base] = {}

    def record(self, ref: Sequence[int]) -> dict[str, Any]:
        rec: dict[str, Any] = self.reader.get(ref[0], ref[1])
        return rec

    def remember(self, ns: str, cid: str, ref: _Ref, writes: _List[_Ref] | None) -> None:
        if not self.remember_known:
            return
        self.known[(ns, cid)] = [ref, writes]
        self.known.move_to_end((ns, cid))
        while len(self.known) > KNOWN:
            self.known.popitem(last=False)

    def keep_map(self, ns: str, cid: str, chans: _Chans) -> None:
        if not self.remember_known:
            return
        self.maps[ns] = (cid, chans)
        self.maps.move_to_end(ns)
        while len(self.maps) > NAMESPACES:
            old, _ = self.maps.popitem(last=False)
            for key in [k for k in self.bases if k[0] == old]:
                del self.bases[key]

    def stale(self, ref: Sequence[int], what: str) -> CheckpointCorrupt:
        return CheckpointCorrupt(
            self.reader.folder, 0, f"record {ref[0]} is not {what}: the thread's index is stale"
        )

    def close(self) -> None:
        self.reader.close()


class _Held(_View):
    """A thread this saver holds: its journal (the lock) too."""

    def __init__(self, thread_id: str, journal: RunJournal) -> None:
        super().__init__(
            thread_id,
            journal.state,
            JournalReader(journal.folder, check=check_record),
            remember=True,
        )
        self.journal = journal

    def close(self) -> None:
        try:
            self.reader.close()
        finally:
            self.journal.close()


class CrashpointSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a crashpoint :class:`~crashpoint.checkpoint.Store`.

    ``path`` is the store's folder (or pass ``store=``). ``durability`` is the store's
    (``"always"``: every put is fdatasync'ed before it returns). ``lock_timeout``: how long a
    second writer of a thread waits before :class:`~crashpoint.errors.RunLocked`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        store: Store | None = None,
        durability: str = "always",
        lock_timeout: float = 0.0,
        on_corrupt: str = "raise",
        lock_on_read: bool = True,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        if store is None:
            if path is None:
                raise WrongArgumentType("CrashpointSaver needs a folder (path) or a Store (store=)")
            store = Store(
                path,
                durability=durability,
                lock_timeout=lock_timeout,
                on_corrupt=on_corrupt,  # type: ignore[arg-type]
                segment_bytes=SEGMENT_BYTES,
            )
        self.store = store
        self.lock_on_read = lock_on_read
        self._held: dict[str, _Held] = {}
        self._mutex = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close every open thread and release its lock."""
        with self._mutex:
            held, self._held = self._held, {}
            for th in held.values():
                th.close()

    def release(self, thread_id: str) -> None:
        """Close one thread and release its lock (another process may then resume it)."""
        with self._mutex:
            th = self._held.pop(str(thread_id), None)
            if th is not None:
                th.close()

    def __enter__(self) -> CrashpointSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> CrashpointSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- threads -----------------------------------------------------------------------------

    def _open_journal(self, thread_id: str, *, full: bool = False) -> RunJournal:
        """The thread's journal, opened (lock + generation, torn tail repaired, the index
        loaded); ``full``: the index rebuilt from every record."""
        # the lock is taken at once (a second resumer waits or is refused before any node
        # runs); its new generation is synced with the first write, so a resume that only
        # reads costs no fsync
        j = self.store.open(
            run_id_for(thread_id), reducer=saver_reducer, full=full, defer_sync=True
        )
        try:
            st = j.state
            if "thread_id" not in st:
                if j.seq:
                    raise PayloadError(f"{j.folder}: records without a thread record")
                j.append({"t": "thread", "thread_id": thread_id, "v": FORMAT}, redact=False)
                # a status of its own: the Supervisor never takes an idle thread for an
                # interrupted run, and pruning never removes it (delete_thread does)
                j.set_meta(status="langgraph-thread", thread_id=thread_id)
            elif st["thread_id"] != thread_id:
                raise PayloadError(
                    f"{j.folder}: holds thread {st['thread_id']!r}, "
                    f"not {thread_id!r} (a hash collision or a copied folder)"
                )
            elif st.get("n") != j.seq and not full:  # an index that ends elsewhere: rebuild
                j.close()
                return self._open_journal(thread_id, full=True)
            self._maybe_snapshot(j)  # no snapshot yet, or a damaged one passed over
        except BaseException:
            if not j.closed:
                j.close()
            raise
        return j

    def _hold(self, thread_id: str, *, full: bool = False) -> _Held:
        th = self._held.get(thread_id)
        if th is not None and not th.journal.closed and not full:
            return th
        if th is not None:
            self.release(thread_id)
        th = _Held(thread_id, self._open_journal(thread_id, full=full))
        self._held[thread_id] = th
        return th

    def _maybe_snapshot(self, j: RunJournal) -> None:
        if j.since_snapshot >= max(SNAPSHOT_MIN, SNAPSHOT_RATIO * j.snapshot_bytes):
            j.snapshot(required=False)  # a failed snapshot costs speed only: the journal is whole

    def _peek(self, thread_id: str, *, full: bool = False) -> _View | None:
        """The thread's index read from disk without its lock (None: no such thread)."""
        rid = run_id_for(thread_id)
        try:
            loaded = self.store.read(rid, reducer=saver_reducer, full=full)
        except RunNotFound:
            return None
        st = loaded.state
        if st.get("thread_id") != thread_id:
            return None
        if st.get("n") != loaded.seq and not full:
            return self._peek(thread_id, full=True)
        reader = JournalReader(self.store.path(rid), check=check_record)
        return _View(thread_id, st, reader, remember=False)

    def _with(self, thread_id: str, lock: bool, fn: Callable[[_View], _T]) -> _T | None:
        """``fn`` on the thread's view, once more on an index rebuilt from every record if
        what the index pointed at did not check out (the rebuild raises on real damage, or
        rolls back with ``on_corrupt="rollback"``). None: the thread does not exist."""
        if lock or thread_id in self._held:
            th = self._hold(thread_id)
            try:
                return fn(th)
            except (CheckpointCorrupt, PayloadError):
                th = self._hold(thread_id, full=True)
                return _corrupt_if_payload(th, fn)
        view = self._peek(thread_id)
        if view is None:
            return None
        try:
            return fn(view)
        except (CheckpointCorrupt, PayloadError):
            view.close()
            view = self._peek(thread_id, full=True)
            if view is None:
                raise
            return _corrupt_if_payload(view, fn)
        finally:
            if view is not None:
                view.close()

    def _threads(self) -> _List[str]:
        out = []
        for rid in self.store.run_ids():
            if rid.startswith(RUN_PREFIX):
                tid = self.store.meta(rid).get("thread_id")
                if isinstance(tid, str):
                    out.append(tid)
        for tid in self._held:
            if tid not in out:
                out.append(tid)
        return out

    # -- reading -----------------------------------------------------------------------------

    def _dec(self, typed: Sequence[str]) -> Any:
        return self.serde.loads_typed((typed[0], _b64(typed[1])))

    def _locate(self, v: _View, ns: str, cid: str) -> tuple[_Ref, _List[_Ref]] | None:
        """Where checkpoint ``cid``'s newest record is, and its write records: from the index,
        from what this saver read or wrote lately, else by reading the journal newest first
        (up to that record: its writes all follow it, or are listed in it)."""
        h = v.state["heads"].get(ns)
        if h is not None and h[0] == cid:
            return h[1], _List(h[2])
        k = v.known.get((ns, cid))
        if k is not None and k[1] is not None:
            v.known.move_to_end((ns, cid))
            return k[0], _List(k[1])
        found = self._scan_for(v, ns, cid)
        if found is not None:
            v.remember(ns, cid, found[0], _List(found[1]))
        return found

    def _scan_for(self, v: _View, ns: str, cid: str) -> tuple[_Ref, _List[_Ref]] | None:
        writes: _List[_Ref] = []
        at: _Ref | None = None
        for seq, d in v.reader.newest_first(v.state["n"]):
            t = d["t"]
            if t == "w":
                if d["ns"] == ns and d["cid"] == cid:
                    writes.append([seq, d.get("o", -1)])
            elif t == "cp":
                if at is None and d["ns"] == ns and d["id"] == cid:
                    at = [seq, d.get("o", -1)]
                    if "o" in d:  # format 2: the writes made before it are listed in it
                        return at, _merge(writes, d.get("ww") or ())
            elif t == "prune" and d["keep"].get(ns) != cid:
                break  # everything of it before this record was pruned
        return None if at is None else (at, _merge(writes))

    def _source(
        self, v: _View, rec: dict[str, Any], ref: _Ref, ns: str, ch: str, vk: str
    ) -> _Ref | int:
        """The record holding version ``vk`` of channel ``ch`` of checkpoint record ``rec``
        (at ``ref``); 0: no value stored."""
        b = rec["blobs"].get(ch)
        if b is not None and b[0] == vk:
            return ref
        at = rec.get("at")
        if at is not None:
            src: _Ref | int = at.get(ch, 0)
            return src
        return self._find_blob(v, ref[0] - 1, ns, ch, vk)  # format 1: look back for it

    def _find_blob(self, v: _View, last: int, ns: str, ch: str, vk: str) -> _Ref | int:
        for seq, d in v.reader.newest_first(last):
            if d["t"] == "cp" and d["ns"] == ns:
                b = d["blobs"].get(ch)
                if b is not None and b[0] == vk:
                    return [seq, d.get("o", -1)]
        return 0

    def _value(
        self, v: _View, src: _Ref, ns: str, ch: str, vk: str, read: dict[int, dict[str, Any]]
    ) -> tuple[str, bytes, _List[tuple[_Ref, str, _List[Any]]]]:
        """A channel value's (type, bytes), following its delta chain to a whole copy; and
        the chain (ref, version, blob), newest first. ``read``: records already read."""
        chain: _List[tuple[_Ref, str, _List[Any]]] = []
        ref, want = src, vk
        while True:
            rec = read.get(ref[0]) or v.record(ref)
            b = rec["blobs"].get(ch) if rec["t"] == "cp" and rec["ns"] == ns else None
            if b is None or b[0] != want:
                raise v.stale(ref, f"version {want} of channel {ch!r}")
            blob = b[1]
            chain.append((ref, want, blob))
            if len(blob) <= 3:
                break
            if len(blob) >= 7:
                ref, want = blob[5], blob[2]
                continue
            want = blob[2]  # format 1: the base is found by its version
            found = self._find_blob(v, ref[0] - 1, ns, ch, want)
            if not isinstance(found, list):
                raise PayloadError(
                    f"a delta of channel {ch!r} names a base that is missing ({want})"
                )
            ref = found
        whole = chain[-1][2]
        data = _rebuild(_value_bytes(whole), [_delta_bytes(b) for _, _, b in reversed(chain[:-1])])
        return chain[0][2][0], data, chain

    def _writes(self, v: _View, ns: str, cid: str, refs: Sequence[_Ref]) -> _List[Any]:
        folded: dict[tuple[str, int], tuple[str, str, _List[str], str, int]] = {}
        for ref in _merge(refs):
            w = v.record(ref)
            if w["t"] != "w" or w["ns"] != ns or w["cid"] != cid:
                raise v.stale(ref, f"a write to checkpoint {cid}")
            for task, idx, ch, typed, path in w["w"]:
                if idx >= 0 and (task, idx) in folded:
                    continue  # a regular write is kept from its first put, a special replaced
                folded[(task, idx)] = (task, ch, typed, path, idx)
        ordered = sorted(folded.values(), key=lambda f: writes_sort_key(f[3], f[0], f[4]))
        return [(f[0], f[1], self._dec(f[2])) for f in ordered]

    def _tuple(
        self,
        v: _View,
        ns: str,
        cid: str,
        ref: _Ref,
        writes: Sequence[_Ref],
        rec: dict[str, Any] | None = None,
    ) -> CheckpointTuple:
        if rec is None:
            rec = v.record(ref)
        if rec["t"] != "cp" or rec["ns"] != ns or rec["id"] != cid:
            raise v.stale(ref, f"checkpoint {cid} of namespace {ns!r}")
        checkpoint: Checkpoint = self._dec(rec["cp"])
        values: dict[str, Any] = {}
        chans: _Chans = {}
        read = {ref[0]: rec}
        for ch, ver in checkpoint.get("channel_versions", {}).items():
            vk = _vkey(ver)
            src = self._source(v, rec, ref, ns, ch, vk)
            chans[ch] = (vk, src)
            if not isinstance(src, list):
                continue
            typ, data, chain = self._value(v, src, ns, ch, vk, read)
            if typ != "empty":
                values[ch] = self.serde.loads_typed((typ, data))
            if v.remember_known and len(data) >= 64 and (ns, ch) not in v.bases:
                base = _seed(typ, data, chain)
                if base is not None:
                    v.bases[(ns, ch)] = base
        pending = self._writes(v, ns, cid, writes)
        v.remember(ns, cid, ref, _List(writes))
        parent = rec["parent"]
        up, pw = rec.get("up"), rec.get("pw")
        # the parent's writes: those it had when this was put, and those made since
        if parent and up and pw is not None and not v.state["ooo"] and (ns, parent) not in v.known:
            later = v.state["late"].get(ns, {}).get(parent, ())
            v.remember(ns, parent, up, _merge(pw, later))
        v.keep_map(ns, cid, chans)
        thread_id = v.thread_id
        return CheckpointTuple(
            config={
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
            },
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self._dec(rec["md"]),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=pending,
        )

    # -- the BaseCheckpointSaver interface ---------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "")
        cid = get_checkpoint_id(config)

        def get(v: _View) -> CheckpointTuple | None:
            if cid:
                loc = self._locate(v, ns, cid)
                if loc is None:
                    return None
                return self._tuple(v, ns, cid, loc[0], loc[1])
            h = v.state["heads"].get(ns)
            if h is None:
                return None
            return self._tuple(v, ns, h[0], h[1], h[2])

        with self._mutex:
            # LangGraph reads the thread first when it starts or resumes a run: taking the
            # thread's lock here makes a second resumer wait or refuse before any node runs
            return self._with(thread_id, self.lock_on_read, get)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The thread's checkpoints (all threads' without ``config``), newest first, read from
        disk as they are consumed: nothing is gathered in memory first (but for a thread whose
        checkpoint ids arrived out of order: then their ids and record numbers are, and
        sorted)."""
        threads = [str(config["configurable"]["thread_id"])] if config else None
        want_ns = config["configurable"].get("checkpoint_ns") if config else None
        want_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        if limit is not None and limit <= 0:
            return
        count = 0
        with self._mutex:
            if threads is None:
                threads = self._threads()
        for thread_id in threads:
            for tup in self._list_thread(thread_id, want_ns, want_id, before_id, filter):
                yield tup
                count += 1
                if limit is not None and count >= limit:
                    return

    def _list_thread(
        self,
        thread_id: str,
        want_ns: str | None,
        want_id: str | None,
        before_id: str | None,
        filter: dict[str, Any] | None,
    ) -> Iterator[CheckpointTuple]:
        with self._mutex:
            th = self._held.get(thread_id)
            if th is not None and not th.journal.closed:
                view: _View | None = _View(
                    thread_id,
                    {**th.state, "heads": {}, "late": {}},
                    JournalReader(th.journal.folder, check=check_record),
                    remember=False,
                )
            else:
                view = self._peek(thread_id)
        if view is None:
            return
        try:
            items = (
                self._list_sorted(view, want_ns)
                if view.state["ooo"] or view.state["v"] < FORMAT
                else self._list_newest_first(view, want_ns)
            )
            while True:
                with self._mutex:
                    got = next(items, None)
                    if got is None:
                        return
                    ns, cid, ref, writes, rec = got
                    if want_id and cid != want_id:
                        continue
                    if before_id and cid >= before_id:
                        continue
                    if filter:
                        md = self._dec(rec["md"])
                        if not all(md.get(k) == val for k, val in filter.items()):
                            continue
                    tup = self._tuple(view, ns, cid, ref, writes, rec)
                yield tup
        finally:
            view.close()

    def _list_newest_first(
        self, v: _View, want_ns: str | None
    ) -> Iterator[tuple[str, str, _Ref, _List[_Ref], dict[str, Any]]]:
        pending: dict[tuple[str, str], _List[_Ref]] = {}
        alive: set[tuple[str, str]] | None = None
        for seq, d in v.reader.newest_first(v.state["n"]):
            t = d["t"]
            if t == "prune":
                keep = set(d["keep"].items())
                alive = keep if alive is None else alive & keep
                continue
            if t not in ("cp", "w"):
                continue
            ns = d["ns"]
            if want_ns is not None and ns != want_ns:
                continue
            ref = [seq, d.get("o", -1)]
            if t == "w":
                key = (ns, d["cid"])
                if alive is None or key in alive:
                    pending.setdefault(key, []).append(ref)
            else:
                key = (ns, d["id"])
                if alive is None or key in alive:
                    writes = _merge(pending.pop(key, ()), d.get("ww") or ())
                    yield ns, d["id"], ref, writes, d

    def _list_sorted(
        self, v: _View, want_ns: str | None
    ) -> Iterator[tuple[str, str, _Ref, _List[_Ref], dict[str, Any]]]:
        """For ids out of journal order (or format 1): gather (id, record, writes) of every
        checkpoint first, then read them newest id first."""
        newest: dict[tuple[str, str], _Ref] = {}
        writes: dict[tuple[str, str], _List[_Ref]] = {}
        alive: set[tuple[str, str]] | None = None
        for seq, d in v.reader.newest_first(v.state["n"]):
            t = d["t"]
            if t == "prune":
                keep = set(d["keep"].items())
                alive = keep if alive is None else alive & keep
                continue
            if t not in ("cp", "w"):
                continue
            ns = d["ns"]
            if want_ns is not None and ns != want_ns:
                continue
            key = (ns, d["cid"] if t == "w" else d["id"])
            if alive is not None and key not in alive:
                continue
            ref = [seq, d.get("o", -1)]
            if t == "w":
                writes.setdefault(key, []).append(ref)
            elif key not in newest:
                newest[key] = ref
                writes.setdefault(key, []).extend(d.get("ww") or ())
        for key in sorted(newest, key=lambda k: (k[1], k[0]), reverse=True):
            ref = newest[key]
            yield key[0], key[1], ref, _merge(writes.get(key, ())), v.record(ref)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "")
        parent = conf.get("checkpoint_id")
        c = checkpoint.copy()
        values: dict[str, Any] = c.pop("channel_values")  # type: ignore[misc]
        md = _enc(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)))
        cp = _enc(self.serde.dumps_typed(c))

        def put(v: _View) -> None:
            assert isinstance(v, _Held)
            self._put(v, ns, parent, checkpoint, cp, md, values, new_versions)

        with self._mutex:
            self._with(thread_id, True, put)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _put(
        self,
        th: _Held,
        ns: str,
        parent: str | None,
        checkpoint: Checkpoint,
        cp: _List[str],
        md: _List[str],
        values: dict[str, Any],
        new_versions: ChannelVersions,
    ) -> None:
        j = th.journal
        st = th.state
        cid = checkpoint["id"]
        pmap, up, pw = self._parent(th, ns, parent)
        new_id = cid > st["top"]
        if new_id:  # writes made to it before it was put (async durability)
            ww = _merge(st["late"].get(ns, {}).get(cid, ()))
        else:  # a checkpoint put again: all its writes so far
            loc_self = self._locate(th, ns, cid)
            ww = loc_self[1] if loc_self is not None else []
        own = [j.seq + 1, j.position[1]]  # where this record goes
        blobs: dict[str, _List[Any]] = {}
        bases: dict[str, _Base | None] = {}
        for ch, ver in new_versions.items():
            vk = _vkey(ver)
            if ch not in values:
                blobs[ch] = [vk, ["empty", ""]]
                continue
            typ, data = self.serde.dumps_typed(values[ch])
            blob, base = self._encode(th, ns, ch, vk, typ, data, own)
            blobs[ch] = [vk, blob]
            bases[ch] = base
        at: dict[str, _Ref | int] = {}
        chans: _Chans = {}
        for ch, ver in checkpoint.get("channel_versions", {}).items():
            vk = _vkey(ver)
            b = blobs.get(ch)
            if b is not None and b[0] == vk:
                chans[ch] = (vk, own)
                continue
            loc = pmap.get(ch)
            src = loc[1] if loc is not None and loc[0] == vk else self._blob_for_put(th, ns, ch, vk)
            at[ch] = src
            chans[ch] = (vk, src)
        record: dict[str, Any] = {
            "t": "cp",
            "o": own[1],
            "ns": ns,
            "id": cid,
            "parent": parent,
            "cp": cp,
            "md": md,
            "blobs": blobs,
            "at": at,
            "up": up,
            "pw": pw,
        }
        if ww:
            record["ww"] = ww
        seq = j.append(record, redact=False)
        if seq != own[0]:  # pragma: no cover - the journal numbers records one by one
            raise CheckpointCorrupt(j.folder, own[1], f"record {seq} went where {own[0]} was due")
        # once the record is durable: what later puts and reads build on
        th.remember(ns, cid, own, _List(ww))
        th.keep_map(ns, cid, chans)
        for ch, base in bases.items():
            if base is None:
                th.bases.pop((ns, ch), None)
            else:
                th.bases[(ns, ch)] = base
        self._maybe_snapshot(j)

    def _parent(
        self, th: _Held, ns: str, parent: str | None
    ) -> tuple[_Chans, _Ref | None, _List[_Ref] | None]:
        """The parent checkpoint's channels (version, ref), its record and its writes."""
        if not parent:
            return {}, None, None
        m = th.maps.get(ns)
        loc = self._locate(th, ns, parent)
        if loc is None:  # not in the journal (a config from elsewhere)
            return (m[1] if m is not None and m[0] == parent else {}), None, None
        up, writes = loc
        if m is not None and m[0] == parent:
            return m[1], up, writes
        rec = th.record(up)
        if rec["t"] != "cp" or rec["ns"] != ns or rec["id"] != parent:
            raise th.stale(up, f"checkpoint {parent} of namespace {ns!r}")
        chans: _Chans = {}
        for ch, ver in self._dec(rec["cp"]).get("channel_versions", {}).items():
            vk = _vkey(ver)
            chans[ch] = (vk, self._source(th, rec, up, ns, ch, vk))
        return chans, up, writes

    def _blob_for_put(self, th: _Held, ns: str, ch: str, vk: str) -> _Ref | int:
        """Where a version the parent does not have was stored (a checkpoint put without its
        parent's config): the namespace's channel map, else the journal read back."""
        m = th.maps.get(ns)
        if m is not None:
            loc = m[1].get(ch)
            if loc is not None and loc[0] == vk:
                return loc[1]
        return self._find_blob(th, th.journal.seq, ns, ch, vk)

    def _encode(
        self, th: _Held, ns: str, ch: str, vk: str, typ: str, data: bytes, own: _Ref
    ) -> tuple[_List[Any], _Base | None]:
        """A channel value as a skip delta against an earlier version of it (see
        :data:`FANOUT`) while the deltas since its last whole copy stay under :data:`RESET`
        times its size, else whole; and the base for its next delta (None: small values)."""
        base = th.bases.get((ns, ch))
        if base is not None and base.typ == typ and len(data) >= 64:
            d = _next_delta(base, data)
            if d is not None:
                head, a, tail, kept = d
                size = len(head) + len(tail)
                if base.since + size <= RESET * len(data):
                    index = base.chain[0].index + 1
                    text = _text_of(head + tail)
                    blob: _List[Any] = [typ, "", a.vkey, a.skip, "", a.ref, index]
                    if text is not None:
                        blob[1], blob[4] = text[: len(head)], text[len(head) :]
                        blob.append("r")
                    else:
                        blob[1] = base64.b64encode(head).decode("ascii")
                        blob[4] = base64.b64encode(tail).decode("ascii")
                    chain = [_Anchor(index, vk, own, 0, len(data), 0), *kept]
                    return blob, _Base(typ, data, base.since + size, chain)
        whole = _whole(typ, data)
        if len(data) < 64:
            return whole, None
        return whole, _Base(typ, data, 0, [_Anchor(0, vk, own, 0, len(data), 0)])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "")
        cid = conf["checkpoint_id"]
        items = [
            [task_id, WRITES_IDX_MAP.get(ch, idx), ch, _enc(self.serde.dumps_typed(v)), task_path]
            for idx, (ch, v) in enumerate(writes)
        ]
        with self._mutex:
            th = self._hold(thread_id)
            j = th.journal
            o = j.position[1]
            seq = j.append({"t": "w", "o": o, "ns": ns, "cid": cid, "w": items}, redact=False)
            k = th.known.get((ns, cid))
            if k is not None and k[1] is not None:
                k[1].append([seq, o])
            self._maybe_snapshot(j)

    def delete_thread(self, thread_id: str) -> None:
        thread_id = str(thread_id)
        with self._mutex:
            self.release(thread_id)
            try:
                self.store.remove(run_id_for(thread_id))
            except RunNotFound:
                pass

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgument(
                f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}"
            )
        for tid in thread_ids:
            tid = str(tid)
            if strategy == "delete":
                self.delete_thread(tid)
                continue
            with self._mutex:
                if tid not in self._held and not self.store.exists(run_id_for(tid)):
                    continue
                th = self._hold(tid)
                keep = {ns: h[0] for ns, h in th.state["heads"].items()}
                th.journal.append({"t": "prune", "keep": keep}, redact=False)
                th.known.clear()
                self._maybe_snapshot(th.journal)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Monotonic string versions, like LangGraph's own savers (``<n:032>.<hash:016>``)."""
        cur: Any = current  # LangGraph may hand over an int version of another saver
        n = 0 if cur is None else cur if isinstance(cur, int) else int(str(cur).split(".")[0])
        return f"{n + 1:032}.{os.urandom(8).hex()}"

    # -- async: the same calls on a worker thread (fsync must not block the event loop) ------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = self.list(config, filter=filter, before=before, limit=limit)
        done = object()
        try:
            while True:
                item = await asyncio.to_thread(next, items, done)
                if item is done:
                    return
                yield item  # type: ignore[misc]
        finally:
            await asyncio.to_thread(items.close)  # type: ignore[attr-defined]

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _corrupt_if_payload(v: _View, fn: Callable[[_View], _T]) -> _T:
    """``fn(v)``; stored content that does not decode (a checksummed record the saver never
    writes) raised as :class:`CheckpointCorrupt` naming the thread's folder."""
    try:
        return fn(v)
    except CheckpointCorrupt:
        raise
    except PayloadError as exc:
        raise CheckpointCorrupt(
            v.reader.folder, 0, f"a stored value does not decode: {exc}"
        ) from exc


def _seed(typ: str, data: bytes, chain: Sequence[tuple[_Ref, str, _List[Any]]]) -> _Base | None:
    """The delta base of a value just read (``chain``: its versions, newest first, down to a
    whole copy), so that the next put of it is a delta too, not a whole copy."""
    if len(chain[-1][2]) > 3 or any(len(b) < 7 for _, _, b in chain[:-1]):
        return None  # format 1: the next put writes it whole
    lengths = [0] * len(chain)  # each version's length, from the whole copy outward
    whole = chain[-1][2]
    lengths[-1] = len(whole[1]) if len(whole) == 3 else _b64len(whole[1])
    since = 0
    for i in range(len(chain) - 2, -1, -1):
        b = chain[i][2]
        size = len if len(b) == 8 else _b64len
        head, tail = size(b[1]), size(b[4])
        lengths[i] = head + lengths[i + 1] - b[3] + tail
        since += head + tail
    if lengths[0] != len(data):
        return None
    # place each version in the newest: version i+1's bytes from its skip on sit in version i
    # right after version i's head
    anchors: _List[_Anchor] = []
    skip, pos = 0, 0  # version i's bytes from skip on are the newest's from pos
    for i, (ref, vk, b) in enumerate(chain):
        if skip >= lengths[i]:
            break
        index = int(b[6]) if len(b) >= 7 else 0
        anchors.append(_Anchor(index, vk, ref, skip, lengths[i] - skip, pos))
        if len(b) >= 7:
            head = len(b[1]) if len(b) == 8 else _b64len(b[1])
            if head >= skip:
                pos, skip = pos + head - skip, b[3]
            else:
                skip = b[3] + (skip - head)
    return _Base(typ, data, since, anchors)
