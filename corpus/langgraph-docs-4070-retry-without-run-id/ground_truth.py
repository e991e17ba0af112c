"""Ground truth without crashpoint: kill -9 the job right after its email was sent and the
graph moved on, run the job again as its queue would, and count the emails.

A small HTTP server in this script plays the mail and report services. The first time the
report arrives (POST /reports: the email was sent and acknowledged, and the graph went on to
its next node) the server kills the agent with SIGKILL before it answers. Then the script runs
the agent again with the same job (the retry) and counts the POSTs to /email. Run it with the
Python of the environment under test:

    .venv/bin/python ground_truth.py [--control]

(``--control``: the agent runs with the workaround, ``--run-id``.)

Exit 1 and "BUG" if the retry sent the email again (LangGraph started the thread over instead
of resuming it), 0 and "ok" if the email went out once, 2 if the agent failed.
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
        if "--control" in sys.argv[1:]:
            cmd.append("--run-id")
        first = subprocess.Popen(cmd)
        victim.append(first)
        print(f"attempt 1: exit {first.wait(timeout=120)} (killed after the email was sent)")
        second = subprocess.run(cmd, timeout=120, check=False)
        print(f"attempt 2 (the retry): exit {second.returncode}")
    server.shutdown()
    print(f"POSTs received: {dict(posts)}")
    if second.returncode != 0 or posts["/reports"] < 2:
        print("ERROR: the agent did not run as planned (see its output above)")
        return 2
    if posts["/email"] > 1:
        print(f"BUG: the retry started the thread over: the email was sent {posts['/email']} times")
        return 1
    print("ok: the retry resumed the thread; the email was sent once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
