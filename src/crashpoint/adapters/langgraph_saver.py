"""``CrashpointSaver``: a LangGraph checkpointer on crashpoint's journal.

One LangGraph thread is one crashpoint run (folder ``lg-<sha256 of the thread id>`` under the
store): an append-only, checksummed journal plus periodic snapshots. Each ``put`` appends the
checkpoint and only the channel values that changed (``new_versions``), each ``put_writes`` appends
the task's writes: O(size of the step) bytes, history is never rewritten. A call returns once its
record is fdatasync'ed (durability ``always``, the default).

One writer per thread: the first call that touches a thread (``get_tuple``, ``put``,
``put_writes``) takes the run's OS lock and a fencing generation, and keeps them until
:meth:`CrashpointSaver.close` (or :meth:`release`). A second process resuming the same thread
waits ``lock_timeout`` seconds, then gets :class:`crashpoint.errors.RunLocked`.

Values go through LangGraph's own serde (``self.serde.dumps_typed``), stored base64-encoded in
the JSON records; nothing is pickled by this module, and loading a journal runs no code.

    >>> from crashpoint.adapters.langgraph_saver import CrashpointSaver   # doctest: +SKIP
    >>> with CrashpointSaver("state/") as saver:                          # doctest: +SKIP
    ...     graph = builder.compile(checkpointer=saver)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import os
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

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

from crashpoint.checkpoint import PayloadError, RunJournal, Store
from crashpoint.errors import RunNotFound

__all__ = ["CrashpointSaver", "run_id_for", "saver_reducer"]

RUN_PREFIX = "lg-"
_List = list  # the class below defines a method named list


def run_id_for(thread_id: str) -> str:
    """The store's run id for a LangGraph thread id (any string maps to a safe folder name)."""
    return RUN_PREFIX + hashlib.sha256(str(thread_id).encode()).hexdigest()[:40]


def _vkey(version: Any) -> str:
    """A channel version as a JSON object key (1 and "1" stay distinct)."""
    return json.dumps(version)


def _typed(obj: Any, what: str) -> list[str]:
    if not isinstance(obj, list) or len(obj) != 2 or not all(isinstance(x, str) for x in obj):
        raise PayloadError(f"{what} is not [type, base64]")
    return obj


def _blob(obj: Any, what: str) -> list[Any]:
    """A channel value: ``[type, base64]`` (whole) or ``[type, head, base_version, skip,
    tail]`` (a delta: the value's bytes are ``head + bytes of base_version[skip:] + tail``)."""
    if isinstance(obj, list) and len(obj) == 5:
        if (
            isinstance(obj[0], str)
            and isinstance(obj[1], str)
            and isinstance(obj[2], str)
            and isinstance(obj[3], int)
            and not isinstance(obj[3], bool)
            and obj[3] >= 0
            and isinstance(obj[4], str)
        ):
            return obj
        raise PayloadError(f"{what} is not a delta [type, head, base, skip, tail]")
    return _typed(obj, what)


def _str(obj: Any, what: str) -> str:
    if not isinstance(obj, str):
        raise PayloadError(f"{what} is not a string")
    return obj


def saver_reducer(state: dict[str, Any], data: Any) -> None:
    """Fold one record into the thread's state (shapes are checked before anything changes).

    State: ``thread_id``; ``cps[ns][checkpoint_id] = [checkpoint, metadata, parent_id]``;
    ``blobs[ns][channel][version] = typed``; ``writes[ns][checkpoint_id][task\\0idx] =
    [task_id, channel, typed, task_path]``; typed values are ``[serde type, base64]``.
    """
    if not isinstance(data, dict):
        raise PayloadError("a saver record is not an object")
    kind = data.get("t")
    if kind == "thread":
        state["thread_id"] = _str(data.get("thread_id"), "thread_id")
        state.setdefault("cps", {})
        state.setdefault("blobs", {})
        state.setdefault("writes", {})
        return
    if "thread_id" not in state:
        raise PayloadError("a saver record before the thread record")
    if kind == "cp":
        ns = _str(data.get("ns"), "ns")
        cid = _str(data.get("id"), "id")
        parent = data.get("parent")
        if parent is not None:
            _str(parent, "parent")
        cp = _typed(data.get("cp"), "cp")
        md = _typed(data.get("md"), "md")
        blobs = data.get("blobs")
        if not isinstance(blobs, dict):
            raise PayloadError("blobs is not an object")
        checked = []
        for ch, item in blobs.items():
            if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
                raise PayloadError(f"blob of channel {ch!r} is not [version, typed]")
            checked.append((ch, item[0], _blob(item[1], f"blob of channel {ch!r}")))
        nsb = state["blobs"].setdefault(ns, {})
        for ch, ver, typed in checked:
            nsb.setdefault(ch, {})[ver] = typed
        state["cps"].setdefault(ns, {})[cid] = [cp, md, parent]
    elif kind == "w":
        ns = _str(data.get("ns"), "ns")
        cid = _str(data.get("cid"), "cid")
        items = data.get("w")
        if not isinstance(items, list):
            raise PayloadError("w is not a list")
        checked_w = []
        for item in items:
            if (
                not isinstance(item, list)
                or len(item) != 5
                or not isinstance(item[0], str)
                or not isinstance(item[1], int)
                or not isinstance(item[2], str)
                or not isinstance(item[4], str)
            ):
                raise PayloadError("a write is not [task_id, idx, channel, typed, task_path]")
            checked_w.append((item[0], item[1], item[2], _typed(item[3], "a write"), item[4]))
        nsw = state["writes"].setdefault(ns, {}).setdefault(cid, {})
        for task, idx, ch, typed, path in checked_w:
            key = f"{task}\x00{idx}"
            if idx >= 0 and key in nsw:
                continue  # a special write (error, interrupt...) is kept from its first put
            nsw[key] = [task, ch, typed, path]
    elif kind == "prune":
        ns_keep = data.get("keep")
        if not isinstance(ns_keep, dict):
            raise PayloadError("keep is not an object")
        for ns in list(state["cps"]):
            keep = ns_keep.get(ns)
            cps = state["cps"][ns]
            for cid in list(cps):
                if cid != keep:
                    del cps[cid]
                    state["writes"].get(ns, {}).pop(cid, None)
            if not cps:
                del state["cps"][ns]
    else:
        raise PayloadError(f"unknown saver record type {kind!r}")


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
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
    p = _common_prefix(base, new)
    for j in range(p, min(p + 10, len(base) - 31)):  # at least 32 bytes to share
        rest = len(base) - j
        for k in range(p, min(p + 10, len(new) - rest + 1)):
            if new[k : k + rest] == base[j:]:
                return k, j, k + rest
    return None


def _enc(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


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
            )
        self.store = store
        self.lock_on_read = lock_on_read
        self._journals: dict[str, RunJournal] = {}
        # the last version of each channel this saver wrote, while it holds the thread
        self._last: dict[tuple[str, str, str], tuple[str, str, bytes, int, int]] = {}
        self._mutex = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close every open thread and release its lock."""
        with self._mutex:
            journals, self._journals = self._journals, {}
            self._last.clear()
            for j in journals.values():
                j.close()

    def release(self, thread_id: str) -> None:
        """Close one thread and release its lock (another process may then resume it)."""
        with self._mutex:
            self._forget(str(thread_id))
            j = self._journals.pop(str(thread_id), None)
            if j is not None:
                j.close()

    def __enter__(self) -> CrashpointSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> CrashpointSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- journals ----------------------------------------------------------------------------

    def _journal(self, thread_id: str) -> RunJournal:
        """The thread's open journal: opened (lock + generation, torn tail repaired) once."""
        j = self._journals.get(thread_id)
        if j is not None and not j.closed:
            return j
        j = self.store.open(run_id_for(thread_id), reducer=saver_reducer)
        try:
            if "thread_id" not in j.state:
                j.append({"t": "thread", "thread_id": thread_id}, redact=False)
                # a status of its own: the Supervisor never takes an idle thread for an
                # interrupted run, and pruning never removes it (delete_thread does)
                j.set_meta(status="langgraph-thread", thread_id=thread_id)
            elif j.state["thread_id"] != thread_id:
                raise PayloadError(
                    f"{j.folder}: holds thread {j.state['thread_id']!r}, "
                    f"not {thread_id!r} (a hash collision or a copied folder)"
                )
        except BaseException:
            j.close()
            raise
        self._journals[thread_id] = j
        return j

    def _state(self, thread_id: str) -> dict[str, Any] | None:
        """The thread's state: from its open journal, else read from disk without a lock."""
        j = self._journals.get(thread_id)
        if j is not None and not j.closed:
            return j.state
        try:
            st = self.store.read(run_id_for(thread_id), reducer=saver_reducer).state
        except RunNotFound:
            return None
        return st if st.get("thread_id") == thread_id else None

    def _threads(self) -> list[str]:
        out = []
        for rid in self.store.run_ids():
            if rid.startswith(RUN_PREFIX):
                tid = self.store.meta(rid).get("thread_id")
                if isinstance(tid, str):
                    out.append(tid)
        for tid in self._journals:
            if tid not in out:
                out.append(tid)
        return out

    # -- decoding ----------------------------------------------------------------------------

    def _dec(self, typed: list[str]) -> Any:
        try:
            raw = base64.b64decode(typed[1], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise PayloadError(f"a stored value is not base64: {exc}") from exc
        return self.serde.loads_typed((typed[0], raw))

    def _blob_bytes(self, blobs: dict[str, Any], vkey: str) -> tuple[str, bytes] | None:
        """A channel value's (type, bytes), following a delta chain back to a whole value."""
        chain: list[list[Any]] = []
        item = blobs.get(vkey)
        while item is not None and len(item) == 5:
            chain.append(item)
            if len(chain) > 100_000:
                raise PayloadError(f"a delta chain of channel version {vkey} does not end")
            item = blobs.get(item[2])
        if item is None:
            if chain:
                raise PayloadError(
                    f"a delta of channel version {vkey} names a base that is "
                    f"missing ({chain[-1][2]})"
                )
            return None
        data = _b64(item[1])
        for d in reversed(chain):
            data = _b64(d[1]) + data[d[3] :] + _b64(d[4])
        return (chain[0][0] if chain else item[0]), data

    def _tuple(self, state: dict[str, Any], ns: str, cid: str) -> CheckpointTuple:
        thread_id = state["thread_id"]
        cp_t, md_t, parent = state["cps"][ns][cid]
        checkpoint: Checkpoint = self._dec(cp_t)
        nsb = state["blobs"].get(ns, {})
        values: dict[str, Any] = {}
        for ch, ver in checkpoint.get("channel_versions", {}).items():
            raw = self._blob_bytes(nsb.get(ch, {}), _vkey(ver))
            if raw is None or raw[0] == "empty":
                continue
            values[ch] = self.serde.loads_typed(raw)
        stored = state["writes"].get(ns, {}).get(cid, {})
        ordered = sorted(
            stored.items(),
            key=lambda kv: writes_sort_key(kv[1][3], kv[1][0], int(kv[0].rsplit("\x00", 1)[1])),
        )
        return CheckpointTuple(
            config={
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
            },
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self._dec(md_t),
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
            pending_writes=[(w[0], w[1], self._dec(w[2])) for _, w in ordered],
        )

    # -- the BaseCheckpointSaver interface ---------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "")
        with self._mutex:
            # LangGraph reads the thread first when it starts or resumes a run: taking the
            # thread's lock here makes a second resumer wait or refuse before any node runs
            state = self._journal(thread_id).state if self.lock_on_read else self._state(thread_id)
            if state is None:
                return None
            cps = state["cps"].get(ns, {})
            cid = get_checkpoint_id(config)
            if cid:
                if cid not in cps:
                    return None
            elif cps:
                cid = max(cps)
            else:
                return None
            return self._tuple(state, ns, cid)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        with self._mutex:
            out = self._list(config, filter=filter, before=before, limit=limit)
        yield from out

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> _List[CheckpointTuple]:
        threads = [str(config["configurable"]["thread_id"])] if config else self._threads()
        want_ns = config["configurable"].get("checkpoint_ns") if config else None
        want_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        out: _List[CheckpointTuple] = []
        for thread_id in threads:
            state = self._state(thread_id)
            if state is None:
                continue
            for ns, cps in state["cps"].items():
                if want_ns is not None and ns != want_ns:
                    continue
                for cid in sorted(cps, reverse=True):
                    if want_id and cid != want_id:
                        continue
                    if before_id and cid >= before_id:
                        continue
                    if filter:
                        md = self._dec(cps[cid][1])
                        if not all(md.get(k) == v for k, v in filter.items()):
                            continue
                    if limit is not None and len(out) >= limit:
                        return out
                    out.append(self._tuple(state, ns, cid))
        return out

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
        c = checkpoint.copy()
        values: dict[str, Any] = c.pop("channel_values")  # type: ignore[misc]
        with self._mutex:
            j = self._journal(thread_id)
            blobs: dict[str, _List[Any]] = {}
            done: dict[tuple[str, str, str], tuple[str, str, bytes, int, int]] = {}
            for ch, ver in new_versions.items():
                vk = _vkey(ver)
                if ch not in values:
                    blobs[ch] = [vk, ["empty", ""]]
                    continue
                typ, data = self.serde.dumps_typed(values[ch])
                blob, since, full = self._encode_blob((thread_id, ns, ch), typ, data)
                blobs[ch] = [vk, blob]
                done[(thread_id, ns, ch)] = (vk, typ, data, since, full)
            record = {
                "t": "cp",
                "ns": ns,
                "id": checkpoint["id"],
                "parent": conf.get("checkpoint_id"),
                "cp": _enc(self.serde.dumps_typed(c)),
                "md": _enc(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
                "blobs": blobs,
            }
            j.append(record, redact=False)
            self._last.update(done)  # bases for the next deltas, once this record is durable
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        items = [
            [task_id, WRITES_IDX_MAP.get(ch, idx), ch, _enc(self.serde.dumps_typed(v)), task_path]
            for idx, (ch, v) in enumerate(writes)
        ]
        record = {
            "t": "w",
            "ns": conf.get("checkpoint_ns", ""),
            "cid": conf["checkpoint_id"],
            "w": items,
        }
        with self._mutex:
            self._journal(thread_id).append(record, redact=False)

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
                if self._state(tid) is None:
                    continue
                j = self._journal(tid)
                keep = {ns: max(cps) for ns, cps in j.state["cps"].items() if cps}
                j.append({"t": "prune", "keep": keep}, redact=False)

    def _encode_blob(
        self, key: tuple[str, str, str], typ: str, data: bytes
    ) -> tuple[_List[Any], int, int]:
        """A channel value as a delta against the last version of it this saver wrote (while
        the deltas since the last whole value stay smaller than it: O(N) bytes for a growing
        value, a bounded chain to read), else whole. Returns (blob, delta bytes since the last
        whole value, that whole value's size)."""
        last = self._last.get(key)
        if last is not None and last[1] == typ and len(data) >= 64:
            base_vk, _, base, since, full = last
            d = _delta(base, data)
            if d is not None:
                k, skip, end = d
                size = k + len(data) - end
                if since + size <= full:
                    head = base64.b64encode(data[:k]).decode("ascii")
                    tail = base64.b64encode(data[end:]).decode("ascii")
                    return [typ, head, base_vk, skip, tail], since + size, full
        return _enc((typ, data)), 0, len(data)

    def _forget(self, thread_id: str) -> None:
        for key in [k for k in self._last if k[0] == thread_id]:
            del self._last[key]

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
        items = await asyncio.to_thread(
            lambda: self._locked_list(config, filter=filter, before=before, limit=limit)
        )
        for item in items:
            yield item

    def _locked_list(self, config: RunnableConfig | None, **kw: Any) -> _List[CheckpointTuple]:
        with self._mutex:
            return self._list(config, **kw)

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
