"""A ticket-triage agent written the way agents are written: the OpenAI SDK for the model,
httpx for the webhook, a plain JSON file for its progress. It does not import crashpoint.

For each ticket it asks the model for a label, then posts the label to a webhook. Its
endpoints are configuration, as in any deployment: the SDK reads ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY``, the webhook comes from ``--webhook``. Under the gate they point at the
harness's stand-in services, so every model call and every POST is a boundary the harness can
kill at, and is judged (``exactly_once``, ``no_repeated_llm_calls``).

As written (no ``--fixed``), it has the two bugs the gate is for:

* it records a ticket as done only after the webhook, so a crash after the model answered
  asks the model again on restart (a re-billed call);
* it posts without an ``Idempotency-Key``, so a crash after the webhook was delivered and
  before the agent recorded it sends the same webhook twice.

``--fixed`` records the label as soon as the model gave it, and sends a key derived from the
ticket, which the webhook's service uses to deduplicate the re-sent request.

    python agent.py --state DIR --webhook URL [--fixed]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import httpx
from openai import OpenAI

TICKETS = ["printer on fire", "invoice charged twice", "password reset loop"]


def load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            state: dict[str, Any] = json.load(f)
            return state
    except FileNotFoundError:
        return {"labels": {}, "posted": []}


def save(path: str, state: dict[str, Any]) -> None:
    """Write the whole state atomically and durably (temp file, fsync, rename, fsync dir)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for the agent's progress file")
    ap.add_argument("--webhook", required=True, help="URL the labels are posted to")
    ap.add_argument("--fixed", action="store_true", help="record before acting, send keys")
    args = ap.parse_args(argv)
    path = os.path.join(args.state, "triage.json")
    state = load(path)
    model = OpenAI(max_retries=0)  # base URL and key from the environment
    with httpx.Client(timeout=10) as web:
        for n, ticket in enumerate(TICKETS):
            tid = f"T-{n + 1}"
            if tid in state["posted"]:
                continue
            label = state["labels"].get(tid)
            if label is None:
                reply = model.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=[
                        {"role": "system", "content": "Label the ticket in one word."},
                        {"role": "user", "content": f"{tid}: {ticket}"},
                    ],
                )
                label = (reply.choices[0].message.content or "").strip()
                state["labels"][tid] = label
                if args.fixed:
                    save(path, state)  # the answer is kept: a restart does not ask again
            headers = {"Idempotency-Key": f"triage-{tid}"} if args.fixed else {}
            r = web.post(args.webhook, json={"ticket": tid, "label": label}, headers=headers)
            r.raise_for_status()
            state["posted"].append(tid)
            save(path, state)
    for tid in sorted(state["labels"]):
        print(tid, state["labels"][tid])
    return 0


if __name__ == "__main__":
    sys.exit(main())
