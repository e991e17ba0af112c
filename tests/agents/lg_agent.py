"""A small LangGraph agent (plan -> search -> send -> report) on SqliteSaver, for fork mode.

Run as ``python lg_agent.py --state DIR``: the graph's checkpoints live in ``DIR/graph.db``
(thread "t1"); a rerun resumes the thread. Each node reports its start to the probe, ``send``
posts one effect whose key is derived from the thread and the node (so a re-run of the node
is not a duplicate), and a node is reported completed once its update was checkpointed
(``durability="sync"``). ``--keyless``: the effect has no key (a re-run is a duplicate).
"""

import json
import os
import sqlite3
import sys
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from crashpoint import probe

THREAD = "t1"
KEYLESS = "--keyless" in sys.argv


class State(TypedDict, total=False):
    topic: str
    plan: str
    found: str
    sent: str
    report: str


def plan(state: State) -> State:
    probe.step_started("plan")
    return {"plan": f"look up {state['topic']}"}


def search(state: State) -> State:
    probe.step_started("search")
    return {"found": " ".join(f"doc-{i}" for i in range(20))}


def send(state: State) -> State:
    probe.step_started("send")
    probe.effect(
        "email",
        {"to": "ops", "text": state["found"][:30]},
        key=None if KEYLESS else f"{THREAD}:send",
    )
    return {"sent": "ok"}


def report(state: State) -> State:
    probe.step_started("report")
    return {"report": f"{state['plan']}: {len(state['found'])} chars, sent {state['sent']}"}


def build(saver: SqliteSaver):
    g = StateGraph(State)
    for name, fn in (("plan", plan), ("search", search), ("send", send), ("report", report)):
        g.add_node(name, fn)
    g.add_edge(START, "plan")
    g.add_edge("plan", "search")
    g.add_edge("search", "send")
    g.add_edge("send", "report")
    g.add_edge("report", END)
    return g.compile(checkpointer=saver)


def main() -> int:
    folder = sys.argv[sys.argv.index("--state") + 1]
    conn = sqlite3.connect(os.path.join(folder, "graph.db"), check_same_thread=False)
    graph = build(SqliteSaver(conn))
    config = {"configurable": {"thread_id": THREAD}}
    started = graph.get_state(config).values
    todo = None if started else {"topic": "crash recovery"}
    for update in graph.stream(todo, config, stream_mode="updates", durability="sync"):
        for node in update:
            probe.step_completed(node)
    final = graph.get_state(config).values
    print(json.dumps({"report": final["report"]}))
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
