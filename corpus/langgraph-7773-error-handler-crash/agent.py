"""A LangGraph order job whose charge step has an error handler, resumed from SqliteSaver.

The graph is reserve -> charge -> ship (or, when charge fails, its handler -> notify),
compiled with SqliteSaver under ``--state``:

* ``reserve`` POSTs the order to ``{http}/reservations`` (holds the stock);
* ``charge`` scores the order (0.3 s: a model call's time) and POSTs the payment to
  ``{http}/charges``; when the payment service answers that the card was declined, it raises
  ``PaymentDeclined`` (the run's scenario scripts the answer);
* ``charge``'s error handler (``add_node(..., error_handler=...)``) compensates, the Saga
  pattern: it decides what to do (0.3 s: a model call's time), releases the stock with a POST
  to ``{http}/releases`` and routes to ``notify`` (``Command(goto="notify")``);
* ``notify`` drafts a note to the customer (0.3 s) and POSTs it to ``{http}/email``;
* ``ship`` POSTs to ``{http}/shipments`` (only a paid order gets there).

Every POST carries an Idempotency-Key from the thread and the node. A restarted process resumes
the thread from its last checkpoint (``invoke(None, config)`` once the thread has one), as a job
runner does after a crash. Nothing here imports crashpoint: the harness sees the HTTP requests.

    python agent.py --state DIR --http URL
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
from langgraph.errors import NodeError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

HTTP = ""
THREAD = "order-7773"


class PaymentDeclined(Exception):
    pass


class State(TypedDict, total=False):
    order: str
    amount: int
    reservation: str
    status: str


def _post(path: str, body: dict[str, Any], key: str) -> dict[str, Any]:
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        HTTP + path, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310
        reply: dict[str, Any] = json.loads(r.read() or b"{}")
    return reply


def reserve(state: State) -> State:
    _post("/reservations", {"order": state["order"], "sku": "A-1"}, f"{THREAD}:reserve")
    return {"reservation": f"{state['order']}:A-1"}


def charge(state: State) -> State:
    time.sleep(0.3)  # scoring the order for fraud (a model call's time)
    body = {"order": state["order"], "amount": state["amount"]}
    reply = _post("/charges", body, f"{THREAD}:charge")
    if reply.get("status") == "declined":
        raise PaymentDeclined(f"card declined: {reply.get('decline_code', 'unknown')}")
    return {"status": "paid"}


def on_charge_error(state: State, error: NodeError) -> Command[Any]:
    time.sleep(0.3)  # deciding how to compensate (a model call's time)
    _post("/releases", {"reservation": state["reservation"]}, f"{THREAD}:release")
    return Command(update={"status": f"{error.node} failed, stock released"}, goto="notify")


def notify(state: State) -> State:
    time.sleep(0.3)  # drafting the note (a model call's time)
    note = f"Your payment for order {state['order']} did not go through; nothing was charged."
    _post("/email", {"to": "customer@example.com", "text": note}, f"{THREAD}:notify")
    return {"status": state["status"] + ", customer told"}


def ship(state: State) -> State:
    _post("/shipments", {"order": state["order"]}, f"{THREAD}:ship")
    return {"status": "shipped"}


def build() -> Any:
    g = StateGraph(State)
    g.add_node("reserve", reserve)
    g.add_node("charge", charge, error_handler=on_charge_error)
    g.add_node("ship", ship)
    g.add_node("notify", notify)
    g.add_edge(START, "reserve")
    g.add_edge("reserve", "charge")
    g.add_edge("charge", "ship")
    g.add_edge("ship", END)
    g.add_edge("notify", END)
    return g


def main(argv: list[str] | None = None) -> int:
    global HTTP
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the SQLite checkpoints")
    ap.add_argument("--http", required=True, help="base URL of the order services")
    args = ap.parse_args(argv)
    HTTP = args.http.rstrip("/")
    os.makedirs(args.state, exist_ok=True)
    conn = sqlite3.connect(os.path.join(args.state, "graph.sqlite"), check_same_thread=False)
    saver = SqliteSaver(conn)
    graph = build().compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": THREAD}}
    started = saver.get_tuple(config) is not None  # a restart resumes the thread
    final = graph.invoke(None if started else {"order": "o-7773", "amount": 4200}, config)
    print(f"{final['order']}: {final['status']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
