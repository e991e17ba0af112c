"""The checkpoint store: one folder per run, an append-only journal, snapshots, one writer."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from crashpoint._failpoints import failpoint
from crashpoint.checkpoint._fsio import REAL, FsOps
from crashpoint.checkpoint._journal import (
    META,
    Damage,
    Loaded,
    Reducer,
    TornTail,
    list_files,
    load,
    read_meta,
    records_reducer,
    segment_name,
    snapshot_name,
    verify_folder,
)
from crashpoint.checkpoint._lock import RunLock, acquire, is_locked
from crashpoint.checkpoint._notify import Notify
from crashpoint.checkpoint._record import KIND_SNAPSHOT, encode, encode_json
from crashpoint.checkpoint._redact import DEFAULT_SECRET_NAMES, Redactor
from crashpoint.errors import (
    CheckpointError,
    CheckpointWriteError,
    DiskBudgetExceeded,
    InvalidRunId,
    RunNotFound,
)

__all__ = [
    "ACTIVE_STATUSES",
    "PRUNABLE_STATUSES",
    "Durability",
    "Recovery",
    "Retention",
    "RunInfo",
    "RunJournal",
    "SnapshotPolicy",
    "Store",
    "validate_run_id",
]

MiB = 1 << 20
#: Statuses a run can be resumed from; pruning never removes these (nor unknown ones).
ACTIVE_STATUSES = frozenset({"created", "running", "paused", "decided", "failed"})
#: Only runs in these statuses are ever pruned.
PRUNABLE_STATUSES = frozenset({"completed", "denied", "dead"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BATCH = re.compile(r"^batch\((\d+)\)$|^batch:(\d+)$")


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is a safe folder name under the store; raise InvalidRunId if not."""
    if not isinstance(run_id, str):
        raise InvalidRunId(repr(run_id), "a run id must be a string")
    if not run_id:
        raise InvalidRunId(run_id, "it is empty")
    if len(run_id) > 200:
        raise InvalidRunId(run_id[:40] + "...", f"it is {len(run_id)} characters (max 200)")
    if "/" in run_id or "\\" in run_id:
        raise InvalidRunId(run_id, "it contains a path separator")
    if "\x00" in run_id or _CONTROL.search(run_id):
        raise InvalidRunId(run_id, "it contains NUL or a control character")
    if run_id in {".", ".."} or run_id.startswith("."):
        raise InvalidRunId(run_id, "it starts with '.' (reserved for the store's temp files)")
    return run_id


@dataclass(frozen=True, slots=True)
class Durability:
    """When an append is durable.

    ``always`` (default): fdatasync every record before ``append`` returns.
    ``batch(n)``: group commit, fdatasync every n records or on :meth:`RunJournal.sync`.
    ``none``: never sync. **A power loss may lose any record**; a process crash loses none.
    For tests and scratch runs only.
    """

    mode: Literal["always", "batch", "none"] = "always"
    every: int = 1

    @classmethod
    def always(cls) -> Durability:
        return cls("always", 1)

    @classmethod
    def batch(cls, n: int) -> Durability:
        if n < 1:
            raise ValueError(f"batch size must be >= 1, got {n}")
        return cls("batch", n)

    @classmethod
    def none(cls) -> Durability:
        return cls("none", 0)

    @classmethod
    def parse(cls, spec: str | Durability) -> Durability:
        """Accept a Durability or one of ``always``, ``none``, ``batch(N)``, ``batch:N``."""
        if isinstance(spec, Durability):
            return spec
        s = str(spec).strip().lower()
        if s == "always":
            return cls.always()
        if s == "none":
            return cls.none()
        if m := _BATCH.match(s):
            return cls.batch(int(m.group(1) or m.group(2)))
        raise ValueError(f"unknown durability {spec!r}: use 'always', 'batch(N)' or 'none'")

    def __str__(self) -> str:
        return f"batch({self.every})" if self.mode == "batch" else self.mode


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """Snapshot when the journal since the last snapshot reaches ``max(min_bytes, ratio x last
    snapshot size)``. Growing the interval with the state keeps total bytes written O(N): the
    snapshots of a run add at most ``(1 + ratio) / ratio`` times its final state in writes.

    The defaults suit append-only runs (each step adds its result): decoding a snapshot costs
    about what decoding the journal it replaces does, so a snapshot mostly pays off when
    records supersede each other. Runs under 8 MiB of journal are never snapshotted; past
    that, at most 1.5x the state is rewritten in total. Lower ``min_bytes`` for state that is
    overwritten often."""

    min_bytes: int = 8 * 1024 * 1024
    ratio: float = 2.0
    enabled: bool = True

    def due(self, since: int, last_snapshot: int) -> bool:
        return self.enabled and since >= max(self.min_bytes, int(self.ratio * last_snapshot))


@dataclass(frozen=True, slots=True)
class Retention:
    """What pruning may remove: completed (or denied, or dead-lettered) runs only.

    ``max_age``: seconds since a finished run was last written; ``max_runs`` / ``max_bytes``:
    keep at most this many finished runs / bytes of them (oldest removed first).
    """

    max_age: float | None = None
    max_runs: int | None = None
    max_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run as ``crashpoint checkpoints list`` shows it."""

    run_id: str
    path: str
    status: str
    size: int
    updated: float
    generation: int
    locked: bool
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def age(self) -> float:
        return max(0.0, time.time() - self.updated)


@dataclass(frozen=True, slots=True)
class Recovery:
    """What opening a run repaired or rolled back. Falsy when nothing was found."""

    torn_tail: TornTail | None = None
    damage: tuple[Damage, ...] = ()
    lost_from_seq: int | None = None
    moved_aside: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.torn_tail is not None or bool(self.damage)

    def describe(self) -> str:
        parts = []
        if self.torn_tail:
            parts.append(f"repaired a torn tail: {self.torn_tail}")
        for d in self.damage:
            parts.append(f"rolled back past damage: {d}")
        if self.lost_from_seq is not None:
            parts.append(f"records from #{self.lost_from_seq} on were not recovered")
        for p in self.moved_aside:
            parts.append(f"moved aside {p}")
        return "; ".join(parts) or "clean"


def _dir_size(path: str) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _existing_ancestor(path: str) -> str:
    """``path`` or its nearest ancestor that exists (where a new folder's bytes would land)."""
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _newest_mtime(path: str) -> float:
    newest = 0.0
    try:
        with os.scandir(path) as it:
            for e in it:
                try:
                    newest = max(newest, e.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    pass
    except OSError:
        pass
    return newest


class Store:
    """A folder of runs. Thread-compatible (one thread per open run); process-safe via locks.

    >>> store = Store(path)                                  # doctest: +SKIP
    >>> with store.open("run-1") as j:                       # doctest: +SKIP
    ...     j.append({"step": "fetch", "result": [1, 2]})
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        durability: str | Durability = "always",
        budget_bytes: int | None = None,
        reserve_bytes: int | None = None,
        retention: Retention | None = None,
        on_corrupt: Literal["raise", "rollback"] = "raise",
        snapshots: SnapshotPolicy | None = None,
        secret_names: Iterable[str] = DEFAULT_SECRET_NAMES,
        lock_timeout: float = 0.0,
        segment_bytes: int = 8 * MiB,
        fs: FsOps = REAL,
        notify: Notify = None,
    ) -> None:
        if on_corrupt not in ("raise", "rollback"):
            raise ValueError(f"on_corrupt must be 'raise' or 'rollback', not {on_corrupt!r}")
        if budget_bytes is not None and budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
        self.root = os.path.abspath(os.fspath(root))
        self.durability = Durability.parse(durability)
        self.budget_bytes = budget_bytes
        self.reserve_bytes = reserve_bytes
        self.retention = retention or Retention()
        self.on_corrupt = on_corrupt
        self.snapshots = snapshots or SnapshotPolicy()
        self.redactor = Redactor(secret_names)
        self.lock_timeout = lock_timeout
        self.segment_bytes = segment_bytes
        self.fs = fs
        self.notify = notify  # a hook for pause / dead letter / stale (see _notify.py)
        self.bytes_written = 0  # every byte this Store object wrote (records, snapshots, meta)
        self._usage: int | None = None
        self._reserve: int | None = None
        self._free_seen = 0  # free bytes at the last statvfs
        self._since_statvfs = MiB + 1  # bytes written since (forces a first reading)
        self._statvfs_every = 0  # bytes writable without any check (set by _guard when safe)

    # -- paths ------------------------------------------------------------------------------

    def path(self, run_id: str) -> str:
        return os.path.join(self.root, validate_run_id(run_id))

    def exists(self, run_id: str) -> bool:
        return os.path.isdir(self.path(run_id))

    def run_ids(self) -> list[str]:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return sorted(n for n in names
                      if not n.startswith(".") and os.path.isdir(os.path.join(self.root, n)))

    # -- opening -----------------------------------------------------------------------------

    def open(self, run_id: str, *, reducer: Reducer = records_reducer, create: bool = True,
             lock_timeout: float | None = None) -> RunJournal:
        """Open a run for writing: take its lock, repair a torn tail, load its state."""
        folder = self.path(run_id)
        if not os.path.isdir(folder):
            if not create:
                raise RunNotFound(f"no run {run_id!r} in {self.root}")
            self._guard(4096, folder)
            try:
                self.fs.makedirs_durable(folder)
            except OSError as exc:
                raise CheckpointWriteError(exc.errno or errno.EIO, folder, "creating the run's "
                                           "folder") from exc
        lock = acquire(os.path.join(folder, "lock"), run_id, fs=self.fs,
                       timeout=self.lock_timeout if lock_timeout is None else lock_timeout)
        try:
            return RunJournal(self, run_id, folder, reducer, lock)
        except BaseException:
            lock.release()
            raise

    def read(self, run_id: str, *, reducer: Reducer = records_reducer) -> Loaded:
        """Load a run's state without locking or repairing anything (for inspection).

        Damage raises :class:`CheckpointCorrupt` unless the store rolls back, in which case the
        returned ``Loaded`` lists it.
        """
        folder = self.path(run_id)
        if not os.path.isdir(folder):
            raise RunNotFound(f"no run {run_id!r} in {self.root}")
        return load(folder, reducer, stop_on_damage=self.on_corrupt == "raise")

    def meta(self, run_id: str) -> dict[str, Any]:
        return read_meta(self.path(run_id))

    # -- listing, verifying, pruning ------------------------------------------------------------

    def runs(self) -> list[RunInfo]:
        out = []
        for rid in self.run_ids():
            folder = os.path.join(self.root, rid)
            meta = read_meta(folder)
            lock_path = os.path.join(folder, "lock")
            gen = 0
            try:
                with open(lock_path, "rb") as f:
                    gen = int(json.loads(f.read() or b"{}").get("generation", 0))
            except (OSError, ValueError, AttributeError):
                pass
            out.append(RunInfo(rid, folder, str(meta.get("status", "unknown")), _dir_size(folder),
                               _newest_mtime(folder), gen, is_locked(lock_path), meta))
        return out

    def verify(self, run_id: str | None = None) -> dict[str, tuple[list[Damage], list[TornTail]]]:
        """Check every checksum of one run or all; ``{run_id: (damage, torn tails)}``."""
        ids = [run_id] if run_id is not None else self.run_ids()
        out = {}
        for rid in ids:
            folder = self.path(rid)
            if not os.path.isdir(folder):
                raise RunNotFound(f"no run {rid!r} in {self.root}")
            out[rid] = verify_folder(folder)
        return out

    def usage(self, *, refresh: bool = False) -> int:
        """Bytes under the store's root (cached; ``refresh`` walks the folder again)."""
        if self._usage is None or refresh:
            self._usage = _dir_size(self.root) if os.path.isdir(self.root) else 0
        return self._usage

    def _account(self, delta: int) -> None:
        if self._usage is not None:
            self._usage += delta
        if delta > 0:
            self.bytes_written += delta

    def remove(self, run_id: str) -> None:
        """Delete a run's folder for real. Refuses a run whose lock is held."""
        folder = self.path(run_id)
        lock = acquire(os.path.join(folder, "lock"), run_id, fs=self.fs, timeout=0)
        try:
            size = _dir_size(folder)
            shutil.rmtree(folder)
        finally:
            lock.release()
        self.fs.fsync_dir(self.root)
        self._account(-size)

    def prunable(self, *, now: float | None = None, need: int = 0) -> list[RunInfo]:
        """Finished runs that retention (or a need for ``need`` bytes) allows removing, oldest
        first. Never an active, paused, unknown or locked run."""
        now = time.time() if now is None else now
        done = sorted((r for r in self.runs()
                       if r.status in PRUNABLE_STATUSES and not r.locked),
                      key=lambda r: r.updated)
        r_ = self.retention
        picked: list[RunInfo] = []
        keep = list(done)
        if r_.max_age is not None:
            picked += [r for r in keep if now - r.updated > r_.max_age]
            keep = [r for r in keep if r not in picked]
        if r_.max_runs is not None and len(keep) > r_.max_runs:
            extra = keep[: len(keep) - r_.max_runs]
            picked += extra
            keep = keep[len(extra):]
        if r_.max_bytes is not None:
            while keep and sum(r.size for r in keep) > r_.max_bytes:
                picked.append(keep.pop(0))
        freed = sum(r.size for r in picked)
        while need > freed and keep:  # space pressure: oldest finished runs go first
            r = keep.pop(0)
            picked.append(r)
            freed += r.size
        return picked

    def prune(self, *, now: float | None = None, need: int = 0,
              dry_run: bool = False) -> list[RunInfo]:
        """Remove what :meth:`prunable` picks; return the runs removed."""
        removed = []
        for r in self.prunable(now=now, need=need):
            if dry_run:
                removed.append(r)
                continue
            try:
                self.remove(r.run_id)
            except (CheckpointError, OSError):
                continue  # taken by a writer meanwhile, or already gone: not ours to remove
            removed.append(r)
        return removed

    # -- disk guardrails -----------------------------------------------------------------------

    def reserve_for(self) -> int:
        """The free-space reserve in bytes: configured, else min(64 MiB, 5% of the filesystem)."""
        if self.reserve_bytes is not None:
            return self.reserve_bytes
        if self._reserve is None:
            st = os.statvfs(_existing_ancestor(self.root))
            self._reserve = min(64 * MiB, (st.f_blocks * st.f_frsize) // 20)
        return self._reserve

    def _free(self) -> int:
        st = os.statvfs(_existing_ancestor(self.root))
        free = st.f_bavail * st.f_frsize
        self._free_seen, self._since_statvfs = free, 0
        return free

    def _violation(self, n: int, *, fresh: bool = False) -> str | None:
        if self.budget_bytes is not None and self.usage() + n > self.budget_bytes:
            return f"the store's budget of {self.budget_bytes} bytes (in use: {self.usage()})"
        reserve = self.reserve_for()
        if reserve > 0:
            # Free space is read with statvfs only when our own writes since the last reading
            # could have brought it near the reserve (others' writes are caught within 1 MiB of
            # ours, or at once once the estimate is close): no syscall on the hot path.
            est = self._free_seen - self._since_statvfs
            if fresh or est - n < 2 * reserve + 4 * MiB or self._since_statvfs > MiB:
                est = self._free()
            if est - n < reserve:
                return f"the free-space reserve of {reserve} bytes (free: {est})"
        return None

    def _guard(self, n: int, path: str) -> None:
        """Make room for a write of ``n`` bytes or raise DiskBudgetExceeded before writing."""
        if self._violation(n) is None:
            self._since_statvfs += n
            self._arm_fast_path()
            return
        self.usage(refresh=True)
        if self._violation(n, fresh=True) is None:
            self._since_statvfs += n
            return
        self.prune(need=n)
        self.usage(refresh=True)
        why = self._violation(n, fresh=True)
        if why is not None:
            raise DiskBudgetExceeded(path, n, why)
        self._since_statvfs += n
        self._arm_fast_path()

    def _arm_fast_path(self) -> None:
        """Let appends skip the check while free space is far above the reserve: up to 1 MiB
        of our writes between readings, never closer than 2 x reserve + 4 MiB to the reserve."""
        reserve = self.reserve_for()
        room = self._free_seen - 2 * reserve - 4 * MiB
        self._statvfs_every = MiB if reserve == 0 or room > MiB else 0


class RunJournal:
    """An open, locked run: append records, take snapshots, keep the reduced state in memory.

    Use as a context manager; :meth:`close` releases the lock.
    """

    def __init__(self, store: Store, run_id: str, folder: str, reducer: Reducer,
                 lock: RunLock) -> None:
        self.store = store
        self.run_id = run_id
        self.folder = folder
        self.fs = store.fs
        self._reducer = reducer
        self._lock = lock
        self._fd = -1
        self._broken: OSError | None = None
        self._unsynced = 0
        self.snapshot_error: OSError | None = None
        for name in os.listdir(folder):  # a crash can leave temp files of atomic writes
            if name.startswith(".") and name.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
        loaded = load(folder, reducer, stop_on_damage=store.on_corrupt == "raise")
        self.state: dict[str, Any] = loaded.state
        self.seq = loaded.seq
        if loaded.generation >= lock.generation:  # the lock file was torn; records fence
            lock.generation = loaded.generation + 1
            self.fs.truncate(lock.fd, 0)
            self.fs.pwrite(lock.fd, json.dumps({"generation": lock.generation,
                                                "pid": os.getpid()}).encode(), 0)
            self.fs.fsync(lock.fd)
        self.generation = lock.generation
        self._since_snapshot = loaded.bytes_since_snapshot
        self._snapshot_size = loaded.snapshot_bytes
        self._snapshot_due = self._due()
        dur = store.durability
        self._sync_every = {"always": 1, "batch": dur.every}.get(dur.mode, 0)
        moved: list[str] = []
        try:
            if loaded.damage:  # rollback: make the valid prefix durable on its own first
                self._write_snapshot()
                stamp = time.strftime("%Y%m%dT%H%M%S")
                for p in loaded.unusable:
                    if os.path.exists(p):
                        dst = f"{p}.corrupt-{stamp}"
                        self.fs.replace(p, dst)
                        moved.append(dst)
                self.fs.fsync_dir(folder)
                loaded.last_segment = None
            else:
                for p in loaded.covered:
                    self._unlink(p)
            if loaded.last_segment is not None:
                self._path = loaded.last_segment
                self._fd = self.fs.open_append(self._path)
                if loaded.torn is not None and loaded.torn.path == self._path:
                    self.fs.truncate(self._fd, loaded.last_segment_end)
                    self.fs.fsync(self._fd)
                self._end = loaded.last_segment_end
            else:
                self._new_segment()
        except OSError as exc:
            self._close_fd()
            raise CheckpointWriteError(exc.errno or errno.EIO, folder, "recovering the run") \
                from exc
        self.recovery = Recovery(loaded.torn, tuple(loaded.damage), loaded.lost_from_seq,
                                 tuple(moved))

    # -- writing ---------------------------------------------------------------------------

    def _due(self) -> float:
        """Journal bytes since the last snapshot at which the next one is taken."""
        pol = self.store.snapshots
        if not pol.enabled:
            return float("inf")
        return max(pol.min_bytes, int(pol.ratio * self._snapshot_size))

    def append(self, data: Any, *, redact: bool = True, sync: bool | None = None) -> int:
        """Append one record; return its sequence number once it is durable per the store's
        durability (``sync=True`` forces an fdatasync, ``False`` skips it).

        With ``redact=False`` the reducer is given ``data`` itself, not a copy: pass a structure
        you will not mutate afterwards."""
        if self._broken is not None:
            raise CheckpointWriteError(self._broken.errno or errno.EIO, self._path,
                                       "the journal stopped at an earlier write error; reopen")
        if self._fd < 0:
            raise CheckpointError(f"run {self.run_id!r} is closed")
        store = self.store
        if redact:
            data = store.redactor.redact(data)
        # the canonical encoding of {"s": seq, "g": generation, "d": data}, keys sorted
        payload = b'{"d":%b,"g":%d,"s":%d}' % (encode_json(data), self.generation, self.seq + 1)
        frame = encode(payload)
        n = len(frame)
        if store.budget_bytes is not None or store._since_statvfs + n > store._statvfs_every:
            store._guard(n, self._path)  # the full check: budget, or free space due a reading
        else:
            store._since_statvfs += n  # free space was read recently and was plentiful
        if sync is None:
            every = self._sync_every
            sync = every == 1 or (every > 1 and self._unsynced + 1 >= every)
        try:
            failpoint("journal.write", self._path)
            self.fs.write(self._fd, frame)
            failpoint("journal.after_write", self._path)
            if sync:
                self.fs.fdatasync(self._fd)
            failpoint("journal.after_sync", self._path)
        except OSError as exc:
            self._fail(exc)
            raise CheckpointWriteError(exc.errno or errno.EIO, self._path) from exc
        self._unsynced = 0 if sync else self._unsynced + 1
        self._end += n
        self.seq += 1
        store.bytes_written += n
        if store._usage is not None:
            store._usage += n
        self._since_snapshot += n
        self._reducer(self.state, data)  # as encoded: redacted, a fresh copy of the caller's
        if self._since_snapshot >= self._snapshot_due:
            self.snapshot(required=False)
        elif self._end >= store.segment_bytes:
            try:
                self._roll()
            except CheckpointWriteError:
                raise
            except OSError as exc:  # the record is durable, but its ack is withheld: stop
                self._broken = exc
                raise CheckpointWriteError(exc.errno or errno.EIO, self.folder,
                                           f"starting a new segment after record {self.seq}") \
                    from exc
        return self.seq

    def sync(self) -> None:
        """Make every appended record durable now (group commit)."""
        if self._fd < 0 or self._broken is not None or not self._unsynced:
            return
        try:
            self.fs.fdatasync(self._fd)
        except OSError as exc:
            self._fail(exc)
            raise CheckpointWriteError(exc.errno or errno.EIO, self._path) from exc
        self._unsynced = 0

    @property
    def unsynced(self) -> int:
        """Records appended since the last fdatasync."""
        return self._unsynced

    def snapshot(self, *, required: bool = True) -> None:
        """Write the state as a snapshot, start a new segment, and delete what it covers.

        With ``required=False`` (automatic snapshots) a failure is kept in ``snapshot_error``
        instead of raised: the journal alone is still complete.
        """
        try:
            self._write_snapshot()
            self._roll(covered=True)
            self.snapshot_error = None
        except (OSError, DiskBudgetExceeded) as exc:
            if required:
                if isinstance(exc, CheckpointError):
                    raise
                raise CheckpointWriteError(exc.errno or errno.EIO, self.folder,
                                           "writing a snapshot") from exc
            self.snapshot_error = exc

    def _write_snapshot(self) -> None:
        payload = encode_json({"seq": self.seq, "gen": self.generation, "state": self.state})
        frame = encode(payload, KIND_SNAPSHOT)
        self.store._guard(len(frame), self.folder)
        self.fs.write_atomic(os.path.join(self.folder, snapshot_name(self.seq)), frame)
        self.store._account(len(frame))
        self._snapshot_size = len(frame)
        self._since_snapshot = 0
        self._snapshot_due = self._due()

    def _roll(self, *, covered: bool = False) -> None:
        """Start a new segment at the next sequence number; with ``covered``, delete every older
        segment and snapshot (the newest snapshot holds their content)."""
        if self._unsynced:
            self.sync()
        old_fd = self._fd
        self._new_segment()
        if old_fd >= 0:
            self.fs.close(old_fd)
        if covered:
            snaps, segs = list_files(self.folder)
            for s, p in segs:
                if s <= self.seq:
                    self._unlink(p, sync=False)
            for s, p in snaps:
                if s < self.seq:
                    self._unlink(p, sync=False)
            self.fs.fsync_dir(self.folder)

    def _new_segment(self) -> None:
        """Switch to a new segment only once its folder entry is durable; on error keep the
        current one (a record acknowledged in a segment whose entry was never synced would not
        survive a power loss)."""
        path = os.path.join(self.folder, segment_name(self.seq + 1))
        fd = self.fs.open_append(path)
        try:
            if os.fstat(fd).st_size:  # a leftover with this name: only an empty or torn one
                self.fs.truncate(fd, 0)
            self.fs.fsync_dir(self.folder)
        except BaseException:
            self.fs.close(fd)
            raise
        self._path, self._fd, self._end = path, fd, 0

    def _unlink(self, path: str, *, sync: bool = True) -> None:
        try:
            size = os.lstat(path).st_size
            self.fs.unlink(path)
            self.store._account(-size)
        except FileNotFoundError:
            return
        if sync:
            self.fs.fsync_dir(self.folder)

    def _fail(self, exc: OSError) -> None:
        """Leave at most a torn tail: cut the file back to the last acknowledged record."""
        self._broken = exc
        try:
            self.fs.truncate(self._fd, self._end)
        except OSError:
            pass  # the torn tail stays; the next open repairs it

    # -- meta and lifecycle ----------------------------------------------------------------------

    def set_meta(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into meta.json (replaced atomically). meta is a cache for listing."""
        meta = read_meta(self.folder)
        meta.update(fields)
        meta.setdefault("run_id", self.run_id)
        meta.setdefault("created", time.time())
        meta["updated"] = time.time()
        data = encode_json(self.store.redactor.redact(meta))
        self.store._guard(len(data), self.folder)
        try:
            self.fs.write_atomic(os.path.join(self.folder, META), data)
        except OSError as exc:
            raise CheckpointWriteError(exc.errno or errno.EIO, os.path.join(self.folder, META)) \
                from exc
        self.store._account(len(data))
        return meta

    @property
    def meta(self) -> dict[str, Any]:
        return read_meta(self.folder)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def _close_fd(self) -> None:
        if self._fd >= 0:
            try:
                self.fs.close(self._fd)
            finally:
                self._fd = -1

    def close(self) -> None:
        """Sync a pending batch (not with durability ``none``), close, release the lock."""
        try:
            if self._broken is None and self.store.durability.mode == "batch":
                self.sync()
        finally:
            self._close_fd()
            self._lock.release()

    def __enter__(self) -> RunJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<RunJournal {self.run_id!r} seq={self.seq} gen={self.generation}>"


@contextmanager
def opened(store: Store, run_id: str, **kw: Any) -> Iterator[RunJournal]:
    j = store.open(run_id, **kw)
    try:
        yield j
    finally:
        j.close()
