"""The MCP stand-in on stdio: a relay an agent's MCP client starts as its server process.

    python -I _mcp_stdio.py URL          (what ``{mcp_stdio}`` expands to)

Each newline-delimited JSON-RPC message read on stdin is POSTed to ``URL`` (the stand-in's
streamable-HTTP endpoint, ``{mcp}``), and each message of the answer (JSON, or server-sent
events) is written to stdout, one line each; the ``Mcp-Session-Id`` of ``initialize`` is sent
with every later message. So the stdio transport is served by the same stand-in, tools, ledger
and faults as the HTTP one. It runs inside the agent's process tree (the ledger serves it as
the trial's own; ``CRASHPOINT_TOKEN`` is sent when the environment has it) and is killed with
the agent; it exits as soon as its stdin ends (the client closed it, or died), even while a
request is held.

A dropped connection (the agent killed at the call, a planned ``reset`` or ``timeout``) ends
the relay, as a crashed server process ends its pipe: the client sees its server go away. An
HTTP error without a JSON-RPC body (the front's own 403 or 404) becomes a JSON-RPC error for
the request. Standard library only, run by its path with ``-I``: it imports nothing of
crashpoint.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import sys
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

SESSION = "Mcp-Session-Id"


def _messages(body: bytes, ctype: str) -> list[Any]:
    if not body.strip():
        return []
    if ctype.startswith("text/event-stream"):
        out = []
        for event in body.decode("utf-8", "replace").split("\n\n"):
            data = [ln[5:].lstrip() for ln in event.splitlines() if ln.startswith("data:")]
            if data:
                out.append(json.loads("\n".join(data)))
        return out
    return [json.loads(body)]


def _lines_until_eof(stdin: Any) -> Iterator[bytes]:
    """The lines of ``stdin``, read by a thread of their own: at end of input (the client
    closed its pipe, or died) the relay exits at once, even while a request is held."""
    lines: queue.Queue[bytes] = queue.Queue()

    def read() -> None:
        for line in stdin:
            lines.put(line)
        sys.stdout.flush()
        os._exit(0)

    threading.Thread(target=read, daemon=True).start()
    while True:
        yield lines.get()


def relay(url: str, stdin: Any = None, stdout: Any = None) -> int:
    """Relay ``stdin`` (lines) to ``url`` and the answers to ``stdout``, until the input ends
    (given streams: read in this thread, for tests; the process's stdin: see
    :func:`_lines_until_eof`) or the connection drops (1)."""
    lines = stdin if stdin is not None else _lines_until_eof(sys.stdin.buffer)
    stdout = stdout or sys.stdout.buffer
    u = urlsplit(url)
    token = os.environ.get("CRASHPOINT_TOKEN", "")
    session = ""
    conn: http.client.HTTPConnection | None = None
    for line in lines:
        if not line.strip():
            continue
        try:
            rid = json.loads(line).get("id")
        except (ValueError, AttributeError):
            rid = None
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if session:
            headers[SESSION] = session
        if token:
            headers["X-Crashpoint-Token"] = token
        try:
            if conn is None:
                conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=None)
            conn.request("POST", u.path or "/", body=line.strip(), headers=headers)
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            print(f"crashpoint mcp stdio: the connection to {url} dropped ({exc})", file=sys.stderr)
            return 1
        if resp.getheader("Connection", "").lower() == "close":
            conn.close()
            conn = None
        session = resp.getheader(SESSION) or session
        try:
            out = _messages(body, resp.getheader("Content-Type") or "")
        except ValueError:
            out = []
        out = [m for m in out if isinstance(m, dict) and m.get("jsonrpc") == "2.0"]
        if resp.status >= 400 and not out and rid is not None:
            out = [
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "error": {
                        "code": -32603,
                        "message": f"HTTP {resp.status}: {body[:200].decode('utf-8', 'replace')}",
                    },
                }
            ]
        for m in out:
            stdout.write(json.dumps(m, separators=(",", ":")).encode() + b"\n")
        stdout.flush()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -I _mcp_stdio.py URL (the MCP stand-in's {mcp})", file=sys.stderr)
        sys.exit(2)
    code = relay(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: the stdin reader thread holds stdin's lock in a read, and the interpreter's
    # shutdown would abort on it (SIGABRT, "Fatal Python error: _enter_buffered_busy").
    os._exit(code)
