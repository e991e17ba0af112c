"""An agent that opens a ticket through an MCP tool server with the ``mcp`` client SDK, the
ordinary way: no crashpoint import.

    python mcp_tickets.py STATE_DIR --http URL | --stdio "COMMAND LINE" [--keyless]
                                    [--timeout SECONDS]

It connects to the server (streamable HTTP at URL, or a stdio server started from the command
line, split with shlex), lists its tools, calls ``create_ticket`` with a title and a
``request_id`` that is the same in every run of the job (the tool's idempotency key), then
saves that the ticket is open in STATE_DIR (temp file, fsync, rename) and prints the reply. A
run that finds it saved prints the reply and stops.

``--keyless`` (the bug): no ``request_id``. A crash after the server opened the ticket and
before the agent saved it makes the next run open a second one. A reply that does not come
within ``--timeout`` seconds (10) fails the run (exit 1): the harness restarts it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from typing import Any

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def save(state: str, data: dict[str, Any]) -> None:
    tmp = os.path.join(state, "ticket.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(state, "ticket.json"))


async def open_ticket(streams: Any, keyless: bool, timeout: float) -> str:
    async with ClientSession(streams[0], streams[1], read_timeout_seconds=timeout) as session:
        await session.initialize()
        tools = await session.list_tools()
        assert "create_ticket" in [t.name for t in tools.tools], tools
        args = {"title": "disk full on db-1"}
        if not keyless:
            args["request_id"] = "job-42:create_ticket"
        result = await session.call_tool("create_ticket", args)
        if result.is_error:
            raise RuntimeError(f"create_ticket failed: {result.content}")
        return str(result.content[0].text)  # type: ignore[union-attr]


async def run(a: argparse.Namespace) -> str:
    if a.http:
        async with streamable_http_client(a.http) as streams:
            return await open_ticket(streams, a.keyless, a.timeout)
    cmd = shlex.split(a.stdio)
    async with stdio_client(StdioServerParameters(command=cmd[0], args=cmd[1:])) as streams:
        return await open_ticket(streams, a.keyless, a.timeout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("state")
    ap.add_argument("--http", default="")
    ap.add_argument("--stdio", default="")
    ap.add_argument("--keyless", action="store_true")
    ap.add_argument("--timeout", type=float, default=10.0)  # seconds to wait for a reply
    a = ap.parse_args()
    os.makedirs(a.state, exist_ok=True)
    saved = os.path.join(a.state, "ticket.json")
    if os.path.exists(saved):
        with open(saved, encoding="utf-8") as f:
            print(json.load(f)["reply"])
        return 0
    reply = asyncio.run(run(a))
    save(a.state, {"reply": reply})
    print(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
