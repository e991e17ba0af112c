"""A LangGraph agent written the way LangGraph agents are written: a StateGraph of four nodes
(plan -> search -> send_email -> report) compiled with a checkpointer (SqliteSaver), resumed
on restart from its thread's last checkpoint. Deterministic and offline: no model is called.

* ``search`` calls a LangChain tool that GETs ``{http}/search`` (a read: a boundary, no effect);
* ``send_email`` POSTs the summary to ``{http}/email`` (the HTTP stand-in judges it);
* ``report`` publishes the report through ``crashpoint.probe.effect`` (the probe judges it).

One line hooks the graph to the harness: ``instrument(...)`` from
``crashpoint.adapters.langgraph`` reports each node's start, each tool call, and each node's
completion once its checkpoint write has returned (outside the harness it does nothing).

As written (no ``--fixed``) it has the bug LangGraph users meet: a node is re-executed as a
whole after a crash that came after its side effect and before its checkpoint, and
``send_email`` posts without an ``Idempotency-Key``, so the email goes out twice. ``--fixed``
sends a key derived from the thread id and the node name (and keys the report the same way),
and the services deduplicate the re-sent request.

    python agent.py --state DIR --http URL [--thread ID] [--fixed]
                    [--saver sqlite|crashpoint] [--durability async|sync|exit]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import urllib.parse
import urllib.request
from typing import Any, TypedDict

from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Durability

from crashpoint import probe
from crashpoint.adapters.langgraph import instrument

TOPIC = "crash recovery for agents"


class State(TypedDict, total=False):
    topic: str
    plan: list[str]
    results: list[str]
    sent: str
    report: str


class Options:
    http: str = ""
    thread: str = "thread-1"
    fixed: bool = False


OPT = Options()


def _request(method: str, url: str, body: Any = None, key: str | None = None) -> Any:
    data = None if body is None else json.dumps(body, sort_keys=True).encode()
    req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (http base)
    req.add_header("Content-Type", "application/json")
    if key is not None:
        req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 (http base)
        raw = r.read()
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return raw.decode("utf-8", "replace")


@tool
def web_search(query: str) -> str:
    """Search the web (here: the HTTP stand-in) for ``query``."""
    if OPT.http:
        _request("GET", f"{OPT.http}/search?" + urllib.parse.urlencode({"q": query}))
    return f"3 articles on {query}"


def plan(state: State) -> State:
    return {"plan": [f"search {state['topic']}", "email the summary", "write the report"]}


def search(state: State) -> State:
    return {"results": [web_search.invoke({"query": state["topic"]})]}


def send_email(state: State) -> State:
    body = {
        "to": "team@example.com",
        "subject": f"Findings: {state['topic']}",
        "text": "; ".join(state["results"]),
    }
    key = f"{OPT.thread}:send_email" if OPT.fixed else None  # the fix: a stable key
    if OPT.http:
        _request("POST", f"{OPT.http}/email", body, key)
    return {"sent": body["subject"]}


def report(state: State) -> State:
    text = f"{state['topic']}: {len(state['plan'])} steps, sent {state['sent']!r}"
    probe.effect(
        "publish_report", {"report": text}, key=f"{OPT.thread}:report" if OPT.fixed else None
    )
    return {"report": text}


def build() -> StateGraph[State]:
    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("search", search)
    g.add_node("send_email", send_email)
    g.add_node("report", report)
    g.add_edge(START, "plan")
    g.add_edge("plan", "search")
    g.add_edge("search", "send_email")
    g.add_edge("send_email", "report")
    g.add_edge("report", END)
    return g


def open_saver(kind: str, state_dir: str) -> BaseCheckpointSaver[Any]:
    if kind == "crashpoint":
        from crashpoint.adapters.langgraph_saver import CrashpointSaver

        return CrashpointSaver(os.path.join(state_dir, "checkpoints"))  # type: ignore[no-any-return]
    conn = sqlite3.connect(os.path.join(state_dir, "graph.sqlite"), check_same_thread=False)
    return SqliteSaver(conn)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the checkpointer's files")
    ap.add_argument("--http", default="", help="base URL of the search and email services")
    ap.add_argument(
        "--thread",
        default="",
        help="the LangGraph thread id (default: $CRASHPOINT_RUN_ID or thread-1)",
    )
    ap.add_argument("--fixed", action="store_true", help="send stable idempotency keys")
    ap.add_argument("--saver", choices=("sqlite", "crashpoint"), default="sqlite")
    ap.add_argument("--durability", choices=("async", "sync", "exit"), default="async")
    args = ap.parse_args(argv)
    OPT.http = args.http.rstrip("/")
    OPT.thread = args.thread or os.environ.get("CRASHPOINT_RUN_ID") or "thread-1"
    OPT.fixed = args.fixed
    durability: Durability = args.durability
    if not os.path.isdir(args.state):  # (the harness makes it)
        os.makedirs(args.state)
    saver = open_saver(args.saver, args.state)
    graph = instrument(build().compile(checkpointer=saver))  # the one line for the harness
    config: Any = {"configurable": {"thread_id": OPT.thread}}
    started = saver.get_tuple(config) is not None
    # a thread with a checkpoint resumes from its last one (a finished one runs nothing)
    final = graph.invoke(None if started else {"topic": TOPIC}, config, durability=durability)
    print(final["report"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
