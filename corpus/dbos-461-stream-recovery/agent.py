"""A research assistant on DBOS that streams its progress, as DBOS's streaming docs show.

The brief workflow asks the model for each section of a brief (one step each; the model is
the OpenAI-compatible endpoint at ``--llm``), writes each section to the workflow's stream
``progress`` (``DBOS.write_stream``, called from the workflow as DBOS documents), files the
brief with the documents service (a step posting to ``--http``, with an Idempotency-Key from
the workflow id) and closes the stream. The process launches DBOS on a SQLite system database
in ``--state`` (launching recovers the PENDING workflows a crashed process left), starts the
brief under its workflow id unless it exists, prints the stream as it is read
(``DBOS.read_stream``) and then the workflow's result.

Nothing here imports crashpoint: the harness sees the model calls and the HTTP requests.

    python agent.py --state DIR --llm URL --http URL
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
SECTIONS = ("background", "findings", "recommendation")


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
def draft(topic: str, section: str) -> str:
    reply = _post(
        LLM + "/chat/completions",
        {
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "user", "content": f"Write the {section} of a brief on {topic}."}
            ],
        },
        {"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "none")},
    )
    return str(reply["choices"][0]["message"]["content"])


@DBOS.step()
def file_brief(topic: str, sections: list[str]) -> None:
    key = f"{DBOS.workflow_id}:file"
    _post(HTTP + "/briefs", {"topic": topic, "sections": sections}, {"Idempotency-Key": key})


@DBOS.workflow()
def brief(topic: str) -> str:
    sections = []
    for section in SECTIONS:
        text = draft(topic, section)
        sections.append(text)
        DBOS.write_stream("progress", f"{section}: {text}")
    file_brief(topic, sections)
    DBOS.close_stream("progress")
    return f"brief on {topic}: {len(sections)} sections filed"


def main(argv: list[str] | None = None) -> int:
    global LLM, HTTP
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", required=True, help="folder of the SQLite system database")
    ap.add_argument("--llm", required=True, help="OpenAI-compatible base URL (…/v1)")
    ap.add_argument("--http", required=True, help="base URL of the documents service")
    ap.add_argument("--workflow-id", default="brief-1042")
    args = ap.parse_args(argv)
    LLM, HTTP = args.llm.rstrip("/"), args.http.rstrip("/")
    config: DBOSConfig = {
        "name": "corpus-dbos-brief",
        "system_database_url": "sqlite:///" + os.path.join(args.state, "dbos.sqlite"),
        "run_admin_server": False,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers the PENDING workflows a crashed process left
    if DBOS.get_workflow_status(args.workflow_id) is None:
        with SetWorkflowID(args.workflow_id):
            handle = DBOS.start_workflow(brief, "heat pumps")
    else:  # started before the crash: launching recovered it
        handle = DBOS.retrieve_workflow(args.workflow_id)
    for entry in DBOS.read_stream(args.workflow_id, "progress"):
        print(entry, flush=True)
    print(handle.get_result())
    return 0


if __name__ == "__main__":
    sys.exit(main())
