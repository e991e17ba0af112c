"""Every exception crashpoint raises, in one module of the base layer (standard library only).

One base, :class:`CrashpointError`; each subclass also inherits the built-in category a caller
would already catch (``OSError`` for disk trouble, ``ValueError`` for bad input, ``TimeoutError``
for a lock that stays taken, ``ImportError`` for an agent entry that does not import), so
``except OSError`` around a checkpoint write still works, and ``except CrashpointError`` catches
anything crashpoint raised on purpose.

Two exceptions are *not* a :class:`CrashpointError`, on purpose: :class:`Interrupted` and
:class:`CampaignInterrupted` are ``KeyboardInterrupt`` s (SIGINT or SIGTERM reached the
harness). They must travel like Ctrl-C through every ``except Exception`` on their way up, so
that every ``finally`` runs and nothing swallows the request to stop.

Grouped by who raises them: the base (probe, units, placeholders, failpoints, the agent entry),
the reference library (``crashpoint.checkpoint``), process control, the faults, the harness,
and the command line. Every error pickles (``__reduce__`` where the constructor differs from
``args``), so it crosses a process boundary (pytest-xdist) whole.
"""

from __future__ import annotations

import errno as _errno
import os

TYPE_CHECKING = False  # without importing typing: the probe, inside every agent, imports this
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = [
    "AgentNotExecutable",
    "AgentNotFound",
    "AgentStartError",
    "BudgetExceeded",
    "CampaignInterrupted",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointWriteError",
    "ConfinementError",
    "CrashpointError",
    "DiskBudgetExceeded",
    "EffectInDoubt",
    "EffectMismatch",
    "EntryError",
    "FailpointSpecError",
    "FaultSpecError",
    "GateFileError",
    "GoldenRunFailed",
    "HttpEffectError",
    "Interrupted",
    "InvalidArgument",
    "InvalidRunId",
    "LLMScriptError",
    "LeaseLost",
    "MailEffectError",
    "NoBoundaries",
    "PayloadError",
    "PlaceholderError",
    "ProbeError",
    "ReplayError",
    "ResumeMismatch",
    "RunDeadLettered",
    "RunDenied",
    "RunLocked",
    "RunNotFound",
    "RunOwned",
    "RunPaused",
    "RunStateError",
    "ScenarioError",
    "ServiceSpecError",
    "StandInError",
    "StepOutOfOrder",
    "StoreTimeout",
    "UnitError",
    "UnsafeReportFolder",
    "UsageError",
    "WrongArgumentType",
    "ZygoteError",
]


def _signal_name(signum: int) -> str:
    import signal as _signal  # only when a message is made: the probe imports this module

    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _redact_url(url: str) -> str:
    """``url`` without a password in its user part (error messages never carry one)."""
    from urllib.parse import urlsplit  # only when a message is made: the probe imports this

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


class CrashpointError(Exception):
    """Base of every crashpoint error."""


# -- the base layer: the probe, units, placeholders, failpoints, the agent entry ---------------


class ProbeError(CrashpointError, RuntimeError):
    """The ledger answered with an error, or the connection to it broke."""


class UnitError(CrashpointError, ValueError):
    """A duration or size that could not be read. The message says what and the accepted forms."""


class PlaceholderError(CrashpointError, ValueError):
    """A template with a malformed or unsupported placeholder."""


class FailpointSpecError(CrashpointError, ValueError):
    """``CRASHPOINT_FAILPOINTS`` does not parse."""


class EntryError(CrashpointError, ImportError):
    """``module:function`` does not name an importable module and a callable in it."""


class InvalidArgument(CrashpointError, ValueError):
    """A function or class of crashpoint was given a value it cannot use: the message says which
    argument, what it got and what it takes."""


class WrongArgumentType(CrashpointError, TypeError):
    """A function or class of crashpoint was given an argument of the wrong type, or a
    combination of arguments it does not take."""


# -- the reference library (crashpoint.checkpoint) ---------------------------------------------


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


class PayloadError(CheckpointError, ValueError):
    """Stored bytes whose checksum holds but whose content the store never writes."""


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


class StoreTimeout(CheckpointError, TimeoutError):
    """A checkpoint store's database gave no answer in time (``PostgresStore``): the server is
    down, unreachable, or the network dropped the connection without telling anyone.

    ``where`` is the store (and run), ``what`` the call that waited, ``seconds`` the limit and
    ``option`` the constructor option that sets it; ``outcome`` says what became of a write
    (stored, not stored, or unknown until the run is reopened).
    """

    def __init__(
        self, where: str, what: str, seconds: float, option: str, outcome: str = ""
    ) -> None:
        self.where = where
        self.what = what
        self.seconds = seconds
        self.option = option
        self.outcome = outcome
        super().__init__(where, what, seconds, option, outcome)

    def __str__(self) -> str:
        outcome = f" {self.outcome}." if self.outcome else ""
        return (
            f"{self.where}: {self.what}: the database gave no answer within {self.seconds:g}s "
            f"({self.option}): the server is down or unreachable, or the network dropped the "
            f"connection silently.{outcome} Check the server and the network; to change the "
            f"limit, pass PostgresStore(..., {self.option}=SECONDS)."
        )

    def __reduce__(self) -> tuple[type[StoreTimeout], tuple[str, str, float, str, str]]:
        return (type(self), (self.where, self.what, self.seconds, self.option, self.outcome))


class RunOwned(RunLocked):
    """Another live agent called ``start`` on the run and still runs (exit 73, as locked)."""

    def __str__(self) -> str:
        return (
            f"run {self.run_id!r} is owned by another live agent ({self.holder}); only one "
            "agent may run it at a time: wait for that one to exit, then start again"
        )


class InvalidRunId(CheckpointError, ValueError):
    """A run id that could escape the store folder or cannot be a file name."""

    def __init__(self, run_id: str, why: str) -> None:
        self.run_id = run_id
        self.why = why
        super().__init__(run_id, why)

    def __str__(self) -> str:
        return (
            f"invalid run id {self.run_id!r}: {self.why}. Use 1-200 printable UTF-8 characters "
            "without '/', '\\', control characters or bidirectional formatting, not starting "
            "with '.' (letters, digits, '-', '_', '.', ':' are safe)."
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


class StepOutOfOrder(ResumeMismatch):
    """``step NAME`` for a step that is not the run's next one (exit 70, as a mismatch)."""

    def __init__(
        self,
        run_id: str,
        position: int,
        expected: str,
        requested: str,
        completed: Sequence[str] = (),
    ) -> None:
        super().__init__(run_id, position, expected, requested)
        self.completed = list(completed)

    def __str__(self) -> str:
        done = ", ".join(self.completed) or "none"
        if self.requested in self.completed:
            why = f"{self.requested!r} is already recorded as completed"
        else:
            why = "it is not the run's next step"
        return (
            f"run {self.run_id!r}: cannot record step {self.requested!r}: {why}; the next "
            f"step is {self.recorded!r} (#{self.position}; completed: {done}). Ask "
            f"`crashpoint checkpoints status {self.run_id} --next` what to run"
        )

    def __reduce__(self) -> Any:
        return (
            type(self),
            (self.run_id, self.position, self.recorded, self.requested, self.completed),
        )


class EffectMismatch(ResumeMismatch):
    """``effect`` without ``--key`` whose payload differs from the effect already announced,
    and not settled, under the same default key (exit 70, as a mismatch): another effect, not
    a retry of that one, so it is refused, never sent under that key."""

    def __init__(self, run_id: str, key: str, kind: str, position: int = 0) -> None:
        super().__init__(run_id, position, key, kind)
        self.key = key
        self.kind = kind

    def __str__(self) -> str:
        return (
            f"run {self.run_id!r}: effect {self.kind!r} is refused, not sent: an effect of that "
            f"kind was already announced under the default key {self.key!r} with a different "
            "payload and is not settled (in doubt). A retry of an effect sends the same "
            "payload; two effects of one kind in one step need a --key each (stable across "
            f"attempts), or settle the first with `crashpoint checkpoints effect {self.run_id} "
            f"{self.kind} --done` before announcing the next"
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.run_id, self.key, self.kind, self.position))


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


class RunDenied(CheckpointError):
    """A human denied an approval; the run ended as denied."""

    def __init__(self, run_id: str, step: str, note: str = "") -> None:
        self.run_id, self.step, self.note = run_id, step, note
        super().__init__(run_id, step, note)

    def __str__(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"run {self.run_id!r} was denied at {self.step!r}{note}; it ended as denied"

    def __reduce__(self) -> tuple[type[RunDenied], tuple[str, str, str]]:
        return (type(self), (self.run_id, self.step, self.note))


class HttpEffectError(CrashpointError):
    """An HTTP effect failed: a non-2xx reply (``status``, ``body``) or no reply at all
    (``status`` None: refused, reset, timed out). The effect is not recorded as done: its intent
    stays, so a resumed run sends it again with the same key (``key``)."""

    def __init__(
        self, method: str, url: str, key: str, status: int | None, body: str = "", reason: str = ""
    ) -> None:
        self.method, self.url, self.key = method, url, key
        self.status, self.body, self.reason = status, body, reason
        super().__init__(method, url, key, status, body, reason)

    def __str__(self) -> str:
        what = f"{self.method} {_redact_url(self.url)} (Idempotency-Key {self.key!r})"
        if self.status is None:
            return (
                f"{what} got no reply: {self.reason}. The effect is not recorded as done; "
                "a resumed run sends it again with the same key"
            )
        body = self.body.strip().replace("\n", " ")
        return (
            f"{what} was answered {self.status}"
            f"{' ' + self.reason if self.reason else ''}: {body[:300]!r}. The effect is "
            "not recorded as done; a resumed run sends it again with the same key"
        )

    def __reduce__(self) -> tuple[type[HttpEffectError], tuple[Any, ...]]:
        return (type(self), (self.method, self.url, self.key, self.status, self.body, self.reason))


class MailEffectError(CrashpointError):
    """A mail effect failed: the server refused it or did not answer. The effect is not
    recorded as done: its intent stays, so a resumed run sends it again with the same
    Message-ID (``message_id``)."""

    def __init__(self, host: str, port: int, message_id: str, reason: str) -> None:
        self.host, self.port, self.message_id, self.reason = host, port, message_id, reason
        super().__init__(host, port, message_id, reason)

    def __str__(self) -> str:
        return (
            f"mail {self.message_id} to SMTP {self.host}:{self.port} failed: {self.reason}. "
            "The effect is not recorded as done; a resumed run sends it again with the "
            "same Message-ID"
        )

    def __reduce__(self) -> tuple[type[MailEffectError], tuple[str, int, str, str]]:
        return (type(self), (self.host, self.port, self.message_id, self.reason))


# -- process control: starting an agent, stopping cleanly --------------------------------------


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


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: raised in the main thread so every ``finally`` runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(
            f"{_signal_name(signum)} received: stopping cleanly (agents killed, "
            "temporary folders removed, partial report written)"
        )
        self.signum = signum


# -- the faults (crashpoint.faults) ------------------------------------------------------------


class ConfinementError(CrashpointError, ValueError):
    """The folders a corruption may touch are unusable (e.g. the filesystem root)."""


# -- the harness (crashpoint.harness): scenarios, campaigns, trials, reports -------------------


class ScenarioError(CrashpointError, ValueError):
    """A scenario file that cannot be run: where (file, line, key), what, and how to fix it."""

    def __init__(self, path: str, line: int | None, key: str, message: str) -> None:
        self.path, self.line, self.key, self.message = path, line, key, message
        super().__init__(path, line, key, message)

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        k = f" (key '{self.key}')" if self.key else ""
        return f"{where}{k}: {self.message}"

    def __reduce__(self) -> tuple[type[ScenarioError], tuple[str, int | None, str, str]]:
        return (type(self), (self.path, self.line, self.key, self.message))


class FaultSpecError(CrashpointError, ValueError):
    """A bad fault family: what, and where within the ``faults:`` item: ``item`` (the index
    within a chain, None for a single fault), ``kind`` and ``option`` (empty when the item as a
    whole is wrong)."""

    def __init__(
        self, message: str, *, item: int | None = None, kind: str = "", option: str = ""
    ) -> None:
        super().__init__(message)
        self.item, self.kind, self.option = item, kind, option


class ServiceSpecError(CrashpointError, ValueError):
    """A bad ``services:`` section: ``parts`` is the path of what is wrong (``("services",
    "http", "routes", "POST /hook", "status")``), ``key`` its text."""

    def __init__(self, parts: tuple[str, ...], message: str) -> None:
        self.parts, self.message = parts, message
        self.key = "".join(
            p
            if i == 0
            else f"[{p}]"
            if p.isdigit()
            else f"[{p!r}]"
            if not p.isidentifier()
            else f".{p}"
            for i, p in enumerate(parts)
        )
        super().__init__(f"{self.key}: {message}")


class LLMScriptError(CrashpointError, ValueError):
    """A bad ``services.llm`` script: ``key`` (e.g. ``replies[2].regex``, relative to
    ``services.llm``) and what is wrong with it."""

    def __init__(self, key: str, message: str) -> None:
        self.key, self.message = key, message
        super().__init__(f"{key}: {message}" if key else message)


class NoBoundaries(CrashpointError, ValueError):
    """The golden run reported no event and no file operation: nothing to place a fault at,
    nothing to judge a trial by."""


class GoldenRunFailed(CrashpointError, RuntimeError):
    """The agent does not complete even without faults: nothing to judge trials against."""


class BudgetExceeded(CrashpointError, TimeoutError):
    """The campaign's time budget ran out (:attr:`TrialRunner.deadline`); what was running was
    stopped and cleaned up."""


class CampaignInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM (or Ctrl-C) stopped a campaign. Its processes and temporary folders are
    gone; ``result`` holds the trials that ran, marked incomplete (its reports are written)."""

    def __init__(self, result: Any) -> None:
        super().__init__(f"campaign {result.name!r}: {result.incomplete}")
        #: the :class:`crashpoint.harness.CampaignResult` of the trials that ran
        self.result = result


class ReplayError(CrashpointError, ValueError):
    """A trial folder cannot be replayed as it is (e.g. a redacted agent.env value is unknown)."""


class ZygoteError(CrashpointError, RuntimeError):
    """The fork-mode zygote could not start, refused a spawn, or died."""


class StandInError(CrashpointError, RuntimeError):
    """A stand-in service of the harness (the SMTP sink, the throw-away PostgreSQL server)
    could not start, or was used in a way it does not support."""


class UnsafeReportFolder(CrashpointError, PermissionError):
    """A report folder (or a file in it) that crashpoint will not write through."""


class GateFileError(CrashpointError, ValueError):
    """A file given as a gate's report (``--baseline``, ``crashpoint report``) that is not one:
    missing, unreadable, not JSON, not a gate.json, or left by a gate that never finished."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message
        super().__init__(path, message)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def __reduce__(self) -> tuple[type[GateFileError], tuple[str, str]]:
        return (type(self), (self.path, self.message))


# -- the command line (crashpoint.cli) ---------------------------------------------------------


class UsageError(CrashpointError, ValueError):
    """Bad usage or input: printed as ``crashpoint: error: MESSAGE``, exit 2."""
