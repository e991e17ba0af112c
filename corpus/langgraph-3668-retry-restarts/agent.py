"""A LangGraph job that its queue retries: every attempt calls ``graph.invoke(input, config)``.

A job runner (a queue worker, Temporal, Celery, a Kubernetes Job) runs this script for one job
and, if the process dies, runs it again with the same job. The script does what such a retry
does: it invokes the graph with the job's input on the job's thread, and passes the job's id as
the run id (``config["metadata"]["run_id"]``), the same in every attempt, so that LangGraph can
tell a retry of this run from a new run on the thread. The graph is make_plan -> send_email ->
write_report, compiled with SqliteSaver under ``--state``:

* ``send_email`` POSTs the summary to ``{http}/email`` with an Idempotency-Key from the thread
  and the node;
* ``write_report`` drafts the report (0.3 s: a model call's time) and POSTs it to
  ``{http}/reports``, keyed the same way.

Nothing here imports crashpoint: the harness sees the HTTP requests.

    python agent.py --state DIR --http URL [--job job-1042]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
import urllib.request
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

HTTP = ""
THREAD = "thread-1042"


class State(TypedDict, total=False):
    topic: str
    plan: list[str]
    sent: str
    report: str


def _post(path: str, body: dict[str, Any], key: str) -> None:
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        HTTP + path, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310
        r.read()


def plan(state: State) -> State:
    return {"plan": [f"email a summary of {state['topic']}", "write the report"]}


def send_email(state: State) -> State:
    subject = f"Summary: {state['topic']}"
    _post("/email", {"to": "team@example.com", "subject": subject}, f"{THREAD}:send_email")
    return {"sent": subject}


def write_report(state: State) -> State:
    time.sleep(0.3)  # drafting the report (a model call's time)
    text = f"{state['topic']}: {len(state['plan'])} steps, sent {state['sent']!r}"
    _post("/reports", {"report": text}, f"{THREAD}:write_report")
    return {"report": text}


def build() -> Any:
    g = StateGraph(State)
    g.add_node("make_plan", plan)
    g.add_node("send_email", send_email)
    g.add_node("write_report", write_report)
    g.add_edge(START, "make_plan")
    g.add_edge("make_plan", "send_email")
    g.add_edge("send_email", "write_report")
    g.add_edge("write_report", END)
    return g


def main(argv: list[str] | None = None) -> int:
    global HTTP
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the SQLite checkpoints")
    ap.add_argument("--http", required=True, help="base URL of the mail and report services")
    ap.add_argument("--job", default="job-1042", help="the job's id: the run id of every attempt")
    args = ap.parse_args(argv)
    HTTP = args.http.rstrip("/")
    os.makedirs(args.state, exist_ok=True)
    conn = sqlite3.connect(os.path.join(args.state, "graph.sqlite"), check_same_thread=False)
    graph = build().compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": THREAD}, "metadata": {"run_id": args.job}}
    final = graph.invoke({"topic": "crash recovery"}, config)  # the job's input, every attempt
    print(final["report"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
