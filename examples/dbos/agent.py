"""A billing workflow written with DBOS: fetch the order, send the invoice, report.

Three DBOS steps in one workflow, checkpointed by DBOS in a SQLite system database under
``--state``. The workflow has a fixed id, so a restarted process finds it PENDING and DBOS
resumes it: recorded steps are replayed from the database, the first unrecorded one runs.

``send`` posts the invoice to ``--webhook`` (under the gate: the harness's HTTP stand-in, an
effect it judges). DBOS runs a step at least once: if the process dies after the POST and
before DBOS has recorded the step, the step runs again on recovery. As written (no
``--fixed``) the POST has no ``Idempotency-Key``, so that re-run sends the invoice twice.
``--fixed`` sends a key derived from the workflow id and the step name, the same in every
re-run, so the receiver applies it once.

The only crashpoint line: ``@crashpoint_step()`` in place of ``@DBOS.step()``, which reports
each step's start, its return (side effect done, checkpoint pending) and its durable
completion to the harness.

Several resumers: DBOS recovers, at launch, the PENDING workflows of its own executor id
(``--executor-id``, else ``$DBOS__VMID``, else ``local``). Two processes with one id both
recover the same workflow, and one started while the other runs it runs its step again; give
each process its own id, the same in every restart of that process's slot.

    python agent.py --state DIR --webhook URL [--fixed] [--executor-id ID]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

from crashpoint.adapters.dbos import crashpoint_step

WORKFLOW_ID = "invoice-1042"  # fixed: a restart resumes this workflow, not a new one
WEBHOOK = ""
FIXED = False


@crashpoint_step()
def fetch(order_id: str) -> dict[str, Any]:
    return {"order": order_id, "customer": "ada@example.com", "total_cents": 4200}


@crashpoint_step()
def send(invoice: dict[str, Any]) -> int:
    headers = {"Content-Type": "application/json"}
    if FIXED:  # the same key in every re-run of this step of this workflow
        headers["Idempotency-Key"] = f"{DBOS.workflow_id}:send"
    body = json.dumps(invoice, sort_keys=True).encode()
    req = urllib.request.Request(  # noqa: S310 (http URL)
        WEBHOOK,
        data=body,
        headers=headers,
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 (--webhook: an http URL)
        return int(r.status)


@crashpoint_step()
def report(invoice: dict[str, Any], status: int) -> str:
    return f"invoice {invoice['order']} for {invoice['total_cents']} cents sent ({status})"


@DBOS.workflow()
def billing(order_id: str) -> str:
    invoice = fetch(order_id)
    status = send(invoice)
    return report(invoice, status)


def main(argv: list[str] | None = None) -> int:
    global WEBHOOK, FIXED
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", required=True, help="folder for DBOS's SQLite system database")
    ap.add_argument("--webhook", required=True, help="URL the invoice is posted to")
    ap.add_argument("--fixed", action="store_true", help="post with an idempotency key")
    ap.add_argument(
        "--executor-id",
        default=None,
        help="this process's DBOS executor id (default $DBOS__VMID, else 'local'): "
        "one per resumer, stable across its restarts",
    )
    args = ap.parse_args(argv)
    WEBHOOK, FIXED = args.webhook, args.fixed
    db = os.path.join(os.path.abspath(args.state), "dbos.sqlite")
    config: DBOSConfig = {
        "name": "crashpoint-dbos-example",
        "system_database_url": f"sqlite:///{db}",
        "log_level": "WARNING",
        "executor_id": args.executor_id,  # None: $DBOS__VMID, else "local"
    }
    DBOS(config=config)
    DBOS.launch()  # recovers this executor's PENDING workflows (a crashed earlier run)
    if DBOS.get_workflow_status(WORKFLOW_ID) is not None:
        result = DBOS.retrieve_workflow(WORKFLOW_ID).get_result()  # resumed (or done)
    else:
        with SetWorkflowID(WORKFLOW_ID):
            result = billing("1042")
    print(result)  # the result is in the system database by now; DBOS.destroy() would only
    return 0  # wait ~1 s for DBOS's idle queue threads before this short process exits


if __name__ == "__main__":
    sys.exit(main())
