"""Ground truth without crashpoint: kill -9 the assistant after its workflow wrote the first
section to its stream, start it again, and see whether the restarted process recovers the
workflow and finishes.

A small HTTP server in this script plays the model (``/v1/chat/completions``, a fixed reply)
and the documents service (``/briefs``). The second model request (the second section's, after
the first section was written to the stream) kills process A with SIGKILL before it is
answered. Process B then starts on the same SQLite system database: launching recovers the
workflow, which replays the first section's step and its ``DBOS.write_stream``. Run it with
the Python of the environment under test:

    python ground_truth.py

Exit 1 and "BUG" when B does not finish within 30 s (the recovery stopped at the replayed
stream write, the workflow stays PENDING) or prints a section twice, 0 and "ok" when B prints
each section once and the result, 2 if the run did not go as planned.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
DEADLINE = 30.0


def main() -> int:
    victim: list[subprocess.Popen[bytes]] = []
    asked = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body: dict[str, object] = {"ok": True}
            if self.path.endswith("/chat/completions"):
                asked[0] += 1
                if asked[0] == 2 and victim:
                    os.kill(victim.pop().pid, signal.SIGKILL)  # A dies asking for section 2
                    return
                msg = {"role": "assistant", "content": "a paragraph"}
                body = {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}
            data = json.dumps(body).encode()
            self.send_response(200)
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
        a = subprocess.Popen(cmd)
        victim.append(a)
        code_a = a.wait(timeout=120)
        if victim or code_a != -signal.SIGKILL:
            print(f"ERROR: A was not killed at its second model call (exit {code_a})")
            return 2
        b = subprocess.Popen(cmd, stdout=subprocess.PIPE)
        try:
            out, _ = b.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            b.kill()
            out, _ = b.communicate()
            lines = out.decode().splitlines()
            print(f"B printed {lines} and was still running after {DEADLINE:.0f} s")
            print("BUG: the restarted process did not finish the recovered workflow")
            return 1
        finally:
            server.shutdown()
    lines = out.decode().splitlines()
    print(f"B exited {b.returncode} and printed {lines}")
    if b.returncode != 0:
        return 2
    names = ("background", "findings", "recommendation")
    sections = [ln.split(":")[0] for ln in lines if ln.split(":")[0] in names]
    if len(sections) != len(set(sections)):
        print("BUG: the recovered workflow wrote a section to its stream twice")
        return 1
    if sections != list(names) or not lines[-1].startswith("brief on"):
        return 2
    print("ok: the restarted process recovered the workflow and streamed each section once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
