"""An on-call job that files an incident through an MCP server's tools, with the MCP Python SDK
(``mcp``) over stdio: the ordinary client of the SDK's README (``stdio_client`` and
``ClientSession``), no crashpoint import.

It starts the server (``--mcp-stdio "COMMAND ARGS"``), calls ``create_ticket`` then
``page_oncall``, and records each result in its progress file (temp file, fsync, rename) before
the next call; a restart skips the calls already recorded. Each call carries a ``request_id``
that is the same in every run of the job (the tools' idempotency key), so a call repeated after
a failure is answered without acting again.

When the server process dies mid-call, the SDK fails the pending call with ``McpError``
("Connection closed", mcp >= 1.9.2) and the job starts the server again and retries, up to three
times. mcp <= 1.9.1 never answers the pending call (modelcontextprotocol/python-sdk#332): the job
waits forever.

    python agent.py --state DIR --mcp-stdio "COMMAND ARGS"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError

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


async def file_incident(server: StdioServerParameters, progress: str) -> dict[str, str]:
    done = load(progress)
    for attempt in range(1, TRIES + 1):
        gone: McpError | None = None
        async with (
            stdio_client(server) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for tool, args in CALLS:
                if tool in done:
                    continue
                try:
                    result = await session.call_tool(tool, {**args, "request_id": f"{JOB}:{tool}"})
                except McpError as exc:  # the server went away: start it again
                    gone = exc
                    break
                if result.isError:
                    raise SystemExit(f"{tool} failed: {result.content}")
                done[tool] = result.content[0].text  # type: ignore[union-attr]
                save(progress, done)
        if gone is None:
            return done
        print(f"MCP server gone ({gone.error.message}); try {attempt} of {TRIES}", file=sys.stderr)
    raise SystemExit(f"the MCP server went away {TRIES} times")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="the job's state folder")
    ap.add_argument("--mcp-stdio", required=True, help="the MCP server's command line")
    a = ap.parse_args()
    os.makedirs(a.state, exist_ok=True)
    argv = shlex.split(a.mcp_stdio)
    server = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    done = asyncio.run(file_incident(server, os.path.join(a.state, "progress.json")))
    for tool, _args in CALLS:
        print(f"{tool}: {done[tool]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
