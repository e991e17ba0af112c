"""OpenAI Agents SDK adapter: a run reports its model calls and tool calls to the harness.

One line in the agent (the session is the one you already pass to ``Runner.run``)::

    from crashpoint.adapters.openai_agents import instrument

    session, hooks = instrument(SQLiteSession("chat-7", "state/chat.db"))
    result = await Runner.run(agent, message, session=session, hooks=hooks)

Public API only: a :class:`agents.RunHooks` subclass (``on_llm_start``/``on_llm_end``,
``on_tool_start``/``on_tool_end``) and a wrapper around the ``Session`` the run is given (its
``get_items``/``add_items``/``pop_item``/``clear_session`` are called unchanged). Under the
harness (Contract 1) the run then reports, for each model call and each local tool call:

* ``step_started("model:<agent>")`` just before the SDK calls the model (``on_llm_start``),
  and ``event "openai-agents:model:<agent>:returned"`` once the reply arrived
  (``on_llm_end``), before anything of it is saved;
* ``step_started("tool:<name>")`` just before the tool's function runs (``on_tool_start``),
  and ``event "openai-agents:tool:<name>:returned"`` once it returned (``on_tool_end``): its
  side effects are done and its result is not saved yet. A kill there is the boundary
  "after the effect, before the session write": on resume the SDK has no record of the call,
  asks the model again and runs the tool again, so an effect without an idempotency key (the
  tool call's ``tool_call_id`` is a good one) is applied twice;
* ``step_completed`` of a tool call once a ``session.add_items`` that holds its
  ``function_call_output`` (matched by ``call_id``) has returned, and of a model call once
  every message (matched by its text) and tool call (by ``call_id``) of its reply has been
  saved that way.

**What "durable" means here**: the session's ``add_items`` returned. That is as durable as the
session makes it: ``SQLiteSession`` commits each ``add_items`` (a file on disk survives a kill
of the process; a power cut, only as far as SQLite's ``synchronous`` setting goes); an
in-memory session (``SQLiteSession`` without a file) is lost with the process, so nothing it
holds survives a kill, and a resumed run starting over is then what the harness sees. The
adapter does not read the session back: it reports what the SDK handed to the session, once
the session said it kept it.

Without a session (``crashpoint_hooks()`` alone) nothing is durable, so no step is ever
reported completed; starts and returns still are. The SDK calls the hooks only for local tools
(function tools, shell, computer ...): hosted tools run inside the model provider and are
part of the model call. A session's private helpers (names starting with ``_``, such as the
compaction generation guard of SDK 0.24) are not passed through the wrapper, so the SDK uses
the session's public ``add_items``, which is what the adapter watches.

Outside the harness every report is a no-op (see :mod:`crashpoint.probe`). The core never
imports this module.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

from crashpoint import probe
from crashpoint.errors import InvalidArgument

try:
    from agents import RunHooks
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "crashpoint.adapters.openai_agents needs the OpenAI Agents SDK: "
        f"pip install 'crashpoint[openai-agents]' ({exc})"
    ) from exc

__all__ = ["ProbeHooks", "ProbedSession", "StepTracker", "crashpoint_hooks", "instrument"]

#: The prefix of the events the adapter sends (``event`` op, ``name`` field).
_EVENT = "openai-agents"


def _plain(item: Any) -> dict[str, Any]:
    """An item as the plain dict the session stores (SDK output items are pydantic models)."""
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        out = dump(exclude_unset=True)
        return out if isinstance(out, dict) else {}
    return {}


def _key(item: Any) -> str | None:
    """What identifies an item across the model's reply and the session's rows: a tool call's
    ``call_id``; an assistant message's text (not its ``id``: a session may drop ids, and
    Chat Completions models get the SDK's placeholder ``__fake_id__``). None for kinds the
    adapter does not wait for (user input, reasoning, hosted-tool items)."""
    d = _plain(item)
    call_id = d.get("call_id")
    if isinstance(call_id, str) and call_id:
        kind = "output" if str(d.get("type", "")).endswith("_output") else "call"
        return f"{kind}:{call_id}"
    if d.get("type", "message") != "message" or d.get("role") != "assistant":
        return None
    content = d.get("content")
    parts = content if isinstance(content, list) else [content]
    texts = [p.get("text", p.get("refusal")) if isinstance(p, dict) else p for p in parts]
    return "text:" + json.dumps(texts, sort_keys=True, default=str)


class _Pending:
    __slots__ = ("keys", "step")

    def __init__(self, step: str, keys: set[str] | None) -> None:
        self.step = step
        self.keys = keys  # None: not known yet (the model call has not returned)


class StepTracker:
    """The model calls and tool calls started and not yet saved, and what saving them takes.
    Thread-safe: a session may be written from a worker thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._models: dict[int, _Pending] = {}  # id(agent) -> its model call in flight

    def model_started(self, agent: Any, step: str) -> None:
        with self._lock:
            p = _Pending(step, None)
            self._models[id(agent)] = p
            self._pending.append(p)

    def model_returned(self, agent: Any, output: Iterable[Any]) -> None:
        """The model's reply: its call is durable once every message and tool call in it is
        saved (a reply with none of those: at the next write of the session)."""
        with self._lock:
            p = self._models.pop(id(agent), None)
            if p is not None:
                p.keys = {k for k in map(_key, output) if k is not None}

    def tool_started(self, step: str, call_id: str | None) -> None:
        with self._lock:
            self._pending.append(_Pending(step, {f"output:{call_id}"} if call_id else set()))

    def saved(self, items: Iterable[Any]) -> list[str]:
        """The steps made durable by a session write of ``items`` that has returned, in the
        order they started."""
        keys = {k for k in map(_key, items) if k is not None}
        with self._lock:
            done: list[_Pending] = []
            left: list[_Pending] = []
            for p in self._pending:
                if p.keys is None:
                    left.append(p)
                    continue
                p.keys -= keys
                (left if p.keys else done).append(p)
            self._pending = left
            return [p.step for p in done]

    def forget(self) -> None:
        """Drop what is pending (the session was cleared: nothing started is saved any more)."""
        with self._lock:
            self._pending.clear()
            self._models.clear()


def _name(obj: Any, default: str) -> str:
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) and name else default


class ProbeHooks(RunHooks[Any]):
    """Run hooks that report model calls and tool calls (see the module's docstring). The
    harness's reply is awaited inline, so a kill lands exactly at the hook."""

    def __init__(self, tracker: StepTracker | None = None) -> None:
        super().__init__()
        self.tracker = tracker

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: Any, input_items: Any
    ) -> None:
        step = f"model:{_name(agent, 'agent')}"
        if self.tracker is not None:
            self.tracker.model_started(agent, step)
        probe.step_started(step)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if self.tracker is not None:
            self.tracker.model_returned(agent, getattr(response, "output", None) or ())
        probe.event(
            "event",
            name=f"{_EVENT}:model:{_name(agent, 'agent')}:returned",
            boundary="after the model replied, before its reply is saved in the session",
        )

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        step = f"tool:{_name(tool, 'tool')}"
        call_id = getattr(context, "tool_call_id", None)
        if self.tracker is not None:
            self.tracker.tool_started(step, call_id if isinstance(call_id, str) else None)
        probe.step_started(step)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        name = _name(tool, "tool")
        probe.event(
            "event",
            name=f"{_EVENT}:tool:{name}:returned",
            boundary=f"after {name}'s side effects, before its result is saved in the session",
        )


class ProbedSession:
    """Wraps any ``Session``: every call goes to ``inner`` unchanged; once ``add_items`` has
    returned, the model calls and tool calls it saved are reported completed. Other public
    attributes (``session_id``, ``session_settings``, a session's own extras) are the inner
    session's."""

    def __init__(self, inner: Any, tracker: StepTracker | None = None) -> None:
        for method in ("get_items", "add_items", "pop_item", "clear_session"):
            if not callable(getattr(inner, method, None)):
                raise InvalidArgument(
                    f"instrument(session): {type(inner).__name__} has no {method}(); pass an "
                    "Agents SDK Session, e.g. SQLiteSession('chat-1', 'state/chat.db')"
                )
        self.inner = inner
        self.tracker = tracker or StepTracker()
        self.session_id = getattr(inner, "session_id", "")
        self.session_settings = getattr(inner, "session_settings", None)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "inner":  # private helpers stay the inner's own
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items: list[Any] = await self.inner.get_items(limit)
        return items

    async def add_items(self, items: list[Any]) -> None:
        await self.inner.add_items(items)
        for step in self.tracker.saved(items):
            probe.step_completed(step)

    async def pop_item(self) -> Any:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()
        self.tracker.forget()


def crashpoint_hooks(tracker: StepTracker | None = None) -> ProbeHooks:
    """Run hooks reporting model and tool calls; with no ``tracker`` (no session) nothing is
    ever reported completed. Prefer :func:`instrument`, which ties them to the session."""
    return ProbeHooks(tracker)


def instrument(session: Any) -> tuple[ProbedSession, ProbeHooks]:
    """The ``session`` wrapped so its writes report what became durable, and the run hooks
    that report starts and returns, sharing one tracker: pass both to ``Runner.run`` (or
    ``run_sync``, ``run_streamed``). Wrapping an already wrapped session reuses its tracker."""
    if isinstance(session, ProbedSession):
        return session, ProbeHooks(session.tracker)
    wrapped = ProbedSession(session)
    return wrapped, ProbeHooks(wrapped.tracker)
