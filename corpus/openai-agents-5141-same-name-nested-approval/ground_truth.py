"""Ground truth without crashpoint: kill -9 the worker while it asks for the approval, run it
again as its queue would (twice), and see whether the approved refund is ever issued.

A small HTTP server in this script plays the model (a scripted OpenAI Responses endpoint, the
same replies as the scenarios'), the approval service and the refund service. The first time
the worker asks for an approval (POST /approvals: the run paused and its state was saved), the
server kills it with SIGKILL before answering. Then the script runs the worker again (the
restart: it reads the saved RunState back, approves and resumes), and once more if that fails,
as a queue retries a failed job.
Run it with the Python of the environment under test:

    .venv/bin/python ground_truth.py

Exit 1 and "BUG" if no restart finishes and the refund is never issued (the resumed run pauses
again on the approval it was given), 0 and "ok" if the first restart finishes with the refund
issued once, 2 if the worker did not run as planned.
"""

from __future__ import annotations

import collections
import hashlib
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
OUTER = "please refund my order A-1001"
INNER = "Refund order A-1001 in full"


def _turn(body: dict[str, Any]) -> tuple[str, bool]:
    """The last user message's text, and whether tool outputs follow it."""
    items = body.get("input")
    if isinstance(items, str):
        return items, False
    last, outputs = "", False
    for item in items or []:
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content)
            last, outputs = str(content), False
        elif item.get("type") == "function_call_output":
            outputs = True
    return last, outputs


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    text, outputs = _turn(body)
    fp = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]
    call: tuple[str, dict[str, Any]] | None = None
    answer = "?"
    if INNER in text:
        call = ("issue_refund", {"amount_cents": 2599, "order_id": "A-1001"})
        answer = "Refunded 2599 cents on order A-1001."
    elif OUTER in text:
        call = ("refunds_desk", {"input": "Refund order A-1001 in full: 2599 cents."})
        answer = "Your refund for order A-1001 is on its way."
    if call and not outputs:
        out = {
            "type": "function_call",
            "id": "fc_" + fp,
            "call_id": "call_" + fp,
            "name": call[0],
            "arguments": json.dumps(call[1], sort_keys=True),
            "status": "completed",
        }
    else:
        out = {
            "type": "message",
            "id": "msg_" + fp,
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": answer, "annotations": []}],
        }
    return {
        "id": "resp_" + fp,
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": body.get("model", "gpt-4o-mini"),
        "output": [out],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "metadata": {},
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": {
            "input_tokens": 1,
            "output_tokens": 1,
            "total_tokens": 2,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def main() -> int:
    seen: collections.Counter[str] = collections.Counter()
    victim: list[subprocess.Popen[bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            reply: dict[str, Any] = {"ok": True}
            if self.path.endswith("/responses"):
                body = json.loads(raw)
                text, outputs = _turn(body)
                if INNER in text and not outputs:
                    seen["refunds agent started"] += 1
                reply = _reply(body)
            else:
                seen[self.path] += 1
                if self.path == "/approvals" and victim:
                    os.kill(victim.pop().pid, signal.SIGKILL)  # the crash, before the answer
                    return
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
    env = {**os.environ, "OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-ground-truth"}
    with tempfile.TemporaryDirectory() as state:
        cmd = [sys.executable, os.path.join(HERE, "agent.py"), "--state", state, "--http", url]
        first = subprocess.Popen(cmd, env=env)
        victim.append(first)
        print(f"attempt 1: exit {first.wait(timeout=120)} (killed while asking for the approval)")
        restarts = []
        for _ in range(2):
            run = subprocess.run(cmd, env=env, timeout=120, check=False)
            restarts.append(run.returncode)
            print(f"restart {len(restarts)}: exit {run.returncode}")
            if run.returncode == 0:
                break
    server.shutdown()
    print(f"requests: {dict(seen)}")
    if first.returncode != -signal.SIGKILL or seen["/approvals"] < 2:
        print("ERROR: the worker did not run as planned (see its output above)")
        return 2
    if restarts[0] == 0 and seen["/refunds"] == 1:
        print("ok: the restart resumed the approved refund and issued it once")
        return 0
    if 0 not in restarts and seen["/refunds"] == 0:
        print(
            f"BUG: the approval was recorded but never applied: {len(restarts)} restarts failed"
            f" (exits {restarts}), the approval service was asked {seen['/approvals']} times and"
            " the refund was never issued"
        )
        return 1
    print(f"ERROR: an outcome this script does not know (restarts {restarts}, {dict(seen)})")
    return 2


if __name__ == "__main__":
    sys.exit(main())
