"""Ground truth without crashpoint: kill -9 the agent once both bookings are done and it asks
the model for its answer, restart it, and count the bookings.

A small HTTP server in this script plays the model (an OpenAI-compatible chat completions
endpoint that asks for ``book_hotel`` and ``book_car`` in one reply, then answers) and the
travel service (the hotel takes a second to answer, the car at once). When the second model
request arrives (both tools have returned and the run moved on) the server kills the agent's
process group with SIGKILL before it answers; then the script starts the agent again, and
DBOS recovers the run. Run it with the Python of the environment under test:

    .venv/bin/python ground_truth.py

Exit 1 and "BUG" if the restart booked the car again (its finished step was never recorded:
the two tool steps ran at once inside the workflow and DBOS kept only one of them), 0 and "ok"
if each booking was made once, 2 if the agent did not run as planned.
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
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def _completion(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages", [])
    if any(m.get("role") == "tool" for m in messages):
        message: dict[str, Any] = {"role": "assistant", "content": "Trip booked."}
    else:
        calls = [
            {
                "id": f"call-{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps({"city": "Lisbon"})},
            }
            for i, name in enumerate(["book_hotel", "book_car"])
        ]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def main() -> int:
    posts: collections.Counter[str] = collections.Counter()
    victim: list[subprocess.Popen[bytes]] = []
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            with lock:
                posts[self.path] += 1
                answered = posts[self.path]
            if self.path.endswith("/chat/completions"):
                if answered == 2 and victim:  # the crash: both tools done, before the answer
                    os.killpg(victim.pop().pid, signal.SIGKILL)
                    return
                reply = _completion(body)
            else:
                if self.path == "/hotels":
                    time.sleep(1.0)  # the hotel's system is slow
                reply = {}
            data = json.dumps(reply).encode()
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
    env = dict(os.environ, OPENAI_BASE_URL=url + "/v1")
    with tempfile.TemporaryDirectory() as state:
        cmd = [sys.executable, os.path.join(HERE, "agent.py"), "--state", state, "--http", url]
        first = subprocess.Popen(cmd, env=env, start_new_session=True)
        victim.append(first)
        print(f"run 1: exit {first.wait(timeout=120)} (killed after both bookings were made)")
        second = subprocess.run(cmd, env=env, timeout=120, check=False)
        print(f"run 2 (the restart): exit {second.returncode}")
    server.shutdown()
    print(f"POSTs received: {dict(posts)}")
    if second.returncode != 0 or posts["/v1/chat/completions"] < 3:
        print("ERROR: the agent did not run as planned (see its output above)")
        return 2
    if posts["/cars"] > 1 or posts["/hotels"] > 1:
        print(
            f"BUG: the restart booked again: {posts['/hotels']} hotel and "
            f"{posts['/cars']} car booking(s) for one trip"
        )
        return 1
    print("ok: the restart resumed after the bookings; each was made once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
