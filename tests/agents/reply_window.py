"""An agent with no crashpoint import that asks the model two questions and posts each answer
to a webhook with a key, keeping its progress in a JSON file written atomically (temp file,
fsync, rename, folder fsync). Standard library only: the model is the harness's
OpenAI-compatible stand-in at ``$OPENAI_BASE_URL``.

``--save first`` (correct): each reply is saved as soon as it arrives, before anything else.
``--save late`` (buggy twin): the reply is saved only after its webhook was posted, so a crash
after the webhook asks the model again although the agent had every chance to keep the reply.

    python reply_window.py --state DIR --hook URL --save first|late
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from typing import Any

QUESTIONS = ["label: printer on fire", "label: invoice charged twice"]


def post(url: str, body: Any, headers: dict[str, str]) -> Any:
    req = urllib.request.Request(  # noqa: S310 - the harness's loopback stand-ins
        url, data=json.dumps(body).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    for k, v in headers.items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310
        return json.loads(r.read() or b"null")


def save(path: str, state: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--state", required=True)
    ap.add_argument("--hook", required=True)
    ap.add_argument("--save", choices=["first", "late"], required=True)
    a = ap.parse_args()
    path = os.path.join(a.state, "progress.json")
    try:
        with open(path, encoding="utf-8") as f:
            state: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        state = {"answers": {}, "posted": []}
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    auth = {"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', 'x')}"}
    for n, q in enumerate(QUESTIONS):
        qid = f"q{n + 1}"
        if qid in state["posted"]:
            continue
        answer = state["answers"].get(qid)
        if answer is None:
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": q}]}
            reply = post(f"{base}/chat/completions", body, auth)
            answer = reply["choices"][0]["message"]["content"]
            state["answers"][qid] = answer
            if a.save == "first":
                save(path, state)
        post(a.hook, {"q": qid, "answer": answer}, {"Idempotency-Key": f"post-{qid}"})
        state["posted"].append(qid)
        save(path, state)
    for qid in sorted(state["answers"]):
        print(qid, state["answers"][qid])
    return 0


if __name__ == "__main__":
    sys.exit(main())
