"""An agent that streams a model reply with the OpenAI SDK, the ordinary way: no crashpoint
import.

    python llm_stream.py STATE_DIR [--keep-partial] [--api chat|responses] [--retries 3]
                                   [--timeout 10]

It asks the model (``$OPENAI_BASE_URL``, the harness's stand-in) for a summary with
``stream=True``, joins the text deltas, saves the answer in STATE_DIR (temp file, fsync,
rename) and prints ``answer: <text>``. A run that finds the answer saved prints it and stops.

By default it knows a stream may end early: a chat stream is complete only with a
``finish_reason`` on its last choice (a responses stream: with ``response.completed``). An
incomplete stream, a connection error (a reset) or a read timeout (a stall) throws the
partial text away and asks again, at most ``--retries`` times.

``--keep-partial`` (the bug): whatever the stream delivered before it ended is the answer. The
SDK ends the iteration without an error when the connection closes before ``[DONE]``, so a cut
stream becomes a truncated answer, saved and printed.
"""

from __future__ import annotations

import argparse
import os
import sys

import openai
from openai import OpenAI

QUESTION = "Summarise crash recovery in one sentence."


class Incomplete(Exception):
    """The stream ended without saying it was complete."""


def save(state: str, text: str) -> None:
    tmp = os.path.join(state, "answer.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(state, "answer.txt"))


def ask_chat(client: OpenAI, keep_partial: bool) -> str:
    parts: list[str] = []
    finish = None
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
    )
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                parts.append(choice.delta.content)
            if choice.finish_reason is not None:
                finish = choice.finish_reason
    if finish is None and not keep_partial:
        raise Incomplete(f"the stream ended without a finish_reason after {len(parts)} pieces")
    return "".join(parts)


def ask_responses(client: OpenAI, keep_partial: bool) -> str:
    parts: list[str] = []
    done = False
    stream = client.responses.create(model="gpt-4o-mini", input=QUESTION, stream=True)
    for ev in stream:
        if ev.type == "response.output_text.delta":
            parts.append(ev.delta)
        elif ev.type == "response.completed":
            done = True
    if not done and not keep_partial:
        raise Incomplete("the stream ended without response.completed")
    return "".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("state")
    ap.add_argument("--keep-partial", action="store_true")
    ap.add_argument("--api", choices=("chat", "responses"), default="chat")
    ap.add_argument("--retries", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=10.0)
    a = ap.parse_args()
    os.makedirs(a.state, exist_ok=True)
    saved = os.path.join(a.state, "answer.txt")
    if os.path.exists(saved):
        with open(saved, encoding="utf-8") as f:
            print(f"answer: {f.read()}")
        return 0
    client = OpenAI(max_retries=0, timeout=a.timeout)
    ask = ask_chat if a.api == "chat" else ask_responses
    for attempt in range(a.retries + 1):
        try:
            answer = ask(client, a.keep_partial)
            break
        except (Incomplete, openai.APIConnectionError) as exc:  # a timeout is one too
            print(f"llm_stream: try {attempt + 1}: {exc}", file=sys.stderr)
    else:
        print("llm_stream: no complete reply; giving up", file=sys.stderr)
        return 1
    save(a.state, answer)
    print(f"answer: {answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
