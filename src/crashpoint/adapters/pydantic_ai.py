"""Pydantic AI adapter: an agent reports its model requests and tool calls to the harness.

Pydantic AI leaves keeping a conversation to you (``result.all_messages()``, or the messages
of each node of ``agent.iter``, written where you like). So the adapter has two parts: what
the agent does, seen through Pydantic AI's public wrappers, and what you made durable, which
you tell it in one call after your own write has returned::

    from crashpoint.adapters.pydantic_ai import instrument, saved

    with instrument(agent):                       # model and tools wrapped for this block
        async with agent.iter(prompt, message_history=history) as run:
            async for node in run:
                save(run.all_messages())          # your durable write (a file, a database)
                saved(run.all_messages())         # crashpoint: what that write made durable

Public API only: a :class:`pydantic_ai.models.wrapper.WrapperModel` around the agent's model
and a :class:`pydantic_ai.toolsets.WrapperToolset` around each of its toolsets (the function
tools registered with ``@agent.tool`` included), put in place with ``agent.override`` (or built
in yourself: ``Agent(ProbedModel(model), toolsets=[ProbedToolset(tools)])``). Under the
harness (Contract 1) the agent then reports:

* ``step_started("model:<model name>")`` just before each model request (streamed or not),
  and ``event "pydantic-ai:model:<model name>:returned"`` once the response is complete,
  before anything of it is saved;
* ``step_started("tool:<name>")`` just before a tool's function runs, and ``event
  "pydantic-ai:tool:<name>:returned"`` once it returned: its side effects are done, its result
  is not saved yet. A kill there is the boundary "after the effect, before the history write":
  a run resumed from the saved history runs the tool again (from the saved tool call, or from
  the model's reply asked again), so an effect without an idempotency key
  (``ctx.tool_call_id`` is a good one) is applied twice. Pydantic AI puts a tool's return into
  the history with the *next* model request, so a history written after each node of
  ``agent.iter`` holds it only once that request returned: the window spans it;
* ``step_completed`` of a model request once :func:`saved` is handed messages that hold its
  response (matched by its tool calls' ids, else its text), and of a tool call once they hold
  its return (a ``tool-return`` or ``retry-prompt`` part with its ``tool_call_id``).

**What "durable" means here** is what your write does before you call :func:`saved`: the
adapter cannot see your storage, so call it only once the write has returned (a file written,
fsync'ed and renamed; a database transaction committed). Calling it earlier claims durability
the agent does not have, and the harness's ``resumes_from_last_completed`` check then fails the
agent when a kill lands in between. Never calling it is safe: nothing is reported completed.

Outside the harness every report is a no-op (see :mod:`crashpoint.probe`). The core never
imports this module.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from crashpoint import probe
from crashpoint.errors import InvalidArgument

try:
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.toolsets import WrapperToolset
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "crashpoint.adapters.pydantic_ai needs Pydantic AI: pip install 'crashpoint[pydantic-ai]' "
        f"({exc})"
    ) from exc

__all__ = ["ProbedModel", "ProbedToolset", "StepTracker", "instrument", "saved", "tracker"]

_EVENT = "pydantic-ai"


def _response_keys(response: Any) -> set[str]:
    """What identifies a model response in a saved history: its tool calls' ids, else its
    text (and thinking) parts' content."""
    parts = list(getattr(response, "parts", None) or ())
    calls = {
        f"call:{p.tool_call_id}"
        for p in parts
        if getattr(p, "part_kind", "").endswith("tool-call") and getattr(p, "tool_call_id", None)
    }
    if calls:
        return calls
    texts = [str(getattr(p, "content", "")) for p in parts if getattr(p, "part_kind", "") == "text"]
    return {"text:" + json.dumps(texts)} if texts else set()


def _saved_keys(messages: Iterable[Any]) -> set[str]:
    """Every key :func:`_response_keys` or a tool return can have, found in ``messages``."""
    out: set[str] = set()
    for m in messages:
        kind = getattr(m, "kind", "")
        parts = list(getattr(m, "parts", None) or ())
        if kind == "response":
            out |= _response_keys(m)
            texts = [str(p.content) for p in parts if getattr(p, "part_kind", "") == "text"]
            if texts:
                out.add("text:" + json.dumps(texts))
        elif kind == "request":
            for p in parts:
                if getattr(p, "part_kind", "") in ("tool-return", "retry-prompt") and getattr(
                    p, "tool_call_id", None
                ):
                    out.add(f"return:{p.tool_call_id}")
    return out


class StepTracker:
    """The model requests and tool calls started and not yet saved. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[str, set[str] | None, int]] = []  # step, keys, token
        self._next = 0

    def started(self, step: str, keys: set[str] | None = None) -> int:
        """A step begins; ``keys`` (None: known when it returns) are what must be saved."""
        with self._lock:
            self._next += 1
            self._pending.append((step, keys, self._next))
            return self._next

    def returned(self, token: int, keys: set[str]) -> None:
        with self._lock:
            self._pending = [(s, keys if t == token else k, t) for s, k, t in self._pending]

    def saved(self, messages: Iterable[Any]) -> list[str]:
        """The steps a durable write of ``messages`` holds, in the order they started (each
        once); a step whose output has no key is held by the first write after it returned."""
        have = _saved_keys(messages)
        with self._lock:
            done, left = [], []
            for step, keys, token in self._pending:
                if keys is not None and keys <= have:
                    done.append(step)
                else:
                    left.append((step, keys, token))
            self._pending = left
            return done


_TRACKER = StepTracker()


def tracker() -> StepTracker:
    """The process's tracker, shared by :class:`ProbedModel`, :class:`ProbedToolset` and
    :func:`saved` unless they are given their own."""
    return _TRACKER


class ProbedModel(WrapperModel):
    """Any Pydantic AI model (an instance or a name such as ``"openai:gpt-4o-mini"``),
    reporting each request's start and return; its requests are unchanged."""

    def __init__(self, wrapped: Any, tracker: StepTracker | None = None) -> None:
        super().__init__(wrapped)
        self.tracker = tracker or _TRACKER

    @property
    def _step(self) -> str:
        return f"model:{self.wrapped.model_name}"

    def _returned(self, token: int, response: Any) -> None:
        self.tracker.returned(token, _response_keys(response))
        probe.event(
            "event",
            name=f"{_EVENT}:{self._step}:returned",
            boundary="after the model replied, before its response is saved",
        )

    async def request(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        token = self.tracker.started(self._step)
        probe.step_started(self._step)
        response = await self.wrapped.request(messages, *args, **kwargs)
        self._returned(token, response)
        return response

    @asynccontextmanager
    async def request_stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        token = self.tracker.started(self._step)
        probe.step_started(self._step)
        async with self.wrapped.request_stream(messages, *args, **kwargs) as stream:
            yield stream
        self._returned(token, stream.get())


class ProbedToolset(WrapperToolset[Any]):
    """Any Pydantic AI toolset, reporting each tool call's start and return; the calls are
    unchanged."""

    def __init__(self, wrapped: Any, tracker: StepTracker | None = None) -> None:
        super().__init__(wrapped)
        self.tracker = tracker or _TRACKER

    async def call_tool(self, name: str, tool_args: Any, ctx: Any, tool: Any) -> Any:
        step = f"tool:{name}"
        call_id = getattr(ctx, "tool_call_id", None)
        self.tracker.started(step, {f"return:{call_id}"} if call_id else set())
        probe.step_started(step)
        out = await self.wrapped.call_tool(name, tool_args, ctx, tool)
        probe.event(
            "event",
            name=f"{_EVENT}:{step}:returned",
            boundary=f"after {name}'s side effects, before its return is saved",
        )
        return out

    def visit_and_replace(self, visitor: Any) -> Any:
        # keep the wrapper (and its tracker) when Pydantic AI rebuilds the toolset tree
        return ProbedToolset(self.wrapped.visit_and_replace(visitor), self.tracker)


def saved(messages: Sequence[Any], tracker: StepTracker | None = None) -> None:
    """Report the model requests and tool calls that ``messages`` hold as completed: call it
    once your own write of those messages has returned (see the module's docstring)."""
    for step in (tracker or _TRACKER).saved(messages):
        probe.step_completed(step)


@contextmanager
def instrument(agent: Any, tracker: StepTracker | None = None) -> Iterator[Any]:
    """Within the block, ``agent`` runs with its model in :class:`ProbedModel` and each of its
    toolsets (its ``@agent.tool`` functions included) in :class:`ProbedToolset`, through
    ``agent.override`` (a context variable: other tasks and threads are not affected)."""
    model = getattr(agent, "model", None)
    if model is None:
        raise InvalidArgument(
            "instrument(agent): the agent has no model to wrap; give it one, e.g. "
            "Agent('openai:gpt-4o-mini', ...), or wrap yours: Agent(ProbedModel(model), ...)"
        )
    t = tracker or _TRACKER
    toolsets = [
        ts if isinstance(ts, ProbedToolset) else ProbedToolset(ts, t) for ts in agent.toolsets
    ]
    probed = model if isinstance(model, ProbedModel) else ProbedModel(model, t)
    # tools=[]: the agent's own function toolset is in `toolsets` already (wrapped)
    with agent.override(model=probed, toolsets=toolsets, tools=[]):
        yield agent
