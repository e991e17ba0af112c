"""Ground truth without crashpoint: kill -9 the loan worker as it files its decision, start it
again as its supervisor would, and see whether the restored run can finish.

A small HTTP server in this script plays the loan services. The first time the decision is
filed (POST /decisions: both checks came back and ``decide`` joined them; the worker's last
snapshot was saved while ``decide`` held the first result and waited for the second) the
server kills the worker with SIGKILL before it answers. Then the script starts the worker
again: it finds the snapshot and resumes the run from it (``Context.from_dict`` +
``workflow.run(ctx=...)``). Run it with the Python of the environment under test:

    .venv-broken/bin/python ground_truth.py

Exit 1 and "BUG" if the restored run failed in ``ctx.collect_events`` (the restored event
buffer is a plain dict, so the second result's type is a KeyError: llama_index#18304), 0 and
"ok" if it filed the decision, 2 if the worker did not run as planned.
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
            if self.path == "/decisions" and victim:
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
        print(f"attempt 1: exit {first.wait(timeout=120)} (killed while filing the decision)")
        saved = os.path.exists(os.path.join(state, "run.json"))
        second = subprocess.run(cmd, timeout=120, check=False, stderr=subprocess.PIPE, text=True)
        print(second.stderr[-600:], end="")
        print(f"attempt 2 (resumes from the snapshot): exit {second.returncode}")
    server.shutdown()
    print(f"POSTs received: {dict(posts)}")
    if not saved or posts["/decisions"] < 1:
        print("ERROR: the worker did not run as planned (see its output above)")
        return 2
    if second.returncode != 0 and "KeyError" in second.stderr:
        print(
            "BUG: the restored run failed joining the checks (KeyError in collect_events): "
            "the decision is never filed"
        )
        return 1
    if second.returncode == 0 and posts["/decisions"] >= 2:
        print("ok: the restored run joined both checks and filed the decision")
        return 0
    print("ERROR: the restored run failed another way (see its output above)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
