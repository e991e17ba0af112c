"""Ground truth without crashpoint: the helpdesk's first reply fails once (HTTP 503), DBOS
retries the step, and the stream is read.

A small HTTP server in this script plays the model (``/v1/chat/completions``, a fixed reply)
and the helpdesk (``/replies``), and answers the first ``POST /replies`` with 503: the step
raises, and DBOS runs it again (``retries_allowed=True``). Run it with the Python of the
environment under test (``--control``: the agent writes its progress from the workflow, the
documented workaround):

    python ground_truth.py [--control]

Exit 1 and "BUG" when the stream holds a ticket's progress entry twice (one write, delivered
once per attempt of the step), 0 and "ok" when each entry is there once, 2 if the run did not
go as planned.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--control", action="store_true", help="write progress from the workflow")
    args = ap.parse_args()
    failed = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status, body = 200, {"ok": True}
            if self.path.endswith("/chat/completions"):
                msg = {"role": "assistant", "content": "a reply"}
                body = {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}
            elif self.path == "/replies" and not failed[0]:
                failed[0] += 1
                status, body = 503, {"error": "unavailable"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with tempfile.TemporaryDirectory() as state:
        cmd = [sys.executable, os.path.join(HERE, "agent.py"), "--state", state]
        cmd += ["--llm", url + "/v1", "--http", url]
        cmd += ["--progress", "workflow" if args.control else "step"]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=180)
        finally:
            server.shutdown()
    entries = [ln for ln in done.stdout.decode().splitlines() if ln.startswith("answering ")]
    print(f"the agent exited {done.returncode}; the stream: {entries}")
    if done.returncode != 0 or failed[0] != 1:
        print("ERROR: the run did not go as planned")
        return 2
    if len(entries) != len(set(entries)):
        print("BUG: one write_stream call delivered its entry once per attempt of the step")
        return 1
    if entries != ["answering T-101", "answering T-102"]:
        return 2
    print("ok: each progress entry is in the stream once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
