"""Ground truth without crashpoint: kill -9 the job while its second branch is at work, after
the first branch finished, restart it, and count the notifications.

A small HTTP server in this script plays the notification and report services. The first time
the report arrives (POST /reports: notify has already posted, been answered and returned) it
kills the agent with SIGKILL before it answers. The script then starts the agent again (it
resumes its thread) and counts the POSTs to /notify. Run it with the Python of the
environment under test:

    python ground_truth.py

Exit 1 and "BUG" if the restart ran notify again (the finished branch's writes, saved by
AsyncSqliteSaver.aput_writes but never committed, were lost with the process), 0 and "ok" if
it did not, 2 if the agent failed.
"""

from __future__ import annotations

import collections
import http.server
import os
import signal
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    posts: collections.Counter[str] = collections.Counter()
    victim: list[subprocess.Popen[bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            posts[self.path] += 1
            if self.path == "/reports" and victim:
                os.kill(victim.pop().pid, signal.SIGKILL)  # the crash, before the reply
                return
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with tempfile.TemporaryDirectory() as state:
        cmd = [sys.executable, os.path.join(HERE, "agent.py"), "--state", state, "--http", url]
        first = subprocess.Popen(cmd)
        victim.append(first)
        print(f"run 1: exit {first.wait(timeout=120)} (killed while write_report was at work)")
        second = subprocess.run(cmd, timeout=120, check=False)
        print(f"run 2 (the restart): exit {second.returncode}")
    server.shutdown()
    print(f"POSTs received: {dict(posts)}")
    if second.returncode != 0 or posts["/reports"] < 2:
        print("ERROR: the agent did not run as planned (see its output above)")
        return 2
    if posts["/notify"] > 1:
        print(f"BUG: the restart ran the finished branch again: {posts['/notify']} notifications")
        return 1
    print("ok: the restart ran only the unfinished branch; one notification")
    return 0


if __name__ == "__main__":
    sys.exit(main())
