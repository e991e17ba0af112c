"""A billing assistant on the OpenAI Agents SDK, crash-tested through crashpoint's hooks.

The customer asks for an invoice; the model calls the ``send_invoice`` tool, which POSTs the
invoice to ``--webhook``; the model then confirms. The conversation lives in a
``SQLiteSession`` under ``--state``, so a restarted process carries on from what the session
holds (a finished chat prints its answer again; an unfinished one is run on from its history).

The one crashpoint line: ``instrument(session)`` returns the session wrapped and the run hooks
(see :mod:`crashpoint.adapters.openai_agents`); outside the harness both are no-ops.

As written, the tool posts without an Idempotency-Key: killed after the POST and before the
SDK saved the tool's result in the session, the resumed run asks the model again, calls the
tool again and the invoice is sent twice. ``--fixed`` sends the tool call's id as the key (the
model's reply, and so the id, is the same when the run is resumed), and the receiver
deduplicates the second POST.

    python agent.py --state DIR --webhook URL [--fixed]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.request
from typing import Any

from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.tool_context import ToolContext

from crashpoint.adapters.openai_agents import instrument

ASK = "Invoice acme for 4200 cents, please."
WEBHOOK = ""
FIXED = False


@function_tool
def send_invoice(ctx: ToolContext[Any], customer: str, cents: int) -> str:
    """Send an invoice to a customer."""
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        WEBHOOK,
        data=json.dumps({"customer": customer, "cents": cents}, sort_keys=True).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    if FIXED:
        req.add_header("Idempotency-Key", f"invoice:{ctx.tool_call_id}")
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
        r.read()
    return f"invoice for {cents} cents sent to {customer}"


agent = Agent(
    name="billing",
    instructions="You send invoices with the send_invoice tool, then confirm in one sentence.",
    model="gpt-4o-mini",
    tools=[send_invoice],
)


async def chat(state_dir: str) -> str:
    session, hooks = instrument(SQLiteSession("billing-1", os.path.join(state_dir, "chat.db")))
    history = await session.get_items()
    last = history[-1] if history else {}
    if last.get("role") == "assistant" and last.get("type", "message") == "message":
        return str(last["content"][0]["text"])  # finished before a crash: answer again
    # an unfinished chat goes on from its history (the question is already in it)
    result = await Runner.run(agent, [] if history else ASK, session=session, hooks=hooks)
    return str(result.final_output)


def main(argv: list[str] | None = None) -> int:
    global WEBHOOK, FIXED
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the SQLite session")
    ap.add_argument("--webhook", required=True, help="where invoices are POSTed")
    ap.add_argument("--fixed", action="store_true", help="send the tool call id as the key")
    args = ap.parse_args(argv)
    WEBHOOK, FIXED = args.webhook, args.fixed
    os.makedirs(args.state, exist_ok=True)
    set_tracing_disabled(True)  # no tracing export (no OpenAI account here)
    print(asyncio.run(chat(args.state)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
