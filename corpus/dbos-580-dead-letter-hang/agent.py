"""A nightly ops report on DBOS that caps its recovery attempts, as DBOS documents for workflows
that crash their process.

The report workflow reads the night's metrics, has the renderer build the report and publishes
it (one step each, posting to the ops service at ``--http`` with an Idempotency-Key from the
workflow id and the step). A report that takes its process down every time (the renderer runs
out of memory on a bad night, say) must not crash-loop the service: the workflow is declared
with ``max_recovery_attempts=1``, so DBOS moves it to MAX_RECOVERY_ATTEMPTS_EXCEEDED (its dead
letter) at its third start instead of running it again. The process launches DBOS on a SQLite
system database in ``--state`` (launching recovers the PENDING workflows a crashed process
left), starts the night's report under its workflow id unless it exists, and prints its result;
an error (the dead letter included) ends the process with its traceback.

Nothing here imports crashpoint: the harness sees the HTTP requests.

    python agent.py --state DIR --http URL
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


def _post(path: str, body: dict[str, Any], key: str) -> Any:
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        HTTP + path, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310
        return json.loads(r.read() or b"{}")


@DBOS.step()
def metrics(night: str) -> dict[str, Any]:
    _post("/metrics/query", {"night": night}, f"{DBOS.workflow_id}:metrics")
    return {"night": night, "errors": 3, "p99_ms": 420}


@DBOS.step()
def render(data: dict[str, Any]) -> str:
    _post("/render", data, f"{DBOS.workflow_id}:render")
    return f"night {data['night']}: {data['errors']} errors, p99 {data['p99_ms']} ms"


@DBOS.step()
def publish(report: str) -> None:
    _post("/reports", {"report": report}, f"{DBOS.workflow_id}:publish")


@DBOS.workflow(max_recovery_attempts=1)
def nightly_report(night: str) -> str:
    report = render(metrics(night))
    publish(report)
    return report


def main(argv: list[str] | None = None) -> int:
    global HTTP
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder of the SQLite system database")
    ap.add_argument("--http", required=True, help="base URL of the ops service")
    ap.add_argument("--night", default="2026-11-26")
    args = ap.parse_args(argv)
    HTTP = args.http.rstrip("/")
    config: DBOSConfig = {
        "name": "corpus-dbos-nightly",
        "system_database_url": "sqlite:///" + os.path.join(args.state, "dbos.sqlite"),
        "run_admin_server": False,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers the PENDING workflows a crashed process left
    wid = f"report-{args.night}"
    if DBOS.get_workflow_status(wid) is None:
        with SetWorkflowID(wid):
            handle = DBOS.start_workflow(nightly_report, args.night)
    else:  # started before a crash: launching recovered it (or dead-lettered it)
        handle = DBOS.retrieve_workflow(wid)
    print(handle.get_result())
    return 0


if __name__ == "__main__":
    sys.exit(main())
