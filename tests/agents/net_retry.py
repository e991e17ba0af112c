"""An agent that POSTs a webhook with ``urllib`` and retries it: no crashpoint import.

    python net_retry.py STATE_DIR [--keyed] [--url URL] [--path /hook] [--timeout 1]
                                  [--retries 3] [--no-backoff]

It POSTs ``{"msg": "hello"}`` to ``$CRASHPOINT_HTTP/hook`` (or ``URL/hook``). On a 5xx or 429,
a reset connection or a timeout it tries again, at most ``--retries`` times (backing off 50 ms,
100 ms, ... unless ``--no-backoff``); then it records ``posted`` in STATE_DIR (temp + rename)
and prints ``posted``. A run that finds ``posted`` prints it and stops.

``--keyed``: each request carries an ``Idempotency-Key`` derived from its state: a key drawn
once and written to STATE_DIR before the first try, so every retry and every restart sends
the same key and the service applies the webhook once. Without it (the bug) a retry after a
timeout, where the service applied the request and the reply got lost, posts it twice.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid


def save(state: str, name: str, text: str) -> None:
    tmp = os.path.join(state, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(state, name))


def post(url: str, key: str | None, timeout: float) -> int:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an HTTP URL: {url!r}")
    req = urllib.request.Request(  # noqa: S310
        url,
        data=json.dumps({"msg": "hello"}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    if key:
        req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (checked above)
        resp.read()
        return int(resp.status)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("state")
    ap.add_argument("--keyed", action="store_true")
    ap.add_argument("--url", default=os.environ.get("CRASHPOINT_HTTP", ""))
    ap.add_argument("--path", default="/hook")
    ap.add_argument("--timeout", type=float, default=1.0)
    ap.add_argument("--retries", type=int, default=3)
    ap.add_argument("--no-backoff", action="store_true")
    a = ap.parse_args()
    if not a.url:
        print("net_retry: no URL (set CRASHPOINT_HTTP or --url)", file=sys.stderr)
        return 2
    os.makedirs(a.state, exist_ok=True)
    if os.path.exists(os.path.join(a.state, "posted")):
        print("posted")
        return 0
    key = None
    if a.keyed:
        kpath = os.path.join(a.state, "key")
        if not os.path.exists(kpath):
            save(a.state, "key", f"hook-{uuid.uuid4()}")
        with open(kpath) as f:
            key = f.read().strip()
    url = a.url.rstrip("/") + a.path
    for attempt in range(a.retries + 1):
        try:
            post(url, key, a.timeout)
            break
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                raise
            why = f"HTTP {exc.code}"
        except (
            urllib.error.URLError,
            ConnectionError,
            TimeoutError,
            http.client.RemoteDisconnected,
        ) as exc:
            why = f"{type(exc).__name__}: {exc}"
        print(f"net_retry: try {attempt + 1} failed ({why})", file=sys.stderr)
        if attempt == a.retries:
            print("net_retry: giving up", file=sys.stderr)
            return 1
        if not a.no_backoff:
            time.sleep(0.05 * 2**attempt)
    save(a.state, "posted", "1")
    print("posted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
