"""Ground truth without crashpoint: kill -9 the worker during its second order, restart it,
and see whether DBOS can recover that order's run.

A small HTTP server in this script plays the model (an OpenAI-compatible chat completions
endpoint that asks for ``ship_order`` and then answers) and the warehouse. The first time the
second order's shipment is booked (POST /shipments for order 1043: that run's first model
request is already a recorded DBOS step) the server kills the worker's process group with
SIGKILL before it answers. Then the script starts the worker again, as its supervisor would.
Run it with the Python of the environment under test:

    .venv/bin/python ground_truth.py

Exit 1 and "BUG" if the restarted worker cannot finish the interrupted order (DBOS's recovery
of the run fails: a process-wide tool cache skipped the ``get_tools`` step when the run was
recorded, and a fresh process takes it, shifting every step), 0 and "ok" if both orders
finish with each shipment applied once, 2 if the worker did not run as planned.
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
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def _completion(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages", [])
    user = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    order = str(user).split()[-1].rstrip(".")
    if any(m.get("role") == "tool" for m in messages):
        message: dict[str, Any] = {"role": "assistant", "content": f"Order {order} is shipped."}
        finish = "stop"
    else:
        call = {
            "id": f"call-{order}",
            "type": "function",
            "function": {"name": "ship_order", "arguments": json.dumps({"order": order})},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def main() -> int:
    shipments: collections.Counter[str] = collections.Counter()
    victim: list[subprocess.Popen[bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            if self.path.endswith("/chat/completions"):
                reply = _completion(body)
            else:
                shipments[body["order"]] += 1
                if body["order"] == "1043" and victim:  # the crash, before the reply
                    os.killpg(victim.pop().pid, signal.SIGKILL)
                    return
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
    with tempfile.TemporaryDirectory() as state:
        cmd = [
            sys.executable,
            os.path.join(HERE, "agent.py"),
            "--state",
            state,
            "--llm",
            url + "/v1",
            "--http",
            url,
        ]
        first = subprocess.Popen(cmd, start_new_session=True)
        victim.append(first)
        print(f"run 1: exit {first.wait(timeout=120)} (killed while shipping order 1043)")
        second = subprocess.run(cmd, timeout=120, check=False, capture_output=True, text=True)
        sys.stdout.write(second.stdout)
        err = second.stderr.strip().splitlines()
        print(f"run 2 (the restart): exit {second.returncode}" + (f": {err[-1]}" if err else ""))
    server.shutdown()
    print(f"shipments booked: {dict(shipments)}")
    if not shipments or "1043" not in shipments:
        print("ERROR: the worker did not run as planned (see its output above)")
        return 2
    if second.returncode != 0:
        print("BUG: the restarted worker cannot recover order 1043's run")
        return 1
    print("ok: the restarted worker recovered order 1043's run and finished the batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
