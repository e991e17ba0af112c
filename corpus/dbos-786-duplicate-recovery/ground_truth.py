"""Ground truth without crashpoint: kill -9 the service during its charge, then start two
processes of it at once (a restart that ran twice), both with DBOS's default executor id, and
count the charge requests the two recoveries made.

A small HTTP server in this script plays the payment service and counts every POST (whatever
its key). The first charge request (process A's) kills A with SIGKILL before it is answered.
Then B and C start together; the server holds each one's charge request until both have sent
theirs or 10 s have passed (a payment call that takes a moment). Run it with the Python of
the environment under test:

    python ground_truth.py --database postgresql://USER@HOST:PORT/DBNAME

Exit 1 and "BUG" when B and C both ran the recovered workflow's charge (two recoveries of one
workflow), 0 and "ok" when one did, 2 if the run did not go as planned.
"""

from __future__ import annotations

import argparse
import collections
import http.server
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--database", required=True, help="PostgreSQL URL (created if missing)")
    args = ap.parse_args()
    posts: collections.Counter[str] = collections.Counter()
    victim: list[subprocess.Popen[bytes]] = []
    held: list[float] = []
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                posts[self.path] += 1
            if self.path == "/charges" and victim:
                os.kill(victim.pop().pid, signal.SIGKILL)  # A dies mid-charge
                return
            if self.path == "/charges":
                with lock:
                    held.append(time.monotonic())
                while len(held) < 2 and time.monotonic() < held[0] + 10.0:
                    time.sleep(0.01)  # both recoveries at their charge, or 10 s
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    base = [sys.executable, os.path.join(HERE, "agent.py"), "--database", args.database]
    base += ["--http", url, "--workflow-id"]
    # one run alone first: DBOS creates its tables (a deployment migrates before it scales)
    subprocess.run([*base, "warm-up"], check=True, timeout=120)
    posts.clear()
    held.clear()
    wid = f"checkout-{os.getpid()}-{time.time_ns()}"
    a = subprocess.Popen([*base, wid])
    victim.append(a)
    code_a = a.wait(timeout=120)
    if victim or code_a != -signal.SIGKILL:
        print(f"ERROR: A was not killed during its charge (exit {code_a})")
        return 2
    after_a = posts["/charges"]
    procs = [subprocess.Popen([*base, wid]) for _ in range(2)]
    codes = [p.wait(timeout=120) for p in procs]
    server.shutdown()
    again = posts["/charges"] - after_a
    print(f"B and C exited {codes}; charge requests after A died: {again}; POSTs: {dict(posts)}")
    if any(codes):
        return 2
    if again > 1:
        print(f"BUG: two recoveries of one workflow: the charge was requested {again} times")
        return 1
    print("ok: one recovery charged; the other process waited for its result")
    return 0


if __name__ == "__main__":
    sys.exit(main())
