"""A run's lifecycle from the command line: checkpointing for agents in any language.

Each ``crashpoint checkpoints start|step|effect|status|complete`` command is a separate process
that opens the run (takes its lock, gets a fresh fencing generation), writes what it must,
fdatasyncs it, closes the run, and only then tells the harness's probe. The records are the
ones :class:`crashpoint.checkpoint.Run` writes (``open``, ``step``, ``intent``, ``effect``,
``finish``), so ``show``, ``plan`` and ``verify`` read a shell agent's run like any other.

Between commands no lock is held, so the agent that called ``start`` owns the run through a
lease: its process group (a shell script and every command it runs share one), recorded in the
``open`` record. Another agent's ``start`` is refused while that group lives; a dead owner's run
is taken over (a restart after a crash). Steps are declared at ``start``; ``start`` and ``step``
print the step to run next and report it started to the probe (the agent is sequential: what
comes after a command is the next step).

An effect is announced before it is performed: ``effect`` records its intent durably, reports
it to the probe with its key (under the harness, that is the outside world applying it) and
says "send" (exit 0). The agent then performs it with the same key. Completing the step (or
``effect --done``) settles it. On a retry after a crash an effect already settled says "skip"
(exit :data:`EXIT_SKIP`); one in doubt (intent, no settlement) says "send" again, same key.
Without ``--key`` a retry must carry the same payload: a different one under the same default
key is another effect of that kind in that step, refused (:class:`EffectMismatch`, exit 70),
never sent under the first one's key.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from crashpoint.checkpoint._record import encode_json
from crashpoint.checkpoint._runstate import _init_state, any_reducer, is_run_state
from crashpoint.checkpoint._store import RunJournal, Store
from crashpoint.checkpoint._value import Value
from crashpoint.errors import (
    EffectMismatch,
    ResumeMismatch,
    RunDeadLettered,
    RunNotFound,
    RunOwned,
    RunStateError,
    StepOutOfOrder,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "EXIT_SKIP",
    "LOCK_WAIT",
    "EffectAnswer",
    "LifecycleStatus",
    "RunOwned",
    "StepOutOfOrder",
    "complete_run",
    "exists_or_raise",
    "record_effect",
    "record_step",
    "run_status",
    "start_run",
]

#: ``effect``'s exit code when the effect is already recorded as done: skip sending it.
EXIT_SKIP = 3
#: Seconds a command waits for the run's lock (another command of the same run is brief).
LOCK_WAIT = 10.0
_FINISHED = ("completed", "denied", "dead")


def _a_run(run_id: str, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (read with :func:`any_reducer`, as ``verify`` reads), if it is a run's."""
    if not is_run_state(state):
        raise RunStateError(
            f"run {run_id!r} holds a journal of other records, not a run's (its first record "
            "is not an 'open' record): it was not started with `crashpoint checkpoints start` "
            "or open_run(); use another run id"
        )
    _init_state(state)
    return state


# -- the owner: the caller's process group ------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot) from /proc; None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return None
    fields = stat.rpartition(b")")[2].split()
    return fields[19].decode() if len(fields) > 19 else None


def _me() -> str:
    """This caller's identity: its process group and the group leader's start time."""
    pgid = os.getpgid(0)
    return f"{pgid}:{_start_time(pgid) or '?'}"


def _alive(owner: str) -> bool:
    """Does the process group ``owner`` names still run (same leader, not a reused pid)?"""
    pgid_text, _, born = owner.partition(":")
    try:
        pgid = int(pgid_text)
    except ValueError:
        return False
    now = _start_time(pgid)
    if now is not None:
        return born in ("?", now)
    if os.path.isdir("/proc/self"):  # /proc works and the leader is gone
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_owner(journal: RunJournal, me: str) -> None:
    owner = journal.state.get("owner")
    if isinstance(owner, str) and owner != me and _alive(owner):
        raise RunOwned(
            journal.run_id,
            journal.folder,
            f"process group {owner.partition(':')[0]}, which called `crashpoint checkpoints start`",
        )


# -- facts ------------------------------------------------------------------------------------


class LifecycleStatus(Value):
    """Where a run stands: what to do next, and what is done."""

    __slots__ = (
        "attempts",
        "completed",
        "effects",
        "output",
        "results",
        "run_id",
        "status",
        "steps",
    )

    def __init__(
        self,
        run_id: str,
        status: str,
        steps: list[str],
        completed: list[str],
        results: list[Any],
        attempts: int,
        effects: dict[str, Any] | None = None,
        output: Any = None,
    ) -> None:
        self.run_id = run_id
        self.status = status
        self.steps = steps
        self.completed = completed
        self.results = results
        self.attempts = attempts
        self.effects: dict[str, Any] = {} if effects is None else effects
        self.output = output

    @property
    def next(self) -> str | None:
        """The step to run next (None: every step is done, or the run is finished)."""
        if self.status in _FINISHED or len(self.completed) >= len(self.steps):
            return None
        return self.steps[len(self.completed)]

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "status": self.status,
            "next": self.next,
            "steps": self.steps,
            "completed": self.completed,
            "results": dict(zip(self.completed, self.results, strict=False)),
            "attempts": self.attempts,
            "output": self.output,
            "effects": {
                k: {"kind": e.get("kind"), "status": e.get("status"), "step": e.get("step")}
                for k, e in self.effects.items()
            },
        }


def _status(run_id: str, state: dict[str, Any]) -> LifecycleStatus:
    _init_state(state)
    return LifecycleStatus(
        run_id,
        str(state["status"]),
        list(state.get("steps") or []),
        list(state["order"]),
        list(state["results"]),
        int(state["attempts"]),
        dict(state["effects"]),
        state.get("output"),
    )


def run_status(store: Store, run_id: str) -> LifecycleStatus:
    """The run's status, read without a lock and without changing anything."""
    return _status(run_id, _a_run(run_id, store.read(run_id, reducer=any_reducer).state))


def _open(store: Store, run_id: str, me: str) -> RunJournal:
    journal = store.open(run_id, reducer=any_reducer, create=False, lock_timeout=LOCK_WAIT)
    try:
        _a_run(run_id, journal.state)
        _check_owner(journal, me)
        if not journal.state.get("steps"):
            raise RunStateError(
                f"run {run_id!r} was not started with a step list; run "
                f"`crashpoint checkpoints start {run_id} --steps A,B,...` first"
            )
    except BaseException:
        journal.close()
        raise
    return journal


# -- commands ---------------------------------------------------------------------------------


def start_run(store: Store, run_id: str, steps: Sequence[str] | None) -> LifecycleStatus:
    """Open run ``run_id`` (create it with ``steps``) or resume it, and own it.

    Raises :class:`ResumeMismatch` if ``steps`` differ from the recorded list,
    :class:`RunLocked` if another live agent owns it, :class:`RunStateError` for a new run
    without steps."""
    me = _me()
    exists = store.exists(run_id)
    if not exists and not steps:
        raise RunStateError(f"run {run_id!r} does not exist yet: give its steps, `--steps A,B,...`")
    journal = store.open(run_id, reducer=any_reducer, lock_timeout=LOCK_WAIT)
    with journal:
        st = _a_run(run_id, journal.state)
        recorded = st.get("steps")
        declared = list(steps) if steps else None
        if declared is not None and recorded and list(recorded) != declared:
            pos = next(
                (i for i, (a, b) in enumerate(zip(recorded, declared, strict=False)) if a != b),
                min(len(recorded), len(declared)),
            )
            raise ResumeMismatch(
                run_id,
                pos,
                recorded[pos] if pos < len(recorded) else "<end>",
                declared[pos] if pos < len(declared) else "<end>",
            )
        if not recorded and declared is None:
            raise RunStateError(
                f"run {run_id!r} has no step list yet: give its steps, `--steps A,B,...`"
            )
        if st["status"] == "dead":
            raise RunDeadLettered(run_id, int(st["attempts"]), str(st.get("reason", "")))
        _check_owner(journal, me)
        if st["status"] not in _FINISHED:
            journal.append(
                {
                    "t": "open",
                    "attempt": st["attempts"] + 1,
                    "steps": declared or list(recorded or []),
                    "owner": me,
                },
                redact=False,
                sync=True,
            )
            journal.set_meta(
                status="running", attempts=st["attempts"], pid=int(me.partition(":")[0])
            )
        return _status(run_id, st)


def record_step(store: Store, run_id: str, name: str, result: Any) -> LifecycleStatus:
    """Record step ``name`` as completed with ``result``, durable before this returns.

    ``name`` must be the run's next step (:class:`ResumeMismatch` otherwise). Effects announced
    during the step and not yet settled are settled with it."""
    with _open(store, run_id, _me()) as journal:
        st = journal.state
        if st["status"] in _FINISHED:
            raise RunStateError(f"run {run_id!r} is {st['status']}; it records no more steps")
        steps, pos = list(st["steps"]), len(st["order"])
        if pos >= len(steps) or steps[pos] != name:
            expected = steps[pos] if pos < len(steps) else "<no more steps>"
            raise StepOutOfOrder(run_id, pos, expected, name, st["order"])
        for key, eff in list(st["effects"].items()):
            if eff.get("status") == "intent":
                journal.append(
                    {
                        "t": "effect",
                        "key": key,
                        "kind": eff.get("kind"),
                        "via": "step",
                        "result": None,
                    },
                    redact=False,
                    sync=False,
                )
        journal.append(
            {
                "t": "step",
                "pos": pos,
                "name": name,
                "kind": "step",
                "result": store.redactor.redact(result),
            },
            redact=False,
            sync=True,
        )
        return _status(run_id, st)


class EffectAnswer(Value):
    """What ``effect`` decided: ``send`` (perform it now, with ``key``), ``skip`` (already
    done) or ``recorded`` (``--done``: its result is now recorded)."""

    __slots__ = ("action", "in_doubt", "key", "kind", "result")

    def __init__(
        self, action: str, key: str, kind: str, in_doubt: bool = False, result: Any = None
    ) -> None:
        self.action = action
        self.key = key
        self.kind = kind
        self.in_doubt = in_doubt  # "send" again: an earlier attempt announced it, then crashed
        self.result = result


def _default_key(run_id: str, st: dict[str, Any], kind: str) -> str:
    """The key :meth:`Run.effect_key` gives: position, step, kind, and how many effects of the
    kind were settled there before (an unsettled one is the same effect, retried)."""
    pos = len(st["order"])
    steps = st.get("steps") or []
    step = steps[pos] if pos < len(steps) else ""
    prefix = f"{run_id}:{pos}.{step}:{kind}:"
    done = sum(
        1 for k, e in st["effects"].items() if k.startswith(prefix) and e.get("status") == "done"
    )
    return f"{prefix}{done}"


def record_effect(
    store: Store,
    run_id: str,
    kind: str,
    *,
    key: str | None,
    payload: Any,
    done: bool = False,
    result: Any = None,
) -> EffectAnswer:
    """Announce (or, with ``done``, settle) one effect; see the module's docstring.

    Without ``key`` (the default key), a payload that differs from the one the effect under
    that key was announced with, and not settled, raises :class:`EffectMismatch`: that is
    another effect (two of one kind in one step), never sent under the first one's key."""
    with _open(store, run_id, _me()) as journal:
        st = journal.state
        if st["status"] in _FINISHED:
            raise RunStateError(f"run {run_id!r} is {st['status']}; it performs no more effects")
        default = key is None
        if key is None:
            key = _default_key(run_id, st, kind)
        rec = st["effects"].get(key)
        if rec is not None and rec.get("status") == "done":
            return EffectAnswer("skip", key, kind, result=rec.get("result"))
        if done:
            journal.append(
                {
                    "t": "effect",
                    "key": key,
                    "kind": kind,
                    "via": "call",
                    "result": store.redactor.redact(result),
                },
                redact=False,
                sync=True,
            )
            return EffectAnswer("recorded", key, kind, result=result)
        stored = store.redactor.redact(payload)
        if default and rec is not None and encode_json(stored) != encode_json(rec.get("payload")):
            raise EffectMismatch(run_id, key, kind, len(st["order"]))
        if rec is None:
            pos = len(st["order"])
            steps = st["steps"]
            journal.append(
                {
                    "t": "intent",
                    "key": key,
                    "kind": kind,
                    "policy": "retry",
                    "step": steps[pos] if pos < len(steps) else "",
                    "payload": stored,
                },
                redact=False,
                sync=True,
            )
        return EffectAnswer("send", key, kind, in_doubt=rec is not None)


def complete_run(store: Store, run_id: str, output: Any) -> LifecycleStatus:
    """The run completed with ``output`` (durable). On a completed run: nothing changes."""
    with _open(store, run_id, _me()) as journal:
        st = journal.state
        if st["status"] == "completed":
            return _status(run_id, st)
        if st["status"] in _FINISHED:
            raise RunStateError(f"run {run_id!r} is {st['status']}; it cannot complete")
        left = list(st["steps"])[len(st["order"]) :]
        if left:
            raise RunStateError(
                f"run {run_id!r} has steps left ({', '.join(left)}); record "
                f"them with `crashpoint checkpoints step` before completing"
            )
        for key, eff in list(st["effects"].items()):
            if eff.get("status") == "intent":
                journal.append(
                    {
                        "t": "effect",
                        "key": key,
                        "kind": eff.get("kind"),
                        "via": "step",
                        "result": None,
                    },
                    redact=False,
                    sync=False,
                )
        journal.append(
            {"t": "finish", "status": "completed", "output": store.redactor.redact(output)},
            redact=False,
            sync=True,
        )
        journal.set_meta(status="completed", steps_done=len(st["order"]), waiting_for=None)
        return _status(run_id, st)


def exists_or_raise(store: Store, run_id: str) -> None:
    """Raise :class:`RunNotFound`, saying how to start it, if the run does not exist."""
    if not store.exists(run_id):
        known = ", ".join(store.run_ids()[:10]) or "none"
        raise RunNotFound(
            f"no run {run_id!r} in {store.root} (runs: {known}); start it with "
            f"`crashpoint checkpoints start {run_id} --steps A,B,...`"
        )
