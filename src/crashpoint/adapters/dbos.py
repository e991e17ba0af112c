"""Crash-test a DBOS workflow: its steps reported to the crashpoint harness, one line changed.

Replace ``@DBOS.step(...)`` with ``@crashpoint_step(...)`` (same options)::

    from crashpoint.adapters.dbos import crashpoint_step

    @crashpoint_step()               # was: @DBOS.step()
    def send(invoice: dict) -> int: ...

The step is still a DBOS step (``DBOS.step`` does the work, with your options); around it the
harness is told, through :mod:`crashpoint.probe`, three boundaries of each execution:

1. ``step_started(name)``: DBOS is about to run the step's function (not sent when DBOS
   replays a step it has already recorded: a replay does not run the function);
2. ``event`` named ``"<name>: returned, DBOS checkpoint pending"``: the function returned, its
   side effects are done, DBOS has not yet recorded its output. A kill here is the one a
   durable-execution framework cannot hide: the step ran, its checkpoint did not, so DBOS runs
   it again on recovery (DBOS documents steps as at-least-once; an effect inside one needs an
   idempotency key, e.g. ``f"{DBOS.workflow_id}:{name}"``);
3. ``step_completed(name)``: DBOS's ``record_operation_result`` has returned, i.e. the
   transaction that checkpoints the step's output in the system database is committed. Only
   from here on does DBOS promise never to run the step again, and that is what the harness's
   ``resumes_from_last_completed`` check then holds it to.

A step that raises is not reported completed (DBOS records most errors, but the adapter cannot
tell a recorded error from a failed checkpoint, so it claims nothing). Outside a workflow, and
for a step called inside another step, DBOS runs the function as a plain call: nothing is
reported. Outside the harness every probe call is a no-op. Sync and ``async`` steps both work.

Why a decorator and not a hook: DBOS 3 has no public step callback; its OpenTelemetry spans
(an optional dependency) end after the checkpoint too but carry no "returned, not yet recorded"
point. The decorator uses only ``DBOS.step``, ``DBOS.workflow_id`` and ``DBOS.step_id``.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

try:
    from dbos import DBOS
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "crashpoint.adapters.dbos needs DBOS, which is not installed: "
        "pip install 'crashpoint[dbos]'"
    ) from exc

from crashpoint import probe

__all__ = ["RETURNED", "crashpoint_step", "returned_event"]

F = TypeVar("F", bound=Callable[..., Any])

#: The suffix of the event sent when a step's function has returned and DBOS has not yet
#: recorded its output (the boundary "after the side effect, before the checkpoint").
RETURNED = ": returned, DBOS checkpoint pending"


def returned_event(step: str) -> str:
    """The name of the ``event`` sent after ``step``'s function returned, before DBOS records
    it (what a ``kill`` fault names to land exactly there: ``op="event"``, this name)."""
    return step + RETURNED


@dataclass(slots=True)
class _Call:
    """One call of a reported step from workflow code: did DBOS run its function?"""

    step: str
    ran: bool = False  # the function ran and returned (not a replay, not an exception)
    inside: bool = False  # the function is running (a nested step call is a plain call)


_current: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "crashpoint_dbos_step", default=None
)


def _begin(step: str) -> _Call | None:
    """The call record if this is a step DBOS will checkpoint (in a workflow, not in a step)."""
    if DBOS.workflow_id is None or DBOS.step_id is not None or _current.get() is not None:
        return None
    return _Call(step)


def _enter(call: _Call | None) -> bool:
    """In the function: report its start if DBOS runs it as this step."""
    if call is None or call.inside:
        return False
    call.inside = True
    probe.step_started(call.step)
    return True


def _returned(call: _Call) -> None:
    call.inside = False
    call.ran = True
    probe.event("event", name=returned_event(call.step))


def crashpoint_step(*, name: str | None = None, **options: Any) -> Callable[[F], F]:
    """``@DBOS.step(name=..., **options)`` whose executions are reported to the harness.

    ``options`` are passed to :meth:`DBOS.step` as they are (``retries_allowed``,
    ``max_attempts``, ...). The step's name is ``name`` or the function's ``__qualname__``,
    as DBOS names it; each retry of a failing step reports ``step_started`` again.
    """

    def decorator(func: F) -> F:
        step = name if name is not None else func.__qualname__
        if inspect.iscoroutinefunction(func):
            return cast(F, _decorate_async(func, step, name, options))

        @functools.wraps(func)
        def body(*args: Any, **kwargs: Any) -> Any:
            call = _current.get()
            if not _enter(call):
                return func(*args, **kwargs)
            assert call is not None
            try:
                out = func(*args, **kwargs)
            finally:
                call.inside = False
            _returned(call)
            return out

        durable = DBOS.step(name=name, **options)(body)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            call = _begin(step)
            if call is None:
                return durable(*args, **kwargs)
            token = _current.set(call)
            try:
                out = durable(*args, **kwargs)  # returns once DBOS committed the checkpoint
            finally:
                _current.reset(token)
            if call.ran:
                probe.step_completed(step)
            return out

        return cast(F, wrapper)

    return decorator


def _decorate_async(
    func: Callable[..., Any], step: str, name: str | None, options: dict[str, Any]
) -> Callable[..., Any]:
    @functools.wraps(func)
    async def body(*args: Any, **kwargs: Any) -> Any:
        call = _current.get()
        if not _enter(call):
            return await func(*args, **kwargs)
        assert call is not None
        try:
            out = await func(*args, **kwargs)
        finally:
            call.inside = False
        _returned(call)
        return out

    durable = DBOS.step(name=name, **options)(body)

    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = _begin(step)
        if call is None:
            return await durable(*args, **kwargs)
        token = _current.set(call)
        try:
            out = await durable(*args, **kwargs)
        finally:
            _current.reset(token)
        if call.ran:
            probe.step_completed(step)
        return out

    return wrapper
