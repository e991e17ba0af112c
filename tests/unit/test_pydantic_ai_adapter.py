"""What the Pydantic AI adapter reports, on a real agent run in-process with Pydantic AI's
``TestModel`` (the probe's calls are recorded instead of sent): model requests and tool calls
started and returned, and completed only once :func:`saved` is handed messages holding them."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from _lazy import LazyModule, needs
from crashpoint import probe
from crashpoint.errors import InvalidArgument

if TYPE_CHECKING:
    from pydantic_ai import Agent

    from crashpoint.adapters.pydantic_ai import StepTracker

pytestmark = needs("pydantic_ai", reason="the pydantic-ai extra is not installed")
# imported by the tests that use them, not at collection (pydantic_ai: ~1.5 s)
pai = LazyModule("pydantic_ai")
pai_test = LazyModule("pydantic_ai.models.test")
adapter = LazyModule("crashpoint.adapters.pydantic_ai")


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


def _agent(sent: list[str]) -> Agent[None, str]:
    agent = pai.Agent(pai_test.TestModel())

    @agent.tool_plain
    def send_invoice(customer: str) -> str:
        sent.append(customer)
        return "sent"

    return agent


def _run(agent: Agent[None, str], tracker: StepTracker, *, save: bool) -> str:
    """A run through ``agent.iter``, handing each node's new messages to :func:`saved`."""

    async def go() -> str:
        with adapter.instrument(agent, tracker):
            async with agent.iter("invoice acme") as run:
                async for _node in run:
                    if save:
                        adapter.saved(run.all_messages(), tracker)
            assert run.result is not None
            return str(run.result.output)

    return asyncio.run(go())


def test_steps_complete_only_once_saved_holds_them(reports: list[tuple[str, str]]) -> None:
    sent: list[str] = []
    out = _run(_agent(sent), adapter.StepTracker(), save=True)
    assert sent == ["a"]
    assert "send_invoice" in out
    assert reports == [
        ("started", "model:test"),
        ("event", "pydantic-ai:model:test:returned"),
        ("completed", "model:test"),  # the history holds the response (its tool call)
        ("started", "tool:send_invoice"),
        ("event", "pydantic-ai:tool:send_invoice:returned"),
        ("started", "model:test"),
        ("event", "pydantic-ai:model:test:returned"),
        # Pydantic AI puts the tool's return into the history with the next request
        ("completed", "tool:send_invoice"),
        ("completed", "model:test"),
    ]


def test_without_saved_nothing_is_reported_completed(reports: list[tuple[str, str]]) -> None:
    _run(_agent([]), adapter.StepTracker(), save=False)
    assert [k for k, _ in reports].count("started") == 3
    assert "completed" not in [k for k, _ in reports]


def test_instrument_wraps_for_the_block_only() -> None:
    agent = _agent([])
    with adapter.instrument(agent) as same:
        assert same is agent
        wrapped = [t for t in agent.toolsets if isinstance(t, adapter.ProbedToolset)]
        assert len(wrapped) == 1  # the function toolset (send_invoice), wrapped once
        # what is left unwrapped is the override's empty function toolset: no tool unseen
        assert all(not getattr(t, "tools", {}) for t in agent.toolsets if t not in wrapped)
    # the override is gone, and was never stored
    assert isinstance(agent.model, pai_test.TestModel)
    assert not any(isinstance(t, adapter.ProbedToolset) for t in agent.toolsets)


def test_an_agent_without_a_model_gets_a_clear_error() -> None:
    with (
        pytest.raises(InvalidArgument, match=r"no model to wrap.*ProbedModel"),
        adapter.instrument(pai.Agent()),
    ):
        pass


def test_outside_the_harness_the_probe_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(probe.ENV_LEDGER, raising=False)
    sent: list[str] = []
    # no ledger: nothing is sent, nothing raises
    _run(_agent(sent), adapter.StepTracker(), save=True)
    assert sent == ["a"]


def test_without_pydantic_ai_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    for name in ("pydantic_ai.models.wrapper", "pydantic_ai.toolsets"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    monkeypatch.delitem(sys.modules, "crashpoint.adapters.pydantic_ai", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'crashpoint\[pydantic-ai\]'"):
        importlib.import_module("crashpoint.adapters.pydantic_ai")
