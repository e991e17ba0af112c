"""A refund flow on LangGraph with a human in the loop: ``draft`` -> ``ask_reviewer`` ->
``approve`` (``interrupt()``) -> ``refund``.

``ask_reviewer`` notifies the reviewer (``probe.effect``, keyed by the thread id) in a node of
its own, as LangGraph's docs advise: a node that calls ``interrupt()`` runs again from its top
when resumed. ``approve`` calls ``interrupt()``; the agent answers with ``Command(resume=...)``
(here the reviewer always approves). ``refund`` POSTs to ``{http}/refunds`` with a key.

Planted bug (``--bug effect_before_interrupt``): the reviewer is notified inside ``approve``,
before ``interrupt()``, without a key: the resumed node notifies them again, even without a
crash.
"""

from __future__ import annotations

import sys
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from lgkit import parse, post, run

from crashpoint import probe

BUGS = ("effect_before_interrupt",)
ARGS: Any = None


class State(TypedDict, total=False):
    ticket: str
    amount: int
    asked: bool
    approved: bool
    refund_id: str


def draft(state: State) -> State:
    return {"amount": 1999}


def ask_reviewer(state: State) -> State:
    if ARGS.bug != "effect_before_interrupt":
        probe.effect("ask_reviewer", {"ticket": state["ticket"]}, key=f"{ARGS.thread}:ask_reviewer")
    return {"asked": True}


def approve(state: State) -> State:
    if ARGS.bug == "effect_before_interrupt":
        probe.effect("ask_reviewer", {"ticket": state["ticket"]})
    answer = interrupt({"question": f"refund {state['amount']} on {state['ticket']}?"})
    return {"approved": answer == "yes"}


def refund(state: State) -> State:
    if state["approved"] and ARGS.http:
        body = {"ticket": state["ticket"], "amount": state["amount"]}
        post(f"{ARGS.http}/refunds", body, f"{ARGS.thread}:refund")
    return {"refund_id": f"rf-{state['ticket']}" if state["approved"] else ""}


def build() -> StateGraph[State]:
    g = StateGraph(State)
    g.add_node("draft", draft)
    g.add_node("ask_reviewer", ask_reviewer)
    g.add_node("approve", approve)
    g.add_node("refund", refund)
    g.add_edge(START, "draft")
    g.add_edge("draft", "ask_reviewer")
    g.add_edge("ask_reviewer", "approve")
    g.add_edge("approve", "refund")
    g.add_edge("refund", END)
    return g


def main() -> int:
    global ARGS
    ARGS = parse(__doc__ or "", BUGS)
    final = run(build(), ARGS, {"ticket": "T-77"}, answer=lambda question: "yes")
    print(final["refund_id"], final["approved"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
