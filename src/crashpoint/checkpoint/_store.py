"""The checkpoint store: one folder per run, an append-only journal, snapshots, one writer."""

from __future__ import annotations

import _thread  # its RLock is threading's, without importing threading
import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Iterable

from crashpoint._failpoints import failpoint
from crashpoint._fsio import REAL, FsOps, is_temp_of
from crashpoint.checkpoint._journal import (
    META,
    SNAP_RE,
    Damage,
    Loaded,
    Reducer,
    TornTail,
    is_history_index,
    list_files,
    load,
    read_lock,
    read_meta,
    records_reducer,
    segment_name,
    snapshot_name,
    verify_folder,
)
from crashpoint.checkpoint._lock import RunLock, acquire, flock_within, is_locked, write_holder
from crashpoint.checkpoint._record import KIND_SNAPSHOT, decode_json, encode, encode_json
from crashpoint.checkpoint._redact import DEFAULT_SECRET_NAMES, Redactor
from crashpoint.checkpoint._value import Value
from crashpoint.errors import (
    CheckpointError,
    CheckpointWriteError,
    DiskBudgetExceeded,
    InvalidArgument,
    InvalidRunId,
    RunNotFound,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any, Literal

    from crashpoint.checkpoint._facts import Recovery, RunInfo
    from crashpoint.checkpoint._notify import Notify

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
    "atomic_write",
    "is_store_url",
    "makedirs_durable",
    "validate_run_id",
]


def __getattr__(name: str) -> Any:
    """:class:`RunInfo` and :class:`Recovery` (in ``_facts``), imported on first use: they are
    dataclasses, and opening a run imports none."""
    if name in ("Recovery", "RunInfo"):
        from crashpoint.checkpoint import _facts  # on first use, for the cost (see above)

        return getattr(_facts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MiB = 1 << 20
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: Statuses a run can be resumed from; pruning never removes these (nor unknown ones).
ACTIVE_STATUSES = frozenset({"created", "running", "paused", "decided", "failed"})
#: Only runs in these statuses are ever pruned.
PRUNABLE_STATUSES = frozenset({"completed", "denied", "dead"})
#: What a run id may not hold, beyond C0 and C1 controls and DEL and lone surrogates (how Python
#: holds a byte that is not UTF-8, e.g. from a command line): line and paragraph separators and
#: the bidirectional formatting characters (marks, embeddings, overrides, isolates: they make a
#: name display in another order than it is stored).
_UNSAFE = frozenset(
    [0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)
_BATCH = r"^batch\((\d+)\)$|^batch:(\d+)$"  # compiled on first use
_MAX_RUN_ID = 200


def _unsafe_at(run_id: str) -> int:
    """The index of the first character a run id may not hold, or -1."""
    if run_id.isascii() and run_id.isprintable():  # the common case, at C speed
        return -1
    for i, ch in enumerate(run_id):
        n = ord(ch)
        if n < 0x20 or 0x7F <= n <= 0x9F or 0xD800 <= n <= 0xDFFF or n in _UNSAFE:
            return i
    return -1


def _unsafe_char(ch: str) -> str:
    """What the character ``ch`` (one :func:`_unsafe_at` finds) is, for an error message."""
    n = ord(ch)
    if 0xDC80 <= n <= 0xDCFF:
        return f"the byte 0x{n - 0xDC00:02x}, which is not UTF-8 (a run id is UTF-8 text)"
    if 0xD800 <= n <= 0xDFFF:
        return f"U+{n:04X}, a lone surrogate (not UTF-8)"
    if n < 0x20 or n == 0x7F:
        return f"U+{n:04X}, a control character"
    if n <= 0x9F:
        return f"U+{n:04X}, a C1 control character"
    if n in (0x2028, 0x2029):
        return f"U+{n:04X}, a line or paragraph separator"
    return f"U+{n:04X}, a bidirectional formatting character (text would display reordered)"


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is a safe folder name under the store; raise InvalidRunId if not.

    A run id is 1-200 printable characters of valid UTF-8: no path separator, no control
    character (C0, DEL, C1), no line separator, no bidirectional formatting character, no
    byte that is not UTF-8; it does not start with ``.``. Checked before anything is created."""
    if not isinstance(run_id, str):
        raise InvalidRunId(repr(run_id), "a run id must be a string")
    if not run_id:
        raise InvalidRunId(run_id, "it is empty")
    if len(run_id) > _MAX_RUN_ID:
        raise InvalidRunId(
            run_id[:40] + "...", f"it is {len(run_id)} characters (max {_MAX_RUN_ID})"
        )
    if "/" in run_id or "\\" in run_id:
        raise InvalidRunId(run_id, "it contains a path separator")
    at = _unsafe_at(run_id)
    if at >= 0:
        raise InvalidRunId(run_id, f"character {at + 1} is {_unsafe_char(run_id[at])}; remove it")
    if run_id in {".", ".."} or run_id.startswith("."):
        raise InvalidRunId(run_id, "it starts with '.' (reserved for the store's temp files)")
    return run_id


class Durability(Value):
    """When an append is durable.

    ``always`` (default): fdatasync every record before ``append`` returns.
    ``batch(n)``: group commit, fdatasync every n records or on :meth:`RunJournal.sync`.
    ``none``: never sync. **A power loss may lose any record**; a process crash loses none.
    For tests and scratch runs only.
    """

    __slots__ = ("every", "mode")

    def __init__(self, mode: Literal["always", "batch", "none"] = "always", every: int = 1) -> None:
        self.mode = mode
        self.every = every

    @classmethod
    def always(cls) -> Durability:
        return cls("always", 1)

    @classmethod
    def batch(cls, n: int) -> Durability:
        if n < 1:
            raise InvalidArgument(f"batch size must be >= 1, got {n}")
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
        if m := re.match(_BATCH, s):
            return cls.batch(int(m.group(1) or m.group(2)))
        raise InvalidArgument(f"unknown durability {spec!r}: use 'always', 'batch(N)' or 'none'")

    def __str__(self) -> str:
        return f"batch({self.every})" if self.mode == "batch" else self.mode


class SnapshotPolicy(Value):
    """Snapshot when the journal since the last snapshot reaches ``max(min_bytes, ratio x last
    snapshot size)``. Growing the interval with the state keeps total bytes written O(N): the
    snapshots of a run add at most ``(1 + ratio) / ratio`` times its final state in writes.

    The defaults suit append-only runs (each step adds its result): decoding a snapshot costs
    about what decoding the journal it replaces does, so a snapshot mostly pays off when
    records supersede each other. Runs under 8 MiB of journal are never snapshotted; past
    that, at most 1.5x the state is rewritten in total. Lower ``min_bytes`` for state that is
    overwritten often."""

    __slots__ = ("enabled", "min_bytes", "ratio")

    def __init__(
        self, min_bytes: int = 8 * 1024 * 1024, ratio: float = 2.0, enabled: bool = True
    ) -> None:
        self.min_bytes = min_bytes
        self.ratio = ratio
        self.enabled = enabled

    def due(self, since: int, last_snapshot: int) -> bool:
        return self.enabled and since >= max(self.min_bytes, int(self.ratio * last_snapshot))


class Retention(Value):
    """What pruning may remove: completed (or denied, or dead-lettered) runs only.

    ``max_age``: seconds since a finished run was last written; ``max_runs`` / ``max_bytes``:
    keep at most this many finished runs / bytes of them (oldest removed first).
    """

    __slots__ = ("max_age", "max_bytes", "max_runs")

    def __init__(
        self,
        max_age: float | None = None,
        max_runs: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.max_age = max_age
        self.max_runs = max_runs
        self.max_bytes = max_bytes


def _dir_size(path: str) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def pick_for_retention(
    done: list[RunInfo], retention: Retention, now: float, need: int = 0
) -> list[RunInfo]:
    """Of the finished runs ``done``, those ``retention`` (or a need for ``need`` more bytes)
    allows removing, oldest first (one rule for every store)."""
    keep = sorted(done, key=lambda r: r.updated)
    picked: list[RunInfo] = []
    if retention.max_age is not None:
        picked += [r for r in keep if now - r.updated > retention.max_age]
        keep = [r for r in keep if r not in picked]
    if retention.max_runs is not None and len(keep) > retention.max_runs:
        extra = keep[: len(keep) - retention.max_runs]
        picked += extra
        keep = keep[len(extra) :]
    if retention.max_bytes is not None:
        while keep and sum(r.size for r in keep) > retention.max_bytes:
            picked.append(keep.pop(0))
    freed = sum(r.size for r in picked)
    while need > freed and keep:  # space pressure: oldest finished runs go first
        r = keep.pop(0)
        picked.append(r)
        freed += r.size
    return picked


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
            raise InvalidArgument(f"on_corrupt must be 'raise' or 'rollback', not {on_corrupt!r}")
        if budget_bytes is not None and budget_bytes <= 0:
            raise InvalidArgument(f"budget_bytes must be positive, got {budget_bytes}")
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
        self._usage: int | None = None  # without a budget: this object's count of the store
        self._measured = False  # with a budget: this object measured the store once
        self._reserve: int | None = None
        self._free_seen = 0  # free bytes at the last statvfs
        self._since_statvfs = MiB + 1  # bytes written since (forces a first reading)
        self._statvfs_every = 0  # the window granted at the last reading (see _violation)
        self._mutex = _thread.RLock()  # threads of this object, around the store's flock
        self._held: _Ledger | None = None
        self._claimed: list[Any] = []
        self._slock_fd = -1
        self._slock_pid = 0
        self._key = f"{os.getpid()}.{id(self)}"

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
        return sorted(
            n for n in names if not n.startswith(".") and os.path.isdir(os.path.join(self.root, n))
        )

    # -- opening -----------------------------------------------------------------------------

    def open(
        self,
        run_id: str,
        *,
        reducer: Reducer = records_reducer,
        create: bool = True,
        lock_timeout: float | None = None,
        full: bool = False,
        defer_sync: bool = False,
    ) -> RunJournal:
        """Open a run for writing: take its lock (and a fencing generation no writer of the run
        had before), repair a torn tail, load its state.

        A run folder that is a symbolic link or belongs to another user is refused. ``full``:
        for a history index, replay every record, not the newest snapshot and what follows
        (see :func:`~crashpoint.checkpoint.register_history_index`). ``defer_sync``: the new
        generation is fsynced with the first write rather than before this returns (an opener
        that only reads, such as a LangGraph resume reading its latest checkpoint, costs no
        fsync)."""
        folder = self.path(run_id)
        lock_path = os.path.join(folder, "lock")
        timeout = self.lock_timeout if lock_timeout is None else lock_timeout
        for _ in range(5):
            if not check_run_folder(folder):
                if not create:
                    raise RunNotFound(f"no run {run_id!r} in {self.root}")
                self._create_run_folder(folder, lock_path)
            try:
                before = os.lstat(lock_path).st_size
            except OSError:
                before = 0
            lock = acquire(lock_path, run_id, fs=self.fs, timeout=timeout, sync=not defer_sync)
            grown = os.fstat(lock.fd).st_size - before  # a lock file of an older version
            if grown:
                self._account(grown)
            if _still_at(lock.fd, lock_path):
                break
            lock.release()  # removed while we waited for its lock: start again
        else:
            raise CheckpointError(
                f"{folder}: the run was removed each time it was opened; "
                "is a prune running in a loop?"
            )
        try:
            return RunJournal(
                self, run_id, folder, reducer, lock, full=full, lock_synced=not defer_sync
            )
        except BaseException:
            lock.release()
            raise

    def _create_run_folder(self, folder: str, lock_path: str) -> None:
        """Create the run's folder and its lock file, counted against the budget as one step
        (the lock file is written at its full size now, so opening never grows it)."""
        held = self._claim(4096, folder)
        written = 0
        try:
            self.fs.makedirs_durable(folder)
            check_run_folder(folder, must_exist=True)  # planted meanwhile by another user
            fd = self.fs.open_rw(lock_path)
            try:
                if os.fstat(fd).st_size == 0:
                    write_holder(self.fs, fd, 0)
                    written = os.fstat(fd).st_size
            finally:
                self.fs.close(fd)
            self.fs.fsync_dir(folder)
        except OSError as exc:
            raise CheckpointWriteError(
                exc.errno or errno.EIO, folder, "creating the run's folder"
            ) from exc
        finally:
            self._settle(held, written, data=False)

    def read(
        self, run_id: str, *, reducer: Reducer = records_reducer, full: bool = False
    ) -> Loaded:
        """Load a run's state without locking or repairing anything (for inspection).

        Damage raises :class:`CheckpointCorrupt` unless the store rolls back, in which case the
        returned ``Loaded`` lists it.
        """
        folder = self.path(run_id)
        if not os.path.isdir(folder):
            raise RunNotFound(f"no run {run_id!r} in {self.root}")
        return load(folder, reducer, stop_on_damage=self.on_corrupt == "raise", full=full)

    def meta(self, run_id: str) -> dict[str, Any]:
        return read_meta(self.path(run_id))

    # -- listing, verifying, pruning ------------------------------------------------------------

    def runs(self) -> list[RunInfo]:
        # imported here, not above: a dataclass, and opening a run imports no dataclasses
        from crashpoint.checkpoint._facts import RunInfo

        self._finish_removals()  # an interrupted removal's leftovers are never runs
        out = []
        for rid in self.run_ids():
            folder = os.path.join(self.root, rid)
            meta = read_meta(folder)
            lock_path = os.path.join(folder, "lock")
            gen, _pid = read_lock(lock_path)  # never a FIFO, a device or through a link
            out.append(
                RunInfo(
                    rid,
                    folder,
                    str(meta.get("status", "unknown")),
                    _dir_size(folder),
                    _newest_mtime(folder),
                    gen,
                    is_locked(lock_path),
                    meta,
                )
            )
        return out

    def verify(
        self, run_id: str | None = None, *, reducer: Reducer = records_reducer
    ) -> dict[str, tuple[list[Damage], list[TornTail]]]:
        """Check every checksum of one run or all; ``{run_id: (damage, torn tails)}``.

        Damage here means :meth:`read` with the same ``reducer`` finds damage too (pass
        :func:`~crashpoint.checkpoint.run_reducer` to check the records' shapes as runs)."""
        ids = [run_id] if run_id is not None else self.run_ids()
        out = {}
        for rid in ids:
            folder = self.path(rid)
            if not os.path.isdir(folder):
                raise RunNotFound(f"no run {rid!r} in {self.root}")
            out[rid] = verify_folder(folder, reducer)
        return out

    def usage(self, *, refresh: bool = False) -> int:
        """Bytes under the store's root, for all its writers together: the store-wide count
        kept in the store's lock file (``refresh`` walks the folder again and resets it)."""
        if not os.path.isdir(self.root):
            return 0
        if self.budget_bytes is None:  # nothing to hold store-wide: this object's count
            if self._usage is None or refresh:
                self._usage = _dir_size(self.root)
            return self._usage
        with self._store_locked() as led:
            if refresh or led.usage is None or not self._measured:
                led.usage, led.dirty, self._measured = _dir_size(self.root), True, True
            return led.usage

    def _account(self, delta: int) -> None:
        """Count ``delta`` bytes written (or, negative, freed) outside :meth:`_claim`."""
        if delta > 0:
            self.bytes_written += delta
        if self.budget_bytes is None:
            if self._usage is not None:
                self._usage += delta
            return
        if not os.path.isdir(self.root):
            return
        with self._store_locked() as led:
            if led.usage is not None:
                led.usage = max(0, led.usage + delta)
                led.dirty = True

    # -- the store-wide lock and its ledger -----------------------------------------------------

    def _store_locked(self) -> _StoreLocked:
        """Hold the store-wide lock (an ``flock`` on ``<root>/.store-lock``, re-entrant within
        this object) and give the ledger kept in it (``with ... as led``); a changed ledger is
        written back."""
        return _StoreLocked(self)

    def _store_lock_fd(self) -> int:
        """This process's descriptor of the store's lock file (reopened after a fork: a shared
        open file would share the lock with the parent)."""
        if self._slock_fd < 0 or self._slock_pid != os.getpid():
            self.fs.makedirs_durable(self.root)
            path = os.path.join(self.root, STORE_LOCK)
            try:
                fd = os.open(
                    path, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, 0o600
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise CheckpointError(
                        f"{path}: the store's lock file is a symbolic link; remove it (the "
                        "store recreates it) and check who can write to the store"
                    ) from exc
                raise CheckpointWriteError(
                    exc.errno or errno.EIO, path, "opening the store's lock file"
                ) from exc
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise CheckpointError(
                    f"{path}: the store's lock file is not a regular file; "
                    "remove it (the store recreates it)"
                )
            self._slock_fd, self._slock_pid = fd, os.getpid()
        return self._slock_fd

    # -- removing and pruning ------------------------------------------------------------------

    def remove(self, run_id: str) -> None:
        """Delete a run for real, crash-safely. Refuses a run whose lock is held.

        The folder is first renamed aside (``.removing-<id>``, the store's folder fsynced), then
        deleted: a crash leaves the run whole or gone, never half; :meth:`prune` and
        :meth:`runs` finish what an interrupted removal left."""
        self._remove(run_id, finished_only=False)

    def _remove(self, run_id: str, *, finished_only: bool) -> int:
        folder = self.path(run_id)
        check_run_folder(folder, must_exist=True)
        lock = acquire(os.path.join(folder, "lock"), run_id, fs=self.fs, timeout=0, bump=False)
        try:
            if finished_only and finished_status(folder) not in PRUNABLE_STATUSES:
                raise CheckpointError(f"run {run_id!r} is not finished (by its journal)")
            size = _dir_size(folder)
            aside = os.path.join(self.root, f"{REMOVING}{run_id}")
            if os.path.lexists(aside):  # an earlier removal of a run of this name, unfinished
                _rmtree(aside)
            try:
                os.rename(folder, aside)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                aside = f"{aside}-{os.urandom(4).hex()}"
                os.rename(folder, aside)
            self.fs.fsync_dir(self.root)  # from here on the run is gone, even after power loss
            _rmtree(aside)
            self.fs.fsync_dir(self.root)
        finally:
            lock.release()
        self._account(-size)
        return size

    def _finish_removals(self) -> None:
        """Delete what interrupted removals left (``.removing-*`` folders no one is deleting)."""
        try:
            names = [n for n in os.listdir(self.root) if n.startswith(REMOVING)]
        except OSError:
            return
        done = False
        for name in names:
            path = os.path.join(self.root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue  # not one of ours: never followed, never deleted
            if is_locked(os.path.join(path, "lock")):
                continue  # its remover is still at work
            _rmtree(path)
            done = True
        if done:
            try:
                self.fs.fsync_dir(self.root)
            except OSError:
                pass

    def prunable(self, *, now: float | None = None, need: int = 0) -> list[RunInfo]:
        """Finished runs that retention (or a need for ``need`` more bytes) allows removing,
        oldest first. "Finished" is read from each run's journal (its last word is a finish
        record), never from meta.json. Never an active, paused, unknown or locked run."""
        # imported here, not above: RunInfo is a dataclass (opening a run imports none)
        from dataclasses import replace

        now = time.time() if now is None else now
        done = []
        for r in self.runs():
            if r.locked:
                continue
            status = finished_status(r.path)
            if status in PRUNABLE_STATUSES:
                done.append(replace(r, status=status))
        return pick_for_retention(done, self.retention, now, need)

    def prune(
        self, *, now: float | None = None, need: int = 0, dry_run: bool = False
    ) -> list[RunInfo]:
        """Remove what :meth:`prunable` picks (``need``: free at least this many bytes); return
        the runs removed. Each is checked again under its lock before it goes."""
        if not dry_run:
            self._finish_removals()
        removed = []
        for r in self.prunable(now=now, need=need):
            if dry_run:
                removed.append(r)
                continue
            try:
                self._remove(r.run_id, finished_only=True)
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

    def _violation(self, n: int, led: _Ledger, *, fresh: bool) -> tuple[str, int] | None:
        """Why a write of ``n`` more bytes breaks a limit, and the shortfall in bytes."""
        if self.budget_bytes is not None:
            if led.usage is None or fresh or not self._measured:
                # measured under the lock, while no writer of the store is between its check
                # and its write: exact (each Store object measures once, so a count lost to a
                # power cut is redone)
                led.usage, led.dirty, self._measured = _dir_size(self.root), True, True
            if led.usage + n > self.budget_bytes:
                return (
                    f"the store's budget of {self.budget_bytes} bytes (in use by all its "
                    f"writers: {led.usage})",
                    led.usage + n - self.budget_bytes,
                )
        reserve = self.reserve_for()
        if reserve > 0:
            if not fresh and self._since_statvfs + n <= self._statvfs_every:
                return None  # inside the window this object was granted at the last reading
            # Free space now, less the windows other writers of this store were granted and
            # may still be writing into: the reserve holds for all of them together.
            est = self._free() - led.others(self._key)
            if est - n < reserve:
                led.grant(self._key, 0)
                self._statvfs_every = 0
                return f"the free-space reserve of {reserve} bytes (free: {est})", reserve - (
                    est - n
                )
            window = MiB if est - n - MiB > 2 * reserve + 4 * MiB else 0
            led.grant(self._key, window)
            self._statvfs_every = window
        return None

    def _claim(self, n: int, path: str) -> bool:
        """Make room for a write of ``n`` bytes, for all writers of the store together, or
        raise DiskBudgetExceeded before anything is written.

        Returns True when the store's lock is held: the caller writes, then calls
        :meth:`_settle` (so the check and the write are one step for every writer). Without a
        budget and while free space is far above the reserve, a writer uses its window (up to
        1 MiB, counted against every other writer's reserve check) without any system call."""
        if self.budget_bytes is None and (
            self.reserve_for() == 0 or self._since_statvfs + n <= self._statvfs_every
        ):
            self._since_statvfs += n
            return False
        cm = self._store_locked()
        led = cm.__enter__()
        try:
            v = self._violation(n, led, fresh=False)
            if v is not None:
                v = self._violation(n, led, fresh=True)
            if v is not None:
                self.prune(need=v[1])
                v = self._violation(n, led, fresh=True)
            if v is not None:
                raise DiskBudgetExceeded(path, n, v[0])
        except BaseException:
            cm.__exit__(None, None, None)
            raise
        self._since_statvfs += n
        self._claimed.append(cm)
        return True

    def _settle(self, held: bool, written: int, *, data: bool = True) -> None:
        """After a write that :meth:`_claim` made room for: count it, release the lock.
        ``data=False``: bookkeeping (a lock file), not counted in :attr:`bytes_written`."""
        if written > 0 and data:
            self.bytes_written += written
            if self._usage is not None and self.budget_bytes is None:
                self._usage += written
        if not held:
            return
        cm = self._claimed.pop()
        led = self._held
        if led is not None and led.usage is not None and written:
            led.usage = max(0, led.usage + written)
            led.dirty = True
        cm.__exit__(None, None, None)

    def _guard(self, n: int, path: str) -> None:
        """Check room for a write of ``n`` bytes (raise DiskBudgetExceeded if none); the caller
        writes and counts it with :meth:`_account` (prefer :meth:`_claim`: one step)."""
        self._settle(self._claim(n, path), 0)


STORE_LOCK = ".store-lock"
REMOVING = ".removing-"
_LEDGER_PAD = 4096  # a ledger up to this size is rewritten in place, padded (see _Ledger.write)


class _StoreLocked:
    """:meth:`Store._store_locked`'s context manager (a class, not ``@contextmanager``: opening
    a run imports no contextlib, which a lifecycle command, run once per step, would pay for)."""

    __slots__ = ("_led", "_outer", "_store")

    def __init__(self, store: Store) -> None:
        self._store = store
        self._outer = False
        self._led: _Ledger | None = None

    def __enter__(self) -> _Ledger:
        store = self._store
        store._mutex.acquire()
        try:
            led = store._held
            self._outer = led is None
            if led is None:
                led = store._held = _open_store_lock(store.root, store._store_lock_fd())
        except BaseException:
            store._mutex.release()
            raise
        self._led = led
        return led

    def __exit__(self, *exc: object) -> None:
        store, led = self._store, self._led
        try:
            if self._outer and led is not None:
                store._held = None
                try:
                    if led.dirty:
                        led.write()
                finally:
                    fcntl.flock(led.fd, fcntl.LOCK_UN)
        finally:
            store._mutex.release()


class _Ledger:
    """The store-wide facts kept in ``.store-lock``, read and written under its ``flock``:
    the bytes in use by all writers, and the free-space windows granted to live writers."""

    __slots__ = ("dirty", "fd", "grants", "usage")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.usage: int | None = None
        self.grants: dict[str, int] = {}
        self.dirty = False

    def others(self, me: str) -> int:
        total = 0
        for key, size in list(self.grants.items()):
            if key == me:
                continue
            if _pid_alive(key.partition(".")[0]):
                total += size
            else:
                del self.grants[key]
                self.dirty = True
        return total

    def grant(self, me: str, size: int) -> None:
        if self.grants.get(me, 0) != size:
            if size:
                self.grants[me] = size
            else:
                self.grants.pop(me, None)
            self.dirty = True

    def write(self) -> None:
        data = json.dumps({"usage": self.usage, "grants": self.grants}, sort_keys=True).encode()
        try:  # a cache: a lost write is re-measured (each Store measures on first use)
            size = os.fstat(self.fd).st_size
            if size <= _LEDGER_PAD:
                # in place, padded with spaces (JSON's whitespace) over what it replaces: a
                # truncation to zero is a journal transaction of the filesystem (milliseconds
                # on ext4, each lifecycle command paid it), an overwrite in place is not
                os.pwrite(self.fd, data.ljust(size), 0)
            else:
                os.ftruncate(self.fd, 0)
                os.pwrite(self.fd, data, 0)
        except OSError:
            pass


def _pid_alive(pid_s: str) -> bool:
    try:
        os.kill(int(pid_s), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError):
        return True
    return True


def _open_store_lock(root: str, fd: int) -> _Ledger:
    """Take the store's lock (waiting up to a minute: it is held only around single writes)."""
    if not flock_within(fd, 60.0, 0.001):
        raise CheckpointError(
            f"{os.path.join(root, STORE_LOCK)}: the store's lock has been held for a "
            "minute; a writer of this store is stopped (SIGSTOP?) or hung: find it "
            "with `fuser -v` on that file"
        )
    led = _Ledger(fd)
    try:
        raw = os.pread(fd, 1 << 16, 0)
        info = decode_json(raw) if raw else {}
    except (OSError, ValueError):  # unreadable or not ours: a cache, measured again
        info = {}
    if isinstance(info, dict):
        u = info.get("usage")
        if isinstance(u, int) and not isinstance(u, bool) and u >= 0:
            led.usage = u
        g = info.get("grants")
        if isinstance(g, dict):
            led.grants = {
                k: v
                for k, v in g.items()
                if isinstance(k, str) and isinstance(v, int) and 0 < v <= MiB
            }
    return led


def _still_at(fd: int, path: str) -> bool:
    """True if the open file ``fd`` is still the file at ``path`` (not renamed away)."""
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _rmtree(path: str) -> None:
    """Delete a folder tree without following links (``shutil.rmtree`` works on descriptors);
    what cannot be deleted now is left for the next prune."""
    import shutil  # only when a run is removed: the lifecycle commands start without it

    shutil.rmtree(path, ignore_errors=True)


def check_run_folder(folder: str, *, must_exist: bool = False) -> bool:
    """Refuse a run folder the store must not write into: a symbolic link (it would lead the
    store outside itself), not a folder, or owned by another user (planted in a shared root).
    Return whether it exists."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        if must_exist:
            raise RunNotFound(
                f"no run {os.path.basename(folder)!r} in {os.path.dirname(folder)}"
            ) from None
        return False
    if stat.S_ISLNK(st.st_mode):
        raise CheckpointError(
            f"{folder}: the run's folder is a symbolic link; the store never follows links out "
            "of itself. Remove the link (or move the real folder into the store in its place)"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise CheckpointError(f"{folder}: the run's path is not a folder; move it out of the store")
    if st.st_uid != os.geteuid():
        raise CheckpointError(
            f"{folder}: the run's folder belongs to uid {st.st_uid}, not to this process (uid "
            f"{os.geteuid()}): someone else created it in the store. Remove it, or run as its "
            "owner; keep the store's folder writable by its owner only (chmod 700)"
        )
    return True


def finished_status(folder: str) -> str | None:
    """The status of the run's finish record if that is its journal's last word, else None.

    Read from the journal (never from meta.json, a cache that can disagree); a run whose
    journal cannot be read whole is not finished."""

    def last_word(state: dict[str, Any], rec: Any) -> None:
        state["__finish__"] = (
            rec.get("status") if isinstance(rec, dict) and rec.get("t") == "finish" else None
        )

    try:
        loaded = load(folder, last_word, stop_on_damage=True)
    except Exception:  # damaged or unreadable: not provably finished, so never pruned
        return None
    if loaded.damage or loaded.seq == 0:
        return None
    st = loaded.state
    if "__finish__" in st:
        got = st["__finish__"]
    elif "effects" in st and "status" in st:  # only a snapshot of a Run (run_reducer's state)
        got = st["status"]
    else:
        recs = st.get("records")
        last = recs[-1] if isinstance(recs, list) and recs else None
        got = last.get("status") if isinstance(last, dict) and last.get("t") == "finish" else None
    return got if isinstance(got, str) else None


class RunJournal:
    """An open, locked run: append records, take snapshots, keep the reduced state in memory.

    Use as a context manager; :meth:`close` releases the lock.
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        folder: str,
        reducer: Reducer,
        lock: RunLock,
        *,
        full: bool = False,
        lock_synced: bool = True,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.folder = folder
        self.fs = store.fs
        self._reducer = reducer
        self._lock = lock
        self._lock_synced = lock_synced  # the generation in the lock file is durable
        self._fd = -1
        self._broken: OSError | None = None
        self._unsynced = 0
        self.snapshot_error: OSError | None = None
        for name in os.listdir(folder):  # a crash can leave temp files of atomic writes
            if is_temp_of(name, (META, "snap-")):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
        self._history = is_history_index(reducer)  # snapshots index segments, never replace
        loaded = load(folder, reducer, stop_on_damage=store.on_corrupt == "raise", full=full)
        self._history = loaded.history  # a history index's folder keeps its segments
        self.state: dict[str, Any] = loaded.state
        self.seq = loaded.seq
        if loaded.generation >= lock.generation:  # the lock file was torn; records fence
            lock.generation = loaded.generation + 1
            write_holder(self.fs, lock.fd, lock.generation, sync=lock_synced)
        self.generation = lock.generation
        self._since_snapshot = loaded.bytes_since_snapshot
        self._snapshot_size = loaded.snapshot_bytes
        self._snapshot_due = self._due()
        dur = store.durability
        self._sync_every = {"always": 1, "batch": dur.every}.get(dur.mode, 0)
        moved: list[str] = []
        try:
            if loaded.damage:  # rollback: make the valid prefix durable on its own first
                stamp = time.strftime("%Y%m%dT%H%M%S")
                # damaged snapshots hold nothing readable: aside first (the new one may take
                # one's name); damaged segments only once the snapshot holds their good records
                bad_snaps = [p for p in loaded.unusable if SNAP_RE.match(os.path.basename(p))]
                self._move_aside(bad_snaps, stamp, moved)
                self._write_snapshot()
                self._move_aside([p for p in loaded.unusable if p not in bad_snaps], stamp, moved)
                # everything left is covered by the snapshot, a torn tail in an old segment
                # included: delete it, so the next open has nothing to trip over
                self._drop_covered()
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
            raise CheckpointWriteError(
                exc.errno or errno.EIO, folder, "recovering the run"
            ) from exc
        self._recovered = (loaded.torn, tuple(loaded.damage), loaded.lost_from_seq, tuple(moved))

    @property
    def recovery(self) -> Recovery:
        """What opening the run repaired or rolled back (falsy: nothing)."""
        # imported here, not above: a dataclass, and opening a run imports no dataclasses
        from crashpoint.checkpoint._facts import Recovery

        return Recovery(*self._recovered)

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
            raise CheckpointWriteError(
                self._broken.errno or errno.EIO,
                self._path,
                "the journal stopped at an earlier write error; reopen",
            )
        if self._fd < 0:
            raise CheckpointError(f"run {self.run_id!r} is closed")
        store = self.store
        if redact:
            data = store.redactor.redact(data)
        # the canonical encoding of {"s": seq, "g": generation, "d": data}, keys sorted
        payload = b'{"d":%b,"g":%d,"s":%d}' % (encode_json(data), self.generation, self.seq + 1)
        frame = encode(payload)
        n = len(frame)
        if sync is None:
            every = self._sync_every
            sync = every == 1 or (every > 1 and self._unsynced + 1 >= every)
        if not self._lock_synced:
            self._sync_generation()
        held = store._claim(n, self._path)  # room for all writers; raises before writing
        try:
            written = 0
            try:
                failpoint("journal.write", self._path)
                self.fs.write(self._fd, frame)
                written = n
            finally:
                store._settle(held, written)  # the check and the write were one step
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
                raise CheckpointWriteError(
                    exc.errno or errno.EIO,
                    self.folder,
                    f"starting a new segment after record {self.seq}",
                ) from exc
        return self.seq

    def _sync_generation(self) -> None:
        """Make this writer's generation durable before its first write (see ``defer_sync``)."""
        try:
            self.fs.fsync(self._lock.fd)
        except OSError as exc:
            raise CheckpointWriteError(
                exc.errno or errno.EIO, self._lock.path, "making the run's generation durable"
            ) from exc
        self._lock_synced = True

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

    @property
    def position(self) -> tuple[str, int]:
        """The segment the next record goes to, and its offset there (a record's data may say
        where it lies, for a :class:`~crashpoint.checkpoint.JournalReader` to find it at once)."""
        return self._path, self._end

    @property
    def since_snapshot(self) -> int:
        """Journal bytes appended since the last snapshot (what opening the run replays)."""
        return self._since_snapshot

    @property
    def snapshot_bytes(self) -> int:
        """Size of the last snapshot written or loaded (0: none)."""
        return self._snapshot_size

    def snapshot(self, *, required: bool = True) -> None:
        """Write the state as a snapshot, start a new segment, and delete what it covers.

        With ``required=False`` (automatic snapshots) a failure is kept in ``snapshot_error``
        instead of raised: the journal alone is still complete. A history index's snapshot
        (:func:`~crashpoint.checkpoint.register_history_index`) says where the next record
        goes instead (no new segment, nothing deleted but older snapshots) and is not synced:
        an index a crash may lose, rebuilt from the records.
        """
        try:
            if self._history:  # no sync: opening checks that the records it covers are there
                first = int(os.path.basename(self._path)[4:16])
                self._write_snapshot((first, self._end))
                self._drop_covered()
                self.snapshot_error = None
                return
            self._write_snapshot()
            self._roll(covered=True)
            self.snapshot_error = None
        except (OSError, DiskBudgetExceeded) as exc:
            if required:
                if isinstance(exc, CheckpointError):
                    raise
                raise CheckpointWriteError(
                    exc.errno or errno.EIO, self.folder, "writing a snapshot"
                ) from exc
            self.snapshot_error = exc

    def _write_snapshot(self, tail: tuple[int, int] | None = None) -> None:
        if not self._lock_synced:
            self._sync_generation()
        snap: dict[str, Any] = {"seq": self.seq, "gen": self.generation, "state": self.state}
        if self._history:  # where the records after it begin (a rollback: a new segment)
            snap["tail"] = list(tail or (self.seq + 1, 0))
        frame = encode(encode_json(snap), KIND_SNAPSHOT)
        held = self.store._claim(len(frame), self.folder)
        written = 0
        try:
            path = os.path.join(self.folder, snapshot_name(self.seq))
            if self._history:
                self.fs.write_replace(path, frame)
            else:
                self.fs.write_atomic(path, frame)
            written = len(frame)
        finally:
            self.store._settle(held, written)
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
            self._drop_covered()

    def _drop_covered(self) -> None:
        """Delete every segment and snapshot the newest snapshot (at :attr:`seq`) covers, a
        torn tail in an old segment included, so the next open has nothing to trip over. A
        history index's snapshot replaces older snapshots only: its segments stay."""
        snaps, segs = list_files(self.folder)
        for s, p in segs:
            if s <= self.seq and not self._history:
                self._unlink(p, sync=False)
        for s, p in snaps:
            if s < self.seq:
                self._unlink(p, sync=False)
        if not self._history:  # an older index coming back after a crash is harmless
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

    def _move_aside(self, paths: list[str], stamp: str, moved: list[str]) -> None:
        for p in paths:
            if os.path.lexists(p):
                dst = f"{p}.corrupt-{stamp}"
                self.fs.replace(p, dst)
                moved.append(dst)
        if paths:
            self.fs.fsync_dir(self.folder)

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
        path = os.path.join(self.folder, META)
        try:
            old = os.lstat(path).st_size
        except OSError:
            old = 0
        held = self.store._claim(len(data), self.folder)
        written = 0
        try:
            self.fs.write_atomic(path, data)
            written = len(data)
        except OSError as exc:
            raise CheckpointWriteError(exc.errno or errno.EIO, path) from exc
        finally:
            self.store._settle(held, written)
        if old:
            self.store._account(-old)  # the replaced file's bytes are free again
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


def opened(store: Store, run_id: str, **kw: Any) -> RunJournal:
    """``store.open(run_id, **kw)``, for ``with opened(...) as journal`` (closed at its end)."""
    return store.open(run_id, **kw)


def is_store_url(url_or_path: str | os.PathLike[str]) -> bool:
    """True for a ``postgresql://`` or ``postgres://`` URL (a PostgresStore), else a folder."""
    s = os.fspath(url_or_path)
    return isinstance(s, str) and s.lower().startswith(("postgresql://", "postgres://"))


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old file or the new one, whole
    (same-folder temp file, fsync, ``os.replace``, fsync the folder)."""
    REAL.write_atomic(os.fspath(path), data)


def makedirs_durable(path: str | os.PathLike[str]) -> None:
    """Create the folder ``path`` and its missing parents so that a power cut keeps them
    (each new folder fsynced into its parent), 0700."""
    REAL.makedirs_durable(os.fspath(path))
