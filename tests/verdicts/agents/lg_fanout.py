"""Parallel research on LangGraph: ``Send`` fans out one ``worker`` per source, then
``reduce`` merges their findings and publishes them.

``plan`` returns three sources; a conditional edge sends each to ``worker`` (three parallel
tasks of one node name). Each worker POSTs its finding to ``{http}/findings`` with an
Idempotency-Key from the thread id, the node and the source; the results meet in a list with an
``operator.add`` reducer; ``reduce`` publishes the summary with ``probe.effect`` (keyed).

Planted bugs (``--bug``): ``keyless`` (the workers post without a key), ``random_key`` (a fresh
uuid4 as the key, so a re-run worker posts again under a new key).
"""

from __future__ import annotations

import operator
import sys
import uuid
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from lgkit import parse, post, run

from crashpoint import probe

BUGS = ("keyless", "random_key")
ARGS: Any = None


class State(TypedDict, total=False):
    topic: str
    sources: list[str]
    findings: Annotated[list[str], operator.add]
    summary: str


class Task(TypedDict):
    topic: str
    source: str


def plan(state: State) -> State:
    return {"sources": ["arxiv", "blogs", "issues"]}


def fan_out(state: State) -> list[Send]:
    return [Send("worker", {"topic": state["topic"], "source": s}) for s in state["sources"]]


def worker(task: Task) -> State:
    finding = f"{task['source']}: 3 notes on {task['topic']}"
    key: str | None = f"{ARGS.thread}:worker:{task['source']}"
    if ARGS.bug == "keyless":
        key = None
    elif ARGS.bug == "random_key":
        key = str(uuid.uuid4())
    if ARGS.http:
        post(f"{ARGS.http}/findings", {"finding": finding}, key)
    return {"findings": [finding]}


def reduce(state: State) -> State:
    summary = " | ".join(sorted(state["findings"]))
    probe.effect("publish", {"summary": summary}, key=f"{ARGS.thread}:publish")
    return {"summary": summary}


def build() -> StateGraph[State]:
    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("worker", worker)
    g.add_node("reduce", reduce)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan_out, ["worker"])
    g.add_edge("worker", "reduce")
    g.add_edge("reduce", END)
    return g


def main() -> int:
    global ARGS
    ARGS = parse(__doc__ or "", BUGS)
    final = run(build(), ARGS, {"topic": "crash recovery"})
    print(final["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
