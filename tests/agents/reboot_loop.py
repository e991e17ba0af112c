"""An ops agent that reboots the host it runs on: the reboot loop of the agent trackers.

No crashpoint import, only urllib. It runs three commands, each a POST to the HTTP stand-in
(``$CRASHPOINT_HTTP``): ``/update`` (install updates), ``/reboot`` (restart the host) and
``/report`` (say it is done), recording each command done in ``STATE_DIR/state.json`` (temp
file, fsync, rename) only once the service answered. The reboot takes the agent down with it
(under the harness: a kill in the request's in-doubt window, on every attempt), so the command
is never recorded done, and a restarted agent re-sends it blindly: a reboot loop.

``--max-attempts K`` is the fix: the agent counts its starts in its state (durably, before any
command) and, started more than K times with the run unfinished, gives up: one line on stderr
saying so, exit 69 (the reference library's "dead-lettered"), no command sent; the count stays,
so every later start refuses the same way. ``--keyed`` sends each command with an
``Idempotency-Key`` (the run id and the command), so a re-sent command is deduplicated.
``--quiet-stop`` gives up with exit 1 and nothing on stderr (a stop that says nothing).
``--resend`` gives up only after sending its first command (``/update``) once more, keyless.
``--forgetful`` resets its count when it gives up, so the next start runs (and loops) again.

Usage: reboot_loop.py STATE_DIR [--max-attempts K] [--keyed] [--quiet-stop] [--resend]
                      [--forgetful]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request

COMMANDS = ("update", "reboot", "report")


def post(url: str, body: dict[str, object], key: str | None) -> int:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    req = urllib.request.Request(  # noqa: S310 - loopback
        url, data=json.dumps(body).encode(), method="POST", headers=headers
    )
    with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - loopback
        return int(resp.status)


def save(path: str, state: dict[str, object]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
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
    ap.add_argument("state")
    ap.add_argument("--max-attempts", type=int, default=0)
    ap.add_argument("--keyed", action="store_true")
    ap.add_argument("--quiet-stop", action="store_true")
    ap.add_argument("--resend", action="store_true")
    ap.add_argument("--forgetful", action="store_true")
    a = ap.parse_args()
    base = os.environ.get("CRASHPOINT_HTTP", "")
    if not base:
        print("CRASHPOINT_HTTP is not set", file=sys.stderr)
        return 2
    os.makedirs(a.state, exist_ok=True)
    path = os.path.join(a.state, "state.json")
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {"done": [], "starts": 0}
    state["starts"] = int(state.get("starts", 0)) + 1
    save(path, state)  # counted before anything is sent
    run_id = os.environ.get("CRASHPOINT_RUN_ID", "local")
    done = list(state.get("done", []))
    if a.max_attempts and state["starts"] > a.max_attempts and len(done) < len(COMMANDS):
        if a.resend:
            post(f"{base}/update", {"command": "update", "host": "web-1"}, None)
        if a.forgetful:
            state["starts"] = 0
            save(path, state)
        if a.quiet_stop:
            return 1
        print(
            f"reboot_loop: gave up after {a.max_attempts} attempts: command "
            f"{next(c for c in COMMANDS if c not in done)!r} never finished; run "
            "dead-lettered, not resuming",
            file=sys.stderr,
        )
        return 69
    for cmd in COMMANDS:
        if cmd in done:
            continue
        key = f"{run_id}:{cmd}" if a.keyed else None
        post(f"{base}/{cmd}", {"command": cmd, "host": "web-1"}, key)
        done.append(cmd)
        state["done"] = done
        save(path, state)
    print("updated, rebooted and reported web-1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
