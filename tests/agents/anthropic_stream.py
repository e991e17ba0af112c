"""An agent that streams a model reply with the Anthropic SDK, the ordinary way: no crashpoint
import.

    python anthropic_stream.py STATE_DIR [--keep-partial] [--retries 3] [--timeout 10]

The SDK finds the model through ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` (under the
harness: the Anthropic-compatible face of the LLM stand-in, and the trial's token). It asks
for a summary with ``messages.stream``, joins the ``text_delta`` pieces, saves the answer in
STATE_DIR (temp file, fsync, rename) and prints ``answer: <text>``. A run that finds the
answer saved prints it and stops.

By default it knows a stream may end early: a reply is complete only once ``message_stop``
came. An incomplete stream, a connection error (a reset) or a read timeout (a stall) throws
the partial text away and asks again, at most ``--retries`` times.

``--keep-partial`` (the bug): whatever the stream delivered is the answer. The SDK ends the
iteration without an error when the connection closes before ``message_stop``, so a cut
stream becomes a truncated answer, saved and printed.
"""

from __future__ import annotations

import argparse
import os
import sys

import anthropic

QUESTION = "Summarise crash recovery in one sentence."


class Incomplete(Exception):
    """The stream ended without message_stop."""


def save(state: str, text: str) -> None:
    tmp = os.path.join(state, "answer.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(state, "answer.txt"))


def ask(client: anthropic.Anthropic, keep_partial: bool) -> str:
    parts: list[str] = []
    done = False
    with client.messages.stream(
        model="stand-in-claude",
        max_tokens=512,
        messages=[{"role": "user", "content": QUESTION}],
    ) as stream:
        for ev in stream:
            if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                parts.append(ev.delta.text)
            elif ev.type == "message_stop":
                done = True
    if not done and not keep_partial:
        raise Incomplete(f"the stream ended without message_stop after {len(parts)} pieces")
    return "".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("state")
    ap.add_argument("--keep-partial", action="store_true")
    ap.add_argument("--retries", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=10.0)
    a = ap.parse_args()
    os.makedirs(a.state, exist_ok=True)
    saved = os.path.join(a.state, "answer.txt")
    if os.path.exists(saved):
        with open(saved, encoding="utf-8") as f:
            print(f"answer: {f.read()}")
        return 0
    client = anthropic.Anthropic(max_retries=0, timeout=a.timeout)
    for attempt in range(a.retries + 1):
        try:
            answer = ask(client, a.keep_partial)
            break
        except (Incomplete, anthropic.APIConnectionError) as exc:  # a timeout is one too
            print(f"anthropic_stream: try {attempt + 1}: {exc}", file=sys.stderr)
    else:
        print("anthropic_stream: no complete reply; giving up", file=sys.stderr)
        return 1
    save(a.state, answer)
    print(f"answer: {answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
