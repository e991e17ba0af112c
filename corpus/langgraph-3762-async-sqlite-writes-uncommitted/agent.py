"""An asyncio LangGraph job with two branches in one superstep, resumed from AsyncSqliteSaver.

make_plan fans out to two nodes that run in the same superstep: ``notify`` composes a
notification (0.1 s) and POSTs it to ``{http}/notify``; ``write_report`` drafts for 0.3 s (a
model call's time) and POSTs the report to ``{http}/reports``. Both POSTs carry an
Idempotency-Key from the thread and the node. The graph runs with ``ainvoke`` and the
asynchronous SQLite checkpointer (``AsyncSqliteSaver.from_conn_string``) under ``--state``; a
restarted process resumes the thread from its last checkpoint (``ainvoke(None, config)`` once
the thread has one), as a job runner does after a crash. Nothing here imports crashpoint: the
harness sees the HTTP requests.

    python agent.py --state DIR --http URL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import sys
import urllib.request
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

HTTP = ""
THREAD = "thread-3762"


class State(TypedDict, total=False):
    topic: str
    plan: str
    done: Annotated[list[str], operator.add]  # what each branch did (fan-out: a reducer)
    report: str


def _post(path: str, body: dict[str, Any], key: str) -> None:
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        HTTP + path, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310
        r.read()


async def make_plan(state: State) -> State:
    return {"plan": f"notify the team, then report on {state['topic']}"}


async def notify(state: State) -> State:
    await asyncio.sleep(0.1)  # composing the notification
    body = {"to": "team@example.com", "text": state["plan"]}
    await asyncio.to_thread(_post, "/notify", body, f"{THREAD}:notify")
    return {"done": ["notified team@example.com"]}


async def write_report(state: State) -> State:
    await asyncio.sleep(0.3)  # drafting the report (a model call's time)
    text = f"report on {state['topic']}"
    await asyncio.to_thread(_post, "/reports", {"report": text}, f"{THREAD}:write_report")
    return {"done": ["reported"], "report": text}


def build() -> Any:
    g = StateGraph(State)
    g.add_node("make_plan", make_plan)
    g.add_node("notify", notify)
    g.add_node("write_report", write_report)
    g.add_edge(START, "make_plan")
    g.add_edge("make_plan", "notify")  # notify and write_report: one superstep
    g.add_edge("make_plan", "write_report")
    g.add_edge("notify", END)
    g.add_edge("write_report", END)
    return g


async def run(state_dir: str) -> str:
    path = os.path.join(state_dir, "graph.sqlite")
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        graph = build().compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": THREAD}}
        started = await saver.aget_tuple(config) is not None  # a restart resumes the thread
        final = await graph.ainvoke(None if started else {"topic": "crash recovery"}, config)
    return f"{final['report']}; {', '.join(sorted(final['done']))}"


def main(argv: list[str] | None = None) -> int:
    global HTTP
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the SQLite checkpoints")
    ap.add_argument(
        "--http", required=True, help="base URL of the notification and report services"
    )
    args = ap.parse_args(argv)
    HTTP = args.http.rstrip("/")
    os.makedirs(args.state, exist_ok=True)
    print(asyncio.run(run(args.state)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
