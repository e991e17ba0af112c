"""An invoicing agent, version 1: what a crash across an upgrade starts from.

    python agent_v1.py --state DIR [--run-id ID]

Built on ``crashpoint.checkpoint``: three steps, ``load`` (the invoice), ``charge`` (the effect
``charge_card``) and ``notify`` (the effects ``email``, then ``receipt``). Each step's result
and each effect's intent and outcome are durable before the next begins, so a run killed
anywhere resumes where it stopped and applies each effect once. Its output is one line of
JSON.

``agent_v2.py`` is the next release: the same steps and effects in the same order, written
differently. Under the gate (``scenarios/upgrade.scenario.yaml``) every run is killed under
version 1 at one boundary and resumed by version 2 (the ``upgrade`` family), and each
resumed run must continue as version 1's crash-free run did (``replay_divergence``).
"""

from __future__ import annotations

import argparse
import json
import os

from crashpoint.checkpoint import open_run, open_store, run_main

STEPS = ["load", "charge", "notify"]
INVOICE = {"id": "inv-1042", "customer": "ana@example.com", "cents": 129900}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True)
    ap.add_argument("--run-id", default="invoice-1042")
    args = ap.parse_args()
    store = open_store(os.path.join(args.state, "checkpoints"))
    with open_run(store, args.run_id, steps=STEPS) as run:
        invoice = run.step("load", lambda: dict(INVOICE))
        run.step(
            "charge",
            lambda: (
                run.effect("charge_card", {"invoice": invoice["id"], "cents": invoice["cents"]})
                is not None
            ),
        )

        def notify() -> list[str]:
            text = f"invoice {invoice['id']}: {invoice['cents'] / 100:.2f} charged"
            run.effect("email", {"to": invoice["customer"], "text": text})
            run.effect("receipt", {"invoice": invoice["id"], "to": invoice["customer"]})
            return ["email", "receipt"]

        sent = run.step("notify", notify)
        output = run.finish({"invoice": invoice["id"], "cents": invoice["cents"], "sent": sent})
    print(json.dumps(output, sort_keys=True))


if __name__ == "__main__":
    run_main(main)
