"""Runs: resume from the last completed step, perform every effect exactly once.

:class:`Run` (opened with :func:`open_run`) writes a run's records and :func:`run_reducer`
replays them (both described in ``_runstate``, which every reader of a run shares); here are
the steps, effects, approvals, rollbacks, the state at a step and the plan of a resume.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Sequence

from crashpoint import probe
from crashpoint._failpoints import failpoint
from crashpoint.checkpoint._notify import notify_event
from crashpoint.checkpoint._runstate import (
    EXIT_CODES,
    _after,
    _epoch,
    _init_state,
    any_reducer,
    exit_code,
    run_reducer,
)
from crashpoint.checkpoint._store import RunJournal, Store
from crashpoint.checkpoint._value import FrozenValue
from crashpoint.errors import (
    CheckpointCorrupt,
    CheckpointError,
    EffectInDoubt,
    InvalidArgument,
    ResumeMismatch,
    RunDeadLettered,
    RunDenied,
    RunPaused,
    RunStateError,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any, Literal

    EffectPolicy = Literal["retry", "reconcile", "ask", "fail"]

__all__ = [
    "EXIT_CODES",
    "Checkpointing",
    "Decision",
    "EffectPolicy",
    "PlanLine",
    "Rollback",
    "Run",
    "RunDenied",
    "StateAt",
    "any_reducer",
    "decide",
    "exit_code",
    "open_run",
    "plan",
    "rollback",
    "run_main",
    "run_reducer",
    "state_at",
]

_POLICIES = ("retry", "reconcile", "ask", "fail")


def __getattr__(name: str) -> Any:
    """``EffectPolicy``, the one name here that needs :mod:`typing` at run time, made on first
    use: an agent's run never imports typing (nor dataclasses: the value classes below are
    :class:`~crashpoint.checkpoint._value.FrozenValue`)."""
    if name == "EffectPolicy":
        from typing import Literal

        policy = Literal["retry", "reconcile", "ask", "fail"]
        globals()[name] = policy
        return policy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_main(main: Callable[[], Any]) -> None:
    """Call ``main()`` and exit with the documented code for a run that cannot go on.

    A paused, denied, locked or corrupt run prints one clear line on stderr, no traceback.
    """
    try:
        main()
    except (CheckpointError, RunPaused, RunDeadLettered) as exc:
        print(f"crashpoint: {exc}", file=sys.stderr, flush=True)
        sys.exit(exit_code(exc))


class Decision(FrozenValue):
    """A human's answer to an approval request."""

    # the fields, in order (repr and __init__ follow it, as @dataclass did)
    __slots__ = ("approved", "note", "by")  # noqa: RUF023
    approved: bool
    note: str
    by: str

    def __init__(self, approved: bool, note: str = "", by: str = "") -> None:
        self._init(approved, note, by)


class Checkpointing(FrozenValue):
    """When completed steps are made durable.

    ``event`` (default): every step. ``interval(n)``: group commit every n steps — a power loss
    may re-run up to n-1 completed steps, but effect records always sync, so effects stay
    exactly-once. ``hybrid(n, seconds)``: every n steps or when ``seconds`` passed since the last
    sync. ``after_tools``: also sync after a ``kind="tool"`` step. ``before_llm``: also sync
    before a ``kind="llm"`` step starts (the expensive call is never lost to a crash).
    """

    # the fields, in order (repr and __init__ follow it, as @dataclass did)
    __slots__ = ("mode", "every", "seconds", "after_tools", "before_llm")  # noqa: RUF023
    mode: Literal["event", "interval", "hybrid"]
    every: int
    seconds: float
    after_tools: bool
    before_llm: bool

    def __init__(
        self,
        mode: Literal["event", "interval", "hybrid"] = "event",
        every: int = 1,
        seconds: float = 0.0,
        after_tools: bool = False,
        before_llm: bool = False,
    ) -> None:
        self._init(mode, every, seconds, after_tools, before_llm)

    @classmethod
    def event(cls, **kw: bool) -> Checkpointing:
        return cls("event", 1, 0.0, **kw)

    @classmethod
    def interval(cls, n: int, **kw: bool) -> Checkpointing:
        if n < 1:
            raise InvalidArgument(f"interval must be >= 1 step, got {n}")
        return cls("interval", n, 0.0, **kw)

    @classmethod
    def hybrid(cls, n: int, seconds: float, **kw: bool) -> Checkpointing:
        if n < 1 or seconds <= 0:
            raise InvalidArgument(f"hybrid needs n >= 1 and seconds > 0, got {n}, {seconds}")
        return cls("hybrid", n, seconds, **kw)


class Rollback(FrozenValue):
    """What a rollback did: the step kept last, the steps discarded, and the effects recorded
    after that point, which **may need compensation** (the outside world may have seen them;
    re-running the later steps performs them again under new keys)."""

    # the fields, in order (repr and __init__ follow it, as @dataclass did)
    __slots__ = (  # noqa: RUF023
        "run_id",
        "to",
        "position",
        "status_before",
        "discarded",
        "compensate",
        "pauses",
    )
    run_id: str
    to: str
    position: int
    status_before: str
    discarded: tuple[str, ...]
    compensate: tuple[dict[str, Any], ...]
    pauses: tuple[str, ...]

    def __init__(
        self,
        run_id: str,
        to: str,
        position: int,
        status_before: str,
        discarded: tuple[str, ...],
        compensate: tuple[dict[str, Any], ...],
        pauses: tuple[str, ...],
    ) -> None:
        self._init(run_id, to, position, status_before, discarded, compensate, pauses)

    def describe(self) -> str:
        lines = [
            f"{self.run_id}: rolled back to #{self.position} {self.to} (was "
            f"{self.status_before}); "
            + (
                f"discarded {len(self.discarded)} step(s): "
                + ", ".join(f"#{self.position + 1 + i} {n}" for i, n in enumerate(self.discarded))
                if self.discarded
                else "no step discarded"
            )
        ]
        for e in self.compensate:
            how = "done" if e["status"] == "done" else "in doubt: may or may not have happened"
            lines.append(
                f"may need compensation: effect {e['kind']} key={e['key']} "
                f"(step {e['step'] or '-'}, {how})"
            )
        for n in self.pauses:
            lines.append(f"discarded pause {n}: it will be asked again")
        nxt = (
            f"#{self.position + 1} {self.discarded[0]}"
            if self.discarded
            else f"#{self.position + 1}"
        )
        lines.append(f"the next start replays #0..#{self.position} and runs from {nxt}")
        return "\n".join(lines)


class Run:
    """One run of an agent: steps that replay, effects that happen once, approvals that persist.

    Open with :func:`open_run` and use as a context manager::

        with open_run(store, "report-42", steps=["plan", "search", "write"]) as run:
            plan = run.step("plan", lambda: make_plan(topic))
            hits = run.step("search", lambda: search(plan), kind="tool")
            run.effect("send_email", {"to": "ops@example.com"}, send)
            run.finish({"plan": plan, "hits": hits})
    """

    def __init__(
        self,
        journal: RunJournal,
        *,
        steps: Sequence[str] | None,
        checkpointing: Checkpointing,
        policy: EffectPolicy,
    ) -> None:
        self.journal = journal
        self.run_id = journal.run_id
        self.checkpointing = checkpointing
        self.default_policy = policy
        _init_state(journal.state)
        st = journal.state
        declared = list(steps) if steps is not None else None
        recorded = st.get("steps")
        if (
            declared is not None
            and recorded is not None
            and "steps" in st
            and list(recorded) != declared
        ):
            pos = next(
                (i for i, (a, b) in enumerate(zip(recorded, declared, strict=False)) if a != b),
                min(len(recorded), len(declared)),
            )
            raise ResumeMismatch(
                self.run_id,
                pos,
                recorded[pos] if pos < len(recorded) else "<end>",
                declared[pos] if pos < len(declared) else "<end>",
            )
        self.steps = declared if declared is not None else recorded
        self._pos = 0
        self._current: tuple[int, str] | None = None
        self._ordinals: dict[str, int] = {}  # effects of each kind so far at _ordinals_at
        self._ordinals_at: tuple[int, str] | None = None
        self._pending: list[str] = []  # completed steps not yet durable (interval modes)
        self._last_sync = time.monotonic()
        if st["status"] == "dead":
            raise RunDeadLettered(self.run_id, int(st["attempts"]), str(st.get("reason", "")))
        if st["status"] not in ("completed", "denied", "dead"):
            # not synced on its own: only an attempt counter, made durable by the next
            # durable append (meta.json, written durably next, is what the registry reads)
            journal.append(
                {"t": "open", "attempt": st["attempts"] + 1, "steps": declared},
                redact=False,
                sync=False,
            )
            journal.set_meta(
                status="paused" if st["status"] == "paused" else "running",
                attempts=st["attempts"],
                pid=os.getpid(),
            )

    # -- facts -------------------------------------------------------------------------------

    @property
    def state(self) -> dict[str, Any]:
        return self.journal.state

    @property
    def status(self) -> str:
        return str(self.state["status"])

    @property
    def attempt(self) -> int:
        return int(self.state["attempts"])

    @property
    def completed_steps(self) -> list[str]:
        return list(self.state["order"])

    @property
    def output(self) -> Any:
        return self.state.get("output")

    @property
    def done(self) -> bool:
        return self.status in ("completed", "denied", "dead")

    # -- steps -------------------------------------------------------------------------------

    def _sync_flag(self, want: bool) -> bool:
        return want and self.journal.store.durability.mode != "none"

    def _check_position(self, name: str) -> Any:
        """If position ``_pos`` is already recorded, check the name and return its result."""
        order = self.state["order"]
        pos = self._pos
        if pos < len(order):
            if order[pos] != name:
                raise ResumeMismatch(self.run_id, pos, order[pos], name)
            return True, self.state["results"][pos]
        if self.steps is not None and (pos >= len(self.steps) or self.steps[pos] != name):
            expected = self.steps[pos] if pos < len(self.steps) else "<no more steps>"
            raise ResumeMismatch(self.run_id, pos, expected, name)
        return False, None

    def step(
        self, name: str, fn: Callable[[], Any], *, kind: Literal["step", "tool", "llm"] = "step"
    ) -> Any:
        """Run step ``name`` once: on resume a completed step returns its recorded result
        without calling ``fn``. ``fn``'s result must be JSON-able (it is the checkpoint)."""
        pos, order = self._pos, self.journal.state["order"]
        if pos < len(order) and order[pos] == name:  # the replay fast path
            self._pos = pos + 1
            return self.journal.state["results"][pos]
        replayed, result = self._check_position(name)
        if replayed:
            self._pos += 1
            return result
        if self.done:
            raise RunStateError(f"run {self.run_id!r} is {self.status}; it runs no more steps")
        if kind == "llm" and self.checkpointing.before_llm:
            self.flush()
        self.begin(name)
        result = fn()
        self.complete(name, result, kind=kind)
        return result

    def begin(self, name: str) -> None:
        """Mark step ``name`` as started (``step`` does this for you)."""
        self._current = (self._pos, name)
        self._ordinals = {}
        probe.step_started(name)

    def complete(
        self, name: str, result: Any = None, *, kind: Literal["step", "tool", "llm"] = "step"
    ) -> None:
        """Record step ``name`` as completed with ``result``: durable (per the checkpointing
        mode) before this returns and before the probe hears of it."""
        if self._current is None or self._current[1] != name:
            self._check_position(name)
            self._current = (self._pos, name)
        cp = self.checkpointing
        due = (
            cp.mode == "event"
            or len(self._pending) + 1 >= cp.every
            or (cp.mode == "hybrid" and time.monotonic() - self._last_sync >= cp.seconds)
            or (kind == "tool" and cp.after_tools)
        )
        value = self.journal.store.redactor.redact(result)
        self.journal.append(
            {"t": "step", "pos": self._pos, "name": name, "kind": kind, "result": value},
            redact=False,
            sync=self._sync_flag(due),
        )
        self._pending.append(name)
        self._pos += 1
        self._current = None
        if due:
            self._announce()

    def flush(self) -> None:
        """Make every completed step durable now and tell the probe (a sync point)."""
        if self._pending:
            if self.journal.store.durability.mode != "none":
                self.journal.sync()
            self._announce()

    def _announce(self) -> None:
        self._last_sync = time.monotonic()
        pending, self._pending = self._pending, []
        failpoint("step.after_complete", self.journal.folder)
        for n in pending:
            probe.step_completed(n)

    # -- effects -----------------------------------------------------------------------------

    def _where(self) -> tuple[int, str]:
        """(position, step) effects are keyed by: the current step, or the position between
        steps; effect ordinals count from 0 again at each new place."""
        where = self._current if self._current is not None else (self._pos, "")
        if where != self._ordinals_at:
            self._ordinals, self._ordinals_at = {}, where
        return where

    def effect_key(self, kind: str) -> str:
        """The deterministic key of the next effect of ``kind`` in the current step."""
        pos, step = self._where()
        ordinal = self._ordinals.get(kind, 0)
        epoch = _epoch(self.state, pos)  # a step re-run after a rollback: a new effect
        return f"{self.run_id}:{pos}.{step}:{kind}:{ordinal}" + (f"@r{epoch}" if epoch else "")

    def effect(
        self,
        kind: str,
        payload: Any,
        fn: Callable[[Any, str], Any] | None = None,
        *,
        key: str | None = None,
        policy: EffectPolicy | None = None,
        reconcile: Callable[[Any, str], tuple[bool, Any]] | None = None,
    ) -> Any:
        """Perform a side effect exactly once, and return its result.

        The intent (key, payload) is durable before ``fn(payload, key)`` is called and the
        result after; on resume a finished effect returns its recorded result without calling
        ``fn``. Without ``fn`` the effect is delivered through :func:`crashpoint.probe.effect`.
        An effect left in doubt by a crash follows ``policy``: ``retry`` (call again with the
        same key; the target must deduplicate), ``reconcile`` (``reconcile(payload, key)`` says
        whether it happened and its result), ``ask`` (pause for a human) or ``fail``
        (:class:`EffectInDoubt`). The key is never changed.
        """
        policy = policy or self.default_policy
        if policy not in _POLICIES:
            raise InvalidArgument(f"unknown effect policy {policy!r}; use one of {_POLICIES}")
        if policy == "reconcile" and reconcile is None:
            raise InvalidArgument("policy 'reconcile' needs a reconcile(payload, key) function")
        if key is None:
            key = self.effect_key(kind)
        self._where()
        self._ordinals[kind] = self._ordinals.get(kind, 0) + 1
        deliver = fn or (lambda p, k: probe.effect(kind, p, key=k))
        rec = self.state["effects"].get(key)
        if rec is not None and rec.get("status") == "done":
            return rec.get("result")
        stored_payload = self.journal.store.redactor.redact(payload)
        if rec is not None:  # intent recorded, no result: in doubt
            pol = rec.get("policy", policy)
            if pol == "fail":  # stop; a human settles it with `approve` (re-send) or `--deny`
                decision = self._decision(f"effect:{key}")
                if decision is None:
                    self._pause(
                        f"effect:{key}",
                        f"effect {kind!r} is in doubt and its policy is 'fail'",
                        {"key": key, "kind": kind, "payload": stored_payload},
                        error=EffectInDoubt(self.run_id, key, kind),
                    )
                if decision is not None and not decision.approved:
                    return self._settle(key, kind, None, "human")
            if pol == "reconcile" and reconcile is not None:
                happened, result = reconcile(payload, key)
                if happened:
                    return self._settle(key, kind, result, "reconcile")
            elif pol == "ask":
                decision = self._decision(f"effect:{key}")
                if decision is None:
                    self._pause(
                        f"effect:{key}",
                        f"effect {kind!r} may or may not have happened (a crash came "
                        "between sending it and recording its result); approve to "
                        "send again with the same key, deny to treat it as done",
                        {"key": key, "kind": kind, "payload": stored_payload},
                    )
                if decision is not None and not decision.approved:
                    return self._settle(key, kind, None, "human")
        else:
            self.journal.append(
                {
                    "t": "intent",
                    "key": key,
                    "kind": kind,
                    "policy": policy,
                    "step": self._current[1] if self._current else "",
                    "payload": stored_payload,
                },
                redact=False,
                sync=self._sync_flag(True),
            )
        result = deliver(payload, key)
        failpoint("effect.after_call", self.journal.folder)
        return self._settle(key, kind, result, "call")

    def _settle(self, key: str, kind: str, result: Any, via: str) -> Any:
        self.journal.append(
            {
                "t": "effect",
                "key": key,
                "kind": kind,
                "via": via,
                "result": self.journal.store.redactor.redact(result),
            },
            redact=False,
            sync=self._sync_flag(True),
        )
        return result

    # -- human approval ------------------------------------------------------------------------

    def _decision(self, name: str) -> Decision | None:
        d = self.state["pauses"].get(name, {}).get("decision")
        return Decision(d["approved"], d.get("note", ""), d.get("by", "")) if d else None

    def _pause(
        self, name: str, reason: str, request: Any, error: BaseException | None = None
    ) -> None:
        new = name not in self.state["pauses"]
        if new:
            self.flush()
            self.journal.append(
                {
                    "t": "pause",
                    "name": name,
                    "reason": reason,
                    "request": self.journal.store.redactor.redact(request),
                },
                redact=False,
                sync=self._sync_flag(True),
            )
        self.journal.set_meta(status="paused", waiting_for=name)
        if new:  # once, when the pause is recorded (not on each start while it waits)
            notify_event(
                self.journal.store,
                "paused",
                self.run_id,
                step=name,
                reason=reason,
                request=request,
                attempt=self.attempt,
            )
        raise error if error is not None else RunPaused(self.run_id, name, reason)

    def approval(self, name: str, request: Any = None, *, reason: str = "") -> Decision:
        """A step that waits for a human: without a decision the run pauses (the process should
        exit with ``EXIT_CODES['paused']``); approved, it returns the decision; denied, the run
        ends as denied (:class:`RunDenied`). Decide with ``crashpoint checkpoints approve``."""
        replayed, result = self._check_position(name)
        if replayed:
            if (
                type(result) is not dict
                or type(result.get("approved")) is not bool
                or not all(type(result.get(k, "")) is str for k in ("note", "by"))
                or set(result) - {"approved", "note", "by"}
            ):
                raise CheckpointCorrupt(
                    self.journal.folder,
                    0,
                    f"the recorded result of approval step {name!r} is not "
                    "a decision ({approved, note, by}); was the journal "
                    "edited? Roll the run back before this step",
                )
            self._pos += 1
            if not result["approved"]:
                raise RunDenied(self.run_id, name, result.get("note", ""))
            return Decision(**result)
        decision = self._decision(name)
        if decision is None:
            self._pause(name, reason or f"approval needed for {name!r}", request)
        assert decision is not None
        self.begin(name)
        value = {"approved": decision.approved, "note": decision.note, "by": decision.by}
        self.complete(name, value)
        if not decision.approved:
            self._finish("denied", reason=f"denied at {name}: {decision.note}".rstrip(": "))
            raise RunDenied(self.run_id, name, decision.note)
        return decision

    # -- rollback --------------------------------------------------------------------------------

    def rollback(self, to: str | int, *, note: str = "", by: str = "") -> Rollback:
        """Discard every step after ``to`` (a completed step's name, ``"#N"`` or position N):
        durable (a ``rollback`` record; the journal keeps the history) before this returns.
        The next step this run is asked for is the one after ``to``; effects recorded after it
        are returned as ``compensate`` (they may have reached the outside world)."""
        self.flush()
        done = _rollback(self.journal, self.run_id, to, note=note, by=by)
        self._pos = done.position + 1
        self._current = None
        self._ordinals, self._ordinals_at = {}, None
        return done

    # -- ending ----------------------------------------------------------------------------------

    def finish(self, output: Any = None) -> Any:
        """The run completed with ``output`` (recorded, durable). Idempotent on a completed run:
        returns the recorded output."""
        if self.status == "completed":
            return self.output
        self.flush()
        self._finish("completed", output=self.journal.store.redactor.redact(output))
        return self.output

    def fail(self, reason: str) -> None:
        """The run stopped with an error that a later attempt may get past."""
        self.flush()
        self._finish("failed", reason=reason)

    def _finish(self, status: str, **fields: Any) -> None:
        self.journal.append(
            {"t": "finish", "status": status, **fields}, redact=False, sync=self._sync_flag(True)
        )
        self.journal.set_meta(status=status, steps_done=len(self.state["order"]), waiting_for=None)

    def close(self) -> None:
        try:
            if not self.journal.closed and self._pending and self.journal._broken is None:
                self.flush()
        finally:
            self.journal.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: object
    ) -> None:
        self.close()


def open_run(
    store: Store,
    run_id: str,
    *,
    steps: Sequence[str] | None = None,
    checkpointing: Checkpointing | None = None,
    policy: EffectPolicy = "retry",
    lock_timeout: float | None = None,
) -> Run:
    """Start run ``run_id``, or resume it from its last completed step.

    ``steps`` declares the step list (checked against the journal on resume: a different list
    raises :class:`ResumeMismatch`); leave it out for dynamic steps (each position is still
    checked). Raises :class:`RunLocked` if another live process has the run.
    """
    journal = store.open(run_id, reducer=run_reducer, lock_timeout=lock_timeout)
    try:
        return Run(
            journal, steps=steps, checkpointing=checkpointing or Checkpointing(), policy=policy
        )
    except BaseException:
        journal.close()
        raise


def _waiting(state: dict[str, Any], run_id: str, step: str | None) -> str:
    """The pause a decision is for; :class:`RunStateError` if there is none (or not ``step``)."""
    _init_state(state)
    waiting = [
        n for n, p in state["pauses"].items() if isinstance(p, dict) and p.get("decision") is None
    ]
    if state["status"] != "paused" or not waiting:
        raise RunStateError(
            f"run {run_id!r} is {state['status']}, not waiting for a decision; nothing was recorded"
        )
    name = str(waiting[-1])
    if step is not None and step != name:
        raise RunStateError(
            f"run {run_id!r} waits for a decision on {name!r}, not {step!r}; nothing was "
            f"recorded (approve {name!r}, or leave --step out)"
        )
    return name


def decide(
    store: Store,
    run_id: str,
    *,
    approved: bool,
    note: str = "",
    by: str = "",
    lock_timeout: float = 0.0,
    step: str | None = None,
) -> str:
    """Record a human decision for the run's pending pause; return the pause's name.

    Raises :class:`RunStateError` if the run is not waiting for a decision (or, with ``step``,
    waits for a different one). A refused decision changes nothing: the run is checked by a
    read first, so its lock (and fencing generation) and its files are left as they were.
    """
    _waiting(store.read(run_id, reducer=run_reducer).state, run_id, step)
    with store.open(
        run_id, reducer=run_reducer, create=False, lock_timeout=lock_timeout
    ) as journal:
        name = _waiting(journal.state, run_id, step)  # again under the lock: it may have moved
        journal.append(
            {
                "t": "decision",
                "name": name,
                "approved": approved,
                "note": note,
                "by": by or os.environ.get("USER", ""),
            },
            sync=True,
        )
        journal.set_meta(status="decided", waiting_for=None, decided=name)
        return name


def _resolve_step(state: dict[str, Any], run_id: str, to: str | int) -> int:
    """The position of completed step ``to`` (a name, ``"#N"`` or N); RunStateError if it is
    not a completed step."""
    order = [str(n) for n in state["order"]]
    done = ", ".join(f"#{i} {n}" for i, n in enumerate(order)) or "none"
    if isinstance(to, int) or (isinstance(to, str) and re.fullmatch(r"#\d+", to)):
        pos = to if isinstance(to, int) else int(to[1:])
        if not 0 <= pos < len(order):
            raise RunStateError(
                f"run {run_id!r} has no completed step #{pos} (completed: "
                f"{done}); nothing was changed"
            )
        return pos
    hits = [i for i, n in enumerate(order) if n == to]
    if not hits:
        declared = state.get("steps") or []
        why = "has not completed" if to in declared else "is not a step of this run"
        raise RunStateError(
            f"step {to!r} {why} in run {run_id!r} (completed: {done}); "
            "roll back to a completed step; nothing was changed"
        )
    if len(hits) > 1:
        at = ", ".join(f"#{i}" for i in hits)
        raise RunStateError(
            f"step {to!r} completed at {at} in run {run_id!r}; name the "
            f"position (--to '#{hits[-1]}'); nothing was changed"
        )
    return hits[0]


def _rollback_plan(state: dict[str, Any], run_id: str, to: str | int) -> Rollback:
    _init_state(state)
    pos = _resolve_step(state, run_id, to)
    keep = pos + 1
    effects, pauses = _after(state, keep)
    discarded = tuple(str(n) for n in state["order"][keep:])
    status = str(state["status"])
    if not discarded and not effects and not pauses and status in ("running", "created"):
        raise RunStateError(
            f"run {run_id!r} has nothing after #{pos} {state['order'][pos]} "
            "to roll back; nothing was changed"
        )
    comp = []
    for k in effects:
        e = state["effects"][k]
        comp.append(
            {
                "key": k,
                "kind": e.get("kind"),
                "step": e.get("step"),
                "status": "done" if e.get("status") == "done" else "in-doubt",
                "payload": e.get("payload"),
                "result": e.get("result"),
            }
        )
    return Rollback(
        run_id,
        str(state["order"][pos]),
        pos,
        status,
        discarded,
        tuple(comp),
        tuple(str(n) for n in pauses),
    )


def _rollback(journal: RunJournal, run_id: str, to: str | int, *, note: str, by: str) -> Rollback:
    done = _rollback_plan(journal.state, run_id, to)
    journal.append(
        {
            "t": "rollback",
            "pos": done.position,
            "name": done.to,
            "discarded": list(done.discarded),
            "compensate": [e["key"] for e in done.compensate],
            "pauses": list(done.pauses),
            "was": done.status_before,
            "note": note,
            "by": by or os.environ.get("USER", ""),
        },
        sync=True,
    )
    journal.set_meta(
        status="running",
        steps_done=done.position + 1,
        waiting_for=None,
        reason=None,
        resumes=0,
        last_error="",
        rolled_back_to=done.to,
    )
    return done


def rollback(
    store: Store,
    run_id: str,
    to: str | int,
    *,
    note: str = "",
    by: str = "",
    lock_timeout: float = 0.0,
) -> Rollback:
    """Roll run ``run_id`` back to completed step ``to`` (a name, ``"#N"`` or N), under its
    lock; return what was discarded and which effects may need compensation.

    Any status can be rolled back: a finished (completed, denied, failed, dead) run is
    re-opened, a paused or decided run loses its pending pause and decision if they came after
    ``to``. The next start replays steps up to ``to`` and runs the later ones again; their
    effects get new keys (``...@rN``). A step that is not completed raises
    :class:`RunStateError`, and a refused rollback changes nothing (checked by a read first).
    Raises :class:`RunLocked` if a live process holds the run.
    """
    _rollback_plan(store.read(run_id, reducer=run_reducer).state, run_id, to)
    with store.open(
        run_id, reducer=run_reducer, create=False, lock_timeout=lock_timeout
    ) as journal:
        return _rollback(journal, run_id, to, note=note, by=by)


class StateAt(FrozenValue):
    """A run's state as it was when a step completed (see :func:`state_at`)."""

    # the fields, in order (repr and __init__ follow it, as @dataclass did)
    __slots__ = ("run_id", "step", "position", "seq", "state", "discarded")  # noqa: RUF023
    run_id: str
    step: str
    position: int
    seq: int  # the sequence number of the step's record
    state: dict[str, Any]
    discarded: bool  # a later rollback discarded this completion

    def __init__(
        self,
        run_id: str,
        step: str,
        position: int,
        seq: int,
        state: dict[str, Any],
        discarded: bool,
    ) -> None:
        self._init(run_id, step, position, seq, state, discarded)


def state_at(store: Store, run_id: str, step: str | int) -> StateAt:
    """The run's state right after step ``step`` (a name, ``"#N"`` or N) completed: the
    reducer replayed up to that step's record. If the step completed more than once (it ran
    again after a rollback), the latest completion. Reads only.

    Raises :class:`RunStateError` if the step never completed, or if its record was folded
    into a snapshot (the journal before a snapshot is deleted: that history is not kept)."""
    import copy

    by_pos = isinstance(step, int) or (isinstance(step, str) and re.fullmatch(r"#\d+", step))
    want = (step if isinstance(step, int) else int(step[1:])) if by_pos else None
    found: dict[str, Any] = {}
    calls = [0]
    first_order: list[Any] = []

    def reducer(state: dict[str, Any], rec: Any) -> None:
        if calls[0] == 0:
            _init_state(state)
            first_order.extend(state["order"])
        calls[0] += 1
        pos = len(state.get("order", ()))
        run_reducer(state, rec)
        t = rec.get("t") if isinstance(rec, dict) else None
        if t == "step" and (rec.get("name") == step if want is None else pos == want):
            found.update(
                call=calls[0],
                pos=pos,
                name=str(rec.get("name")),
                state=copy.deepcopy(state),
                discarded=False,
            )
        elif t == "rollback" and found and len(state["order"]) <= found["pos"]:
            found["discarded"] = True

    loaded = store.read(run_id, reducer=reducer)
    if not found:
        label = f"#{want}" if want is not None else repr(step)
        if calls[0] == 0:
            _init_state(loaded.state)
            first_order.extend(loaded.state["order"])
        in_snapshot = (want is not None and want < len(first_order)) or (
            want is None and step in first_order
        )
        if loaded.snapshot_seq and in_snapshot:
            raise RunStateError(
                f"step {label} of run {run_id!r} completed before the snapshot at record "
                f"{loaded.snapshot_seq}; the journal before a snapshot is not kept, so its "
                "state then cannot be shown (states after that record can)"
            )
        raise RunStateError(
            f"step {label} never completed in run {run_id!r}; "
            "`crashpoint checkpoints plan` lists its steps"
        )
    return StateAt(
        run_id,
        found["name"],
        found["pos"],
        loaded.snapshot_seq + found["call"],
        found["state"],
        found["discarded"],
    )


class PlanLine(FrozenValue):
    """One line of a resume plan: what will happen to a step or an effect, and why."""

    # the fields, in order (repr and __init__ follow it, as @dataclass did)
    __slots__ = ("action", "what", "why")
    action: str  # replay | run | in-doubt | wait | done
    what: str
    why: str

    def __init__(self, action: str, what: str, why: str) -> None:
        self._init(action, what, why)


def plan(store: Store, run_id: str) -> list[PlanLine]:
    """What resuming ``run_id`` would do, without doing it (reads only; takes no lock)."""
    loaded = store.read(run_id, reducer=run_reducer)
    st = loaded.state
    _init_state(st)
    lines: list[PlanLine] = []
    if st["status"] in ("completed", "denied", "dead"):
        lines.append(
            PlanLine(
                "done",
                f"run is {st['status']}",
                "a finished run replays its recorded output; nothing re-runs",
            )
        )
    for i, name in enumerate(st["order"]):
        lines.append(
            PlanLine(
                "replay",
                f"#{i} {name}",
                "completed and durable: its recorded result is returned, the code not run",
            )
        )
    for key, eff in st["effects"].items():
        if eff.get("status") != "intent":
            continue
        pol = eff.get("policy", "retry")
        what = {
            "retry": "will be sent again with the same key; the target must deduplicate it",
            "reconcile": "the reconcile function will ask the target whether it happened; "
            "sent again with the same key only if it did not",
            "ask": "the run will pause for a human to decide (approve: send again with the "
            "same key; deny: treat as done)",
            "fail": "the run will stop with EffectInDoubt (exit 76)",
        }.get(pol, pol)
        lines.append(
            PlanLine(
                "in-doubt",
                f"effect {eff.get('kind')} key={key} (step {eff.get('step')})",
                f"intent recorded, no result (crash in the in-doubt window); policy {pol}: {what}",
            )
        )
    for name, p in st["pauses"].items():
        if p.get("decision") is None:
            lines.append(
                PlanLine(
                    "wait",
                    name,
                    f"paused: {p.get('reason')}; decide with "
                    f"`crashpoint checkpoints approve {run_id}`",
                )
            )
    declared = st.get("steps")
    if st["status"] not in ("completed", "denied", "dead"):
        if declared:
            for i, name in enumerate(declared[len(st["order"]) :], start=len(st["order"])):
                lines.append(
                    PlanLine(
                        "run", f"#{i} {name}", "not completed: runs from the start of the step"
                    )
                )
        else:
            lines.append(
                PlanLine(
                    "run",
                    f"#{len(st['order'])} (next step the code asks for)",
                    "dynamic step list: whatever the code asks for next runs",
                )
            )
    return lines
