"""Auto-resume: find the runs a crash interrupted and resume them, without crash-looping.

The registry of in-flight runs is the store itself: a run's ``meta.json`` says ``running`` from
its first open until it finishes, and a run whose lock no live process holds while it still says
``running`` was interrupted. Paused runs wait for their decision; a decided run is resumed
automatically only with ``auto_resume_hitl``. A run that fails on every attempt is
dead-lettered after ``max_attempts`` with the last reason, so a poison run cannot loop forever.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crashpoint.checkpoint._notify import notify_event, run_command
from crashpoint.checkpoint._run import EXIT_CODES, run_reducer
from crashpoint.checkpoint._store import PRUNABLE_STATUSES, RunInfo, Store
from crashpoint.errors import CheckpointError, InvalidArgument, RunLocked, RunPaused

__all__ = ["ResumeOutcome", "Supervisor", "interrupted_runs", "resume_interrupted", "stale_runs"]

_RESUMABLE = frozenset({"running", "created", "failed"})


@dataclass(frozen=True, slots=True)
class ResumeOutcome:
    """What happened to one run the supervisor looked at."""

    run_id: str
    status: str  # completed | paused | denied | failed | dead | locked
    attempts: int
    reason: str = ""


def interrupted_runs(store: Store, *, auto_resume_hitl: bool = False) -> list[str]:
    """Runs a crash interrupted (unfinished, lock free); with ``auto_resume_hitl`` also paused
    runs that have their decision."""
    wanted = _RESUMABLE | ({"decided"} if auto_resume_hitl else frozenset())
    return [r.run_id for r in store.runs() if r.status in wanted and not r.locked]


class Supervisor:
    """Resume interrupted runs at start-up.

    Give either ``command`` (``run_id -> argv``; each attempt runs in its own session, is
    killed with its whole process group after ``timeout`` seconds) or ``resume`` (an in-process
    callable ``run_id -> Any``; no timeout can stop it). Each run is attempted until it
    completes, pauses, or has used ``max_attempts`` (counted across supervisor restarts).
    """

    def __init__(
        self,
        store: Store,
        *,
        command: Callable[[str], Sequence[str]] | None = None,
        resume: Callable[[str], Any] | None = None,
        timeout: float = 600.0,
        max_attempts: int = 3,
        auto_resume_hitl: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if (command is None) == (resume is None):
            raise InvalidArgument("give exactly one of command= or resume=")
        if max_attempts < 1:
            raise InvalidArgument(f"max_attempts must be >= 1, got {max_attempts}")
        self.store = store
        self.command = command
        self.resume = resume
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.auto_resume_hitl = auto_resume_hitl
        self.env = dict(env) if env is not None else None

    def resume_all(self) -> list[ResumeOutcome]:
        return [
            self.resume_one(rid)
            for rid in interrupted_runs(self.store, auto_resume_hitl=self.auto_resume_hitl)
        ]

    def _bookkeep(
        self, run_id: str, *, error: str | None = None, count: bool = False
    ) -> tuple[int, str]:
        """Under the run's lock: count an attempt / record an error; dead-letter when spent."""
        with self.store.open(run_id, reducer=run_reducer, create=False) as j:
            meta = j.meta
            n = int(meta.get("resumes", 0)) + (1 if count else 0)
            reason = error if error is not None else str(meta.get("last_error", ""))
            status = str(j.state.get("status", "created"))
            if status in ("completed", "denied", "dead", "paused"):
                return n, status
            if not count and n >= self.max_attempts:
                why = f"failed on all {n} attempts; last: {reason or 'no reason recorded'}"
                j.append({"t": "finish", "status": "dead", "reason": why}, redact=False, sync=True)
                j.set_meta(status="dead", reason=why, resumes=n, last_error=reason)
                dead = why
            else:
                j.set_meta(resumes=n, last_error=reason)
                return n, status
        notify_event(self.store, "dead_letter", run_id, attempts=n, reason=dead)  # lock freed
        return n, "dead"

    def resume_one(self, run_id: str) -> ResumeOutcome:
        attempts = 0
        while True:
            try:
                attempts, status = self._bookkeep(run_id)
                if status in ("completed", "denied", "dead", "paused"):
                    reason = str(self.store.meta(run_id).get("reason", ""))
                    return ResumeOutcome(run_id, status, attempts, reason)
                attempts, _ = self._bookkeep(run_id, count=True)
            except RunLocked:
                return ResumeOutcome(run_id, "locked", attempts, "another process has it")
            error = self._attempt(run_id)
            try:
                self._bookkeep(run_id, error=error)
            except RunLocked:
                return ResumeOutcome(run_id, "locked", attempts, "another process has it")

    def _attempt(self, run_id: str) -> str:
        """Run one attempt; return '' or the reason it failed."""
        if self.resume is not None:
            try:
                self.resume(run_id)
            except RunPaused:
                return ""
            except (CheckpointError, Exception) as exc:  # any failure counts as a failed attempt
                return f"{type(exc).__name__}: {exc}"
            return ""
        assert self.command is not None
        return (
            run_command(
                list(self.command(run_id)),
                data=None,
                timeout=self.timeout,
                env=None if self.env is None else dict(self.env),
                ok=(0, EXIT_CODES["paused"], EXIT_CODES["denied"]),
            )
            or ""
        )


def stale_runs(
    store: Store, older_than: float, *, notify: bool = True, runs: Sequence[RunInfo] | None = None
) -> list[RunInfo]:
    """Unfinished runs (not completed, denied or dead; unknown counts as unfinished) that no
    live process holds and whose files did not change for ``older_than`` seconds. With
    ``notify``, a ``stale`` event goes to the store's hook for each (every call: a monitor run
    from cron notifies on each round until the run is dealt with)."""
    found = [
        r
        for r in (store.runs() if runs is None else runs)
        if r.status not in PRUNABLE_STATUSES and not r.locked and r.age > older_than
    ]
    if notify:
        for r in found:
            notify_event(
                store,
                "stale",
                r.run_id,
                status=r.status,
                age_seconds=round(r.age, 3),
                updated=r.updated,
                waiting_for=r.meta.get("waiting_for"),
            )
    return found


def resume_interrupted(
    store: Store,
    resume: Callable[[str], Any],
    *,
    max_attempts: int = 3,
    auto_resume_hitl: bool = False,
) -> list[ResumeOutcome]:
    """Resume every interrupted run in-process with ``resume(run_id)``."""
    return Supervisor(
        store, resume=resume, max_attempts=max_attempts, auto_resume_hitl=auto_resume_hitl
    ).resume_all()
