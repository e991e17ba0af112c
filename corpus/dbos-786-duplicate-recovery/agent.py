"""A checkout service on DBOS whose restarts recover its workflows, as DBOS's quick start runs it.

Each process launches DBOS with the default executor id (``local``): launching recovers the
PENDING workflows of that executor id, those a crashed process left. Then it asks for the
order's checkout by its workflow id: the result if the workflow exists (recovered or done),
else it starts it (``SetWorkflowID``). Steps post to the payment service with an
Idempotency-Key from the workflow id and the step, as DBOS advises for steps (they run at
least once). The system database is PostgreSQL (``--database``).

Nothing here imports crashpoint: the harness sees the HTTP requests.

    python agent.py --database URL --http URL --workflow-id ID
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

HTTP = ""


def _post(path: str, body: dict[str, Any], key: str) -> None:
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        HTTP + path, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310 (a patient client)
        r.read()


@DBOS.step()
def fetch(order_id: str) -> dict[str, Any]:
    return {"order": order_id, "customer": "ada@example.com", "total_cents": 4200}


@DBOS.step()
def charge(order: dict[str, Any]) -> None:
    body = {"order": order["order"], "cents": order["total_cents"]}
    _post("/charges", body, f"{DBOS.workflow_id}:charge")


@DBOS.step()
def receipt(order: dict[str, Any]) -> None:
    _post("/receipts", {"order": order["order"]}, f"{DBOS.workflow_id}:receipt")


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
    ap.add_argument("--http", required=True, help="base URL of the payment service")
    ap.add_argument("--workflow-id", required=True)
    args = ap.parse_args(argv)
    HTTP = args.http.rstrip("/")
    config: DBOSConfig = {
        "name": "corpus-dbos-checkout",
        "system_database_url": args.database,
        "run_admin_server": False,  # several processes on one machine: no shared admin port
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers the PENDING workflows of this executor id (a crashed run's)
    if DBOS.get_workflow_status(args.workflow_id) is not None:  # started before: its result
        result = DBOS.retrieve_workflow(args.workflow_id).get_result()
    else:
        with SetWorkflowID(args.workflow_id):
            result = checkout("1042")
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
