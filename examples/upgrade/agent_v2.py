"""An invoicing agent, version 2: a compatible release of ``agent_v1.py``.

    python agent_v2.py --state DIR [--run-id ID]

The code is reorganised (an ``Invoice`` class, the notifications in a table) and it logs its
version on stderr, but it keeps what a run version 1 began depends on: the step names and
their order (the library refuses to resume a run whose steps differ from its journal:
``ResumeMismatch``, exit 70) and the effects, by kind and payload, in the same order. So a
run killed under version 1 and resumed by version 2 continues exactly as version 1's
crash-free run did, and the gate's ``upgrade`` family passes. Rename a step, or send the
receipt before the email, and it fails with a diff of where the resumed run parts from it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass

from crashpoint.checkpoint import open_run, open_store, run_main

VERSION = "2.0"
STEPS = ["load", "charge", "notify"]  # a run's steps are part of its recorded history


@dataclass(frozen=True)
class Invoice:
    id: str
    customer: str
    cents: int

    @property
    def amount(self) -> str:
        return f"{self.cents / 100:.2f}"


def load() -> dict[str, object]:
    return {"id": "inv-1042", "customer": "ana@example.com", "cents": 129900}


#: What ``notify`` sends, in this order (the order is part of the history too).
NOTIFICATIONS = (
    ("email", lambda inv: {"to": inv.customer, "text": f"invoice {inv.id}: {inv.amount} charged"}),
    ("receipt", lambda inv: {"invoice": inv.id, "to": inv.customer}),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True)
    ap.add_argument("--run-id", default="invoice-1042")
    args = ap.parse_args()
    print(f"invoicing agent {VERSION}", file=sys.stderr)
    store = open_store(os.path.join(args.state, "checkpoints"))
    with open_run(store, args.run_id, steps=STEPS) as run:
        inv = Invoice(**run.step("load", load))
        charge = {"invoice": inv.id, "cents": inv.cents}
        run.step("charge", lambda: run.effect("charge_card", charge) is not None)

        def notify() -> list[str]:
            for kind, payload in NOTIFICATIONS:
                run.effect(kind, payload(inv))
            return [kind for kind, _payload in NOTIFICATIONS]

        sent = run.step("notify", notify)
        output = run.finish({"invoice": inv.id, "cents": inv.cents, "sent": sent})
    print(json.dumps(output, sort_keys=True))


if __name__ == "__main__":
    run_main(main)
