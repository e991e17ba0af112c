"""Every exception crashpoint raises.

One base, :class:`CrashpointError`; each subclass also inherits the built-in category a caller
would already catch (``OSError`` for disk trouble, ``ValueError`` for bad input, ``TimeoutError``
for a lock that stays taken), so ``except OSError`` around a checkpoint write still works.
"""

from __future__ import annotations

import errno as _errno
import os

__all__ = [
    "AgentNotExecutable",
    "AgentNotFound",
    "AgentStartError",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointWriteError",
    "CrashpointError",
    "DiskBudgetExceeded",
    "EffectInDoubt",
    "InvalidRunId",
    "LeaseLost",
    "ResumeMismatch",
    "RunDeadLettered",
    "RunLocked",
    "RunNotFound",
    "RunPaused",
    "RunStateError",
]


class CrashpointError(Exception):
    """Base of every crashpoint error."""


class AgentStartError(CrashpointError, OSError):
    """The harness could not start the agent's process; nothing of the agent ran.

    ``argv0`` is the program it tried, ``cwd`` the agent's working folder; the message says
    which was wrong and how to fix it, in one line.
    """

    def __init__(self, err: int, message: str, argv0: str = "", cwd: str = "") -> None:
        super().__init__(err, message, argv0 or None)
        self.message = message
        self.argv0 = argv0
        self.cwd = cwd

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[type[AgentStartError], tuple[int, str, str, str]]:
        return (type(self), (self.errno or 0, self.message, self.argv0, self.cwd))


class AgentNotFound(AgentStartError, FileNotFoundError):
    """The agent's program (or its ``#!`` interpreter, or its working folder) does not exist."""


class AgentNotExecutable(AgentStartError, PermissionError):
    """The agent's program exists but may not be executed (no execute permission)."""


class CheckpointError(CrashpointError):
    """Something is wrong with a checkpoint store or one of its runs."""


class CheckpointCorrupt(CheckpointError, ValueError):
    """A checksum or structure check failed somewhere other than the torn tail of a journal.

    ``path`` and ``offset`` say where; ``reason`` says what did not match.
    """

    def __init__(self, path: str | os.PathLike[str], offset: int, reason: str) -> None:
        self.path = os.fspath(path)
        self.offset = offset
        self.reason = reason
        super().__init__(path, offset, reason)

    def __str__(self) -> str:
        return (
            f"corrupt checkpoint: {self.path} at byte {self.offset}: {self.reason}. "
            "Nothing past this point was returned. Open the store with on_corrupt='rollback' "
            "to fall back to the last valid record (the damaged file is moved aside), "
            "or restore the file from a backup; `crashpoint checkpoints verify` lists all damage."
        )

    def __reduce__(self) -> tuple[type[CheckpointCorrupt], tuple[str, int, str]]:
        return (type(self), (self.path, self.offset, self.reason))


class CheckpointWriteError(CheckpointError, OSError):
    """The OS refused a checkpoint write (ENOSPC, EFBIG, EIO, ...).

    Carries the errno; nothing acknowledged before it is lost, and the record being written
    when it happened was not acknowledged. The journal must be reopened to write again.
    """

    def __init__(self, err: int, path: str | os.PathLike[str], detail: str = "") -> None:
        self.detail = detail
        msg = os.strerror(err)
        if detail:
            msg = f"{msg} ({detail})"
        super().__init__(err, msg, os.fspath(path))

    def __str__(self) -> str:
        name = _errno.errorcode.get(self.errno or 0, str(self.errno))
        return (
            f"checkpoint write failed with {name}: {self.strerror}: {self.filename}. "
            "Every record acknowledged before this one is safe; this one was not acknowledged. "
            "Free space (or fix the device) and reopen the run to continue."
        )

    def __reduce__(self) -> tuple[type[CheckpointWriteError], tuple[int, str, str]]:
        return (type(self), (self.errno or 0, self.filename or "", self.detail))


class DiskBudgetExceeded(CheckpointError, OSError):
    """A write would break the store's byte budget or free-space reserve, even after pruning.

    Raised before anything is written.
    """

    def __init__(self, path: str | os.PathLike[str], needed: int, limit: str) -> None:
        self.needed = needed
        self.limit = limit
        super().__init__(
            _errno.ENOSPC, f"{limit}; a write of {needed} bytes was refused", os.fspath(path)
        )

    def __str__(self) -> str:
        return (
            f"disk budget exceeded for {self.filename}: {self.strerror}. Nothing was written. "
            "Raise the store's budget_bytes or reserve, prune completed runs "
            "(`crashpoint checkpoints prune`), or free space on the filesystem."
        )

    def __reduce__(self) -> tuple[type[DiskBudgetExceeded], tuple[str, int, str]]:
        return (type(self), (self.filename or "", self.needed, self.limit))


class RunLocked(CheckpointError, TimeoutError):
    """Another live process holds the run's lock."""

    def __init__(self, run_id: str, path: str, holder: str = "", waited: float = 0.0) -> None:
        self.run_id = run_id
        self.path = path
        self.holder = holder
        self.waited = waited
        super().__init__(run_id, path, holder, waited)

    def __str__(self) -> str:
        who = f" (held by {self.holder})" if self.holder else ""
        return (
            f"run {self.run_id!r} is locked by another live process{who}; waited "
            f"{self.waited:.1f}s for {self.path}. Only one process may write a run at a time: "
            "wait for it to finish, or pass a longer lock_timeout."
        )

    def __reduce__(self) -> tuple[type[RunLocked], tuple[str, str, str, float]]:
        return (type(self), (self.run_id, self.path, self.holder, self.waited))


class LeaseLost(RunLocked):
    """A writer's lease on a run (PostgresStore) was taken over by another worker, or expired
    and was taken: its fencing generation is stale, so its writes are refused, never applied.

    ``generation`` is the writer's own, ``current`` the one now holding the run (0 if unknown).
    """

    def __init__(
        self,
        run_id: str,
        path: str,
        holder: str = "",
        waited: float = 0.0,
        generation: int = 0,
        current: int = 0,
    ) -> None:
        super().__init__(run_id, path, holder, waited)
        self.generation = generation
        self.current = current
        self.args = (run_id, path, holder, waited, generation, current)

    def __str__(self) -> str:
        now = f" (now generation {self.current}" + (f", {self.holder})" if self.holder else ")")
        return (
            f"run {self.run_id!r}: this writer's lease (generation {self.generation}) was lost"
            f"{now if self.current else ''}; its write was refused and nothing of it was stored. "
            "Another worker owns the run now: stop this attempt; do not retry the write."
        )

    def __reduce__(self) -> tuple[type[LeaseLost], tuple[str, str, str, float, int, int]]:  # type: ignore[override]
        return (
            type(self),
            (self.run_id, self.path, self.holder, self.waited, self.generation, self.current),
        )


class InvalidRunId(CheckpointError, ValueError):
    """A run id that could escape the store folder or cannot be a file name."""

    def __init__(self, run_id: str, why: str) -> None:
        self.run_id = run_id
        self.why = why
        super().__init__(run_id, why)

    def __str__(self) -> str:
        return (
            f"invalid run id {self.run_id!r}: {self.why}. Use 1-200 characters without '/', "
            "'\\', NUL or control characters, not '.' or '..' (letters, digits, '-', '_', '.', "
            "':' are safe)."
        )

    def __reduce__(self) -> tuple[type[InvalidRunId], tuple[str, str]]:
        return (type(self), (self.run_id, self.why))


class RunNotFound(CheckpointError, LookupError):
    """No run with that id exists in the store."""


class RunStateError(CheckpointError, RuntimeError):
    """An operation that the run's current status does not allow (e.g. approve a running run)."""


class ResumeMismatch(CheckpointError, RuntimeError):
    """On resume the code asked for a different step than the journal recorded at that position."""

    def __init__(self, run_id: str, position: int, recorded: str, requested: str) -> None:
        self.run_id = run_id
        self.position = position
        self.recorded = recorded
        self.requested = requested
        super().__init__(run_id, position, recorded, requested)

    def __str__(self) -> str:
        return (
            f"run {self.run_id!r} cannot resume: at step #{self.position} the journal recorded "
            f"{self.recorded!r} but the code now asks for {self.requested!r}. The code changed "
            "between attempts; histories are never mixed. Finish the run with the old code, or "
            "start a new run id."
        )

    def __reduce__(self) -> tuple[type[ResumeMismatch], tuple[str, int, str, str]]:
        return (type(self), (self.run_id, self.position, self.recorded, self.requested))


class EffectInDoubt(CheckpointError, RuntimeError):
    """An effect's intent was recorded but not its result, and its policy is ``fail``."""

    def __init__(self, run_id: str, key: str, kind: str) -> None:
        self.run_id = run_id
        self.key = key
        self.kind = kind
        super().__init__(run_id, key, kind)

    def __str__(self) -> str:
        return (
            f"effect {self.kind!r} (key {self.key!r}) of run {self.run_id!r} is in doubt: a crash "
            "came after it was sent and before its result was recorded, and its policy is "
            "'fail'. Check the target, then record the outcome with "
            f"`crashpoint checkpoints approve {self.run_id}` (re-send) or `--deny` (treat as done)."
        )

    def __reduce__(self) -> tuple[type[EffectInDoubt], tuple[str, str, str]]:
        return (type(self), (self.run_id, self.key, self.kind))


class RunPaused(CrashpointError):
    """The run is waiting for a human decision. Not a failure: the process should exit."""

    def __init__(self, run_id: str, step: str, reason: str) -> None:
        self.run_id = run_id
        self.step = step
        self.reason = reason
        super().__init__(run_id, step, reason)

    def __str__(self) -> str:
        return (
            f"run {self.run_id!r} paused at {self.step!r} waiting for a decision ({self.reason}). "
            f"Decide with `crashpoint checkpoints approve {self.run_id}` (or --deny), then "
            "start the agent again."
        )

    def __reduce__(self) -> tuple[type[RunPaused], tuple[str, str, str]]:
        return (type(self), (self.run_id, self.step, self.reason))


class RunDeadLettered(CrashpointError):
    """A run failed on every attempt the supervisor allowed; it will not be resumed again."""

    def __init__(self, run_id: str, attempts: int, reason: str) -> None:
        self.run_id = run_id
        self.attempts = attempts
        self.reason = reason
        super().__init__(run_id, attempts, reason)

    def __str__(self) -> str:
        return (
            f"run {self.run_id!r} was dead-lettered after {self.attempts} attempts: {self.reason}"
        )

    def __reduce__(self) -> tuple[type[RunDeadLettered], tuple[str, int, str]]:
        return (type(self), (self.run_id, self.attempts, self.reason))
