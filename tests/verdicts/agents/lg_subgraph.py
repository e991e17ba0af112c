"""A writer on LangGraph whose research is a subgraph: ``outline`` -> ``research`` (a compiled
graph used as a node: ``search`` -> ``notify``) -> ``publish``.

The subgraph shares the parent's state keys and is compiled without a checkpointer (it uses the
parent's). Its ``notify`` node POSTs to ``{http}/notes`` with an Idempotency-Key from the thread
id and the node; ``publish`` publishes with ``probe.effect`` (keyed).

Planted bug (``--bug keyless``): the subgraph's ``notify`` posts without a key.
"""

from __future__ import annotations

import sys
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from lgkit import parse, post, run

from crashpoint import probe

BUGS = ("keyless",)
ARGS: Any = None


class State(TypedDict, total=False):
    topic: str
    outline: list[str]
    notes: str
    notified: bool
    article: str


def outline(state: State) -> State:
    return {"outline": ["why", "how", "what next"]}


def search(state: State) -> State:
    return {"notes": f"{len(state['outline'])} sections on {state['topic']}"}


def notify(state: State) -> State:
    key = None if ARGS.bug == "keyless" else f"{ARGS.thread}:research:notify"
    if ARGS.http:
        post(f"{ARGS.http}/notes", {"notes": state["notes"]}, key)
    return {"notified": True}


def publish(state: State) -> State:
    article = f"{state['topic']}: {state['notes']}"
    probe.effect("publish", {"article": article}, key=f"{ARGS.thread}:publish")
    return {"article": article}


def build() -> StateGraph[State]:
    sub = StateGraph(State)
    sub.add_node("search", search)
    sub.add_node("notify", notify)
    sub.add_edge(START, "search")
    sub.add_edge("search", "notify")
    sub.add_edge("notify", END)
    g = StateGraph(State)
    g.add_node("outline", outline)
    g.add_node("research", sub.compile())
    g.add_node("publish", publish)
    g.add_edge(START, "outline")
    g.add_edge("outline", "research")
    g.add_edge("research", "publish")
    g.add_edge("publish", END)
    return g


def main() -> int:
    global ARGS
    ARGS = parse(__doc__ or "", BUGS)
    final = run(build(), ARGS, {"topic": "crash recovery"})
    print(final["article"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
