"""What the OpenAI Agents SDK adapter reports, in-process (the probe's calls are recorded
instead of sent): the run hooks' starts and returns, and completions only once the session's
``add_items`` has returned with the call's items."""

from __future__ import annotations

import asyncio
import functools
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from _lazy import LazyModule, needs
from crashpoint import probe
from crashpoint.errors import InvalidArgument

if TYPE_CHECKING:
    from agents import ModelResponse

    from crashpoint.adapters.openai_agents import ProbedSession

pytestmark = needs("agents", reason="the openai-agents extra is not installed")
# imported by the tests that use them, not at collection (agents with openai and mcp: ~3 s)
adapter = LazyModule("crashpoint.adapters.openai_agents")


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(probe, "step_started", lambda s: seen.append(("started", s)))
    monkeypatch.setattr(probe, "step_completed", lambda s: seen.append(("completed", s)))

    def event(op: str, **fields: Any) -> dict[str, Any]:
        seen.append((op, str(fields.get("name", ""))))
        return {"ok": True}

    monkeypatch.setattr(probe, "event", event)
    return seen


class ListSession:
    """The smallest Session: a list (what a user's own session class looks like)."""

    session_id = "s-1"

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.writes = 0

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self.items if limit is None else self.items[-limit:])

    async def add_items(self, items: list[Any]) -> None:
        self.writes += 1
        self.items.extend(items)

    async def pop_item(self) -> Any:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()

    def extra(self) -> str:
        return "the inner session's own"


AGENT = SimpleNamespace(name="billing")
TOOL = SimpleNamespace(name="send_invoice")


@functools.cache
def _call() -> Any:
    from openai.types.responses import ResponseFunctionToolCall

    return ResponseFunctionToolCall(
        id="fc_1", call_id="call_1", name="send_invoice", arguments="{}", type="function_call"
    )


@functools.cache
def _answer() -> Any:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    return ResponseOutputMessage(
        id="msg_1",
        role="assistant",
        status="completed",
        type="message",
        content=[ResponseOutputText(text="Done.", type="output_text", annotations=[])],
    )


def _response(*items: Any) -> ModelResponse:
    from agents import ModelResponse, Usage

    return ModelResponse(output=list(items), usage=Usage(), response_id=None)


def _turns(session: ProbedSession, hooks: Any) -> None:
    """Two turns as the runner drives them: a tool call, then the answer."""

    async def go() -> None:
        await session.add_items([{"role": "user", "content": "invoice acme"}])
        await hooks.on_llm_start(None, AGENT, None, [])
        await hooks.on_llm_end(None, AGENT, _response(_call()))
        ctx = SimpleNamespace(tool_call_id="call_1")
        await hooks.on_tool_start(ctx, AGENT, TOOL)
        await hooks.on_tool_end(ctx, AGENT, TOOL, "sent")
        await session.add_items(
            [
                _call().model_dump(exclude_unset=True),
                {"type": "function_call_output", "call_id": "call_1", "output": "sent"},
            ]
        )
        await hooks.on_llm_start(None, AGENT, None, [])
        await hooks.on_llm_end(None, AGENT, _response(_answer()))
        await session.add_items([_answer().model_dump(exclude_unset=True)])

    asyncio.run(go())


def test_a_call_completes_once_the_session_write_holding_it_returned(
    reports: list[tuple[str, str]],
) -> None:
    inner = ListSession()
    session, hooks = adapter.instrument(inner)
    _turns(session, hooks)
    assert reports == [
        ("started", "model:billing"),
        ("event", "openai-agents:model:billing:returned"),
        ("started", "tool:send_invoice"),
        ("event", "openai-agents:tool:send_invoice:returned"),
        ("completed", "model:billing"),
        ("completed", "tool:send_invoice"),
        ("started", "model:billing"),
        ("event", "openai-agents:model:billing:returned"),
        ("completed", "model:billing"),
    ]
    assert inner.writes == 3
    assert len(inner.items) == 4
    assert session.session_id == "s-1"
    assert session.extra() == "the inner session's own"


def test_a_write_that_does_not_hold_the_call_completes_nothing(
    reports: list[tuple[str, str]],
) -> None:
    session, hooks = adapter.instrument(ListSession())

    async def go() -> None:
        await hooks.on_llm_start(None, AGENT, None, [])
        await session.add_items([{"role": "user", "content": "a write before the reply"}])
        await hooks.on_llm_end(None, AGENT, _response(_call()))
        await hooks.on_tool_start(SimpleNamespace(tool_call_id="call_1"), AGENT, TOOL)
        await session.add_items([_call().model_dump(exclude_unset=True)])  # the call, no output

    asyncio.run(go())
    # the model call's reply is saved; the tool's result is not
    assert [r for r in reports if r[0] == "completed"] == [("completed", "model:billing")]


def test_a_write_that_fails_completes_nothing(reports: list[tuple[str, str]]) -> None:
    class Full(ListSession):
        async def add_items(self, items: list[Any]) -> None:
            raise OSError(28, "No space left on device")

    session, hooks = adapter.instrument(Full())

    async def go() -> None:
        await hooks.on_llm_start(None, AGENT, None, [])
        await hooks.on_llm_end(None, AGENT, _response(_answer()))
        with pytest.raises(OSError, match="No space"):
            await session.add_items([_answer().model_dump(exclude_unset=True)])

    asyncio.run(go())
    assert [r for r in reports if r[0] == "completed"] == []


def test_hooks_without_a_session_never_claim_durability(reports: list[tuple[str, str]]) -> None:
    hooks = adapter.crashpoint_hooks()
    asyncio.run(hooks.on_llm_start(None, AGENT, None, []))
    asyncio.run(hooks.on_llm_end(None, AGENT, _response(_answer())))
    assert [k for k, _ in reports] == ["started", "event"]


def test_instrument_keeps_one_tracker_and_refuses_what_is_not_a_session() -> None:
    session, _hooks = adapter.instrument(ListSession())
    again, hooks = adapter.instrument(session)
    assert again is session
    assert hooks.tracker is session.tracker
    assert isinstance(session.tracker, adapter.StepTracker)
    with pytest.raises(InvalidArgument, match=r"object has no get_items\(\).*SQLiteSession"):
        adapter.instrument(object())
    with pytest.raises(AttributeError):
        _ = session._private_helper  # private helpers are not passed through


def test_outside_the_harness_the_probe_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(probe.ENV_LEDGER, raising=False)
    session, hooks = adapter.instrument(ListSession())
    _turns(session, hooks)  # no ledger: nothing is sent, nothing raises


def test_without_the_sdk_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "agents", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "crashpoint.adapters.openai_agents", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'crashpoint\[openai-agents\]'"):
        importlib.import_module("crashpoint.adapters.openai_agents")


def test_a_message_saved_without_its_id_still_completes_its_call(
    reports: list[tuple[str, str]],
) -> None:
    session, hooks = adapter.instrument(ListSession())
    stored = _answer().model_dump(exclude_unset=True)
    del stored["id"]  # a session (or a Chat Completions model's reply) without the item id

    async def go() -> None:
        await hooks.on_llm_start(None, AGENT, None, [])
        await hooks.on_llm_end(None, AGENT, _response(_answer()))
        await session.add_items([{"role": "assistant", "content": "another answer"}])
        assert ("completed", "model:billing") not in reports  # not its text
        await session.add_items([stored])

    asyncio.run(go())
    assert [r for r in reports if r[0] == "completed"] == [("completed", "model:billing")]
