"""Ground truth without crashpoint: the MCP server dies in the middle of a tool call; does the
client's pending call end, or wait forever?

The server is the pinned SDK's own FastMCP over stdio (this script, run with ``--serve``), with
the job's two tools. The first ``create_ticket`` it receives makes it exit before it answers
(``os._exit``: a crash, as in the report), once; every ticket and page it applies is appended to
a ledger file, keyed by the request_id. The script runs agent.py against it, as its supervisor
would, with a deadline. Run it with the Python of the environment under test:

    .venv/bin/python ground_truth.py

Exit 1 and "BUG" if the job is still waiting for the dead server's answer after 20 s (mcp <=
1.9.1: python-sdk#332), 0 and "ok" if it finishes with one ticket and one page (mcp >= 1.9.2
fails the pending call with "Connection closed", the job starts the server again and retries),
2 if the job did not run as planned.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEADLINE = 20.0


def serve(folder: str) -> None:
    from mcp.server.fastmcp import FastMCP

    app = FastMCP("incidents")
    ledger = os.path.join(folder, "ledger.jsonl")
    crashed = os.path.join(folder, "crashed")

    def apply(kind: str, key: str, reply: str) -> str:
        seen = set()
        if os.path.exists(ledger):
            with open(ledger, encoding="utf-8") as f:
                seen = {json.loads(line)["key"] for line in f}
        if key not in seen:
            with open(ledger, "a", encoding="utf-8") as f:
                f.write(json.dumps({"kind": kind, "key": key}) + "\n")
        return reply

    @app.tool()
    def create_ticket(title: str, severity: str = "", request_id: str = "") -> str:
        if not os.path.exists(crashed):
            open(crashed, "w").close()
            os._exit(1)  # the server dies before it answers (nothing applied)
        return apply("ticket", request_id, f"opened INC-1: {title}")

    @app.tool()
    def page_oncall(team: str, message: str, request_id: str = "") -> str:
        return apply("page", request_id, f"paged {team}")

    app.run("stdio")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
        return 0
    with tempfile.TemporaryDirectory(prefix="mcp-332-") as folder:
        server = shlex.join([sys.executable, os.path.abspath(__file__), "--serve", folder])
        cmd = [sys.executable, os.path.join(HERE, "agent.py"), "--state", folder]
        proc = subprocess.Popen(
            [*cmd, "--mcp-stdio", server],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            crashed = os.path.exists(os.path.join(folder, "crashed"))
            if not crashed:
                print("the server never received the call: could not tell")
                return 2
            print(
                f"BUG: the server died during create_ticket and the job was still waiting "
                f"for its answer after {DEADLINE:.0f} s (the pending call_tool never ended)"
            )
            return 1
        ledger = os.path.join(folder, "ledger.jsonl")
        applied = []
        if os.path.exists(ledger):
            with open(ledger, encoding="utf-8") as f:
                applied = [json.loads(line)["kind"] for line in f]
        if proc.returncode != 0 or sorted(applied) != ["page", "ticket"]:
            print(f"the job exited {proc.returncode}, applied {applied}: could not tell")
            print(err[-2000:], file=sys.stderr)
            return 2
        print(f"ok: the call failed when the server died, the job retried: {out.strip()!r}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
