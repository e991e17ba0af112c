"""A checkout workflow on DBOS, started under a fixed workflow id, as DBOS documents it.

DBOS's workflow id is its idempotency key: "if you start a workflow with the id of one that
already exists, DBOS returns its handle" (its docs: Workflow IDs and Idempotency). So the
workflow's steps carry no key of their own: ``fetch`` loads the order, ``charge`` posts the
charge to the payment service (POST, no Idempotency-Key), ``receipt`` posts the receipt
(POST, no key). Two
processes that start the same order's checkout at once (a double-fired job, two replicas
taking the same request) must run its body once between them.

Each process is one DBOS executor with an executor id of its own (``replica-<pid>``), as
DBOS asks of processes that share a system database. The system database is PostgreSQL
(``--database``). Nothing here imports crashpoint: the harness sees the HTTP requests.

    python agent.py --database URL --http URL [--order 1042] [--workflow-id ID]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

HTTP = ""


def _call(method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body, sort_keys=True).encode()
    req = urllib.request.Request(HTTP + path, data=data, method=method)  # noqa: S310 (http)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 (an http URL)
        return json.loads(r.read() or b"null")


@DBOS.step()
def fetch(order_id: str) -> dict[str, Any]:
    return {"order": order_id, "customer": "ada@example.com", "total_cents": 4200}


@DBOS.step()
def charge(order: dict[str, Any]) -> None:
    _call("POST", "/charges", {"order": order["order"], "cents": order["total_cents"]})


@DBOS.step()
def receipt(order: dict[str, Any]) -> None:
    _call("POST", "/receipts", {"order": order["order"], "to": order["customer"]})


@DBOS.workflow()
def checkout(order_id: str) -> str:
    order = fetch(order_id)
    charge(order)
    receipt(order)
    return f"order {order_id}: charged {order['total_cents']} cents, receipt sent"


def main(argv: list[str] | None = None) -> int:
    global HTTP
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--database", required=True, help="the system database (PostgreSQL URL)")
    ap.add_argument("--http", required=True, help="base URL of the order and payment services")
    ap.add_argument("--order", default="1042")
    ap.add_argument("--workflow-id", default="", help="default: checkout-<order>")
    args = ap.parse_args(argv)
    HTTP = args.http.rstrip("/")
    config: DBOSConfig = {
        "name": "corpus-dbos-checkout",
        "system_database_url": args.database,
        "executor_id": f"replica-{os.getpid()}",  # one executor id per process
        "run_admin_server": False,  # two processes on one machine: no shared admin port
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    workflow_id = args.workflow_id or f"checkout-{args.order}"
    with SetWorkflowID(workflow_id):  # the idempotency key DBOS documents
        result = checkout(args.order)
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
