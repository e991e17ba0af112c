"""A fulfilment worker: a Pydantic AI agent made durable with DBOS, its tools on an MCP server.

The worker takes the orders of its batch one after another (``--orders 1042,1043``): each is
one run of the agent (a DBOS workflow with the order's id as its workflow id). The agent's
model is an OpenAI-compatible endpoint (``--llm``); its one tool, ``ship_order``, lives on the
team's MCP server (tools_server.py, over stdio), which books the shipment with the warehouse
(``--http``) under an Idempotency-Key from the order. ``DBOSAgent`` makes the model requests
and the MCP calls (``get_tools``, ``call_tool``) DBOS steps; the system database is SQLite
under ``--state``. Restarted, ``DBOS.launch()`` recovers the run a stopped worker left and the
worker waits for its result, as the Pydantic AI DBOS guide shows.

Nothing here imports crashpoint: the harness sees the model calls and the HTTP requests.

    python agent.py --state DIR --llm URL --http URL [--orders 1042,1043]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from dbos import DBOS, DBOSConfig, SetWorkflowID
from fastmcp.client import Client
from fastmcp.client.transports import PythonStdioTransport
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSAgent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

HERE = os.path.dirname(os.path.abspath(__file__))


def build(llm: str, http: str) -> DBOSAgent[None, str]:
    tools = MCPToolset(
        Client(
            PythonStdioTransport(
                os.path.join(HERE, "tools_server.py"), args=["--http", http], keep_alive=False
            )
        ),
        id="fulfilment",
    )
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=llm, api_key="sk-x"))
    agent = Agent(
        model,
        name="fulfilment",
        instructions="You fulfil orders: ship each order with the ship_order tool.",
        toolsets=[tools],
    )
    return DBOSAgent(agent)  # before DBOS.launch(): recovery must find its workflows


async def fulfil(durable: DBOSAgent[None, str], order: str) -> str:
    workflow_id = f"order-{order}"
    if await DBOS.get_workflow_status_async(workflow_id) is not None:  # started before
        handle = await DBOS.retrieve_workflow_async(workflow_id)
        result = await handle.get_result()
        return str(result.output)
    with SetWorkflowID(workflow_id):
        result = await durable.run(f"Ship order {order}.")
    return result.output


async def work(durable: DBOSAgent[None, str], orders: list[str]) -> None:
    for order in orders:
        print(f"order {order}: {await fulfil(durable, order)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for DBOS's SQLite system database")
    ap.add_argument("--llm", required=True, help="base URL of the OpenAI-compatible model")
    ap.add_argument("--http", required=True, help="base URL of the warehouse service")
    ap.add_argument("--orders", default="1042,1043", help="the batch's orders, in order")
    args = ap.parse_args(argv)
    os.makedirs(args.state, exist_ok=True)
    durable = build(args.llm, args.http.rstrip("/"))
    config: DBOSConfig = {
        "name": "corpus-pydantic-ai-fulfilment",
        "system_database_url": "sqlite:///" + os.path.join(args.state, "dbos.sqlite"),
        "run_admin_server": False,  # no admin port: other services share this machine
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers the PENDING runs a stopped worker left
    try:
        asyncio.run(work(durable, args.orders.split(",")))
    finally:
        DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
