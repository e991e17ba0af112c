"""Ground truth without crashpoint: a report that kills its process every time (kill -9 at the
renderer's request, at every start), started three times, and what the third start does.

A small HTTP server in this script plays the ops service and SIGKILLs the process that sends
``POST /render``, every time. The workflow is declared with ``max_recovery_attempts=1``: at its
third start DBOS puts it in MAX_RECOVERY_ATTEMPTS_EXCEEDED (its dead letter) instead of running
it. Run it with the Python of the environment under test:

    python ground_truth.py

Exit 1 and "BUG" when the third process is still running after 90 s (DBOS dead-lettered the
workflow, but the process waiting for its result keeps waiting: a hang, not a stop), 0 and "ok"
when it exits non-zero saying the workflow exceeded its maximum recovery attempts, 2 if the run
did not go as planned.
"""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
DEADLINE = 90.0


def main() -> int:
    running: list[subprocess.Popen[bytes]] = []
    killed = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/render" and running:
                os.kill(running[-1].pid, signal.SIGKILL)  # the poison: every start dies here
                killed[0] += 1
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
        for n in (1, 2):
            p = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
            running.append(p)
            code = p.wait(timeout=180)
            if code != -signal.SIGKILL or killed[0] != n:
                print(f"ERROR: start {n} was not killed at its render request (exit {code})")
                return 2
        third = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        running.append(third)
        try:
            _out, err = third.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            third.kill()
            third.communicate()
            print(f"the third start was still running after {DEADLINE:.0f} s")
            print("BUG: DBOS dead-lettered the workflow, but the process waiting for it hangs")
            return 1
        finally:
            server.shutdown()
    last = (err.decode().strip().splitlines() or [""])[-1]
    print(f"the third start exited {third.returncode}; render requests killed: {killed[0]}")
    print(f"its last stderr line: {last}")
    if killed[0] != 2:
        print("ERROR: the third start ran the poisoned step again (no dead letter)")
        return 2
    if third.returncode != 0 and "maximum recovery attempts" in last:
        print("ok: the third start stopped, saying the workflow was dead-lettered")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
