"""Ground truth without crashpoint: start two processes of agent.py at the same moment on one
PostgreSQL system database, and count the charges the payment service received.

A small HTTP server in this script plays the payment service. It holds each process's first
request (POST /charges) until both processes have sent theirs, or until 10 s have passed since
the first (a process that DBOS told to wait for the other's result never sends one), as a
payment call that takes a moment would, and counts every POST. Run it with the Python of the
environment under test:

    .venv-broken/bin/python ground_truth.py --database postgresql://USER@HOST:PORT/DBNAME

(DBOS creates the database if it is missing). Exit 1 and "BUG" if the
charge was posted more than once, 0 and "ok" if once.
"""

from __future__ import annotations

import argparse
import collections
import http.server
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--database", required=True, help="PostgreSQL URL of a fresh database")
    args = ap.parse_args()
    posts: collections.Counter[str] = collections.Counter()
    first: list[float] = []
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _reply(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/charges":
                with lock:
                    first.append(time.monotonic())
                deadline = first[0] + 10.0
                while len(first) < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)  # both processes at their first request, or 3 s
            with lock:
                posts[self.path] += 1
            self._reply()

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    cmd = [sys.executable, os.path.join(HERE, "agent.py"), "--database", args.database]
    # one process alone first: it creates DBOS's tables (as a deployment migrates before its
    # replicas start) and shows a single process charges once
    subprocess.run([*cmd, "--http", url, "--workflow-id", "warm-up"], check=True, timeout=120)
    first.clear()
    posts.clear()
    wid = f"checkout-{os.getpid()}-{time.time_ns()}"
    procs = [subprocess.Popen([*cmd, "--http", url, "--workflow-id", wid]) for _ in range(2)]
    codes = [p.wait(timeout=120) for p in procs]
    server.shutdown()
    print(f"exit codes {codes}; POSTs received: {dict(posts)}")
    if posts["/charges"] > 1:
        print(f"BUG: the order was charged {posts['/charges']} times")
        return 1
    print("ok: charged once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
