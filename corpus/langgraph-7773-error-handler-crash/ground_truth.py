"""Ground truth without crashpoint: kill -9 the order job while charge's error handler is at
work (after the charge was declined and the handler took over), restart it, and count the
charges.

A small HTTP server in this script plays the order services: it answers POST /charges with a
declined payment (as the scenarios script the {http} stand-in), and the first time the stock
is released (POST /releases: charge was answered, raised PaymentDeclined, and its error
handler is running) it kills the agent with SIGKILL before it answers. The script then
starts the agent again (it resumes its thread) and counts the POSTs to /charges. Run it with
the Python of the environment under test:

    python ground_truth.py

Exit 1 and "BUG" if the restart ran charge again (LangGraph re-ran the failed node instead of
resuming its error handler), 0 and "ok" if it did not, 2 if the agent failed.
"""

from __future__ import annotations

import collections
import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
DECLINED = {"status": "declined", "decline_code": "insufficient_funds"}


def main() -> int:
    posts: collections.Counter[str] = collections.Counter()
    victim: list[subprocess.Popen[bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            posts[self.path] += 1
            if self.path == "/releases" and victim:
                os.kill(victim.pop().pid, signal.SIGKILL)  # the crash, before the reply
                return
            body = json.dumps(DECLINED if self.path == "/charges" else {"ok": True}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with tempfile.TemporaryDirectory() as state:
        cmd = [sys.executable, os.path.join(HERE, "agent.py"), "--state", state, "--http", url]
        first = subprocess.Popen(cmd)
        victim.append(first)
        print(f"run 1: exit {first.wait(timeout=120)} (killed while the error handler was at work)")
        second = subprocess.run(cmd, timeout=120, check=False)
        print(f"run 2 (the restart): exit {second.returncode}")
    server.shutdown()
    print(f"POSTs received: {dict(posts)}")
    if second.returncode != 0 or posts["/email"] < 1:
        print("ERROR: the agent did not run as planned (see its output above)")
        return 2
    if posts["/charges"] > 1:
        print(f"BUG: the restart ran the failed node again: {posts['/charges']} charges")
        return 1
    print("ok: the restart resumed the error handler; one charge")
    return 0


if __name__ == "__main__":
    sys.exit(main())
