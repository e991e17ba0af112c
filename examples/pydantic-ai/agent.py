"""A billing assistant on Pydantic AI, crash-tested through crashpoint's hooks.

The customer asks for an invoice; the model calls the ``send_invoice`` tool, which POSTs the
invoice to ``--webhook``; the model then confirms. The agent keeps its message history in a
JSON file under ``--state``, written after every node of ``agent.iter`` (to a temporary file,
fsync'ed, then renamed), so a restarted process carries on from the history it finds.

The crashpoint lines: ``with instrument(agent):`` wraps the model and the tools for the run,
and ``saved(messages)`` after each write says what that write made durable (see
:mod:`crashpoint.adapters.pydantic_ai`); outside the harness both are no-ops.

As written, the tool posts without an Idempotency-Key: killed after the POST and before the
history holding the tool's return was written, the resumed run asks the model again, calls the
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

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessagesTypeAdapter

from crashpoint.adapters.pydantic_ai import instrument, saved

ASK = "Invoice acme for 4200 cents, please."
WEBHOOK = ""
FIXED = False

agent = Agent(
    "openai:gpt-4o-mini",
    instructions="You send invoices with the send_invoice tool, then confirm in one sentence.",
)


@agent.tool
def send_invoice(ctx: RunContext[Any], customer: str, cents: int) -> str:
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


def load(path: str) -> list[Any]:
    try:
        with open(path, "rb") as f:
            return list(ModelMessagesTypeAdapter.validate_json(f.read()))
    except FileNotFoundError:
        return []


def save(path: str, messages: list[Any]) -> None:
    """Write the history durably: a temporary file, fsync'ed, renamed over the old one."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(ModelMessagesTypeAdapter.dump_json(messages))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def final_text(messages: list[Any]) -> str | None:
    """The answer, if the history ends with one (a response with text and no tool call)."""
    last = messages[-1] if messages else None
    if last is None or last.kind != "response":
        return None
    if any(p.part_kind == "tool-call" for p in last.parts):
        return None
    return "".join(p.content for p in last.parts if p.part_kind == "text") or None


async def chat(state_dir: str) -> str:
    path = os.path.join(state_dir, "history.json")
    history = load(path)
    answer = final_text(history)
    if answer is not None:
        return answer  # finished before a crash: answer again
    with instrument(agent):
        # an unfinished chat goes on from its history (the question is already in it)
        prompt = None if history else ASK
        kept = len(history)
        async with agent.iter(prompt, message_history=history or None) as run:
            async for _node in run:  # each node: the one before it has run
                messages = run.all_messages()
                if len(messages) > kept:  # new messages: write them before going on
                    save(path, messages)
                    saved(messages)  # crashpoint: they are durable now
                    kept = len(messages)
        assert run.result is not None
        return str(run.result.output)


def main(argv: list[str] | None = None) -> int:
    global WEBHOOK, FIXED
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the message history")
    ap.add_argument("--webhook", required=True, help="where invoices are POSTed")
    ap.add_argument("--fixed", action="store_true", help="send the tool call id as the key")
    args = ap.parse_args(argv)
    WEBHOOK, FIXED = args.webhook, args.fixed
    os.makedirs(args.state, exist_ok=True)
    print(asyncio.run(chat(args.state)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
