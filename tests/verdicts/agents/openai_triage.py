"""Ticket triage with the OpenAI SDK: ask the model for a label, post it to a webhook.

The SDK reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (under the gate: the LLM stand-in)
and retries a failed call itself (``max_retries=2``, its default backoff). Progress lives in one
JSON file, saved whole and durably (temp file, fsync, rename, fsync of the folder). Each label
is saved as soon as the model gave it, and each webhook POST carries an Idempotency-Key from
the ticket. The webhook is retried on 5xx with backoff; after three tries the agent gives up
with exit 1 and leaves the rest to the next run.

Planted bugs (``--bug``):

* ``keyless``: the webhook is posted without a key;
* ``no_save_reply``: the label is saved only with the ticket's webhook, so a restart after the
  model answered asks the model again (re-billed);
* ``save_in_place``: the progress file is rewritten in place (no temp file, no rename);
* ``no_fsync``: the temp file is renamed without an fsync (power loss may leave it empty).

    python openai_triage.py --state DIR --webhook URL [--bug NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import httpx
from openai import OpenAI

TICKETS = ["printer on fire", "invoice charged twice", "password reset loop"]
BUGS = ("keyless", "no_save_reply", "save_in_place", "no_fsync")


def load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            state: dict[str, Any] = json.load(f)
            return state
    except FileNotFoundError:
        return {"labels": {}, "posted": []}


def save(path: str, state: dict[str, Any], bug: str | None) -> None:
    data = json.dumps(state, sort_keys=True)
    if bug == "save_in_place":
        with open(path, "w", encoding="utf-8") as f:
            f.write(data)
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        if bug != "no_fsync":
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if bug != "no_fsync":
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def post_label(web: httpx.Client, url: str, body: Any, key: str | None) -> None:
    headers = {"Idempotency-Key": key} if key else {}
    for attempt in range(3):
        r = web.post(url, json=body, headers=headers)
        if r.status_code < 500:
            r.raise_for_status()
            return
        time.sleep(0.2 * 2**attempt)
    raise SystemExit(f"webhook still failing ({r.status_code}); giving up, will resume later")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True)
    ap.add_argument("--webhook", required=True)
    ap.add_argument("--bug", choices=BUGS, default=None)
    args = ap.parse_args()
    path = os.path.join(args.state, "triage.json")
    state = load(path)
    model = OpenAI(max_retries=2)
    with httpx.Client(timeout=5) as web:
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
                if args.bug != "no_save_reply":
                    save(path, state, args.bug)  # the answer is kept: a restart won't ask again
            key = None if args.bug == "keyless" else f"triage-{tid}"
            post_label(web, args.webhook, {"ticket": tid, "label": label}, key)
            state["posted"].append(tid)
            save(path, state, args.bug)
    for tid in sorted(state["labels"]):
        print(tid, state["labels"][tid])
    return 0


if __name__ == "__main__":
    sys.exit(main())
