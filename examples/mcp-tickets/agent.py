"""An on-call agent that files an incident through an MCP tool server, written with the
standard library only (JSON-RPC 2.0 by hand): no SDK, no crashpoint import.

It connects to the server, over streamable HTTP (``--mcp URL``: one POST per message, the
``Mcp-Session-Id`` of ``initialize`` sent with the rest) or stdio (``--mcp-stdio "COMMAND"``:
it starts the server and speaks newline-delimited JSON on its stdin and stdout), lists the
tools, and calls ``create_ticket`` then ``page_oncall``, recording each reply in its progress
file (temp file, fsync, rename, folder fsync) before the next call. At the end it prints the
replies. A restart skips the calls already recorded.

A crash after the server acted and before the agent recorded the reply makes the next run call
the tool again.

* As written (no ``--fixed``), the calls carry no idempotency key: the server opens a second
  ticket, pages the on-call engineer twice.
* ``--fixed`` sends a ``request_id`` that is the same in every run of the job (the tools'
  idempotency key): the server answers a repeated call without acting again.

    python agent.py --state DIR (--mcp URL | --mcp-stdio COMMAND) [--fixed] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shlex
import subprocess
import sys
import urllib.request
from typing import Any

CALLS = [
    ("create_ticket", {"title": "db-1 disk full", "severity": "high"}),
    ("page_oncall", {"team": "storage", "message": "db-1 disk full"}),
]


class Server:
    """One MCP connection: :meth:`request` sends a request and returns its result."""

    def __init__(self, url: str, command: str, timeout: float) -> None:
        self.url, self.timeout, self.session, self.next_id = url, timeout, "", 0
        self.proc: subprocess.Popen[bytes] | None = None
        if command:
            self.proc = subprocess.Popen(
                shlex.split(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )

    def _send(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            assert self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
            self.proc.stdin.flush()
            if "id" not in msg:
                return None
            ready, _w, _x = select.select([self.proc.stdout], [], [], self.timeout)
            if not ready:
                raise TimeoutError(f"no reply to {msg['method']} within {self.timeout:g} s")
            line = self.proc.stdout.readline()
            if not line:
                raise ConnectionError("the MCP server closed its stdout")
            reply: dict[str, Any] = json.loads(line)
            return reply
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        req = urllib.request.Request(  # noqa: S310 (the scenario's loopback URL)
            self.url, data=json.dumps(msg).encode(), headers=headers, method="POST"
        )
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
            self.session = resp.headers.get("Mcp-Session-Id") or self.session
            body = resp.read()
        return json.loads(body) if body else None

    def request(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        reply = self._send(
            {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        )
        assert reply is not None
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error'].get('message')}")
        return reply["result"]

    def start(self) -> None:
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "oncall-agent", "version": "1"},
            },
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> None:
        """Close the server's stdin and wait for it; stop it if it does not exit."""
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def save(path: str, done: dict[str, str]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(done, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the agent's progress file")
    ap.add_argument("--mcp", default="", help="the MCP server's streamable-HTTP URL")
    ap.add_argument("--mcp-stdio", default="", help="the command that starts a stdio server")
    ap.add_argument("--fixed", action="store_true", help="send an idempotency key per call")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a reply")
    a = ap.parse_args(argv)
    if bool(a.mcp) == bool(a.mcp_stdio):
        print("agent: give one of --mcp URL or --mcp-stdio COMMAND", file=sys.stderr)
        return 2
    os.makedirs(a.state, exist_ok=True)
    path = os.path.join(a.state, "progress.json")
    try:
        with open(path, encoding="utf-8") as f:
            done: dict[str, str] = json.load(f)
    except FileNotFoundError:
        done = {}
    if len(done) < len(CALLS):
        server = Server(a.mcp, a.mcp_stdio, a.timeout)
        try:
            server.start()
            tools = [t["name"] for t in server.request("tools/list", {})["tools"]]
            for name, args in CALLS:
                if name in done:
                    continue
                if name not in tools:
                    print(f"agent: the server has no tool {name} ({tools})", file=sys.stderr)
                    return 1
                if a.fixed:
                    args = {**args, "request_id": f"incident-7:{name}"}
                result = server.request("tools/call", {"name": name, "arguments": args})
                done[name] = result["content"][0]["text"]
                save(path, done)  # recorded before the next call: a restart skips it
        finally:
            server.close()
    for name, _args in CALLS:
        print(f"{name}: {done[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
