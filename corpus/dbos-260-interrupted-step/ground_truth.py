"""Ground truth without crashpoint: stop the service with SIGTERM while its charge step is at
work, start it again, and see whether the workflow finishes.

A small HTTP server in this script plays the payment service. When the first charge request
arrives, it sends SIGTERM to the agent (the container is being stopped mid-call), then answers
after a moment; the agent exits. The script then starts the agent again, as its supervisor
would, and reads its exit code. Run it with the Python of the environment under test:

    python ground_truth.py --database postgresql://USER@HOST:PORT/DBNAME

Exit 1 and "BUG" when the restarted agent cannot finish the workflow (DBOS recorded the
interrupted step with neither an output nor an error, and recovery raises "Output and error
are both None"), 0 and "ok" when it finishes, 2 if the first run did not go as planned.
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

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            posts[self.path] += 1
            if self.path == "/charges" and victim:
                os.kill(victim.pop().pid, signal.SIGTERM)  # stopped mid-call
                time.sleep(0.5)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    wid = f"checkout-{os.getpid()}-{time.time_ns()}"
    cmd = [sys.executable, os.path.join(HERE, "agent.py"), "--database", args.database]
    cmd += ["--http", url, "--workflow-id", wid]
    first = subprocess.Popen(cmd)
    victim.append(first)
    code1 = first.wait(timeout=120)
    print(f"run 1: exit {code1} (SIGTERM during the charge)")
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    server.shutdown()
    print(f"run 2 (the restart): exit {second.returncode}; POSTs received: {dict(posts)}")
    if victim or code1 == 0:
        print("ERROR: the first run was not stopped during its charge")
        return 2
    if second.returncode != 0:
        err = [ln for ln in second.stderr.splitlines() if "Output and error" in ln]
        print(
            "BUG: the restarted service cannot finish the workflow: "
            + (err[-1] if err else second.stderr[-300:])
        )
        return 1
    print(f"ok: the restart finished the workflow: {second.stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
