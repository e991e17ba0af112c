"""A briefing agent that streams its model replies, written with the standard library only
(``urllib``, server-sent events read line by line): no SDK, no crashpoint import.

For each topic it asks the model (``$OPENAI_BASE_URL``: under the gate, the harness's
stand-in) for a one-line brief with ``"stream": true``, joins the text deltas, and records the
brief in its progress file (temp file, fsync, rename, folder fsync) before the next topic; at
the end it prints every brief. A restart skips the topics already recorded.

A stream can end early: the connection closes before the last event (a proxy, a load balancer,
a provider's hiccup), or is reset, or stalls until a timeout.

* As written (no ``--fixed``), whatever arrived before the stream ended is the brief: a stream
  cut part-way leaves a truncated brief, recorded and printed as if it were whole.
* ``--fixed`` takes a reply only when the stream said it was complete (a ``finish_reason`` on
  its last choice and the ``data: [DONE]`` line); otherwise, or on a reset or a read timeout,
  it throws the partial text away and asks again (at most 3 times).

``--api anthropic`` asks the Anthropic Messages API instead (``$ANTHROPIC_BASE_URL`` +
``/v1/messages``, its key ``$ANTHROPIC_API_KEY`` in ``x-api-key``): the text is in the
``text_delta`` events, and a stream is complete only with its ``message_stop`` event.

    python agent.py --state DIR [--fixed] [--timeout SECONDS] [--api openai|anthropic]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

TOPICS = ["checkpoints", "idempotency keys"]


class Incomplete(Exception):
    """The stream ended without saying it was complete."""


def load(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            briefs: dict[str, str] = json.load(f)
            return briefs
    except FileNotFoundError:
        return {}


def save(path: str, briefs: dict[str, Any]) -> None:
    """Write the whole progress file atomically and durably."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(briefs, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stream_brief(base: str, topic: str, timeout: float, fixed: bool) -> str:
    """One streamed chat completion; its text. ``fixed``: raise Incomplete unless the stream
    ended with a finish_reason and ``[DONE]``."""
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"OPENAI_BASE_URL is not an HTTP URL: {base!r}")
    body = {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": f"Brief me on {topic} in one line."}],
    }
    req = urllib.request.Request(  # noqa: S310 (an http(s) URL, checked above)
        base.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}",
        },
        method="POST",
    )
    parts: list[str] = []
    finish = None
    done = False
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            for choice in json.loads(line[6:]).get("choices", []):
                parts.append(choice.get("delta", {}).get("content") or "")
                finish = choice.get("finish_reason") or finish
    if fixed and not (done and finish):
        raise Incomplete(f"the stream ended after {len(parts)} pieces, without [DONE]")
    return "".join(parts)


def stream_messages(base: str, topic: str, timeout: float, fixed: bool) -> str:
    """One streamed Anthropic message; its text. ``fixed``: raise Incomplete unless the
    stream ended with ``message_stop``."""
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"ANTHROPIC_BASE_URL is not an HTTP URL: {base!r}")
    body = {
        "model": "claude-stand-in",
        "max_tokens": 256,
        "stream": True,
        "messages": [{"role": "user", "content": f"Brief me on {topic} in one line."}],
    }
    req = urllib.request.Request(  # noqa: S310 (an http(s) URL, checked above)
        base.rstrip("/") + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""),
            "anthropic-version": "2023-06-01",
        },
        method="POST",
    )
    parts: list[str] = []
    done = False
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            ev = json.loads(line[6:])
            if ev.get("type") == "content_block_delta":
                parts.append(ev.get("delta", {}).get("text") or "")
            elif ev.get("type") == "message_stop":
                done = True
    if fixed and not done:
        raise Incomplete(f"the stream ended after {len(parts)} pieces, without message_stop")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the agent's progress file")
    ap.add_argument("--fixed", action="store_true", help="ask again when a stream ends early")
    ap.add_argument("--timeout", type=float, default=10.0, help="read timeout, seconds")
    ap.add_argument("--api", choices=("openai", "anthropic"), default="openai")
    args = ap.parse_args(argv)
    var = "ANTHROPIC_BASE_URL" if args.api == "anthropic" else "OPENAI_BASE_URL"
    ask = stream_messages if args.api == "anthropic" else stream_brief
    base = os.environ.get(var, "")
    if not base:
        print(f"agent: {var} is not set (the model's endpoint)", file=sys.stderr)
        return 2
    os.makedirs(args.state, exist_ok=True)
    path = os.path.join(args.state, "briefs.json")
    briefs = load(path)
    for topic in TOPICS:
        if topic in briefs:
            continue
        for attempt in range(4 if args.fixed else 1):
            try:
                briefs[topic] = ask(base, topic, args.timeout, args.fixed)
                break
            except (Incomplete, OSError, http.client.HTTPException) as exc:
                if not args.fixed:
                    raise  # as written: a reset stream is a crash, and the restart asks again
                print(f"agent: {topic}: try {attempt + 1}: {exc}", file=sys.stderr)
        else:
            print(f"agent: {topic}: no complete reply after 4 tries", file=sys.stderr)
            return 1
        save(path, briefs)  # recorded before the next topic: a restart does not ask again
    for topic in TOPICS:
        print(f"{topic}: {briefs[topic]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
