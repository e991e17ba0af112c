"""A billing workflow on DBOS: fetch the order, send the invoice, notify, report.

Four DBOS steps in one workflow with a fixed id, checkpointed by DBOS in its system database:
SQLite under ``--state`` by default, or PostgreSQL with ``--database URL``. A restarted process
finds the workflow PENDING and DBOS resumes it: recorded steps are replayed from the
database, the first unrecorded one runs. ``send`` POSTs the invoice to ``--webhook`` with an
Idempotency-Key from the workflow id and the step (DBOS runs a step at least once);
``notify`` sends through ``crashpoint.probe.effect``, keyed the same way.
``@crashpoint_step()`` stands in for ``@DBOS.step()`` and reports each step to the harness.

Planted bugs (``--bug``): ``keyless`` (``send`` posts without a key), ``effect_in_workflow``
(the notification is sent from the workflow function, outside any step: DBOS re-executes the
workflow function on recovery, so it is sent again).

    python dbos_billing.py --state DIR --webhook URL [--database URL] [--bug NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

from crashpoint import probe
from crashpoint.adapters.dbos import crashpoint_step

WORKFLOW_ID = "invoice-1042"
OPT: dict[str, Any] = {}


@crashpoint_step()
def fetch(order_id: str) -> dict[str, Any]:
    return {"order": order_id, "customer": "ada@example.com", "total_cents": 4200}


@crashpoint_step()
def send(invoice: dict[str, Any]) -> int:
    headers = {"Content-Type": "application/json"}
    if OPT["bug"] != "keyless":
        headers["Idempotency-Key"] = f"{DBOS.workflow_id}:send"
    req = urllib.request.Request(  # noqa: S310 (http URL)
        OPT["webhook"],
        data=json.dumps(invoice, sort_keys=True).encode(),
        headers=headers,
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
        return int(r.status)


@crashpoint_step()
def notify(invoice: dict[str, Any]) -> None:
    probe.effect("notify", {"to": invoice["customer"]}, key=f"{DBOS.workflow_id}:notify")


@crashpoint_step()
def report(invoice: dict[str, Any], status: int) -> str:
    return f"invoice {invoice['order']} for {invoice['total_cents']} cents sent ({status})"


@DBOS.workflow()
def billing(order_id: str) -> str:
    invoice = fetch(order_id)
    status = send(invoice)
    if OPT["bug"] == "effect_in_workflow":
        probe.effect("notify", {"to": invoice["customer"]})
    else:
        notify(invoice)
    return report(invoice, status)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True)
    ap.add_argument("--webhook", required=True)
    ap.add_argument("--database", default="", help="PostgreSQL URL (default: SQLite in --state)")
    ap.add_argument("--bug", choices=("keyless", "effect_in_workflow"), default=None)
    args = ap.parse_args()
    OPT.update(webhook=args.webhook, bug=args.bug)
    url = args.database or "sqlite:///" + os.path.join(os.path.abspath(args.state), "dbos.sqlite")
    config: DBOSConfig = {
        "name": "verdicts-dbos-billing",
        "system_database_url": url,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers this executor's PENDING workflows
    if DBOS.get_workflow_status(WORKFLOW_ID) is not None:
        result = DBOS.retrieve_workflow(WORKFLOW_ID).get_result()
    else:
        with SetWorkflowID(WORKFLOW_ID):
            result = billing("1042")
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
