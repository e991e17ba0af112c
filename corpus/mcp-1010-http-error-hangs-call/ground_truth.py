"""Ground truth without crashpoint: an MCP server answers one tool call with HTTP 503 (it is
restarting, or a proxy in front of it is); does the error reach the call, so the job can retry?

The server is a small streamable-HTTP MCP server in this script (the standard library only,
the same on both sides): ``initialize`` opens a session, ``tools/call`` applies
``create_ticket`` and ``page_oncall`` once per request_id, and the first ``create_ticket`` is
answered ``503 Service Unavailable`` (Retry-After: 1) before anything is applied. The script
runs agent.py against it with a deadline. Run it with the Python of the environment under test:

    .venv/bin/python ground_truth.py

Exit 1 and "BUG" if the 503 never reaches the call as an error it can retry (mcp 1.x raises
httpx.HTTPStatusError in the transport's background task, python-sdk#1010 and #3091): the job
is still waiting after 60 s, or dies of that exception escaping the transport's task group
(what mcp 1.30.0 does); 0 and "ok" if it finishes with one ticket and one page (mcp >= 2.0
raises the 503 to the caller as MCPError, the job retries), 2 if the job did not run as
planned.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
DEADLINE = 60.0


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.applied: dict[str, str] = {}  # request_id -> kind
        self.refused = 0


class Handler(http.server.BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any] | None, **headers: str) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # no server-initiated stream
        self._send(405, None)

    def do_DELETE(self) -> None:
        self._send(200, None)

    def do_POST(self) -> None:
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in msg:
            self._send(202, None)
            return
        method, rid = msg["method"], msg["id"]
        if method == "initialize":
            result = {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "incidents", "version": "1"},
            }
            self._send(200, {"jsonrpc": "2.0", "id": rid, "result": result}, Mcp_Session_Id="s1")
            return
        if method == "tools/list":
            obj = {"type": "object"}
            tools = [{"name": n, "inputSchema": obj} for n in ("create_ticket", "page_oncall")]
            self._send(200, {"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
            return
        if method != "tools/call":
            self._send(200, {"jsonrpc": "2.0", "id": rid, "result": {}})
            return
        name, args = msg["params"]["name"], msg["params"]["arguments"]
        with self.server.lock:
            if name == "create_ticket" and not self.server.refused:
                self.server.refused += 1
                self._send(503, None, Retry_After="1")
                return
            self.server.applied.setdefault(args["request_id"], name)
        text = f"opened INC-1: {args['title']}" if name == "create_ticket" else "paged storage"
        result = {"content": [{"type": "text", "text": text}], "isError": False}
        self._send(200, {"jsonrpc": "2.0", "id": rid, "result": result})


def main() -> int:
    server = Server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
    with tempfile.TemporaryDirectory(prefix="mcp-1010-") as folder:
        cmd = [sys.executable, os.path.join(HERE, "agent.py"), "--state", folder, "--mcp", url]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            if not server.refused:
                print(f"the job did not reach create_ticket in {DEADLINE:.0f} s: could not tell")
                return 2
            print(
                f"BUG: the server answered create_ticket with 503 and the job was still "
                f"waiting for that call after {DEADLINE:.0f} s (the error never reached it)"
            )
            return 1
        finally:
            server.shutdown()
    if proc.returncode != 0 and "HTTPStatusError" in err:
        print(
            "BUG: the server answered create_ticket with 503 and the error escaped the "
            "transport's task as httpx.HTTPStatusError, tearing the session down, instead of "
            f"failing the call (the job exited {proc.returncode}, never retried)"
        )
        return 1
    applied = sorted(server.applied.values())
    if proc.returncode != 0 or applied != ["create_ticket", "page_oncall"]:
        print(f"the job exited {proc.returncode}, applied {applied}: could not tell")
        print(err[-2000:], file=sys.stderr)
        return 2
    print(f"ok: the 503 reached the call, the job retried: {out.strip()!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
