"""Ground truth without crashpoint: kill -9 the refund worker while it pays an approved refund,
start it again as its supervisor would, and count the holds placed.

A small HTTP server in this script plays the payments service. The first time the refund is
paid (POST /refunds: the hold was placed, the run paused for approval and saved its context,
and the reviewer's answer went in) the server kills the worker with SIGKILL before it answers.
Then the script starts the worker again: it finds the paused run's saved context, resumes it
(``Context.from_dict`` + ``workflow.run(ctx=...)``) and sends the answer. Run it with the
Python of the environment under test:

    .venv-broken/bin/python ground_truth.py

Exit 1 and "BUG" if the resumed run placed the hold again (the step that asked for input was
run again: llama_index#18019), 0 and "ok" if the hold was placed once, 2 if the worker failed.
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
            if self.path == "/refunds" and victim:
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
        print(f"attempt 1: exit {first.wait(timeout=120)} (killed while paying the refund)")
        paused = os.path.exists(os.path.join(state, "paused.json"))
        second = subprocess.run(cmd, timeout=120, check=False)
        print(f"attempt 2 (resumes the paused run): exit {second.returncode}")
    server.shutdown()
    print(f"POSTs received: {dict(posts)}")
    if not paused or second.returncode != 0 or posts["/refunds"] < 2:
        print("ERROR: the worker did not run as planned (see its output above)")
        return 2
    if posts["/holds"] > 1:
        print(
            f"BUG: the resumed run re-ran the step that asked for approval: "
            f"the hold was placed {posts['/holds']} times"
        )
        return 1
    print("ok: the resumed run went on from the reviewer's answer; the hold was placed once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
