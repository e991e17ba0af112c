"""A run's records and the state they replay to: what every reader of a run shares.

A run is a journal of records of these kinds (``"t"``)::

    open      an attempt began (attempt number, the declared step list; the lifecycle
              commands add the owner: the caller's process group)
    step      a step completed, with its position, name and result
    intent    an effect is about to be performed (key, kind, payload, policy)
    effect    the effect's result (how it was settled: call, reconcile, human)
    pause     the run waits for a human decision
    decision  a human decided (approved or denied, with a note)
    finish    the run ended: completed (with its output), denied, failed or dead
    rollback  an operator rolled the run back to a completed step: later steps, effects and
              pauses are discarded from the state (they stay in the journal as history)

:func:`run_reducer` replays them in order, checking each record's shape before it applies it
(a record :class:`~crashpoint.checkpoint.Run` never writes is damage at that record);
:func:`any_reducer` reads any journal, a run's or another, and is what ``checkpoints verify``
and the lifecycle commands both read with. Also the run's documented exit codes.

Split from ``_run`` (the :class:`Run` API, approvals, rollback, plans) so that the lifecycle
commands, which a shell agent runs once per step, load only this: no dataclass, no typing.
"""

from __future__ import annotations

import re

from crashpoint.checkpoint._journal import (
    PayloadError,
    _check_records_state,
    records_reducer,
    register_state_check,
)
from crashpoint.errors import (
    CheckpointCorrupt,
    CheckpointWriteError,
    DiskBudgetExceeded,
    EffectInDoubt,
    InvalidArgument,
    ResumeMismatch,
    RunDeadLettered,
    RunDenied,
    RunLocked,
    RunPaused,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "EXIT_CODES",
    "any_reducer",
    "exit_code",
    "is_run_state",
    "run_reducer",
]

#: Documented exit codes (sysexits-style) for a run that stops without completing.
EXIT_CODES = {
    "paused": 75,  # EX_TEMPFAIL: waiting for a human decision; start again after it
    "locked": 73,  # another live process holds the run
    "denied": 77,  # EX_NOPERM: a human denied the approval; the run ended as denied
    "corrupt": 65,  # EX_DATAERR: a checkpoint failed its checksums (on_corrupt="raise")
    "disk": 74,  # EX_IOERR: ENOSPC / EFBIG / EIO / disk budget; nothing acknowledged lost
    "in_doubt": 76,  # an effect is in doubt and its policy is "fail"
    "mismatch": 70,  # EX_SOFTWARE: the code's steps differ from the journal's
    "dead": 69,  # EX_UNAVAILABLE: dead-lettered after too many attempts
}


def exit_code(exc: BaseException) -> int:
    """The documented exit code for an exception that stops a run (1 for anything else)."""
    table: list[tuple[type[BaseException], str]] = [
        (RunPaused, "paused"),
        (RunLocked, "locked"),
        (RunDenied, "denied"),
        (CheckpointCorrupt, "corrupt"),
        (CheckpointWriteError, "disk"),
        (DiskBudgetExceeded, "disk"),
        (EffectInDoubt, "in_doubt"),
        (ResumeMismatch, "mismatch"),
        (RunDeadLettered, "dead"),
    ]
    for cls, name in table:
        if isinstance(exc, cls):
            return EXIT_CODES[name]
    return 1


def _init_state(state: dict[str, Any]) -> None:
    state.setdefault("order", [])  # [(name, kind)] of completed steps, by position
    state.setdefault("results", [])
    state.setdefault("effects", {})
    state.setdefault("pauses", {})
    state.setdefault("status", "created")
    state.setdefault("attempts", 0)


_FINISHED = ("completed", "denied", "failed", "dead")
_MAX_ATTEMPTS = (1 << 31) - 1
# the fields each record kind must have (name: the types it may be) and may have
_REQUIRED: dict[str, dict[str, tuple[type, ...]]] = {
    "step": {"name": (str,)},
    "open": {},
    "intent": {"key": (str,), "kind": (str,)},
    "effect": {"key": (str,)},
    "pause": {"name": (str,)},
    "decision": {"name": (str,), "approved": (bool,)},
    "finish": {"status": (str,)},
    "rollback": {"pos": (int,)},
}
_OPTIONAL: dict[str, tuple[type, ...]] = {
    "attempt": (int,),
    "policy": (str,),
    "via": (str,),
    "reason": (str,),
    "note": (str,),
    "by": (str,),
    "kind": (str,),
    "step": (str,),
    "pos": (int,),
    "owner": (str,),  # an ``open`` record of the lifecycle commands: the owning process group
}


def _fail(what: str) -> PayloadError:
    return PayloadError(what)


def _is_str_list(v: Any) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _check_run_record(rec: Any) -> None:
    """Raise PayloadError for a record :class:`Run` never writes (checked before it is applied,
    so a bad record leaves the state as it was: the valid prefix)."""
    if type(rec) is not dict:
        raise _fail(f"a run record is an object, not {type(rec).__name__}")
    t = rec.get("t")
    if type(t) is not str:
        raise _fail("a run record has a string 't'")
    need = _REQUIRED.get(t)
    if need is None:
        return  # a kind this version does not know: ignored, as before
    for name, types in need.items():
        if type(rec.get(name)) not in types:
            raise _fail(f"a {t!r} record needs {name!r} of type {types[0].__name__}")
    for name, types in _OPTIONAL.items():
        if name in rec and name not in need and type(rec[name]) not in types:
            raise _fail(f"{name!r} of a {t!r} record is not of type {types[0].__name__}")
    if t == "open":
        if "attempt" in rec and not 0 <= rec["attempt"] <= _MAX_ATTEMPTS:
            raise _fail(f"attempt {str(rec['attempt'])[:20]} is out of range")
        if rec.get("steps") is not None and not _is_str_list(rec["steps"]):
            raise _fail("an 'open' record's steps are a list of names")
    elif t == "rollback" and not 0 <= rec["pos"] <= _MAX_ATTEMPTS:
        raise _fail(f"a rollback to position {str(rec['pos'])[:20]} is out of range")
    elif t == "finish" and rec["status"] not in _FINISHED:
        raise _fail(f"a run cannot finish as {rec['status'][:40]!r}")


def _check_run_state(state: dict[str, Any]) -> None:
    """Raise PayloadError for a snapshot state :func:`run_reducer` never builds."""

    def bad(key: str, what: str) -> PayloadError:
        return _fail(f"the run state's {key!r} is not {what}")

    if "order" in state and not _is_str_list(state["order"]):
        raise bad("order", "a list of step names")
    if type(state.get("results", [])) is not list:
        raise bad("results", "a list")
    if len(state.get("order", [])) != len(state.get("results", [])):
        raise _fail("the run state has a result for each completed step")
    effects, pauses = state.get("effects", {}), state.get("pauses", {})
    if type(effects) is not dict or not all(type(e) is dict for e in effects.values()):
        raise bad("effects", "an object of objects")
    if type(pauses) is not dict or not all(type(p) is dict for p in pauses.values()):
        raise bad("pauses", "an object of objects")
    for p in pauses.values():
        d = p.get("decision")
        if d is not None and (
            type(d) is not dict
            or type(d.get("approved")) is not bool
            or type(d.get("note", "")) is not str
            or type(d.get("by", "")) is not str
        ):
            raise bad("pauses", "decisions with 'approved', 'note' and 'by'")
    if type(state.get("status", "created")) is not str:
        raise bad("status", "a string")
    attempts = state.get("attempts", 0)
    if type(attempts) is not int or not 0 <= attempts <= _MAX_ATTEMPTS:
        raise bad("attempts", "a count")
    if state.get("steps") is not None and not _is_str_list(state["steps"]):
        raise bad("steps", "a list of step names")
    if type(state.get("owner", "")) is not str:
        raise bad("owner", "a string")
    rollbacks = state.get("rollbacks", [])
    if type(rollbacks) is not list or not all(
        type(r) is int and 0 <= r <= _MAX_ATTEMPTS for r in rollbacks
    ):
        raise bad("rollbacks", "a list of positions")


def run_reducer(state: dict[str, Any], rec: Any) -> None:
    """Replay one run record into ``state`` (the reducer the run's journal is opened with).

    A record of a shape :class:`Run` never writes raises :class:`PayloadError` before the
    state changes: the load reports it as damage at that record."""
    _check_run_record(rec)
    if "effects" not in state:
        _init_state(state)
    t = rec.get("t")
    if t == "step":  # the common record first
        state["order"].append(rec["name"])
        state["results"].append(rec.get("result"))
    elif t == "open":
        state["attempts"] = int(rec.get("attempt", state["attempts"] + 1))
        if "steps" not in state:
            state["steps"] = rec.get("steps")
        if "owner" in rec:  # the lifecycle commands' lease: the caller's process group
            state["owner"] = rec["owner"]
        if state["status"] in ("created", "failed"):
            state["status"] = "running"
    elif t == "intent":
        state["effects"][rec["key"]] = {
            "kind": rec["kind"],
            "step": rec.get("step"),
            "payload": rec.get("payload"),
            "policy": rec.get("policy", "retry"),
            "status": "intent",
            "at": len(state["order"]),
        }
    elif t == "effect":
        eff = state["effects"].setdefault(rec["key"], {"kind": rec.get("kind")})
        eff["status"] = "done"
        eff["result"] = rec.get("result")
        eff["via"] = rec.get("via", "call")
    elif t == "pause":
        state["pauses"][rec["name"]] = {
            "reason": rec.get("reason", ""),
            "request": rec.get("request"),
            "decision": None,
            "at": len(state["order"]),
        }
        state["status"] = "paused"
    elif t == "decision":
        p = state["pauses"].setdefault(rec["name"], {"reason": "", "request": None})
        p["decision"] = {
            "approved": bool(rec["approved"]),
            "note": rec.get("note", ""),
            "by": rec.get("by", ""),
        }
        state["status"] = "running"
    elif t == "finish":
        state["status"] = rec["status"]
        if "output" in rec:
            state["output"] = rec["output"]
        if rec.get("reason"):
            state["reason"] = rec["reason"]
    elif t == "rollback":
        pos = rec.get("pos")
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            raise InvalidArgument(f"a rollback record needs a step position, got {pos!r}")
        _apply_rollback(state, pos + 1)


_KEY_POS = r":(\d+)\.[^:]*:[^:]*:\d+(?:@r\d+)?$"  # compiled on first use (a rollback)


def _effect_at(key: str, eff: Any) -> int | None:
    """The position an effect was recorded at: ``at`` in its state, else the position in its
    default key; None if unknown (an explicit key in a journal older than ``at``)."""
    at = eff.get("at") if isinstance(eff, dict) else None
    if isinstance(at, int) and not isinstance(at, bool):
        return at
    m = re.search(_KEY_POS, key)
    return int(m.group(1)) if m else None


def _after(state: dict[str, Any], keep: int) -> tuple[list[str], list[str]]:
    """Keys of effects and names of pauses recorded after the first ``keep`` steps."""
    effects = [
        k for k, e in state["effects"].items() if (at := _effect_at(k, e)) is None or at >= keep
    ]
    kept = set(state["order"][:keep])
    pauses = []
    for name, p in state["pauses"].items():
        at = p.get("at") if isinstance(p, dict) else None
        if isinstance(at, int) and not isinstance(at, bool):
            if at >= keep:
                pauses.append(name)
        elif name not in kept and not (
            str(name).startswith("effect:") and str(name)[7:] not in effects
        ):
            pauses.append(name)
    return effects, pauses


def _apply_rollback(state: dict[str, Any], keep: int) -> None:
    """Keep the first ``keep`` completed steps and what was recorded before their end."""
    effects, pauses = _after(state, keep)
    state["order"] = state["order"][:keep]
    state["results"] = state["results"][:keep]
    for k in effects:
        del state["effects"][k]
    for n in pauses:
        del state["pauses"][n]
    state["rollbacks"] = [*_rollbacks(state), keep]
    state["status"] = "running"
    state.pop("output", None)
    state.pop("reason", None)


def _rollbacks(state: dict[str, Any]) -> list[int]:
    """The first re-run position of each rollback so far, oldest first."""
    rb = state.get("rollbacks")
    return [n for n in rb if isinstance(n, int)] if isinstance(rb, list) else []


def _epoch(state: dict[str, Any], pos: int) -> int:
    """How many rollbacks re-opened position ``pos`` (0: never re-run)."""
    return max((i + 1 for i, first in enumerate(_rollbacks(state)) if first <= pos), default=0)


register_state_check(run_reducer, _check_run_state)


def any_reducer(state: dict[str, Any], rec: Any) -> None:
    """Replay any journal: a run's with :func:`run_reducer`, any other with
    :func:`~crashpoint.checkpoint.records_reducer`.

    A journal is a run's when its first record is an ``open`` record (what :func:`open_run`
    and ``crashpoint checkpoints start`` write first), or its snapshot holds a run's state;
    from then on every record must be a run's. ``crashpoint checkpoints verify`` and the
    lifecycle commands read every run with this one reducer, so they agree on every input: the
    commands refuse a run as corrupt exactly when verify reports damage."""
    if "records" in state:
        records_reducer(state, rec)
    elif state or (type(rec) is dict and rec.get("t") == "open"):
        run_reducer(state, rec)
    else:
        records_reducer(state, rec)


def _check_any_state(state: dict[str, Any]) -> None:
    if "records" in state:
        _check_records_state(state)
    elif state:
        _check_run_state(state)


register_state_check(any_reducer, _check_any_state)


def is_run_state(state: dict[str, Any]) -> bool:
    """True for the state :func:`any_reducer` built from a run's journal (or from no record)."""
    return "records" not in state
