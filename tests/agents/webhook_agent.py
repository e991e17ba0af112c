"""An agent as people write them: no crashpoint import, only urllib, a webhook per item.

For each of 3 items it POSTs ``{"item": i, "text": ...}`` to ``$CRASHPOINT_HTTP/hook``, then
records the item done in its state folder (temp file, fsync, rename). A restarted run skips
the items recorded done.

Without ``--keyed`` the POST carries no key (the usual bug): a kill after the webhook was
applied and before the agent recorded it (the in-doubt window) makes the next attempt post it
again, a duplicate the harness judges by content. With ``--keyed`` it sends an
``Idempotency-Key`` derived from its own state (the run id and the item), so the service
deduplicates the retry. ``--retries N`` retries a failed request (reset, timeout, 5xx) with
the same body (and key). Prints one line per item and exits 0.

Usage: webhook_agent.py STATE_DIR [--keyed] [--retries N] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request


def post(url: str, body: dict[str, object], key: str | None, timeout: float) -> str:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    req = urllib.request.Request(  # noqa: S310 - loopback
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers=headers,
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback
        return f"{resp.status} {resp.headers.get('Idempotent-Replayed', '')}".strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("state")
    ap.add_argument("--keyed", action="store_true")
    ap.add_argument("--retries", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=30.0)
    a = ap.parse_args()
    base = os.environ.get("CRASHPOINT_HTTP", "")
    if not base:
        print("CRASHPOINT_HTTP is not set", file=sys.stderr)
        return 2
    os.makedirs(a.state, exist_ok=True)
    done_path = os.path.join(a.state, "done.json")
    try:
        with open(done_path) as f:
            done = int(json.load(f))
    except (OSError, ValueError):
        done = 0
    run_id = os.environ.get("CRASHPOINT_RUN_ID", "local")
    for i in range(done, 3):
        body = {"item": i, "text": f"item {i} is ready"}
        key = f"{run_id}:hook:{i}" if a.keyed else None
        for n in range(a.retries + 1):
            try:
                got = post(base + "/hook", body, key, a.timeout)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                if n == a.retries:
                    print(f"item {i}: failed: {exc}", file=sys.stderr)
                    return 1
        tmp = done_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(i + 1, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, done_path)
        print(f"item {i}: {got}", file=sys.stderr)
    print("posted 3 items")
    return 0


if __name__ == "__main__":
    sys.exit(main())
