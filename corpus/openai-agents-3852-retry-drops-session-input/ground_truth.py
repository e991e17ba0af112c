"""Ground truth without crashpoint: drop the model's connection on the chat's first request
until the SDK's runner retries it, let the chat finish, and read the transcript it files.

A small HTTP server in this script plays the model (a scripted OpenAI Responses endpoint that
streams its replies as server-sent events, the same replies as the scenarios') and the
ticketing service. It closes the connection of the first model request without answering,
three times in a row (the openai client retries twice on its own; the third failure reaches
the Agents SDK, whose ModelRetrySettings retry the request), then answers every request. Run it
with the Python of the environment under test:

    .venv/bin/python ground_truth.py

Exit 1 and "BUG" if the filed transcript (the chat's SQLiteSession) lacks the customer's first
message, 0 and "ok" if it holds both messages and both replies, 2 if the chat did not run as
planned.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
FIRST = "Hi, my order A-3852 arrived without the charger."
REPLIES = {
    "without the charger": "Sorry about that: I will have a charger sent for order A-3852.",
    "send the charger": "Done: a charger for order A-3852 ships to your address today.",
}


def _last_user(body: dict[str, Any]) -> str:
    items = body.get("input")
    if isinstance(items, str):
        return items
    last = ""
    for item in items or []:
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content)
            last = str(content)
    return last


def _events(body: dict[str, Any], n: int) -> bytes:
    text = next((r for m, r in REPLIES.items() if m in _last_user(body)), "?")
    msg = {
        "type": "message",
        "id": f"msg_{n}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }

    def response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 1_700_000_000,
            "status": status,
            "model": body.get("model", "gpt-4o-mini"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
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

    base = {"item_id": msg["id"], "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response("in_progress", [])},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**msg, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            **base,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
        {"type": "response.output_text.delta", **base, "delta": text, "logprobs": []},
        {"type": "response.output_text.done", **base, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **base, "part": msg["content"][0]},
        {"type": "response.output_item.done", "output_index": 0, "item": msg},
        {"type": "response.completed", "response": response("completed", [msg])},
    ]
    return b"".join(
        f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': i})}\n\n".encode()
        for i, e in enumerate(events)
    )


def main() -> int:
    drops = [3]  # the first model request's connection is dropped this many times
    calls = [0]
    filed: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path.endswith("/responses"):
                if drops[0] > 0:
                    drops[0] -= 1
                    self.close_connection = True  # the connection drops: no answer at all
                    return
                calls[0] += 1
                data = _events(json.loads(raw), calls[0])
                ctype = "text/event-stream"
            else:
                filed.append(json.loads(raw))
                data, ctype = b'{"ok": true}', "application/json"
            self.send_response(200)
            self.send_header("Content-Type", ctype)
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
        run = subprocess.run(cmd, env=env, timeout=120, check=False)
    server.shutdown()
    print(f"the chat: exit {run.returncode}, {calls[0]} model replies, {len(filed)} transcript(s)")
    if run.returncode != 0 or drops[0] or calls[0] < 2 or len(filed) != 1:
        print("ERROR: the chat did not run as planned (see its output above)")
        return 2
    transcript = filed[0]["transcript"]
    users = [t["text"] for t in transcript if t["role"] == "user"]
    print(f"transcript: {[t['role'] for t in transcript]}")
    if FIRST not in users:
        print(
            "BUG: the model retry removed the customer's first message from the session: the"
            f" transcript holds {len(transcript)} items and only these customer messages: {users}"
        )
        return 1
    print("ok: the session kept both customer messages and both replies across the model retry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
