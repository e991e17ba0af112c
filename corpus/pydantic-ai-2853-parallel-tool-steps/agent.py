"""A trip-booking agent made durable with DBOS, its two tools DBOS steps, as the guide advises.

One run of the agent (a DBOS workflow with the trip's id as its workflow id) books a trip: the
model (an OpenAI-compatible endpoint at ``OPENAI_BASE_URL``) asks for ``book_hotel`` and
``book_car`` in one reply, and Pydantic AI runs the two tool calls at once (its default). Each
tool does I/O, so each is a ``@DBOS.step()``, as the Pydantic AI DBOS guide says to do: it posts
the booking to the travel service (``--http``) with an Idempotency-Key from the workflow id and
the tool. The system database is SQLite under ``--state``. Restarted, ``DBOS.launch()`` recovers
the run a stopped process left, and the script waits for its result.

Nothing here imports crashpoint: the harness sees the model calls and the HTTP requests.

    OPENAI_BASE_URL=URL python agent.py --state DIR --http URL [--trip trip-1042]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.request
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

HTTP = ""  # the travel service, from --http
LLM = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")


def _post(path: str, body: dict[str, Any], key: str) -> None:
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        HTTP + path, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310
        r.read()


model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=LLM, api_key="sk-x"))
agent = Agent(model, name="concierge", instructions="Book the trip: the hotel and the car.")


@agent.tool_plain
@DBOS.step()
async def book_hotel(city: str) -> str:
    """Book a hotel in the city."""
    await asyncio.to_thread(_post, "/hotels", {"city": city}, f"{DBOS.workflow_id}:book_hotel")
    return f"hotel booked in {city}"


@agent.tool_plain
@DBOS.step()
async def book_car(city: str) -> str:
    """Book a rental car in the city."""
    await asyncio.to_thread(_post, "/cars", {"city": city}, f"{DBOS.workflow_id}:book_car")
    return f"car booked in {city}"


durable = DBOSAgent(agent)  # before DBOS.launch(): recovery must find its workflows


async def book(trip: str) -> str:
    if await DBOS.get_workflow_status_async(trip) is not None:  # started before: its result
        handle = await DBOS.retrieve_workflow_async(trip)
        return str((await handle.get_result()).output)
    with SetWorkflowID(trip):
        result = await durable.run("Book a trip to Lisbon.")
    return str(result.output)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for DBOS's SQLite system database")
    ap.add_argument("--http", required=True, help="base URL of the travel service")
    ap.add_argument("--trip", default="trip-1042", help="the trip's id (the workflow id)")
    args = ap.parse_args(argv)
    global HTTP
    HTTP = args.http.rstrip("/")
    os.makedirs(args.state, exist_ok=True)
    config: DBOSConfig = {
        "name": "corpus-pydantic-ai-concierge",
        "system_database_url": "sqlite:///" + os.path.join(args.state, "dbos.sqlite"),
        "run_admin_server": False,  # no admin port: other services share this machine
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers the PENDING run a stopped process left
    try:
        print(asyncio.run(book(args.trip)))
    finally:
        DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
