"""An on-call job that files an incident through an MCP server's tools with FastMCP's client
(``fastmcp.Client``) over stdio, written the way FastMCP's client docs show it, no crashpoint
import.

It starts the server with a ``StdioTransport`` (``--mcp-stdio "COMMAND ARGS"``; FastMCP keeps
the subprocess alive across ``async with client:`` blocks by default), calls ``create_ticket``
then ``page_oncall``, and records each result in its progress file (temp file, fsync, rename)
before the next call; a restart skips the calls already recorded. Each call carries a
``request_id`` that is the same in every run of the job (the tools' idempotency key), so a call
repeated after a failure is answered without acting again.

When the server process dies mid-call the call fails; the job opens the client again (``async
with client:``) and retries, up to three times. FastMCP >= 3.2.0 sees the dead subprocess and
starts a new one; FastMCP <= 3.1.1 reuses the dead session on every reconnect (PrefectHQ/fastmcp
PR #3630), so every retry fails and the job gives up.

    python agent.py --state DIR --mcp-stdio "COMMAND ARGS"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys

from fastmcp import Client
from fastmcp.client.transports import StdioTransport

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


async def file_incident(client: Client, progress: str) -> dict[str, str]:
    done = load(progress)
    for attempt in range(1, TRIES + 1):
        try:
            async with client:
                for tool, args in CALLS:
                    if tool not in done:
                        result = await client.call_tool(
                            tool, {**args, "request_id": f"{JOB}:{tool}"}
                        )
                        done[tool] = result.content[0].text  # type: ignore[union-attr]
                        save(progress, done)
            return done
        except Exception as exc:  # the server went away: connect again and retry
            if attempt == TRIES:
                msg = f"gave up after {TRIES} tries: {type(exc).__name__}: {exc}"
                raise SystemExit(msg) from None
            print(f"try {attempt}: {type(exc).__name__}: {exc}; reconnecting", file=sys.stderr)
            await asyncio.sleep(0.5)
    raise AssertionError("unreachable")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="the job's state folder")
    ap.add_argument("--mcp-stdio", required=True, help="the MCP server's command line")
    a = ap.parse_args()
    os.makedirs(a.state, exist_ok=True)
    argv = shlex.split(a.mcp_stdio)
    client = Client(StdioTransport(command=argv[0], args=argv[1:], env=dict(os.environ)))
    done = asyncio.run(file_incident(client, os.path.join(a.state, "progress.json")))
    for tool, _args in CALLS:
        print(f"{tool}: {done[tool]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
