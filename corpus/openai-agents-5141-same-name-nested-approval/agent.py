"""A refunds assistant on the OpenAI Agents SDK whose approval survives a restart of the worker.

An assistant hands a refund to a refunds assistant called as a tool (``Agent.as_tool()``); both
are named "Assistant" (the name a user sees; the SDK does not ask for unique names). The refunds
assistant's ``issue_refund`` tool needs a human's approval (``needs_approval=True``). The worker
does what the SDK's human-in-the-loop guide shows, made durable with ``RunState``'s own
serialization:

* run the assistant on the ticket; when the run pauses on an approval, save
  ``result.to_state().to_string()`` under ``--state`` (a paused run must outlive the worker);
* ask the approval service (POST ``{http}/approvals``, keyed by the ticket and the tool): a 2xx
  answer is an approval; record it (``state.approve(item)``) and save the state again, marked
  decided;
* resume: ``Runner.run(agent, state)``.

If the worker dies (the approval service reset the connection, a deploy, a crash), its queue
runs it again: it finds the saved state, reads it back with ``RunState.from_string()``, asks
for the approvals if they were not recorded yet, and resumes.

``issue_refund`` POSTs to ``{http}/refunds`` with an Idempotency-Key from the order. The model
is the one ``$OPENAI_BASE_URL`` serves (the Responses API, the SDK's default). Tracing export is
off (no OpenAI account here). Nothing here imports crashpoint.

    python agent.py --state DIR --http URL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.request
from typing import Any

from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled

HTTP = ""
TICKET = "ticket-5141"
MODEL = "gpt-4o-mini"
REQUEST = "Customer on ticket-2487 asks: please refund my order A-1001, it arrived broken."


def _post(path: str, body: dict[str, Any], key: str) -> dict[str, Any]:
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        HTTP + path, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
        reply: dict[str, Any] = json.loads(r.read() or b"{}")
        return reply


@function_tool(needs_approval=True)
def issue_refund(order_id: str, amount_cents: int) -> str:
    """Refund an order to the customer's card."""
    _post("/refunds", {"order": order_id, "amount_cents": amount_cents}, f"refund:{order_id}")
    return f"refunded {amount_cents} cents on order {order_id}"


refunds = Agent(
    name="Assistant",
    instructions="You issue refunds with issue_refund, then confirm in one sentence.",
    model=MODEL,
    tools=[issue_refund],
)
assistant = Agent(
    name="Assistant",
    instructions="You answer customers. Hand refunds to the refunds desk.",
    model=MODEL,
    tools=[
        refunds.as_tool(
            tool_name="refunds_desk", tool_description="Ask the refunds desk to refund an order."
        )
    ],
)


def _save(path: str, state: Any, decided: bool) -> None:
    """Write the paused run and whether its approvals are recorded, atomically."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"decided": decided, "state": state.to_string()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _approved(item: Any) -> bool:
    """Ask the approval service about one pending tool call: a 2xx answer approves it."""
    body = {"ticket": TICKET, "tool": item.name, "arguments": item.arguments}
    _post("/approvals", body, f"approval:{TICKET}:{item.name}")
    return True


def _decide(state: Any, interruptions: list[Any]) -> None:
    for item in interruptions:
        if _approved(item):
            state.approve(item)


async def run(state_dir: str) -> str:
    path = os.path.join(state_dir, "paused-run.json")
    if os.path.exists(path):  # a worker before us paused this run: go on from its state
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        state = await RunState.from_string(assistant, saved["state"])
        if not saved["decided"]:
            _decide(state, state.get_interruptions())
            _save(path, state, decided=True)
        result = await Runner.run(assistant, state)
    else:
        result = await Runner.run(assistant, REQUEST)
    while result.interruptions:  # paused on an approval: persist, ask, record, resume
        state = result.to_state()
        _save(path, state, decided=False)
        _decide(state, result.interruptions)
        _save(path, state, decided=True)
        result = await Runner.run(assistant, state)
    return str(result.final_output)


def main(argv: list[str] | None = None) -> int:
    global HTTP
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the paused run's state")
    ap.add_argument("--http", required=True, help="base URL of the approval and refund services")
    args = ap.parse_args(argv)
    HTTP = args.http.rstrip("/")
    os.makedirs(args.state, exist_ok=True)
    set_tracing_disabled(True)
    print(asyncio.run(run(args.state)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
