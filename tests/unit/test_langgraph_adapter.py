"""What the LangGraph adapter reports, on real graphs run in-process (the probe's calls are
recorded instead of sent): a subgraph's inner nodes complete in their own namespace, never
with the parent's supersteps, and a node stopped by ``interrupt()`` starts again on resume."""

from __future__ import annotations

import itertools
import operator
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from crashpoint import probe
from crashpoint.adapters.langgraph import instrument


class S(TypedDict, total=False):
    done: Annotated[list[str], operator.add]
    answer: str


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(probe, "step_started", lambda s: seen.append(("started", s)))
    monkeypatch.setattr(probe, "step_completed", lambda s: seen.append(("completed", s)))

    def event(op: str, **fields: Any) -> dict[str, Any]:
        if str(fields.get("name", "")).endswith("interrupt"):
            seen.append(("event", str(fields["name"])))
        return {"ok": True}

    monkeypatch.setattr(probe, "event", event)
    return seen


def node(name: str) -> Any:
    return lambda s: {"done": [name]}


def test_a_subgraphs_inner_nodes_complete_on_their_own(reports: list[tuple[str, str]]) -> None:
    sb = StateGraph(S)
    for n in ("s1", "s2", "s3"):
        sb.add_node(n, node(n))
    sb.add_edge(START, "s1")
    sb.add_edge("s1", "s2")
    sb.add_edge("s2", "s3")
    sb.add_edge("s3", END)
    b = StateGraph(S)
    b.add_node("plan", node("plan"))
    b.add_node("sub", sb.compile())
    b.add_node("reduce", node("reduce"))
    b.add_edge(START, "plan")
    b.add_edge("plan", "sub")
    b.add_edge("sub", "reduce")
    b.add_edge("reduce", END)
    g = instrument(b.compile(checkpointer=InMemorySaver()))
    g.invoke({"done": []}, {"configurable": {"thread_id": "t"}})
    order = [f"{k[0]}:{s}" for k, s in reports]
    # the parent completes after all its inner nodes, never with an inner superstep
    assert order.index("c:sub") > order.index("c:s3"), order
    assert order.index("s:s1") > order.index("s:sub"), order
    assert order.count("s:sub") == 1
    assert sorted(s for k, s in reports if k == "completed") == sorted(
        ["plan", "sub", "s1", "s2", "s3", "reduce"]
    )


def test_a_node_stopped_by_interrupt_starts_again_on_resume(
    reports: list[tuple[str, str]],
) -> None:
    def approve(s: S) -> dict[str, Any]:
        answer = interrupt("approve?")
        return {"answer": str(answer)}

    b = StateGraph(S)
    b.add_node("approve", approve)
    b.add_edge(START, "approve")
    b.add_edge("approve", END)
    g = instrument(b.compile(checkpointer=InMemorySaver()))
    cfg: Any = {"configurable": {"thread_id": "t"}}
    g.invoke({"done": []}, cfg)
    g.invoke(Command(resume="yes"), cfg)
    assert [r for r in reports if r[0] != "event"] == [
        ("started", "approve"),
        ("started", "approve"),
        ("completed", "approve"),
    ]


def test_each_saved_checkpoint_is_reported_with_its_parent_so_a_fork_can_be_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from crashpoint.harness._checker import check_history

    saved: list[dict[str, Any]] = []

    def event(op: str, **fields: Any) -> dict[str, Any]:
        if str(fields.get("name", "")).startswith("langgraph:checkpoint:"):
            saved.append({"op": op, **fields})
        return {"ok": True}

    monkeypatch.setattr(probe, "event", event)
    monkeypatch.setattr(probe, "step_started", lambda s: None)
    monkeypatch.setattr(probe, "step_completed", lambda s: None)
    b = StateGraph(S)
    b.add_node("plan", node("plan"))
    b.add_node("act", node("act"))
    b.add_edge(START, "plan")
    b.add_edge("plan", "act")
    b.add_edge("act", END)
    g = instrument(b.compile(checkpointer=InMemorySaver()))
    g.invoke({"done": []}, {"configurable": {"thread_id": "t"}})
    assert [e["name"] for e in saved] == [f"langgraph:checkpoint:{n}" for n in (-1, 0, 1, 2)]
    assert saved[0]["parent"] is None  # the thread's first checkpoint
    for before, after in itertools.pairwise(saved):
        assert after["parent"] == before["checkpoint"], (before, after)
    assert {e["thread"] for e in saved} == {"t"}
    assert {e["ns"] for e in saved} == {""}
    # as the ledger records them: one line of history, no fork; a second successor is one
    events = [{**e, "i": n, "attempt": 1} for n, e in enumerate(saved)]
    assert check_history(events).ok
    other = {**saved[2], "checkpoint": "another", "i": 4, "attempt": 2}
    (fork,) = check_history([*events, other]).anomalies
    assert fork.kind == "fork"
    assert fork.witness == (events[2], other)
