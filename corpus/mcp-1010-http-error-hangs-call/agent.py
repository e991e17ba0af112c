"""An on-call job that files an incident through a remote MCP server's tools, with the MCP
Python SDK (``mcp``) over streamable HTTP: the ordinary client of the SDK's README
(``streamable_http_client`` and ``ClientSession``), no crashpoint import.

It connects to the server (``--mcp URL``), calls ``create_ticket`` then ``page_oncall``, and
records each result in its progress file (temp file, fsync, rename) before the next call; a
restart skips the calls already recorded. Each call carries a ``request_id`` that is the same in
every run of the job (the tools' idempotency key), so a call repeated after a failure is
answered without acting again.

A call the server answers with an HTTP error (a 503 while it restarts, a 502 from a proxy) is
retried after a second, up to three times: the SDK raises it as ``MCPError`` ("Server returned
an error response", mcp >= 2.0). mcp 1.x raises ``httpx.HTTPStatusError`` inside the
transport's background task instead (modelcontextprotocol/python-sdk#1010, #3091): the call
never gets an answer it can retry; on 1.30.0 the exception tears the transport's task group
down and the job dies of it. A failure that ends the job is written to stderr in one line (the
job's log) and the job exits 1.

    python agent.py --state DIR --mcp URL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

try:
    from mcp import MCPError  # mcp >= 2.0
except ImportError:  # mcp 1.x
    from mcp.shared.exceptions import McpError as MCPError

JOB = "inc-1042"
CALLS = [
    ("create_ticket", {"title": "db-1 disk full", "severity": "high"}),
    ("page_oncall", {"team": "storage", "message": "db-1 disk full"}),
]
TRIES = 3


def load(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            done: dict[str, str] = json.load(f)
            return done
    except FileNotFoundError:
        return {}


def save(path: str, done: dict[str, str]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(done, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


async def call(session: ClientSession, tool: str, args: dict[str, str]) -> str:
    for attempt in range(1, TRIES + 1):
        try:
            result = await session.call_tool(tool, {**args, "request_id": f"{JOB}:{tool}"})
        except MCPError as exc:  # the server answered with an error: retry
            if attempt == TRIES:
                raise
            print(f"{tool}: {exc}; retrying ({attempt} of {TRIES})", file=sys.stderr)
            await asyncio.sleep(1)
            continue
        if getattr(result, "is_error", None) or getattr(result, "isError", None):  # 2.x, 1.x
            raise SystemExit(f"{tool} failed: {result.content}")
        return result.content[0].text  # type: ignore[union-attr]
    raise AssertionError("unreachable")


async def file_incident(url: str, progress: str) -> dict[str, str]:
    done = load(progress)
    async with (
        streamable_http_client(url) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        for tool, args in CALLS:
            if tool not in done:
                done[tool] = await call(session, tool, args)
                save(progress, done)
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="the job's state folder")
    ap.add_argument("--mcp", required=True, help="the MCP server's streamable-HTTP URL")
    a = ap.parse_args()
    os.makedirs(a.state, exist_ok=True)
    try:
        done = asyncio.run(file_incident(a.mcp, os.path.join(a.state, "progress.json")))
    except Exception as exc:  # one line for the job's log
        print(f"incident job failed: {exc!r}", file=sys.stderr)
        return 1
    for tool, _args in CALLS:
        print(f"{tool}: {done[tool]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
