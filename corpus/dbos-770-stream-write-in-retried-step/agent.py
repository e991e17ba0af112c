"""A helpdesk assistant on DBOS that reports its progress on a stream, written from inside its
steps as the report shows.

The workflow answers a batch of tickets: for each, a step asks the model for a reply (the
OpenAI-compatible endpoint at ``--llm``), and a second step writes "answering <ticket>" to the
workflow's stream ``progress`` (``DBOS.write_stream``) and posts the reply to the helpdesk
(``--http``, with an Idempotency-Key from the workflow id and the ticket). The sending step may
be retried (``retries_allowed=True``), as DBOS advises for steps that call flaky services. With
``--progress workflow`` (the documented workaround) the workflow writes each progress entry
itself, before the sending step. The process launches DBOS on a SQLite system database in
``--state``, starts the batch under its workflow id unless it exists, prints the stream as it
is read (``DBOS.read_stream``) and then the result.

Nothing here imports crashpoint: the harness sees the model calls and the HTTP requests.

    python agent.py --state DIR --llm URL --http URL [--progress step|workflow]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

LLM = ""
HTTP = ""
PROGRESS = "step"
TICKETS = ("T-101", "T-102")


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        url, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    for k, v in headers.items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310
        return json.loads(r.read() or b"{}")


@DBOS.step()
def draft(ticket: str) -> str:
    reply = _post(
        LLM + "/chat/completions",
        {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"Answer {ticket}."}]},
        {"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "none")},
    )
    return str(reply["choices"][0]["message"]["content"])


@DBOS.step(retries_allowed=True, max_attempts=3, interval_seconds=0.5)
def send(ticket: str, text: str) -> None:
    if PROGRESS == "step":
        DBOS.write_stream("progress", f"answering {ticket}")
    key = f"{DBOS.workflow_id}:{ticket}"
    _post(HTTP + "/replies", {"ticket": ticket, "text": text}, {"Idempotency-Key": key})


@DBOS.workflow()
def answer_tickets(tickets: list[str]) -> str:
    for ticket in tickets:
        text = draft(ticket)
        if PROGRESS == "workflow":
            DBOS.write_stream("progress", f"answering {ticket}")
        send(ticket, text)
    DBOS.close_stream("progress")
    return f"{len(tickets)} tickets answered"


def main(argv: list[str] | None = None) -> int:
    global LLM, HTTP, PROGRESS
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder of the SQLite system database")
    ap.add_argument("--llm", required=True, help="OpenAI-compatible base URL (…/v1)")
    ap.add_argument("--http", required=True, help="base URL of the helpdesk")
    ap.add_argument("--progress", choices=("step", "workflow"), default="step")
    ap.add_argument("--workflow-id", default="tickets-0412")
    args = ap.parse_args(argv)
    LLM, HTTP, PROGRESS = args.llm.rstrip("/"), args.http.rstrip("/"), args.progress
    config: DBOSConfig = {
        "name": "corpus-dbos-helpdesk",
        "system_database_url": "sqlite:///" + os.path.join(args.state, "dbos.sqlite"),
        "run_admin_server": False,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers the PENDING workflows a crashed process left
    if DBOS.get_workflow_status(args.workflow_id) is None:
        with SetWorkflowID(args.workflow_id):
            handle = DBOS.start_workflow(answer_tickets, list(TICKETS))
    else:
        handle = DBOS.retrieve_workflow(args.workflow_id)
    for entry in DBOS.read_stream(args.workflow_id, "progress"):
        print(entry, flush=True)
    print(handle.get_result())
    return 0


if __name__ == "__main__":
    sys.exit(main())
