"""An order agent in two versions, for upgrade crashes and always-replay.

Steps load -> charge -> notify; ``charge`` applies the effect ``charge_card``, ``notify`` sends
``email`` then ``sms`` (each effect with a stable idempotency key). The checkpoint is one JSON
file written atomically (temp, fsync, rename, folder fsync) after each step, before the step
is reported completed; a restart runs the steps its state does not list as done. Version A is
the default. Flags make version B (what an upgrade resumes A's crashed run with):

``--v2``       a compatible refactor: other code (a class per channel), the same steps and
               effects in the same order: an upgrade that must pass;
``--rename``   B calls the charge step ``bill``: resuming A's state it does not know ``charge``
               was done and bills again (deduplicated by the key), under another step name;
``--reorder``  B sends ``sms`` before ``email``;
``--shuffle``  not a version: the notifications go to a set of six channels, in the set's
               order, which depends on the interpreter's string-hash seed (random per process):
               a nondeterministic agent, caught by always_replay.

Usage: versioned.py --state DIR [--v2 | --rename | --reorder | --shuffle]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from crashpoint import probe

ORDER = {"id": "order-7", "amount": 1250, "to": "ana@example.com"}


def save(path: str, state: dict[str, object]) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def effect(kind: str, payload: dict[str, object]) -> None:
    probe.effect(kind, payload, key=f"{ORDER['id']}:{kind}:{payload.get('channel', '')}")


class Channel:  # --v2: the same notifications, another shape of code
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def send(self, text: str) -> None:
        effect(self.kind, {"to": ORDER["to"], "text": text})


def notify(args: argparse.Namespace) -> int:
    text = f"order {ORDER['id']} charged {ORDER['amount']}"
    if args.shuffle:
        channels = {"email", "sms", "push", "slack", "pager", "fax"}
        for ch in channels:  # BUG: a set's order changes from one process to the next
            effect("notify", {"channel": ch, "text": text})
        return len(channels)
    kinds = ["sms", "email"] if args.reorder else ["email", "sms"]
    if args.v2:
        for channel in map(Channel, kinds):
            channel.send(text)
    else:
        for kind in kinds:
            effect(kind, {"to": ORDER["to"], "text": text})
    return len(kinds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--state", required=True)
    for flag in ("--v2", "--rename", "--reorder", "--shuffle"):
        ap.add_argument(flag, action="store_true")
    args = ap.parse_args()
    path = os.path.join(args.state, "state.json")
    try:
        with open(path) as f:
            state = json.load(f)
    except FileNotFoundError:
        state = {"done": [], "results": {}}
    charge = "bill" if args.rename else "charge"
    for step in ("load", charge, "notify"):
        if step in state["done"]:
            continue
        probe.step_started(step)
        if step == "load":
            result: object = dict(ORDER)
        elif step == "notify":
            result = notify(args)
        else:
            effect("charge_card", {"order": ORDER["id"], "amount": ORDER["amount"]})
            result = ORDER["amount"]
        state["done"].append(step)
        state["results"][step] = result
        save(path, state)
        probe.step_completed(step)
    print(json.dumps({"order": ORDER["id"], "charged": ORDER["amount"], "notified": True}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
