"""A support chat on the OpenAI Agents SDK that keeps its conversation in a SQLiteSession and
files the transcript with the ticket when the chat ends.

The worker answers the customer's messages one after the other, streaming each reply
(``Runner.run_streamed(agent, message, session=session)``), with the SDK's opt-in model retries
on (``ModelSettings(retry=ModelRetrySettings(...))``: a dropped connection to the model is
retried by the runner). The session (a SQLite file under ``--state``) is the conversation's
memory: each turn's model request carries it, and when the chat ends the worker files it with
the ticket: POST ``{http}/transcripts`` (an Idempotency-Key from the ticket), each item as
its role and text.

The model is the one ``$OPENAI_BASE_URL`` serves (the Responses API, the SDK's default).
Tracing export is off (no OpenAI account here). Nothing here imports crashpoint.

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

from agents import (
    Agent,
    ModelRetrySettings,
    ModelSettings,
    Runner,
    SQLiteSession,
    retry_policies,
    set_tracing_disabled,
)

TICKET = "ticket-3852"
MESSAGES = (
    "Hi, my order A-3852 arrived without the charger.",
    "Can you send the charger to the same address?",
)

agent = Agent(
    name="Support",
    instructions="You help customers with their orders. Answer in one sentence.",
    model="gpt-4o-mini",
    model_settings=ModelSettings(
        retry=ModelRetrySettings(max_retries=2, policy=retry_policies.network_error())
    ),
)


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _post(url: str, body: dict[str, Any], key: str) -> None:
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        url, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
        r.read()


async def chat(state_dir: str, http: str) -> None:
    session = SQLiteSession(TICKET, os.path.join(state_dir, "conversations.db"))
    try:
        for message in MESSAGES:
            result = Runner.run_streamed(agent, message, session=session)
            async for _event in result.stream_events():
                pass  # a chat UI would render the deltas here
            print(f"> {message}\n{result.final_output}")
        items = await session.get_items()
    finally:
        session.close()
    transcript = [
        {"role": str(item.get("role") or item.get("type")), "text": _text(item)} for item in items
    ]
    body = {"ticket": TICKET, "transcript": transcript}
    _post(f"{http}/transcripts", body, f"transcript:{TICKET}")
    print(f"filed a transcript of {len(transcript)} items with {TICKET}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the SQLite session")
    ap.add_argument("--http", required=True, help="base URL of the ticketing service")
    args = ap.parse_args(argv)
    os.makedirs(args.state, exist_ok=True)
    set_tracing_disabled(True)
    asyncio.run(chat(args.state, args.http.rstrip("/")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
