"""An order pipeline on LangGraph: fetch the order, charge it, notify the customer, report.

A straight StateGraph of four nodes. ``charge`` POSTs to the payment service under ``--http``
with an Idempotency-Key from the thread id and the node; ``notify`` sends its message through
``crashpoint.probe.effect`` keyed the same way. The whole run holds a lock on the state folder,
so a second process resuming the same thread waits for the first.

Planted bugs (``--bug``), one at a time:

* ``keyless``: ``charge`` posts without an Idempotency-Key (a re-run node charges twice);
* ``time_key``: the key holds the time, so a re-run sends a fresh key (charged twice);
* ``secret_in_state``: the request headers, API key included, are kept in the graph state,
  which the checkpointer writes to disk;
* ``no_lock``: no lock, so two processes resuming one thread run it at the same time.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from lgkit import get, parse, post, run

from crashpoint import probe

BUGS = ("keyless", "time_key", "secret_in_state", "no_lock")
ARGS: Any = None


class State(TypedDict, total=False):
    order: str
    amount: int
    headers: dict[str, str]
    charge_id: str
    notified: bool
    report: str


def fetch(state: State) -> State:
    if ARGS.http:
        get(f"{ARGS.http}/orders/{state['order']}")
    out: State = {"amount": 4200}
    if ARGS.bug == "secret_in_state":  # convenient for later nodes; written to disk with it
        out["headers"] = {"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"}
    return out


def charge(state: State) -> State:
    key: str | None = f"{ARGS.thread}:charge"
    if ARGS.bug == "keyless":
        key = None
    elif ARGS.bug == "time_key":
        key = f"{ARGS.thread}:charge:{time.time_ns()}"
    body = {"order": state["order"], "amount": state["amount"]}
    if ARGS.http:
        post(f"{ARGS.http}/charges", body, key)
    return {"charge_id": f"ch-{state['order']}"}


def notify(state: State) -> State:
    probe.effect(
        "notify_customer",
        {"order": state["order"], "charge": state["charge_id"]},
        key=f"{ARGS.thread}:notify",
    )
    return {"notified": True}


def report(state: State) -> State:
    return {"report": f"order {state['order']}: charged {state['amount']}, notified"}


def build() -> StateGraph[State]:
    g = StateGraph(State)
    for name, fn in (("fetch", fetch), ("charge", charge), ("notify", notify), ("report", report)):
        g.add_node(name, fn)
    g.add_edge(START, "fetch")
    g.add_edge("fetch", "charge")
    g.add_edge("charge", "notify")
    g.add_edge("notify", "report")
    g.add_edge("report", END)
    return g


def main() -> int:
    global ARGS
    ARGS = parse(__doc__ or "", BUGS)
    final = run(build(), ARGS, {"order": "A-1042"}, lock=ARGS.bug != "no_lock")
    print(final["report"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
