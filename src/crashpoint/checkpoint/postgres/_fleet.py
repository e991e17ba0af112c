"""A fleet of workers over one PostgreSQL store: any worker resumes any unfinished run.

Each worker polls :meth:`PostgresStore.claim` (``FOR UPDATE SKIP LOCKED``: concurrent workers
get disjoint runs) for runs that are unfinished and unleased, takes the run's lease (a new
fencing generation) and resumes it:

* ``command`` (``run_id -> argv``): the agent runs in its own session with
  ``CRASHPOINT_WORKER`` set to the worker id, so its ``PostgresStore`` adopts the lease the
  worker claimed. The worker renews the lease while the agent runs and kills the agent's whole
  process group if a renewal is refused (the lease was lost: someone else has the run) or the
  attempt times out. The agent also dies with the worker (``PR_SET_PDEATHSIG`` on Linux).
* ``resume`` (``run_id -> Any``): in-process, with the worker's store (its journal renews the
  lease itself).

A run that fails ``max_attempts`` times (counted in the store, across workers) is
dead-lettered. A worker killed mid-step stops heartbeating: its lease expires after
``lease_seconds`` and another worker claims the run at the next generation; anything the dead
worker's agent still tries to write is refused (:class:`~crashpoint.errors.LeaseLost`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crashpoint.checkpoint._run import EXIT_CODES, run_reducer
from crashpoint.errors import (
    CheckpointError,
    InvalidArgument,
    LeaseLost,
    RunPaused,
    WrongArgumentType,
)

__all__ = ["FleetOutcome", "FleetWorker", "fleet_summary", "submit"]

_DONE = frozenset({"completed", "denied", "dead", "paused"})


@dataclass(frozen=True, slots=True)
class FleetOutcome:
    """What one worker did with one claimed run."""

    run_id: str
    status: str  # completed | paused | denied | dead | failed | lost
    attempts: int  # attempts counted in the store so far
    generation: int  # the lease generation this worker held
    worker: str
    reason: str = ""
    seconds: float = 0.0

    def line(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return (
            f"{self.run_id}: {self.status} (attempt {self.attempts}, generation "
            f"{self.generation}, worker {self.worker}, {self.seconds:.1f}s){why}"
        )


def fleet_summary(outcomes: Sequence[FleetOutcome]) -> str:
    """One line per run (its last outcome), then the totals."""
    last: dict[str, FleetOutcome] = {}
    for o in outcomes:
        last[o.run_id] = o
    lines = [last[r].line() for r in sorted(last)]
    counts: dict[str, int] = {}
    for o in last.values():
        counts[o.status] = counts.get(o.status, 0) + 1
    lines.append(
        f"{len(last)} run(s): "
        + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none")
    )
    return "\n".join(lines)


def submit(store: Any, run_id: str) -> bool:
    """Put run ``run_id`` into the store, unfinished and unleased, for a worker to claim.
    False if the run already exists (left as it is)."""
    if store.exists(run_id):
        return False
    journal = store.open(run_id, reducer=run_reducer, create=True)
    journal.close()  # releases the lease: claimable at once
    return True


def _pdeathsig() -> Callable[[], None] | None:
    """The child-side hook that makes an agent die with its worker (``PR_SET_PDEATHSIG``),
    resolved here, in the parent: between fork and exec the child only calls it (no library
    loading there, where another thread of the worker may have held a lock)."""
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG

    return hook


#: The last bytes of an agent's stderr a failed attempt keeps (its last line is the reason).
STDERR_TAIL = 64 * 1024


class FleetWorker:
    """One worker of a fleet; see the module docstring.

    ``worker`` defaults to the store's worker id. ``poll``: seconds between claims when idle;
    ``timeout``: seconds one attempt may take; ``log``: where progress lines go (default
    stderr; ``progress`` seconds between "still running" lines).
    """

    def __init__(
        self,
        store: Any,
        *,
        worker: str | None = None,
        command: Callable[[str], Sequence[str]] | None = None,
        resume: Callable[[str], Any] | None = None,
        max_attempts: int = 3,
        poll: float = 1.0,
        timeout: float = 600.0,
        env: Mapping[str, str] | None = None,
        auto_resume_hitl: bool = False,
        log: Callable[[str], None] | None = None,
        progress: float = 30.0,
    ) -> None:
        if (command is None) == (resume is None):
            raise InvalidArgument("give exactly one of command= or resume=")
        if max_attempts < 1:
            raise InvalidArgument(f"max_attempts must be >= 1, got {max_attempts}")
        if poll <= 0 or timeout <= 0:
            raise InvalidArgument("poll and timeout must be positive")
        for name in ("claim", "renew", "release", "record_attempt", "dead_letter"):
            if not hasattr(store, name):
                raise WrongArgumentType(
                    f"a fleet needs a store with leases (PostgresStore); "
                    f"{type(store).__name__} has no {name}()"
                )
        self.store = store
        self.worker = worker or str(store.worker)
        if resume is not None and self.worker != store.worker:
            raise InvalidArgument(
                f"in-process resume writes through the store: its worker id "
                f"{store.worker!r} must be the fleet worker's {self.worker!r}"
            )
        self.command = command
        self.resume = resume
        self.max_attempts = max_attempts
        self.poll = poll
        self.timeout = timeout
        self.env = dict(env) if env is not None else dict(os.environ)
        self.auto_resume_hitl = auto_resume_hitl
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.progress = progress
        self.outcomes: list[FleetOutcome] = []

    # -- the loop --------------------------------------------------------------------------------

    def run_once(self) -> list[FleetOutcome]:
        """Claim one run and work it; [] if there was nothing to claim."""
        claimed = self.store.claim(self.worker, limit=1, auto_resume_hitl=self.auto_resume_hitl)
        out = [self.work(run_id, gen) for run_id, gen in claimed]
        self.outcomes += out
        return out

    def run(
        self,
        *,
        until_idle: bool = False,
        stop: threading.Event | None = None,
        max_runs: int | None = None,
    ) -> list[FleetOutcome]:
        """Claim and work runs until ``stop`` is set (or, with ``until_idle``, until a claim
        finds nothing and no other worker holds an unfinished run)."""
        stop = stop or threading.Event()
        done: list[FleetOutcome] = []
        while not stop.is_set() and (max_runs is None or len(done) < max_runs):
            try:  # the database unreachable (partition, restart): keep polling
                got = self.run_once()
                idle = not got and until_idle and not self._others_busy()
            except CheckpointError as exc:
                self.log(f"worker {self.worker}: the store failed ({exc}); retrying")
                got, idle = [], False
            done += got
            if idle:
                break
            if not got:
                stop.wait(self.poll)
        return done

    def _others_busy(self) -> bool:
        """Unfinished, not dead-lettered runs exist (held by a worker, or its lease not yet
        expired): an idle worker waits for them rather than leave them behind."""
        wanted = {"created", "running", "failed"} | (
            {"decided"} if self.auto_resume_hitl else set()
        )
        dead = {r[0] for r in self.store.dead_lettered()}
        return any(r.status in wanted and r.run_id not in dead for r in self.store.runs())

    # -- one run ---------------------------------------------------------------------------------

    def work(self, run_id: str, generation: int) -> FleetOutcome:
        """Resume one claimed run (lease ``generation`` held by this worker)."""
        start = time.monotonic()
        meta = self.store.meta(run_id)
        status = str(meta.get("status", "created"))
        if status in _DONE:
            self.store.release(run_id, self.worker, generation)
            return self._outcome(run_id, status, generation, start, str(meta.get("reason", "")))
        error, lost = self._attempt(run_id, generation)
        if lost:
            return self._outcome(run_id, "lost", generation, start, error or "lease lost")
        status = str(self.store.meta(run_id).get("status", "created"))
        if status in _DONE and not error:
            self.store.release(run_id, self.worker, generation)
            return self._outcome(run_id, status, generation, start)
        why = error or f"the attempt ended with the run {status}"
        attempts = self.store.record_attempt(run_id, why)
        if attempts >= self.max_attempts:
            reason = f"failed on all {attempts} attempts; last: {why}"
            self.store.dead_letter(run_id, reason)
            self.store.release(run_id, self.worker, generation)
            return self._outcome(run_id, "dead", generation, start, reason, attempts)
        self.store.release(run_id, self.worker, generation)
        return self._outcome(run_id, "failed", generation, start, why, attempts)

    def _outcome(
        self,
        run_id: str,
        status: str,
        generation: int,
        start: float,
        reason: str = "",
        attempts: int | None = None,
    ) -> FleetOutcome:
        if attempts is None:
            try:
                attempts = int(self.store.meta(run_id).get("attempts", 0))
            except CheckpointError:
                attempts = 0
        o = FleetOutcome(
            run_id, status, attempts, generation, self.worker, reason, time.monotonic() - start
        )
        self.log(o.line())
        return o

    def _attempt(self, run_id: str, generation: int) -> tuple[str, bool]:
        """Run one attempt: ('' or why it failed, whether the lease was lost)."""
        if self.resume is not None:
            try:
                self.resume(run_id)
            except RunPaused:
                return "", False
            except LeaseLost as exc:
                return f"LeaseLost: {exc}", True
            except Exception as exc:  # any failure counts as a failed attempt
                return f"{type(exc).__name__}: {exc}", False
            return "", False
        assert self.command is not None
        argv = list(self.command(run_id))
        env = {**self.env, "CRASHPOINT_WORKER": self.worker}
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                env=env,
                preexec_fn=_pdeathsig(),
            )
        except OSError as exc:
            return f"cannot start {argv[0]!r}: {exc.strerror or exc}", False
        err = bytearray()

        def read_tail() -> None:  # bounded: an agent that floods stderr costs no memory
            fd = proc.stderr.fileno() if proc.stderr is not None else -1
            while fd >= 0 and (chunk := os.read(fd, 65536)):
                err.extend(chunk)
                del err[:-STDERR_TAIL]

        reader = threading.Thread(target=read_tail, daemon=True)
        reader.start()
        start = time.monotonic()
        beat = max(0.05, float(getattr(self.store, "heartbeat_seconds", 10.0)))
        next_progress = start + self.progress
        why, lost = "", False
        while True:
            try:
                proc.wait(beat)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if now - start > self.timeout:
                why = f"timed out after {self.timeout:g}s (killed)"
            else:
                try:
                    if not self.store.renew(run_id, self.worker, generation):
                        why, lost = "lease lost (taken over or expired): the agent was killed", True
                except CheckpointError as exc:
                    self.log(f"{run_id}: lease renewal failed ({exc}); trying again")
            if why:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            if now >= next_progress:
                next_progress = now + self.progress
                self.log(
                    f"{run_id}: still running after {now - start:.0f}s "
                    f"(worker {self.worker}, generation {generation})"
                )
        with contextlib.suppress(ProcessLookupError):  # the agent's stragglers
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(5)
        if proc.stderr is not None:
            proc.stderr.close()
        if why:
            return why, lost
        if proc.returncode in (0, EXIT_CODES["paused"], EXIT_CODES["denied"]):
            return "", False
        tail = bytes(err).decode("utf-8", "replace").strip().splitlines()[-1:]
        said = f": {tail[0][:300]}" if tail else ""
        if proc.returncode == EXIT_CODES["locked"]:  # LeaseLost / RunLocked: not ours now
            return f"exit {proc.returncode}{said}", True
        return f"exit {proc.returncode}{said}", False
